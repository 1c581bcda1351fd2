import { Semaphore } from './semaphore.ts';
import { SlidingWindow } from './sliding-window.ts';
import { TokenBucket } from './token-bucket.ts';
import type { LimitSpec, LimitState } from './types.ts';

/** The in-RAM state of one limit of one tenant; `algorithm` tells which. */
export type LimitRuntime = TokenBucket | SlidingWindow | Semaphore;

/** Fresh state for `spec` at `nowMs`: a full bucket, an empty window, no lease. */
export function createRuntime(spec: LimitSpec, nowMs: number): LimitRuntime {
  if (spec.kind === 'concurrent') return new Semaphore(spec.limit, spec.leaseTtlMs);
  if (spec.algorithm === 'sliding_window') return new SlidingWindow(spec.limit, spec.windowMs);
  return new TokenBucket(spec.limit, spec.windowMs, nowMs);
}

/** Brings `rt` to `nowMs`: refills a bucket, purges a window's or a semaphore's expired entries. */
export function syncRuntime(rt: LimitRuntime, nowMs: number): void {
  if (rt.algorithm === 'token_bucket') rt.refill(nowMs);
  else rt.purge(nowMs);
}

/**
 * `LimitState` of `spec` whose state is `rt` (synced to `nowMs`), or of a fresh limit when
 * `rt` is undefined. `resetMs` is rounded up to whole ms.
 */
export function limitState(spec: LimitSpec, rt: LimitRuntime | undefined, nowMs: number): LimitState {
  if (rt === undefined) {
    return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining: spec.limit, resetMs: 0 };
  }
  let remaining: number;
  let reset: number;
  if (rt.algorithm === 'token_bucket') {
    remaining = rt.remaining();
    reset = rt.resetMs();
  } else {
    remaining = rt.remaining();
    reset = rt.resetMs(nowMs);
  }
  return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining, resetMs: Math.ceil(reset) };
}

/**
 * State for `spec` after a policy reload, built conservatively from the state `old` of the
 * limit that had the same name: same algorithm → reconfigured in place (same object, so open
 * reservations still settle against it), usage kept; bucket ↔ window → the units used now carry
 * over (clamped to the new limit; into a window as one entry at `nowMs`); different kind or no
 * old state → fresh.
 */
export function carryOver(
  old: LimitRuntime | undefined,
  oldSpec: LimitSpec | undefined,
  spec: LimitSpec,
  nowMs: number,
): LimitRuntime {
  if (old === undefined || oldSpec === undefined || oldSpec.kind !== spec.kind) {
    return createRuntime(spec, nowMs);
  }
  if (spec.kind === 'concurrent') {
    if (old.algorithm !== 'semaphore') return createRuntime(spec, nowMs);
    old.reconfigure(spec.limit, spec.leaseTtlMs);
    return old;
  }
  if (old.algorithm === 'semaphore') return createRuntime(spec, nowMs);
  if (old.algorithm === spec.algorithm) {
    if (old.algorithm === 'token_bucket') old.reconfigure(spec.limit, spec.windowMs, nowMs);
    else old.reconfigure(spec.limit, spec.windowMs);
    return old;
  }
  let used: number;
  if (old.algorithm === 'token_bucket') {
    old.refill(nowMs);
    used = old.limit - old.level();
  } else {
    old.purge(nowMs);
    used = old.used();
  }
  if (used > spec.limit) used = spec.limit;
  const next = createRuntime(spec, nowMs);
  if (next.algorithm === 'token_bucket') next.setUsed(used);
  else if (next.algorithm === 'sliding_window' && used > 0) next.add(nowMs, used, '');
  return next;
}
