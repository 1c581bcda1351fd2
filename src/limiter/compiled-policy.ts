import { BUCKET_SLOTS } from './token-bucket.ts';
import { SEMAPHORE_SLOTS } from './semaphore.ts';
import type { LimitSpec, Policy } from './types.ts';

/** Reservation lifetime when the policy has no concurrency limit: 10 min. */
export const DEFAULT_RESERVATION_TTL_MS = 600_000;

/**
 * What the limiter derives once per `Policy` object (shared by every tenant that uses it):
 * which limits apply to a given model, and how long an open reservation lives.
 */
export interface CompiledPolicy {
  readonly policy: Policy;
  readonly limits: readonly LimitSpec[];
  /** Indexes (policy order) of the limits that apply to a request without a model or key. */
  readonly unscoped: readonly number[];
  /**
   * Per (model, key) asked for: indexes of the limits that apply (unscoped, plus those scoped to that
   * model and/or that key), policy order; filled on use. Null when no limit is scoped.
   */
  readonly selections: Map<string, readonly number[]> | null;
  /** Reservation lifetime, ms: the longest `leaseTtlMs` of the policy's concurrency limits, or 10 min when none. */
  readonly reservationTtlMs: number;
  /**
   * Per limit: offset of its numbers in a tenant's state array (a token bucket's level and
   * refill time, a semaphore's expiries), or −1 for a sliding window (an object). Slot 0 of
   * the array is the tenant's own (earliest reservation expiry).
   */
  readonly offsets: readonly number[];
  /** Length of a tenant's state array. */
  readonly slots: number;
  /** Per limit: true for a token bucket (its state is numbers only: no object in a tenant's `objs`). */
  readonly bucket: readonly boolean[];
  /**
   * Index of the first limit whose state is an object (window, semaphore, budget), or −1: a tenant
   * keeps that object in a field too (`TenantLimits.first`), one pointer less to chase per decision.
   */
  readonly firstObject: number;
  /** Limit index by name. */
  readonly indexByName: ReadonlyMap<string, number>;
  /** True when a `tokens` limit has weights (settlement then weighs token kinds). */
  readonly weighted: boolean;
  /** True when the policy has a `cost` limit. */
  readonly budgets: boolean;
}

/**
 * Derives a `CompiledPolicy`.
 * @throws RangeError when a limit is not a positive integer, a window or lease TTL is not
 *   positive, or two limits share a name.
 */
export function compilePolicy(policy: Policy): CompiledPolicy {
  const limits = policy.limits;
  const unscoped: number[] = [];
  const names = new Set<string>();
  let ttl = 0;
  let scoped = false;
  limits.forEach((l, i) => {
    if (!Number.isSafeInteger(l.limit) || l.limit <= 0) {
      throw new RangeError(`limit "${l.name}": limit must be a positive integer, got ${l.limit}`);
    }
    if (names.has(l.name)) throw new RangeError(`limit name "${l.name}" is used twice in one policy`);
    names.add(l.name);
    if (l.kind === 'concurrent') {
      if (!(l.leaseTtlMs > 0)) throw new RangeError(`limit "${l.name}": leaseTtlMs must be > 0`);
      if (l.leaseTtlMs > ttl) ttl = l.leaseTtlMs;
    } else if (l.kind === 'cost') {
      if (l.period.kind === 'window' && !(l.period.ms > 0)) throw new RangeError(`limit "${l.name}": a budget's window must be > 0 ms`);
    } else if (!(l.windowMs > 0)) {
      throw new RangeError(`limit "${l.name}": windowMs must be > 0`);
    }
    if (l.model === undefined && l.key === undefined) unscoped.push(i);
    else scoped = true;
  });
  const offsets: number[] = [];
  const bucket: boolean[] = [];
  const indexByName = new Map<string, number>();
  let slots = 1;
  limits.forEach((l, i) => {
    indexByName.set(l.name, i);
    const isBucket = l.kind !== 'concurrent' && l.kind !== 'cost' && l.algorithm === 'token_bucket';
    bucket.push(isBucket);
    if (l.kind === 'concurrent') {
      offsets.push(slots);
      slots += SEMAPHORE_SLOTS;
    } else if (isBucket) {
      offsets.push(slots);
      slots += BUCKET_SLOTS;
    } else {
      offsets.push(-1);
    }
  });
  return {
    policy,
    limits,
    unscoped,
    selections: scoped ? new Map() : null,
    reservationTtlMs: ttl > 0 ? ttl : DEFAULT_RESERVATION_TTL_MS,
    offsets,
    slots,
    bucket,
    firstObject: bucket.indexOf(false),
    indexByName,
    weighted: limits.some((l) => l.kind === 'tokens' && l.weights !== undefined),
    budgets: limits.some((l) => l.kind === 'cost'),
  };
}

/** Most (model, key) selections remembered per policy (model names and key ids come from the config). */
const MAX_SELECTIONS = 10_000;

/** Indexes of the limits of `c` that apply to a request for `model` made with key `key` (policy order). */
export function applicableLimits(c: CompiledPolicy, model: string | undefined, key?: string): readonly number[] {
  const cache = c.selections;
  if (cache === null || (model === undefined && key === undefined)) return c.unscoped;
  const k = `${model ?? ''}\u0000${key ?? ''}`;
  let idx = cache.get(k);
  if (idx === undefined) {
    const picked: number[] = [];
    c.limits.forEach((l, i) => {
      if ((l.model === undefined || l.model === model) && (l.key === undefined || l.key === key)) picked.push(i);
    });
    idx = picked;
    if (cache.size < MAX_SELECTIONS) cache.set(k, idx);
  }
  return idx;
}
