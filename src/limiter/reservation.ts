/** What one admitted request holds (`Reservation`), and the limit objects it acts on. */
import type { CompiledPolicy } from './compiled-policy.ts';
import { limitObject, type LimitObject, type TenantLimits } from './tenant-limits.ts';

/**
 * What one admitted request holds until it is settled and released: the tokens and requests
 * it reserved from each limit that applied, and where. It keeps the policy and the limit
 * objects of the moment it was admitted, so a policy reload that keeps a limit (by name)
 * keeps the reservation settleable against it.
 */
export class Reservation {
  /** Tokens reserved from every applicable `tokens` limit. */
  readonly tokens: number;
  /** Requests counted by every applicable `requests` limit. */
  readonly requests: number;
  /** The tenant's compiled policy when admitted. */
  readonly compiled: CompiledPolicy;
  /** The tenant's limit objects when admitted (windows, semaphores; null for buckets). */
  readonly objs: readonly (LimitObject | null)[];
  /** Indexes (in `compiled.limits`) of the limits that applied. */
  readonly applied: readonly number[];
  /** Per position in `applied`: the sliding-window entry's sequence number, or −1. Null when no window applied. */
  readonly seqs: number[] | null;
  /** Pico-dollars reserved from every applicable `cost` limit. */
  readonly cost: bigint;
  /** Clock ms of admission. */
  readonly admittedAt: number;
  /** Lifetime after admission or renew, ms. */
  readonly ttlMs: number;
  /** From this time (ms) on the reservation is gone: settle/release/renew change nothing. */
  expiresAt: number;
  settled = false;
  released = false;

  constructor(
    tokens: number,
    requests: number,
    compiled: CompiledPolicy,
    objs: readonly (LimitObject | null)[],
    applied: readonly number[],
    seqs: number[] | null,
    nowMs: number,
    cost = 0n,
    admittedAt = nowMs,
  ) {
    this.cost = cost;
    this.admittedAt = admittedAt;
    this.tokens = tokens;
    this.requests = requests;
    this.compiled = compiled;
    this.objs = objs;
    this.applied = applied;
    this.seqs = seqs;
    this.ttlMs = compiled.reservationTtlMs;
    this.expiresAt = nowMs + compiled.reservationTtlMs;
  }
}

/**
 * The state object of limit `i` (in `res.compiled`) that reservation `res` of a tenant with limits
 * `st` was taken from, or null for a token bucket: from `st` while the tenant still has the objects
 * the reservation was admitted with (no reload since), else from the reservation's own `objs`.
 */
export function reservedObject(res: Reservation, st: TenantLimits, i: number): LimitObject | null {
  return res.objs === st.objs ? limitObject(res.compiled, st, i) : (res.objs[i] ?? null);
}
