/**
 * Central-store mode's Redis scripts (`lua/central-acquire.lua`, `lua/central-settle.lua`), loaded
 * once per connection with ioredis `defineCommand` and called through typed, validated wrappers.
 *
 * Both scripts take a variable number of keys (one pair per limit), so they are defined without
 * `numberOfKeys` and the wrappers pass the key count first. As for the global cap's scripts
 * (src/globalcap/scripts.ts), ioredis sends EVAL once per socket and EVALSHA afterwards, and
 * retries a NOSCRIPT as EVAL itself.
 */
import type { Redis } from 'ioredis';
import { LUA_SCRIPTS, defineScript, scriptLoad, scriptText } from '../redis/lua-scripts.ts';

/** The script files of central-store mode, by wrapper name (files in `lua/`; see the registry, `src/redis/lua-scripts.ts`). */
export const CENTRAL_SCRIPT_FILES = { acquire: LUA_SCRIPTS.centralAcquire.file, settle: LUA_SCRIPTS.centralSettle.file } as const;

/** One limit as the scripts see it: its type, numbers and its two keys. */
export interface CentralLimitArg {
  /** `b` token bucket, `w` sliding window, `c` concurrency semaphore. */
  readonly type: 'b' | 'w' | 'c';
  /** Units per window, or slots (> 0). */
  readonly limit: number;
  /** windowMs, or leaseTtlMs for `c` (> 0). */
  readonly periodMs: number;
  readonly name: string;
  /** The bucket hash, the window's entries (sorted set) or the semaphore (sorted set). */
  readonly key: string;
  /** The window's running sum (string); for `b` and `c` pass `key` again. */
  readonly aux: string;
}

/** One acquire (or peek) call (see `lua/central-acquire.lua`). */
export interface CentralAcquireArgs {
  readonly op: 'acquire' | 'peek';
  readonly id: string;
  readonly hintMs: number;
  readonly reservationTtlMs: number;
  readonly tokens: number;
  /** Applicable limits in policy order, each with the units this request costs it. */
  readonly limits: readonly (CentralLimitArg & { readonly cost: number })[];
}

/** Reply of an acquire: code 1 admitted (or peek), 0 limited, 2 too_large, 3 duplicate. */
export interface CentralAcquireReply {
  readonly code: 0 | 1 | 2 | 3;
  /** 1-based index of the refusing limit in `limits`; 0 when admitted. */
  readonly index: number;
  readonly retryAfterMs: number;
  /** Per limit: [remaining, resetMs]. */
  readonly states: readonly (readonly [number, number])[];
}

/** One settle/release/renew/finish call (see `lua/central-settle.lua`). */
export interface CentralSettleArgs {
  readonly op: 'settle' | 'release' | 'renew' | 'finish';
  readonly id: string;
  readonly actualTokens: number;
  /** The policy's `tokens` limits and concurrency limits. */
  readonly limits: readonly CentralLimitArg[];
}

/** Reply of a settle call. */
export interface CentralSettleReply {
  readonly settled: boolean;
  readonly deltaTokens: number;
  /** Released (release/finish) or renewed (renew) by this call. */
  readonly done: boolean;
}

/** The scripts bound to one connection. Both reject with the Redis error when the call fails. */
export interface CentralScripts {
  acquire(reservationsKey: string, args: CentralAcquireArgs): Promise<CentralAcquireReply>;
  settle(reservationsKey: string, args: CentralSettleArgs): Promise<CentralSettleReply>;
}

const defined = new WeakMap<Redis, CentralScripts>();

/**
 * Loads central-store mode's scripts into Redis's script cache (`SCRIPT LOAD`) on `redis`, so the
 * node's first decisions do not compile them. Call once the connection is ready.
 * @throws the Redis error (as a rejection) when a load fails; Error for a SHA1 mismatch.
 */
export async function loadCentralScripts(redis: Redis): Promise<void> {
  await Promise.all([scriptLoad(redis, scriptText('centralAcquire'), CENTRAL_SCRIPT_FILES.acquire), scriptLoad(redis, scriptText('centralSettle'), CENTRAL_SCRIPT_FILES.settle)]);
}

/**
 * Defines central-store mode's scripts on `redis` (once per connection; a second call returns the
 * same wrappers). The `.lua` files are read once per process.
 * @throws Error when a `.lua` file cannot be read (names its path).
 */
export function defineCentralScripts(redis: Redis): CentralScripts {
  const existing = defined.get(redis);
  if (existing !== undefined) return existing;
  defineScript(redis, 'centralAcquire', 'centralSettle');

  const scripts: CentralScripts = {
    async acquire(reservationsKey, a) {
      const keys = [reservationsKey];
      const argv = [a.op, a.id, String(a.hintMs), String(a.reservationTtlMs), String(a.tokens), String(a.limits.length)];
      for (const l of a.limits) {
        keys.push(l.key, l.aux);
        argv.push(l.type, String(l.limit), String(l.periodMs), String(l.cost), l.name);
      }
      const reply = await redis.qrCentralAcquire(keys.length, ...keys, ...argv);
      return parseAcquire(reply, a.limits);
    },
    async settle(reservationsKey, a) {
      const keys = [reservationsKey];
      const argv = [a.op, a.id, String(a.actualTokens), String(a.limits.length)];
      for (const l of a.limits) {
        keys.push(l.key, l.aux);
        argv.push(l.type, String(l.limit), String(l.periodMs), l.name);
      }
      const reply = await redis.qrCentralSettle(keys.length, ...keys, ...argv);
      return parseSettle(reply);
    },
  };
  defined.set(redis, scripts);
  return scripts;
}

/**
 * @throws Error on a reply that is not {code, index, retry, n × [remaining, reset]} (a script/loader
 *   mismatch), or whose numbers are out of range (index beyond the limits, a negative wait or reset,
 *   a limit's remaining outside [0, limit]): a value from Redis is never used unchecked.
 */
function parseAcquire(reply: unknown, limits: readonly CentralLimitArg[]): CentralAcquireReply {
  const n = limits.length;
  if (
    Array.isArray(reply) &&
    reply.length === 3 + 2 * n &&
    reply.every((x) => Number.isSafeInteger(x)) &&
    [0, 1, 2, 3].includes(reply[0] as number) &&
    (reply[1] as number) >= 0 &&
    (reply[1] as number) <= n &&
    (reply[2] as number) >= 0
  ) {
    const r = reply as number[];
    const states: [number, number][] = [];
    for (let i = 0; i < n; i++) {
      const remaining = r[3 + 2 * i] as number;
      const reset = r[4 + 2 * i] as number;
      if (remaining < 0 || remaining > (limits[i] as CentralLimitArg).limit || reset < 0) break;
      states.push([remaining, reset]);
    }
    if (states.length === n) return { code: r[0] as 0 | 1 | 2 | 3, index: r[1] as number, retryAfterMs: r[2] as number, states };
  }
  throw new Error(`${CENTRAL_SCRIPT_FILES.acquire} answered ${JSON.stringify(reply)}, not {code, index, retry, ${n} × [remaining, reset]}`);
}

/** @throws Error on a reply that is not {0|1, "<number>", 0|1}. */
function parseSettle(reply: unknown): CentralSettleReply {
  if (Array.isArray(reply) && reply.length === 3 && typeof reply[1] === 'string') {
    const [settled, delta, done] = reply as [unknown, string, unknown];
    const d = Number(delta);
    if ((settled === 0 || settled === 1) && (done === 0 || done === 1) && Number.isFinite(d)) {
      return { settled: settled === 1, deltaTokens: d, done: done === 1 };
    }
  }
  throw new Error(`${CENTRAL_SCRIPT_FILES.settle} answered ${JSON.stringify(reply)}, not {0|1, "<delta>", 0|1}`);
}
