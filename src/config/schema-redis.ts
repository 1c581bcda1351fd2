/**
 * The `cluster.redis:` section: where Redis is (a URL, a variable holding one, or Sentinel), its ACL
 * credentials from the environment, TLS, and the fallback probe.
 */
import { z } from 'zod';
import { hasPassword } from './url-password.ts';
import { duration, envName } from './units.ts';

/** One Redis Sentinel: host and port (default 26379). */
const SentinelSchema = z.strictObject({
  host: z.string().min(1),
  /** @default 26379 */
  port: z.number().int().min(1).max(65535).default(26379),
});

/**
 * Where Redis is: exactly one of `url` (in the file: no password there, the file is not a secret
 * store), `url_env` (an environment variable holding the whole URL, password included) and
 * `sentinels` + `name` (Redis Sentinel: the sentinels are asked for the current primary, and again
 * after a failover), plus optionally ACL credentials from the environment (`username_env`,
 * `password_env`; `sentinel_username_env`, `sentinel_password_env` for the sentinels) and TLS
 * options (`tls`). Resolved at load (`src/config/redis-url.ts`); the resolved URL and credentials
 * are never logged unredacted.
 */
export const RedisSchema = z
  .strictObject({
    /** `redis://[user@]host:port[/db]` or `rediss://...`, without a password. */
    url: z
      .string()
      .regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')
      .refine((url) => !hasPassword(url), 'a password in the config file: put the whole URL in an environment variable named by url_env, or the password in one named by password_env')
      .optional(),
    /** Environment variable holding the URL (it may carry the password). */
    url_env: envName.optional(),
    /** Environment variable holding the ACL user name (Redis 6+ `AUTH <user> <password>`). */
    username_env: envName.optional(),
    /** Environment variable holding the password (of the ACL user when `username_env` or the URL names one). */
    password_env: envName.optional(),
    /** Redis Sentinel: the sentinels to ask where the primary named `name` is (3 or more, on separate machines). */
    sentinels: z.array(SentinelSchema).min(1, 'sentinels: list at least one sentinel (three for a quorum of two)').optional(),
    /** The primary's name in the sentinels' configuration (`sentinel monitor <name> ...`). Required with `sentinels`. */
    name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'a sentinel master name: 1-64 of A-Z a-z 0-9 . _ -').optional(),
    /** Environment variable holding the sentinels' ACL user name. */
    sentinel_username_env: envName.optional(),
    /** Environment variable holding the sentinels' password (their `requirepass`). */
    sentinel_password_env: envName.optional(),
    /**
     * TLS to Redis (a `rediss://` URL turns it on too). With `sentinels`: TLS to the primary and the
     * replicas, and to the sentinels when `sentinels_tls` is true.
     */
    tls: z
      .strictObject({
        /** PEM file of the CA that signed Redis' certificate (else the system's CAs), read at start. */
        ca_file: z.string().min(1).optional(),
        /** Name expected in Redis' certificate when it differs from the host connected to. */
        servername: z.string().min(1).optional(),
        /** Refuse a certificate the CA did not sign. Off only for tests. @default true */
        reject_unauthorized: z.boolean().default(true),
        /** Use TLS to the sentinels too. @default false */
        sentinels_tls: z.boolean().default(false),
      })
      .optional(),
    /**
     * How often a node in fallback probes Redis (one PING through the circuit breaker, with or
     * without traffic), and how long the breaker stays open before its next probe: a node leaves
     * fallback within about this long after Redis answers again. @default 1s
     */
    probe_interval: duration.refine((ms) => ms >= 10, 'probe_interval: at least 10ms').default(1_000),
  })
  .superRefine((redis, ctx) => {
    const given = [redis.url, redis.url_env, redis.sentinels].filter((x) => x !== undefined).length;
    if (given !== 1) ctx.addIssue({ code: 'custom', message: 'set exactly one of url, url_env and sentinels' });
    if (redis.sentinels !== undefined && redis.name === undefined) ctx.addIssue({ code: 'custom', path: ['name'], message: 'name: the primary\'s name in the sentinels\' configuration (sentinel monitor <name> ...), required with sentinels' });
    if (redis.sentinels === undefined) {
      for (const key of ['name', 'sentinel_username_env', 'sentinel_password_env'] as const) {
        if (redis[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: `${key} applies with sentinels only` });
      }
      if (redis.tls?.sentinels_tls === true) ctx.addIssue({ code: 'custom', path: ['tls', 'sentinels_tls'], message: 'sentinels_tls applies with sentinels only' });
    }
    if (redis.url !== undefined && redis.tls !== undefined && !redis.url.startsWith('rediss://')) {
      ctx.addIssue({ code: 'custom', path: ['tls'], message: 'tls options with a redis:// URL: use rediss:// for TLS' });
    }
  });
