import { Budget } from './budget.ts';
import { periodAt } from './budget-period.ts';
import type { CompiledPolicy } from './compiled-policy.ts';
import { Semaphore } from './semaphore.ts';
import { SlidingWindow } from './sliding-window.ts';
import {
  bucketAdjust,
  bucketInit,
  bucketIsFull,
  bucketRefill,
  bucketRemaining,
  bucketResetMs,
  bucketSetUsed,
  bucketTake,
  bucketUsed,
  bucketWaitMs,
} from './token-bucket.ts';
import type { LimitSpec, LimitState } from './types.ts';

/** A limit's state that needs an object: a sliding window's log, a semaphore's lease ids, a budget's spend. */
export type LimitObject = SlidingWindow | Semaphore | Budget;

/**
 * The state of every limit of one tenant, laid out for cache locality: all numbers (token
 * buckets, semaphore expiries, slot 0 for the tenant's own use) in one `number[]`
 * (offsets from `CompiledPolicy.offsets`), objects only where a limit needs one.
 */
export interface TenantLimits {
  num: number[];
  /** Indexed like the policy's limits; null for token buckets. */
  objs: (LimitObject | null)[];
  /**
   * `objs[c.firstObject]` (null when the policy has no object limit): the limit object a decision
   * reads without loading `objs` (see {@link limitObject}).
   */
  first: LimitObject | null;
}

/** Limits `num` and `objs` of a tenant under `c`, with `first` set from them. */
export function tenantLimits(c: CompiledPolicy, num: number[], objs: (LimitObject | null)[]): TenantLimits {
  return { num, objs, first: c.firstObject < 0 ? null : (objs[c.firstObject] ?? null) };
}

/**
 * The state object of limit `i` of `t` (`t` built for `c`), or null for a token bucket. Decided from
 * `c` (shared by every tenant of the policy, so in cache) and `t.first` where it can be: on a cold
 * tenant each array read is a cache miss.
 */
export function limitObject(c: CompiledPolicy, t: TenantLimits, i: number): LimitObject | null {
  if (c.bucket[i] === true) return null;
  return i === c.firstObject ? t.first : (t.objs[i] ?? null);
}

/** Units an acquire of (`tokens`, `requests`) costs under `spec` (1 slot for concurrency; 0 for a cost limit, which counts money). */
export function costOf(spec: LimitSpec, tokens: number, requests: number): number {
  return spec.kind === 'tokens' ? tokens : spec.kind === 'requests' ? requests : spec.kind === 'cost' ? 0 : 1;
}

/** Pico-dollars a `cost` limit of `micros` µ$ keeps back from a request of priority floor `floor`. */
export function budgetKeep(micros: number, floor: number): bigint {
  return floor > 0 ? BigInt(Math.ceil(floor * micros)) * 1_000_000n : 0n;
}

/** Fresh state for every limit of `c` at `nowMs`: full buckets, empty windows, no lease. */
export function createTenantLimits(c: CompiledPolicy, nowMs: number): TenantLimits {
  const num = new Array<number>(c.slots).fill(0.5);
  const objs: (LimitObject | null)[] = [];
  for (let i = 0; i < c.limits.length; i++) objs.push(createLimit(c, num, i, nowMs));
  return tenantLimits(c, num, objs);
}

function createLimit(c: CompiledPolicy, num: number[], i: number, nowMs: number): LimitObject | null {
  const spec = c.limits[i] as LimitSpec;
  const o = c.offsets[i] as number;
  if (spec.kind === 'concurrent') return new Semaphore(spec.limit, spec.leaseTtlMs, num, o);
  if (spec.kind === 'cost') return new Budget(spec.limit, spec.period, nowMs);
  if (spec.algorithm === 'sliding_window') return new SlidingWindow(spec.limit, spec.windowMs);
  bucketInit(num, o, spec.limit, spec.windowMs, nowMs);
  return null;
}

/** Brings limit `i` to `nowMs`: refills a bucket, purges a window's or a semaphore's expired entries. */
export function syncLimit(c: CompiledPolicy, t: TenantLimits, i: number, nowMs: number): void {
  const obj = limitObject(c, t, i);
  if (obj === null) {
    const spec = c.limits[i] as LimitSpec & { windowMs: number };
    bucketRefill(t.num, c.offsets[i] as number, spec.limit, spec.windowMs, nowMs);
  } else {
    obj.purge(nowMs);
  }
}

/**
 * The exact ms (not rounded) until `cost` fits in limit `i`, 0 when it fits now, for a limit
 * brought to `nowMs` by {@link syncLimit} first; a full semaphore returns the ms until its earliest
 * lease expires; a budget that cannot take `money` (pico-dollars, leaving `keep` after it) returns
 * the ms until its period ends.
 */
export function syncedWaitMs(c: CompiledPolicy, t: TenantLimits, i: number, cost: number, nowMs: number, money = 0n, keep = 0n): number {
  const obj = limitObject(c, t, i);
  if (obj === null) {
    const spec = c.limits[i] as LimitSpec & { windowMs: number };
    return bucketWaitMs(t.num, c.offsets[i] as number, spec.limit, spec.windowMs, cost);
  }
  if (obj.algorithm === 'budget') return obj.waitMs(nowMs, money, keep);
  return obj.algorithm === 'sliding_window' ? obj.waitMs(nowMs, cost) : obj.waitMs(nowMs);
}

/**
 * Takes `cost` from limit `i` for request `id` (after `syncedWaitMs` returned 0); a budget takes
 * `money` pico-dollars.
 * @returns the sliding-window entry's sequence number, or −1 for other limits.
 */
export function takeLimit(c: CompiledPolicy, t: TenantLimits, i: number, cost: number, nowMs: number, id: string, money = 0n): number {
  const obj = limitObject(c, t, i);
  if (obj === null) {
    bucketTake(t.num, c.offsets[i] as number, (c.limits[i] as LimitSpec & { windowMs: number }).windowMs, cost);
    return -1;
  }
  if (obj.algorithm === 'sliding_window') return obj.add(nowMs, cost, id);
  if (obj.algorithm === 'budget') obj.add(money);
  else obj.acquire(nowMs, id);
  return -1;
}

/** Refunds (`delta < 0`, never above capacity) or debits `delta` tokens on bucket `i`. */
export function adjustBucket(c: CompiledPolicy, t: TenantLimits, i: number, delta: number, nowMs: number): void {
  const spec = c.limits[i] as LimitSpec & { windowMs: number };
  const o = c.offsets[i] as number;
  bucketRefill(t.num, o, spec.limit, spec.windowMs, nowMs);
  bucketAdjust(t.num, o, spec.limit, spec.windowMs, delta);
}

/**
 * `LimitState` of limit `i` (synced to `nowMs`), or of a fresh limit when `t` is undefined.
 * `resetMs` is rounded up to whole ms; a cost limit also gives its period's end (`resetAt`).
 */
export function limitState(c: CompiledPolicy, t: TenantLimits | undefined, i: number, nowMs: number): LimitState {
  const spec = c.limits[i] as LimitSpec;
  if (t === undefined) {
    if (spec.kind !== 'cost') return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining: spec.limit, resetMs: 0 };
    // A fresh budget renews at the end of the current period, like one with state.
    const end = periodAt(spec.period, nowMs).end;
    return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining: spec.limit, resetMs: Math.ceil(end - nowMs), resetAt: end };
  }
  const obj = limitObject(c, t, i);
  let remaining: number;
  let reset: number;
  if (obj === null) {
    const o = c.offsets[i] as number;
    const windowMs = (spec as LimitSpec & { windowMs: number }).windowMs;
    remaining = bucketRemaining(t.num, o, windowMs);
    reset = bucketResetMs(t.num, o, spec.limit, windowMs);
  } else {
    remaining = obj.remaining();
    reset = obj.resetMs(nowMs);
  }
  if (obj instanceof Budget) return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining, resetMs: Math.ceil(reset), resetAt: obj.end };
  return { name: spec.name, kind: spec.kind, limit: spec.limit, remaining, resetMs: Math.ceil(reset) };
}

/** True when every limit is back to its initial state (buckets full, windows empty, no lease). */
export function limitsIdle(c: CompiledPolicy, t: TenantLimits, nowMs: number): boolean {
  for (let i = 0; i < c.limits.length; i++) {
    const obj = t.objs[i];
    if (obj === null || obj === undefined) {
      const spec = c.limits[i] as LimitSpec & { windowMs: number };
      if (!bucketIsFull(t.num, c.offsets[i] as number, spec.limit, spec.windowMs, nowMs)) return false;
    } else if (!obj.isIdle(nowMs)) {
      return false;
    }
  }
  return true;
}

/**
 * State for policy `next` after a reload, built conservatively from `prev` (policy `old`):
 * a limit keeps the state of the old limit with the same name and kind. Same algorithm →
 * usage kept (a bucket's used units clamped to the new limit; a window's entries and a
 * semaphore's leases kept as they are, the same objects, so open reservations still settle
 * and release against them); bucket ↔ window → the units used now carry over, clamped to the
 * new limit (into a window as one entry at `nowMs`); otherwise fresh. Slot 0 is copied.
 */
export function rebuildTenantLimits(old: CompiledPolicy, prev: TenantLimits, next: CompiledPolicy, nowMs: number): TenantLimits {
  const num = new Array<number>(next.slots).fill(0.5);
  num[0] = prev.num[0] as number;
  const objs: (LimitObject | null)[] = [];
  for (let i = 0; i < next.limits.length; i++) {
    const spec = next.limits[i] as LimitSpec;
    const j = old.indexByName.get(spec.name);
    const oldSpec = j === undefined ? undefined : old.limits[j];
    if (j === undefined || oldSpec === undefined || oldSpec.kind !== spec.kind) {
      objs.push(createLimit(next, num, i, nowMs));
      continue;
    }
    const o = next.offsets[i] as number;
    const oldObj = prev.objs[j] ?? null;
    if (spec.kind === 'cost') {
      if (oldObj instanceof Budget) {
        oldObj.purge(nowMs);
        oldObj.reconfigure(spec.limit, spec.period, nowMs);
        objs.push(oldObj);
      } else {
        objs.push(createLimit(next, num, i, nowMs));
      }
      continue;
    }
    if (spec.kind === 'concurrent') {
      if (oldObj instanceof Semaphore) {
        oldObj.reconfigure(spec.limit, spec.leaseTtlMs);
        oldObj.rebind(num, o);
        objs.push(oldObj);
      } else {
        objs.push(createLimit(next, num, i, nowMs));
      }
      continue;
    }
    if (oldObj instanceof Semaphore || oldObj instanceof Budget) {
      objs.push(createLimit(next, num, i, nowMs));
      continue;
    }
    let used: number;
    if (oldObj === null) {
      const os = oldSpec as LimitSpec & { windowMs: number };
      const oo = old.offsets[j] as number;
      bucketRefill(prev.num, oo, os.limit, os.windowMs, nowMs);
      used = bucketUsed(prev.num, oo, os.limit, os.windowMs);
    } else {
      oldObj.purge(nowMs);
      used = oldObj.used();
    }
    if (spec.algorithm === 'sliding_window') {
      if (oldObj !== null) {
        oldObj.reconfigure(spec.limit, spec.windowMs);
        objs.push(oldObj);
      } else {
        const w = new SlidingWindow(spec.limit, spec.windowMs);
        if (used > 0) w.add(nowMs, used > spec.limit ? spec.limit : used, '');
        objs.push(w);
      }
    } else {
      bucketSetUsed(num, o, spec.limit, spec.windowMs, used, nowMs);
      objs.push(null);
    }
  }
  return tenantLimits(next, num, objs);
}
