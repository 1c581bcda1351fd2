/**
 * The Redis connection of `cluster.redis`, resolved at load from where the operator keeps it: a URL
 * written in the file (`url`, no password allowed there) or read from an environment variable
 * (`url_env`), or Redis Sentinel (`sentinels` + `name`); ACL credentials optionally from other
 * variables (`username_env`, `password_env`, and `sentinel_username_env`, `sentinel_password_env`).
 * The resolved URL and credentials are secrets: anything that prints a URL goes through {@link redactUrl}.
 */
import type { RedisConnection, RedisTls } from './schema.ts';
import { hasPassword } from './url-password.ts';

/** `cluster.redis` as the file says it (see `RedisSchema`). */
export interface RedisSource {
  readonly url?: string | undefined;
  readonly url_env?: string | undefined;
  readonly username_env?: string | undefined;
  readonly password_env?: string | undefined;
  readonly sentinels?: readonly { readonly host: string; readonly port: number }[] | undefined;
  readonly name?: string | undefined;
  readonly sentinel_username_env?: string | undefined;
  readonly sentinel_password_env?: string | undefined;
  readonly tls?: RedisTls | undefined;
}

/**
 * The connection to make, or the problems that prevent it (`<path>: <message>`, never echoing a
 * value: it may be a password).
 * @param env where the `*_env` variables are read.
 */
export function resolveRedisConnection(redis: RedisSource, env: NodeJS.ProcessEnv): { connection: RedisConnection } | { problems: string[] } {
  const tls = redis.tls === undefined ? {} : { tls: redis.tls };
  if (redis.sentinels === undefined) {
    const resolved = resolveRedisUrl(redis, env);
    if ('problems' in resolved) return resolved;
    if (redis.tls !== undefined && !resolved.url.startsWith('rediss://')) return { problems: ['cluster.redis.tls: tls options with a redis:// URL: use rediss:// for TLS'] };
    return { connection: { kind: 'url', url: resolved.url, ...tls } };
  }
  const problems: string[] = [];
  const read = (key: 'username_env' | 'password_env' | 'sentinel_username_env' | 'sentinel_password_env'): string | undefined => {
    const name = redis[key];
    if (name === undefined) return undefined;
    const value = env[name];
    if (value === undefined || value === '') problems.push(`cluster.redis.${key}: environment variable ${name} is not set`);
    return value;
  };
  const credentials = {
    username: read('username_env'),
    password: read('password_env'),
    sentinelUsername: read('sentinel_username_env'),
    sentinelPassword: read('sentinel_password_env'),
  };
  if (problems.length > 0) return { problems };
  const defined = Object.fromEntries(Object.entries(credentials).filter(([, v]) => v !== undefined)) as Partial<Record<keyof typeof credentials, string>>;
  return { connection: { kind: 'sentinel', sentinels: redis.sentinels.map((s) => ({ host: s.host, port: s.port })), name: redis.name ?? '', ...defined, ...tls } };
}

/**
 * The URL to connect to (with the credentials of `username_env` / `password_env` in it), or the
 * problems that prevent it (`<path>: <message>`, never echoing a value: the URL may hold the password).
 * @param env where `url_env`, `username_env` and `password_env` are read.
 */
export function resolveRedisUrl(redis: RedisSource, env: NodeJS.ProcessEnv): { url: string } | { problems: string[] } {
  let url: string;
  if (redis.url_env !== undefined) {
    const value = env[redis.url_env];
    if (value === undefined || value === '') return { problems: [`cluster.redis.url_env: environment variable ${redis.url_env} is not set`] };
    if (!/^rediss?:\/\//.test(value) || !parses(value)) return { problems: [`cluster.redis.url_env: environment variable ${redis.url_env} does not hold a redis:// or rediss:// URL`] };
    url = value;
  } else {
    url = redis.url ?? '';
  }
  if (redis.username_env !== undefined) {
    const username = env[redis.username_env];
    if (username === undefined || username === '') return { problems: [`cluster.redis.username_env: environment variable ${redis.username_env} is not set`] };
    if (new URL(url).username !== '') return { problems: ['cluster.redis.username_env: the URL already names a user; keep it in one place'] };
    const parsed = new URL(url);
    parsed.username = encodeURIComponent(username);
    url = parsed.toString();
  }
  if (redis.password_env === undefined) return { url };
  const password = env[redis.password_env];
  if (password === undefined || password === '') return { problems: [`cluster.redis.password_env: environment variable ${redis.password_env} is not set`] };
  if (hasPassword(url)) return { problems: [`cluster.redis.password_env: the URL already carries a password; keep it in one place`] };
  const parsed = new URL(url);
  // Percent-encoded: ioredis decodes the URL's userinfo (a `%`, `@` or `:` in a password survives).
  parsed.password = encodeURIComponent(password);
  return { url: parsed.toString() };
}

/** `url` with any password replaced by `***`, for logs and banners; unparseable input gives `(unparseable URL)`. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === '') return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable URL)';
  }
}

/**
 * Where a `cluster.redis` config points, for logs and banners: its URL with any password redacted,
 * or `sentinels h1:p1,h2:p2 (primary <name>)`.
 */
export function describeRedis(redis: { readonly url?: string | undefined; readonly sentinels?: readonly { readonly host: string; readonly port: number }[] | undefined; readonly name?: string | undefined }): string {
  if (redis.url !== undefined) return redactUrl(redis.url);
  const sentinels = (redis.sentinels ?? []).map((s) => `${s.host}:${s.port}`).join(',');
  return `sentinels ${sentinels} (primary ${redis.name ?? '?'})`;
}

function parses(url: string): boolean {
  try {
    return new URL(url).hostname !== '';
  } catch {
    return false;
  }
}
