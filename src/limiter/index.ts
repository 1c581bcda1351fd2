/** Public API of the in-RAM limiter: algorithms, the per-tenant `Limiter`, and its contracts. */
export { Limiter, type LimiterOptions } from './limiter.ts';
export { TokenBucket } from './token-bucket.ts';
export { SlidingWindow } from './sliding-window.ts';
export { Semaphore } from './semaphore.ts';
export { compilePolicy, applicableLimits, DEFAULT_RESERVATION_TTL_MS, type CompiledPolicy } from './compiled-policy.ts';
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
