/**
 * The ioredis connection used on decision paths (global cap, leases, hot tenants): it never queues
 * a command while Redis is unreachable, never resends a command it already wrote, and reconnects
 * quickly with a capped backoff. Every call made on it goes through a `RedisGuard`, which bounds
 * the wait (15 ms by default) and opens a circuit breaker; this client only makes sure that
 * nothing piles up behind the guard.
 */
import type { Redis, RedisOptions } from 'ioredis';
import { newRedisClient } from '../config/redis-client.ts';
import type { RedisConnection } from '../config/schema.ts';
import { countRedisCommands } from '../ops/metrics.ts';

/** First reconnect delay after the connection drops, ms. */
export const RECONNECT_FIRST_MS = 50;
/** Longest reconnect delay, ms: a Redis that comes back is used again within about this long. */
export const RECONNECT_MAX_MS = 1_000;
/** How long a TCP connect may take before ioredis drops it and schedules a reconnect, ms. */
export const CONNECT_TIMEOUT_MS = 500;

/**
 * Reconnect delay for the `attempt`-th attempt in a row (1-based), ms: 50, 100, 200, 400, 800,
 * then 1,000 for every further attempt. Never gives up (a number is always returned), so the
 * client keeps trying for as long as it exists.
 */
export function reconnectDelayMs(attempt: number): number {
  return Math.min(RECONNECT_FIRST_MS * 2 ** Math.max(0, attempt - 1), RECONNECT_MAX_MS);
}

/**
 * The options `redisForDecisions` passes to ioredis, each one chosen for decision paths
 * (ioredis 5 semantics, from `built/redis/RedisOptions.d.ts` and `built/redis/event_handler.js`).
 */
export const DECISION_REDIS_OPTIONS: Readonly<RedisOptions> = Object.freeze({
  /**
   * A command issued while the socket is not writable (connecting, reconnecting, closed) is rejected
   * at once ("Stream isn't writeable and enableOfflineQueue options is false") instead of waiting
   * in a queue that grows for as long as Redis is down. Default `true`.
   */
  enableOfflineQueue: false,
  /**
   * 0, not 1: this limit applies to commands already written to a socket that then closes. ioredis
   * keeps them and resends them after reconnecting until `maxRetriesPerRequest` reconnect attempts
   * failed, then rejects them with MaxRetriesPerRequestError. With 0 they are rejected as soon as
   * the connection closes. By then the guard has answered the caller anyway (timeout), and a
   * resent token-bucket or lease script would be applied a second time if the first copy had
   * already run before the socket dropped. Default 20.
   */
  maxRetriesPerRequest: 0,
  /**
   * Belt and braces with `maxRetriesPerRequest: 0`: written-but-unanswered commands are never sent
   * again on the new connection (a Lua debit is not idempotent). Default `true`.
   */
  autoResendUnfulfilledCommands: false,
  /**
   * Off: measured on this project's machine, auto-pipelining halves the throughput of the global
   * cap's Lua scripts, and it delays a command to the next tick. Default `false`
   * (set explicitly so nobody turns it on by accident).
   */
  enableAutoPipelining: false,
  /**
   * A TCP connect that has not completed after 500 ms is abandoned and retried (ioredis default
   * 10,000 ms). Commands fail fast meanwhile (offline queue off), so this only bounds how long a
   * dead address delays the next attempt.
   */
  connectTimeout: CONNECT_TIMEOUT_MS,
  /** Capped exponential backoff, 50 ms → 1 s, never giving up: see `reconnectDelayMs`. */
  retryStrategy: reconnectDelayMs,
  /** Connect at construction (ioredis default), so the first decision does not pay the connect. */
  lazyConnect: false,
});

/**
 * An ioredis client for decision paths, connecting at once to `connection` (a URL or Sentinel), with
 * `DECISION_REDIS_OPTIONS` (offline queue off, no retries or resends of written commands, no
 * auto-pipelining, 500 ms connect timeout, reconnect backoff 50 ms → 1 s).
 *
 * The client has an `error` listener that ignores connection errors: while Redis is down, ioredis
 * emits one per reconnect attempt, and the failures reach callers through their commands (and the
 * `RedisGuard`). Add your own listener to log them.
 * @param connection `cluster.redis.connection`, or a URL `redis://[[user]:password@]host[:port][/db]` or `rediss://...` (TLS).
 * @returns the client; the caller closes it with `quit()` or `disconnect()`.
 * @throws Error when a TLS CA file of the connection cannot be read.
 */
export function redisForDecisions(connection: RedisConnection | string): Redis {
  const redis = newRedisClient(connection, { ...DECISION_REDIS_OPTIONS });
  countRedisCommands(redis);
  redis.on('error', () => {
    // reported through the commands that fail; see the TSDoc above
  });
  return redis;
}
