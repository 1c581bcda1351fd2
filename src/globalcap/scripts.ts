/**
 * The global cap's Redis scripts (`lua/token-bucket.lua`, `lua/lease.lua`), loaded once per
 * connection with ioredis `defineCommand` and called through typed, validated wrappers.
 *
 * ioredis sends EVAL the first time a script runs on a socket and EVALSHA afterwards; a NOSCRIPT
 * reply (after `SCRIPT FLUSH`, a restart or a failover) is retried as EVAL by ioredis itself
 * (`built/Script.js` in ioredis 5), so a NOSCRIPT never reaches the caller.
 * Do not enable `enableAutoPipelining` on the connection given here: measured on this project's
 * machine it halves these scripts' throughput.
 */
import type { Redis } from 'ioredis';
import { LUA_SCRIPTS, defineScript, scriptLoad, scriptText } from '../redis/lua-scripts.ts';

/** The script files of the global cap, by wrapper name (files in `lua/`; see the registry, `src/redis/lua-scripts.ts`). */
export const CAP_SCRIPT_FILES = { tokenBucket: LUA_SCRIPTS.capTokenBucket.file, lease: LUA_SCRIPTS.capLease.file } as const;

/** Longest key expiry the scripts accept, ms (2^40, about 35 years; the scripts cap at the same). */
const MAX_TTL_MS = 2 ** 40;

/** One token-bucket call (see `lua/token-bucket.lua`). */
export interface TokenBucketOptions {
  /** Units the bucket holds when full (> 0). A fresh bucket starts full. */
  readonly capacity: number;
  /** Refill rate, units per second (> 0). */
  readonly ratePerSec: number;
  /** Units to take (finite); a negative cost gives units back, never above capacity. */
  readonly cost: number;
  /**
   * The call never takes the level below this many units (0..capacity): the last `floor` units are
   * left to calls with floor 0 (higher priorities).
   * @default 0
   */
  readonly floor?: number;
  /**
   * Take the cost even when that drives the level below 0 (debt, e.g. after a provider 429); the
   * call is then always allowed.
   * @default false
   */
  readonly force?: boolean;
  /**
   * Expiry of the bucket's key, ms (> 0, rounded up), refreshed on every write. The script keeps the
   * key at least until it would be full again and deletes it when full, so a short ttl never
   * refills a bucket early.
   */
  readonly ttlMs: number;
}

/** Reply of a token-bucket call. */
export interface TokenBucketResult {
  /** True when the cost was taken (or given back); false leaves the bucket unchanged. */
  readonly allowed: boolean;
  /**
   * 0 when allowed; else ms until the cost fits above the floor (rounded up, by Redis TIME);
   * -1 when it never can (cost > capacity − floor).
   */
  readonly waitMs: number;
  /** Units in the bucket after the call, floored; negative while in debt. */
  readonly level: number;
}

/** One lease call (see `lua/lease.lua`). */
export interface LeaseOptions {
  /** Units the bucket holds when full (> 0). */
  readonly capacity: number;
  /** Refill rate, units per second (> 0). */
  readonly ratePerSec: number;
  /** Units asked for (integer ≥ min). */
  readonly want: number;
  /** Smallest useful grant (integer ≥ 1): a smaller block is not granted at all. */
  readonly min: number;
  /**
   * The grant never takes the level below this many units (0..capacity).
   * @default 0
   */
  readonly floor?: number;
  /** Expiry of the bucket's key, ms (> 0), as for {@link TokenBucketOptions.ttlMs}. */
  readonly ttlMs: number;
}

/** Reply of a lease call. */
export interface LeaseResult {
  /** Units granted: min(want, ⌊level − floor⌋) when that is ≥ min, else 0 (bucket unchanged). */
  readonly granted: number;
  /** 0 when granted; else ms until `min` fits above the floor (rounded up); -1 when it never can (min > capacity − floor). */
  readonly waitMs: number;
  /** Units in the bucket after the call, floored; negative while in debt. */
  readonly level: number;
}

/**
 * The global cap's scripts bound to one ioredis connection. Units are whatever the bucket counts
 * (requests or tokens); times are ms by Redis TIME. Both wrappers reject with the Redis error when
 * the call fails (connection down, timeout), never with a NOSCRIPT, and with an Error when the
 * reply is not in the call's range (allowed 0 or 1; a grant 0 or within [min, want]; wait ≥ −1; a
 * level ≤ capacity): a value from Redis is never used unchecked.
 */
export interface CapScripts {
  /**
   * Takes `cost` units from the bucket at `key` (or gives them back when negative).
   * @throws RangeError (as a rejection) for an invalid option, before any Redis call.
   */
  tokenBucket(key: string, options: TokenBucketOptions): Promise<TokenBucketResult>;
  /**
   * Grants a block of up to `want` units from the bucket at `key`. Give unused units back with
   * `tokenBucket(key, { ..., cost: -unused })`.
   * @throws RangeError (as a rejection) for an invalid option, before any Redis call.
   */
  lease(key: string, options: LeaseOptions): Promise<LeaseResult>;
}

const defined = new WeakMap<Redis, CapScripts>();

/**
 * Defines the global cap's scripts on `redis` (once per connection; a second call returns the same
 * wrappers) and returns typed wrappers. The `.lua` files are read once per process.
 * @throws Error when a `.lua` file cannot be read (names its path).
 */
export function defineCapScripts(redis: Redis): CapScripts {
  const existing = defined.get(redis);
  if (existing !== undefined) return existing;
  defineScript(redis, 'capTokenBucket', 'capLease');

  const scripts: CapScripts = {
    async tokenBucket(key, options) {
      const args = tokenBucketArgs(key, options);
      const reply = await redis.qrCapTokenBucket(key, ...args);
      const [allowed, waitMs, level] = parseReply(reply, CAP_SCRIPT_FILES.tokenBucket);
      if ((allowed !== 0 && allowed !== 1) || waitMs < -1 || level > options.capacity) throw outOfRange(CAP_SCRIPT_FILES.tokenBucket, reply);
      return { allowed: allowed === 1, waitMs, level };
    },
    async lease(key, options) {
      const args = leaseArgs(key, options);
      const reply = await redis.qrCapLease(key, ...args);
      const [granted, waitMs, level] = parseReply(reply, CAP_SCRIPT_FILES.lease);
      if ((granted !== 0 && (granted < options.min || granted > options.want)) || waitMs < -1 || level > options.capacity) {
        throw outOfRange(CAP_SCRIPT_FILES.lease, reply);
      }
      return { granted, waitMs, level };
    },
  };
  defined.set(redis, scripts);
  return scripts;
}

/**
 * Loads the global cap's scripts into Redis's script cache (`SCRIPT LOAD`, one per script, in
 * parallel) on `redis`, the connection {@link defineCapScripts} defined them on, so that Redis has
 * compiled every script before the node's first decision. Call it once the connection is ready
 * (ioredis `ready`), again after each reconnect (a restarted Redis lost its cache); the wrappers
 * keep working without it (ioredis falls back to EVAL on NOSCRIPT).
 * @returns the SHA1 of each script, by wrapper name.
 * @throws the Redis error (as a rejection) when a load fails (connection down); Error when Redis
 *   answers another SHA1 than the script's.
 */
export async function loadCapScripts(redis: Redis): Promise<{ readonly tokenBucket: string; readonly lease: string }> {
  const texts = { tokenBucket: scriptText('capTokenBucket'), lease: scriptText('capLease') };
  const [tokenBucket, lease] = await Promise.all([scriptLoad(redis, texts.tokenBucket, CAP_SCRIPT_FILES.tokenBucket), scriptLoad(redis, texts.lease, CAP_SCRIPT_FILES.lease)]);
  return { tokenBucket, lease };
}

/** ARGV of token-bucket.lua, validated. */
function tokenBucketArgs(key: string, o: TokenBucketOptions): string[] {
  checkKey(key);
  const capacity = positive('capacity', o.capacity);
  const rate = positive('ratePerSec', o.ratePerSec);
  if (!Number.isFinite(o.cost)) throw new RangeError(`cost must be a finite number of units, got ${o.cost}`);
  const floor = floorOf(o.floor, capacity);
  return [String(capacity), String(rate), String(o.cost), String(floor), o.force === true ? '1' : '0', String(ttlOf(o.ttlMs))];
}

/** ARGV of lease.lua, validated. */
function leaseArgs(key: string, o: LeaseOptions): string[] {
  checkKey(key);
  const capacity = positive('capacity', o.capacity);
  const rate = positive('ratePerSec', o.ratePerSec);
  if (!Number.isSafeInteger(o.min) || o.min < 1) throw new RangeError(`min must be an integer >= 1 unit, got ${o.min}`);
  if (!Number.isSafeInteger(o.want) || o.want < o.min) throw new RangeError(`want must be an integer >= min (${o.min}), got ${o.want}`);
  const floor = floorOf(o.floor, capacity);
  return [String(capacity), String(rate), String(o.want), String(o.min), String(floor), String(ttlOf(o.ttlMs))];
}

function checkKey(key: string): void {
  if (typeof key !== 'string' || key === '') throw new RangeError('the bucket key must be a non-empty string (see capKey)');
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a finite number > 0, got ${value}`);
  return value;
}

function floorOf(floor: number | undefined, capacity: number): number {
  if (floor === undefined) return 0;
  if (!Number.isFinite(floor) || floor < 0 || floor > capacity) {
    throw new RangeError(`floor must be a number of units from 0 to capacity (${capacity}), got ${floor}`);
  }
  return floor;
}

function ttlOf(ttlMs: number): number {
  if (!Number.isFinite(ttlMs) || ttlMs <= 0 || ttlMs > MAX_TTL_MS) {
    throw new RangeError(`ttlMs must be a number of ms in (0, 2^40], got ${ttlMs}`);
  }
  return Math.ceil(ttlMs);
}

/**
 * A reply out of the script's range (a grant above `want`, a level above capacity): not used, so the
 * call fails and the node decides from its fallback share (see `fallback-share.ts`).
 */
function outOfRange(file: string, reply: unknown): Error {
  return new Error(`${file} answered ${JSON.stringify(reply)}, out of range for the call`);
}

/** The three integers every cap script answers. @throws Error on any other reply (a script/loader mismatch). */
function parseReply(reply: unknown, file: string): [number, number, number] {
  if (Array.isArray(reply) && reply.length === 3 && reply.every((n) => Number.isSafeInteger(n))) {
    return reply as [number, number, number];
  }
  throw new Error(`${file} answered ${JSON.stringify(reply)}, not {int, int, int}`);
}
