/** Public API of the in-RAM limiter: algorithms, the per-tenant `Limiter`, and its contracts. */
export { Limiter, type LimiterOptions } from './limiter.ts';
export {
  BUCKET_SLOTS,
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
export { SlidingWindow } from './sliding-window.ts';
export { Semaphore, SEMAPHORE_SLOTS } from './semaphore.ts';
export { compilePolicy, applicableLimits, DEFAULT_RESERVATION_TTL_MS, type CompiledPolicy } from './compiled-policy.ts';
export {
  parseTenantSnapshot,
  type TenantSnapshot,
  type LimitSnapshot,
  type TokenBucketSnapshot,
  type SlidingWindowSnapshot,
  type SemaphoreSnapshot,
  type ReservationSnapshot,
} from './snapshot.ts';
export { boundSnapshot, conservativeSnapshot, MAX_CLOCK_SKEW_MS } from './snapshot-bounds.ts';
export { windowUsageSince, budgetUsageSince, withUsage, withOpenRequests, withCarriedRequests, openRequestsSince, isEmptyUsage, type UsageDelta, type OpenRequests, type WindowUsage, type BucketUsage, type BudgetUsage } from './usage-delta.ts';
export { budgetView, changeSpend, type BudgetView, type SpendChange } from './budget-view.ts';
export type {
  Algorithm,
  RateLimitSpec,
  ConcurrencyLimitSpec,
  LimitSpec,
  Policy,
  AcquireRequest,
  LimitState,
  AcquireResult,
  SettleResult,
} from './types.ts';
