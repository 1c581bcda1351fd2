/**
 * The per-limit rules of an admission (`Limiter.acquire` and `Limiter.waitMs`): whether a request
 * can never pass a limit (too large), and how long a limit makes it wait (ms).
 */
import type { CompiledPolicy } from './compiled-policy.ts';
import { budgetKeep, costOf, syncedWaitMs, type TenantLimits } from './tenant-limits.ts';
import type { LimitSpec } from './types.ts';

/**
 * True when a request can never pass `spec`: more tokens or requests than its capacity (less the
 * floor's part of it), or a dearer reservation (`money`, pico-dollars) than its budget (less the
 * floor's part).
 */
export function tooLarge(spec: LimitSpec, tokens: number, requests: number, money: bigint, floor: number): boolean {
  if (spec.kind === 'concurrent') return false;
  if (spec.kind === 'cost') return money + budgetKeep(spec.limit, floor) > BigInt(spec.limit) * 1_000_000n;
  return costOf(spec, tokens, requests) + floor * spec.limit > spec.limit;
}

/**
 * Ms until limit `i` of `st` (synced to `now`, ms) could take a request of `tokens`/`requests`
 * costing `money` (pico-dollars) (0: now). A floored request must leave `floor × limit` behind it:
 * it waits as if it cost that much more. A full concurrency limit counts min(`hintMs`, earliest
 * lease expiry).
 */
export function waitOf(c: CompiledPolicy, st: TenantLimits, i: number, tokens: number, requests: number, floor: number, now: number, money: bigint, hintMs: number): number {
  const spec = c.limits[i] as LimitSpec;
  if (spec.kind === 'concurrent') return Math.min(syncedWaitMs(c, st, i, 0, now), hintMs);
  if (spec.kind === 'cost') return syncedWaitMs(c, st, i, 0, now, money, budgetKeep(spec.limit, floor));
  return syncedWaitMs(c, st, i, floor === 0 ? costOf(spec, tokens, requests) : costOf(spec, tokens, requests) + floor * spec.limit, now);
}
