/**
 * An ioredis client for the connection `cluster.redis` describes (`RedisConnection`, resolved at
 * load): a URL (`redis://`, `rediss://` for TLS) or Redis Sentinel, with ACL credentials and TLS
 * options. Every Redis client of membership, handoff, the global cap and central mode is made here,
 * each caller adding the options of its own path (timeouts, queueing, retries).
 *
 * Sentinel (ioredis' `SentinelConnector`): each (re)connect asks the sentinels, in turn, for the
 * current primary of `name` and checks its role; `failoverDetector` subscribes to the sentinels'
 * `+switch-master` so a failover reconnects at once rather than when the old primary's socket dies;
 * a write refused with `READONLY` (a client still on a demoted primary) reconnects without resending
 * (the command failed, and a Lua debit is not resent blindly). What a failover can lose is what the
 * replica had not yet received: the global cap treats it as a restored Redis (`src/globalcap/reconcile.ts`).
 */
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import type { RedisConnection, RedisTls } from './schema.ts';

/** How long a sentinel may take to answer where the primary is, ms, before the next sentinel is asked. */
export const SENTINEL_COMMAND_TIMEOUT_MS = 1_000;
/** Longest delay between two rounds over every sentinel while none answers, ms. */
export const SENTINEL_RETRY_MAX_MS = 1_000;

/**
 * Node TLS options for `cluster.redis.tls`.
 * @throws Error naming the file when `ca_file` cannot be read.
 */
export function redisTlsOptions(tls: RedisTls): ConnectionOptions {
  let ca: Buffer | undefined;
  if (tls.ca_file !== undefined) {
    try {
      ca = readFileSync(tls.ca_file);
    } catch (err) {
      throw new Error(`cluster.redis.tls.ca_file: cannot read ${tls.ca_file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
  }
  return {
    ...(ca === undefined ? {} : { ca }),
    ...(tls.servername === undefined ? {} : { servername: tls.servername }),
    rejectUnauthorized: tls.reject_unauthorized,
  };
}

/** `reconnectOnError` of every client: a write refused by a demoted primary (`READONLY`) reconnects (through the sentinels) without resending it. */
export function reconnectOnReadonly(err: Error): boolean {
  return err.message.startsWith('READONLY');
}

/**
 * The URL (URL connections) and the ioredis options of a connection, before the caller's own.
 * @throws Error when a TLS CA file cannot be read.
 */
export function redisConnectionOptions(connection: RedisConnection): { url?: string; options: RedisOptions } {
  const tls = connection.tls === undefined ? undefined : redisTlsOptions(connection.tls);
  if (connection.kind === 'url') {
    return { url: connection.url, options: { reconnectOnError: reconnectOnReadonly, ...(tls === undefined ? {} : { tls }) } };
  }
  return {
    options: {
      sentinels: connection.sentinels.map((s) => ({ host: s.host, port: s.port })),
      name: connection.name,
      role: 'master',
      ...(connection.username === undefined ? {} : { username: connection.username }),
      ...(connection.password === undefined ? {} : { password: connection.password }),
      ...(connection.sentinelUsername === undefined ? {} : { sentinelUsername: connection.sentinelUsername }),
      ...(connection.sentinelPassword === undefined ? {} : { sentinelPassword: connection.sentinelPassword }),
      failoverDetector: true,
      sentinelCommandTimeout: SENTINEL_COMMAND_TIMEOUT_MS,
      sentinelRetryStrategy: (attempt: number) => Math.min(50 * 2 ** Math.max(0, attempt - 1), SENTINEL_RETRY_MAX_MS),
      reconnectOnError: reconnectOnReadonly,
      ...(tls === undefined ? {} : { tls, enableTLSForSentinelMode: true }),
      ...(tls !== undefined && connection.tls?.sentinels_tls === true ? { sentinelTLS: tls } : {}),
    },
  };
}

/**
 * A new ioredis client (connecting at once unless `options.lazyConnect`).
 * @param connection `cluster.redis.connection`, or a plain `redis://` / `rediss://` URL.
 * @param options the caller's own options, over the connection's.
 * @throws Error when a TLS CA file cannot be read.
 */
export function newRedisClient(connection: RedisConnection | string, options: RedisOptions): Redis {
  if (typeof connection === 'string') return new Redis(connection, { reconnectOnError: reconnectOnReadonly, ...options });
  const { url, options: base } = redisConnectionOptions(connection);
  const merged: RedisOptions = { ...base, ...options };
  return url === undefined ? new Redis(merged) : new Redis(url, merged);
}
