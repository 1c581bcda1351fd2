/**
 * Every Redis script quotaring runs, in one registry: its file in `lua/`, the command name ioredis
 * defines it under (`defineCommand`), and how many of its arguments are keys. The commands are
 * typed on ioredis' own `RedisCommander` interface (the module augmentation below), so a caller
 * writes `redis.qrCapLease(key, ...args)` with no cast once {@link defineScript} has run on that
 * connection.
 *
 * ioredis sends EVAL the first time a script runs on a socket and EVALSHA afterwards; a NOSCRIPT
 * reply (after `SCRIPT FLUSH`, a restart or a failover) is retried as EVAL by ioredis itself
 * (`built/Script.js` in ioredis 5), so a NOSCRIPT never reaches the caller.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Redis, Result } from 'ioredis';

/** The registry: script name → its file, its ioredis command and its number of keys (`per call`: the first argument says). */
export const LUA_SCRIPTS = {
  /** The global cap's token bucket (`src/globalcap/scripts.ts`). */
  capTokenBucket: { file: 'token-bucket.lua', command: 'qrCapTokenBucket', keys: 1 },
  /** A lease of a block of a global-cap bucket (`src/globalcap/scripts.ts`). */
  capLease: { file: 'lease.lua', command: 'qrCapLease', keys: 1 },
  /** Re-seeding a bucket after Redis lost or regressed its data (`src/globalcap/reconcile.ts`). */
  capReseed: { file: 'reseed.lua', command: 'qrCapReseed', keys: 1 },
  /** The epoch that names the data Redis holds (`src/globalcap/reconcile.ts`). */
  capEpoch: { file: 'epoch.lua', command: 'qrCapEpoch', keys: 1 },
  /** Central-store mode's acquire (`src/central/scripts.ts`). */
  centralAcquire: { file: 'central-acquire.lua', command: 'qrCentralAcquire', keys: 'per call' },
  /** Central-store mode's settle, release and renew (`src/central/scripts.ts`). */
  centralSettle: { file: 'central-settle.lua', command: 'qrCentralSettle', keys: 'per call' },
  /** Dropping silent members against their heartbeats (`src/coord/membership/member-drops.ts`). */
  dropMembers: { file: 'drop-members.lua', command: 'qrDropMembers', keys: 2 },
  /** Reading tenant states with a byte bound (`src/coord/handoff/state-store.ts`). */
  stateReadBounded: { file: 'state-read-bounded.lua', command: 'qrStateReadBounded', keys: 1 },
  /** Exchanging nodes' demand reports of a fair-shared deployment (`src/fairshare/exchange.ts`). */
  fairDemand: { file: 'fair-demand.lua', command: 'qrFairDemand', keys: 1 },
  /** Lowering a deployment bucket toward what the provider reports left (`src/globalcap/feedback-script.ts`). */
  feedbackLower: { file: 'feedback-lower.lua', command: 'qrFeedbackLower', keys: 2 },
} as const satisfies Record<string, { readonly file: string; readonly command: string; readonly keys: number | 'per call' }>;

/** A script of the registry. */
export type ScriptName = keyof typeof LUA_SCRIPTS;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    qrCapTokenBucket(key: string, ...args: string[]): Result<unknown, Context>;
    qrCapLease(key: string, ...args: string[]): Result<unknown, Context>;
    qrCapReseed(key: string, ...args: string[]): Result<unknown, Context>;
    qrCapEpoch(key: string, ...args: string[]): Result<unknown, Context>;
    qrCentralAcquire(numKeys: number, ...args: string[]): Result<unknown, Context>;
    qrCentralSettle(numKeys: number, ...args: string[]): Result<unknown, Context>;
    qrDropMembers(membersKey: string, dropsKey: string, ...args: string[]): Result<unknown, Context>;
    qrStateReadBounded(key: string, ...args: string[]): Result<unknown, Context>;
    qrFairDemand(key: string, ...args: string[]): Result<unknown, Context>;
    qrFeedbackLower(bucketKey: string, logKey: string, ...args: string[]): Result<unknown, Context>;
  }
}

/**
 * Absolute path of a file in `lua/`, from the TypeScript sources (`src/redis/`) or from the build
 * (`dist/src/redis/`).
 * @param file a file name such as `token-bucket.lua`.
 */
export function luaScriptPath(file: string): string {
  const relative = import.meta.url.endsWith('.ts') ? `../../lua/${file}` : `../../../lua/${file}`;
  return fileURLToPath(new URL(relative, import.meta.url));
}

/**
 * The text of a script in `lua/`.
 * @throws Error naming the path when the file cannot be read.
 */
export function readLua(file: string): string {
  const path = luaScriptPath(file);
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the Redis script ${path}: ${(err as Error).message}`, { cause: err });
  }
}

/** Script texts, read once per process. */
const texts = new Map<ScriptName, string>();

/** The text of registry script `name` (read once per process). @throws Error naming the path when its file cannot be read. */
export function scriptText(name: ScriptName): string {
  let text = texts.get(name);
  if (text === undefined) {
    text = readLua(LUA_SCRIPTS[name].file);
    texts.set(name, text);
  }
  return text;
}

const defined = new WeakMap<Redis, Set<ScriptName>>();

/**
 * Defines registry scripts on `redis` (ioredis `defineCommand`; once per connection and script:
 * a second call does nothing), after which `redis[LUA_SCRIPTS[name].command](...)` runs them.
 * @throws Error when a script's file cannot be read (names its path).
 */
export function defineScript(redis: Redis, ...names: readonly ScriptName[]): void {
  let done = defined.get(redis);
  if (done === undefined) {
    done = new Set();
    defined.set(redis, done);
  }
  for (const name of names) {
    if (done.has(name)) continue;
    const { command, keys } = LUA_SCRIPTS[name];
    redis.defineCommand(command, keys === 'per call' ? { lua: scriptText(name) } : { numberOfKeys: keys, lua: scriptText(name) });
    done.add(name);
  }
}

/**
 * Loads a script into Redis's script cache (`SCRIPT LOAD`) and checks the SHA1 Redis answers.
 * @returns the SHA1. @throws the Redis error, or Error when the SHA1 is not the script's.
 */
export async function scriptLoad(redis: Redis, text: string, file: string): Promise<string> {
  const sha = String(await redis.script('LOAD', text));
  if (sha !== createHash('sha1').update(text).digest('hex')) throw new Error(`SCRIPT LOAD of ${file} answered ${sha}, not the script's SHA1`);
  return sha;
}
