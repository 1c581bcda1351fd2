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
  /** Indexes (policy order) of the limits that apply to a request without a model. */
  readonly unscoped: readonly number[];
  /** Per model named by a scoped limit: indexes of unscoped + that model's limits, policy order. Null when no limit is scoped. */
  readonly byModel: ReadonlyMap<string, readonly number[]> | null;
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
  /** Limit index by name. */
  readonly indexByName: ReadonlyMap<string, number>;
}

/**
 * Derives a `CompiledPolicy`.
 * @throws RangeError when a limit is not a positive integer, a window or lease TTL is not
 *   positive, or two limits share a name.
 */
export function compilePolicy(policy: Policy): CompiledPolicy {
  const limits = policy.limits;
  const unscoped: number[] = [];
  const models = new Set<string>();
  const names = new Set<string>();
  let ttl = 0;
  limits.forEach((l, i) => {
    if (!Number.isSafeInteger(l.limit) || l.limit <= 0) {
      throw new RangeError(`limit "${l.name}": limit must be a positive integer, got ${l.limit}`);
    }
    if (names.has(l.name)) throw new RangeError(`limit name "${l.name}" is used twice in one policy`);
    names.add(l.name);
    if (l.kind === 'concurrent') {
      if (!(l.leaseTtlMs > 0)) throw new RangeError(`limit "${l.name}": leaseTtlMs must be > 0`);
      if (l.leaseTtlMs > ttl) ttl = l.leaseTtlMs;
    } else if (!(l.windowMs > 0)) {
      throw new RangeError(`limit "${l.name}": windowMs must be > 0`);
    }
    if (l.model === undefined) unscoped.push(i);
    else models.add(l.model);
  });
  let byModel: Map<string, number[]> | null = null;
  if (models.size > 0) {
    byModel = new Map();
    for (const m of models) {
      const idx: number[] = [];
      limits.forEach((l, i) => {
        if (l.model === undefined || l.model === m) idx.push(i);
      });
      byModel.set(m, idx);
    }
  }
  const offsets: number[] = [];
  const indexByName = new Map<string, number>();
  let slots = 1;
  limits.forEach((l, i) => {
    indexByName.set(l.name, i);
    if (l.kind === 'concurrent') {
      offsets.push(slots);
      slots += SEMAPHORE_SLOTS;
    } else if (l.algorithm === 'token_bucket') {
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
    byModel,
    reservationTtlMs: ttl > 0 ? ttl : DEFAULT_RESERVATION_TTL_MS,
    offsets,
    slots,
    indexByName,
  };
}

/** Indexes of the limits of `c` that apply to a request for `model` (policy order). */
export function applicableLimits(c: CompiledPolicy, model: string | undefined): readonly number[] {
  if (c.byModel === null || model === undefined) return c.unscoped;
  return c.byModel.get(model) ?? c.unscoped;
}
