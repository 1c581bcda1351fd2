/**
 * The provider-feedback script (`lua/feedback-lower.lua`), defined once per connection through the
 * script registry and called through a typed, validated wrapper.
 */
import type { Redis } from 'ioredis';
import { LUA_SCRIPTS, defineScript, scriptLoad, scriptText } from '../redis/lua-scripts.ts';

/** One lowering call (see `lua/feedback-lower.lua`). */
export interface LowerOptions {
  /** Units the bucket holds when full (> 0). */
  readonly capacity: number;
  /** Refill rate, units per second (> 0). */
  readonly ratePerSec: number;
  /** Level to lower toward, units (finite; the script clamps it to [0, capacity]). */
  readonly target: number;
  /** Most units lowered in any 60 s, cluster-wide (≥ 0). */
  readonly allowance: number;
  /** Expiry of the bucket's key, ms (> 0), as for the token-bucket script. */
  readonly ttlMs: number;
}

/** Reply of a lowering call. */
export interface LowerResult {
  /** Units this call took off the bucket, floored (0: it held no more than the target). */
  readonly lowered: number;
  /** The 60 s allowance stopped it short of the target. */
  readonly capped: boolean;
  /** Units in the bucket after the call, floored. */
  readonly level: number;
  /** Units lowered within the last 60 s, this call included, rounded up. */
  readonly used: number;
}

/** Lowers the bucket at `bucketKey`, logging what it lowered at `logKey` (`feedbackLogKey`). */
export type LowerFn = (bucketKey: string, logKey: string, options: LowerOptions) => Promise<LowerResult>;

/**
 * Defines `lua/feedback-lower.lua` on `redis` and returns its wrapper. The wrapper rejects with
 * RangeError for an option out of range (before any Redis call), with the Redis error when the call
 * fails, and with Error when the reply is not `{lowered ≥ 0, 0|1, level ≤ capacity, used ≥ 0}`.
 * @throws Error when the `.lua` file cannot be read.
 */
export function defineFeedbackScript(redis: Redis): LowerFn {
  defineScript(redis, 'feedbackLower');
  return async (bucketKey, logKey, o) => {
    for (const [name, v] of [['capacity', o.capacity], ['ratePerSec', o.ratePerSec], ['ttlMs', o.ttlMs]] as const) {
      if (!Number.isFinite(v) || v <= 0) throw new RangeError(`${name} must be a finite number > 0, got ${v}`);
    }
    if (!Number.isFinite(o.target)) throw new RangeError(`target must be a finite number of units, got ${o.target}`);
    if (!Number.isFinite(o.allowance) || o.allowance < 0) throw new RangeError(`allowance must be a finite number >= 0, got ${o.allowance}`);
    const reply: unknown = await redis.qrFeedbackLower(bucketKey, logKey, String(o.capacity), String(o.ratePerSec), String(o.target), String(o.allowance), String(Math.ceil(o.ttlMs)));
    const file = LUA_SCRIPTS.feedbackLower.file;
    if (!(Array.isArray(reply) && reply.length === 4 && reply.every((n) => Number.isSafeInteger(n)))) throw new Error(`${file} answered ${JSON.stringify(reply)}, not {int, int, int, int}`);
    const [lowered, capped, level, used] = reply as [number, number, number, number];
    if (lowered < 0 || (capped !== 0 && capped !== 1) || level > o.capacity || used < 0) throw new Error(`${file} answered ${JSON.stringify(reply)}, out of range for the call`);
    return { lowered, capped: capped === 1, level, used };
  };
}

/**
 * Loads `lua/feedback-lower.lua` into Redis's script cache (`SCRIPT LOAD`) on `redis`, with the
 * global cap's scripts at each `ready`, so the first correction is not the one that compiles it.
 * @returns its SHA1. @throws the Redis error (as a rejection), or Error when the SHA1 is not the script's.
 */
export async function loadFeedbackScript(redis: Redis): Promise<string> {
  return scriptLoad(redis, scriptText('feedbackLower'), LUA_SCRIPTS.feedbackLower.file);
}
