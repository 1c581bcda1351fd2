/**
 * The Redis URL of `cluster.redis`, resolved at load from where the operator keeps it: written in the
 * file (`url`, no password allowed there), or read from an environment variable (`url_env`), with
 * the password optionally from another variable (`password_env`). The resolved URL is a secret:
 * anything that prints it goes through {@link redactUrl}.
 */

/** `cluster.redis` as the file says it (see `RedisSchema`). */
export interface RedisSource {
  readonly url?: string | undefined;
  readonly url_env?: string | undefined;
  readonly password_env?: string | undefined;
}

/** Whether `url` carries a password (`redis://user:pw@host`, `redis://:pw@host`). */
export function hasPassword(url: string): boolean {
  try {
    return new URL(url).password !== '';
  } catch {
    return false;
  }
}

/**
 * The URL to connect to, or the problems that prevent it (`<path>: <message>`, never echoing a
 * value: the URL may hold the password).
 * @param env where `url_env` and `password_env` are read.
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

function parses(url: string): boolean {
  try {
    return new URL(url).hostname !== '';
  } catch {
    return false;
  }
}
