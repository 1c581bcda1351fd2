/**
 * Central-store mode's decisions as the gateway holds them: the limiter whose every call is a Lua
 * call against Redis, and the guard those calls run through.
 */
import type { RedisGuard } from '../redis/guard.ts';
import type { CentralLimiter } from './central-limiter.ts';

/** The central-store limiter and the guard its calls run through (a timeout, no fallback: a failure is 503 `limiter_unavailable`). */
export interface CentralDecisions {
  readonly limiter: CentralLimiter;
  readonly guard: RedisGuard;
}
