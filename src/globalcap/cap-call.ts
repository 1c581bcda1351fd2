/**
 * How the global cap calls Redis: every script call goes through a {@link CapCall}, which reports a
 * failure as a result instead of throwing (a timeout and circuit-breaker wrapper fits here: see
 * `guardedCall` in `src/redis/guard.ts`). A failure says whether it is a blip (breaker still closed)
 * or Redis being unavailable; the fallback rules (`fallback-share.ts`) act on that.
 */

/**
 * Outcome of a Redis call made through {@link CapCall}: the value, or a failure (Redis down, timeout,
 * breaker open). A call given up on after a timeout may still have run in Redis: `late` then settles
 * with its real outcome (a `RedisGuard` passes it), so a lease granted too late is not lost.
 */
export type CapCallResult<T> =
  | { readonly ok: true; readonly value: T }
  | {
      readonly ok: false;
      readonly late?: Promise<T>;
      /**
       * false: a single failure while the circuit breaker is still closed (a blip): the node stays on
       * its leases and serves only the requests waiting on that call from its fallback share.
       * Absent or true: Redis is unavailable (breaker open, or no breaker): the node enters fallback.
       */
      readonly open?: boolean;
    };

/**
 * Runs one Redis call and reports its outcome instead of throwing (a timeout and circuit-breaker
 * wrapper fits here). Must never reject.
 */
export type CapCall = <T>(fn: () => Promise<T>) => Promise<CapCallResult<T>>;

/** The default {@link CapCall}: runs `fn`, any rejection becomes `{ ok: false }` (no timeout). */
export const runCapCall: CapCall = async <T>(fn: () => Promise<T>): Promise<CapCallResult<T>> => {
  try {
    return { ok: true, value: await fn() };
  } catch {
    return { ok: false };
  }
};
