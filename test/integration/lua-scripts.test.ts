/**
 * The global cap's Lua scripts on a real redis-server: reply shapes, exact bucket arithmetic
 * (capacity, refill, refund, floor, force, lease), key expiry, NOSCRIPT reload after SCRIPT FLUSH,
 * argument validation, key names, and Redis CPU per call (INFO commandstats).
 *
 * The scripts read Redis TIME, so where refill during a test matters the calls are sent back to back
 * on one connection between two TIME commands: every script's clock lies between those two, which
 * bounds the refill exactly (the assertions allow at most that many ms).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { capKey } from '../../src/globalcap/keys.ts';
import { RECONCILE_SCRIPT_FILES, defineReconcileScripts } from '../../src/globalcap/reconcile.ts';
import { CAP_SCRIPT_FILES, defineCapScripts } from '../../src/globalcap/scripts.ts';
import { luaScriptPath } from '../../src/redis/lua-scripts.ts';
import type { CapScripts } from '../../src/globalcap/scripts.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

/** Redis TIME in ms. */
async function redisNow(c: Redis): Promise<number> {
  const [s, us] = (await c.time()) as unknown as [string, string];
  return Number(s) * 1000 + Number(us) / 1000;
}

/**
 * Sends `calls` back to back on `c` between two TIME commands and returns their results and the ms
 * of Redis time between the two TIMEs (every script call's own TIME lies within).
 */
async function bracketed<T>(c: Redis, calls: () => Promise<T>[]): Promise<{ results: T[]; elapsedMs: number }> {
  const start = redisNow(c);
  const pending = calls();
  const end = redisNow(c);
  const results = await Promise.all(pending);
  return { results, elapsedMs: (await end) - (await start) };
}

/** `INFO <section>` as field → value lines. */
async function info(c: Redis, section: string): Promise<Map<string, string>> {
  const text = await c.info(section);
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) fields.set(line.slice(0, i), line.slice(i + 1));
  }
  return fields;
}

/** `calls=…,usec=…,usec_per_call=…` of one command in INFO commandstats, undefined when never called. */
async function commandStats(c: Redis, command: string): Promise<{ calls: number; usecPerCall: number } | undefined> {
  const line = (await info(c, 'commandstats')).get(`cmdstat_${command}`);
  if (line === undefined) return undefined;
  const values = new Map(line.split(',').map((kv) => kv.split('=') as [string, string]));
  return { calls: Number(values.get('calls')), usecPerCall: Number(values.get('usec_per_call')) };
}

describe('global cap Lua scripts on a real Redis', () => {
  let redis: RunningRedis;
  let c: Redis;
  let scripts: CapScripts;
  const key = capKey('test', 'bucket');

  before(async () => {
    redis = await startRedis();
    c = redis.client();
    scripts = defineCapScripts(c);
  });
  after(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    await redis.flush();
  });

  test('every script file has its header and answers three integers', async () => {
    const args: Record<keyof typeof CAP_SCRIPT_FILES, string[]> = {
      tokenBucket: ['100', '10', '1', '0', '0', '60000'],
      lease: ['100', '10', '30', '1', '0', '60000'],
    };
    for (const [name, file] of Object.entries(CAP_SCRIPT_FILES) as [keyof typeof CAP_SCRIPT_FILES, string][]) {
      const lua = readFileSync(luaScriptPath(file), 'utf8');
      assert.ok(lua.startsWith(`--[[\n${file}:`), `${file} starts with its header`);
      for (const part of ['KEYS[1]', 'ARGV[1]', 'ARGV[6]', 'Reply:', 'Redis TIME']) assert.ok(lua.includes(part), `${file} header names ${part}`);
      const reply = await c.eval(lua, 1, capKey('test', name), ...args[name]);
      assert.ok(Array.isArray(reply) && reply.length === 3, `${file} answers a 3-array`);
      assert.ok(reply.every((n) => Number.isSafeInteger(n)), `${file} answers integers: ${JSON.stringify(reply)}`);
    }
    assert.deepEqual(await scripts.tokenBucket(key, { capacity: 100, ratePerSec: 10, cost: 1, ttlMs: 60_000 }), { allowed: true, waitMs: 0, level: 99 });
    assert.deepEqual(await scripts.lease(key, { capacity: 100, ratePerSec: 10, want: 30, min: 1, ttlMs: 60_000 }), { granted: 30, waitMs: 0, level: 69 });
  });

  test('reseed.lua and epoch.lua: headers; a reseed lowers to the known level, never raises, and keeps units taken since; the epoch notices a write-back', async () => {
    for (const file of Object.values(RECONCILE_SCRIPT_FILES)) {
      const lua = readFileSync(luaScriptPath(file), 'utf8');
      assert.ok(lua.startsWith(`--[[\n${file}:`), `${file} starts with its header`);
      for (const part of ['KEYS[1]', 'ARGV[1]', 'ARGV[3]', 'Reply:', 'Clock:']) assert.ok(lua.includes(part), `${file} header names ${part}`);
    }
    const { reseed, epoch } = defineReconcileScripts(c);
    const o = { capacity: 100, ratePerSec: 0.001, ttlMs: 60_000 };
    await scripts.tokenBucket(key, { ...o, cost: 10 }); // the restored level: 90
    const first = { ...o, ageMs: 0, epoch: 'r1:e1' };
    assert.deepEqual(await reseed(key, { ...first, knownLevel: 95 }), { before: 90, level: 90, base: 90 }, 'never raises');
    assert.deepEqual(await reseed(key, { ...first, knownLevel: 60 }), { before: 90, level: 60, base: 60 }, 'max of usage, not the sum');
    await scripts.lease(key, { ...o, want: 20, min: 1 }); // 20 taken since: 40
    assert.deepEqual(await reseed(key, { ...first, knownLevel: 50, ageMs: 5_000 }), { before: 40, level: 30, base: 50 }, 'a lower level seen before: lowered by 10, the 20 taken since stay taken');
    await new Promise((r) => setTimeout(r, 60)); // seen more than 50 ms after the first reseed (see reseed.lua)
    assert.deepEqual(await reseed(key, { ...first, knownLevel: 30, ageMs: 0 }), { before: 30, level: 30, base: 50 }, 'a level seen after the first reseed already counts them');
    assert.deepEqual(await reseed(key, { ...first, knownLevel: 10, epoch: 'r2:e1' }), { before: 30, level: 10, base: 10 }, 'a new epoch starts from the level');
    await assert.rejects(reseed(key, { ...first, knownLevel: 1, epoch: '' }), RangeError);

    const ek = 'qr:test:cap-epoch';
    const e1 = await epoch(ek, 'aaa', undefined);
    assert.deepEqual(e1, { id: 'aaa', n: 1 });
    const older = await c.dumpBuffer(ek);
    const e2 = await epoch(ek, 'bbb', e1);
    assert.deepEqual(e2, { id: 'aaa', n: 2 }, 'same epoch: the counter moves on');
    assert.ok(older !== null);
    await c.restore(ek, 0, older, 'REPLACE');
    assert.deepEqual(await epoch(ek, 'ccc', e2), { id: 'ccc', n: 1 }, 'the counter went back: a new id');
    await c.del(ek);
    assert.deepEqual(await epoch(ek, 'ddd', { id: 'ccc', n: 1 }), { id: 'ddd', n: 1 }, 'missing (FLUSHALL, empty restart): a new id');
  });

  test('a fresh bucket of 100 at 10/s allows 100 calls of 1, then waits 100 ms for the next', async () => {
    const o = { capacity: 100, ratePerSec: 10, cost: 1, ttlMs: 60_000 };
    const { results, elapsedMs } = await bracketed(c, () => Array.from({ length: 101 }, () => scripts.tokenBucket(key, o)));
    assert.ok(elapsedMs < 100, `101 calls took ${elapsedMs} ms of Redis time, less than one unit of refill`);
    results.slice(0, 100).forEach((r, i) => assert.deepEqual(r, { allowed: true, waitMs: 0, level: 99 - i }));
    const last = results[100];
    assert.ok(last !== undefined);
    assert.equal(last.allowed, false);
    assert.equal(last.level, 0);
    // (1 unit − refill since the first call) / 10 per s, rounded up: 100 ms less at most the ms that passed.
    assert.ok(last.waitMs <= 100 && last.waitMs >= 100 - Math.ceil(elapsedMs), `wait ${last.waitMs} ms, elapsed ${elapsedMs} ms`);
  });

  test('a refund never raises the level above capacity, and a full bucket deletes its key', async () => {
    const o = { capacity: 100, ratePerSec: 0.001, ttlMs: 60_000 };
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 30 }), { allowed: true, waitMs: 0, level: 70 });
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: -10 }), { allowed: true, waitMs: 0, level: 80 });
    assert.equal(await c.exists(key), 1);
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: -50 }), { allowed: true, waitMs: 0, level: 100 });
    assert.equal(await c.exists(key), 0, 'a full bucket is the same as no key');
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 100 }), { allowed: true, waitMs: 0, level: 0 });
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 1 }), { allowed: false, waitMs: 1_000_000, level: 0 });
  });

  test('floor 20 stops at level 20; a floor-0 call takes the rest; cost > capacity − floor waits -1', async () => {
    const o = { capacity: 100, ratePerSec: 1, ttlMs: 60_000 };
    const { results, elapsedMs } = await bracketed(c, () => [
      ...Array.from({ length: 9 }, () => scripts.tokenBucket(key, { ...o, cost: 10, floor: 20 })),
      scripts.tokenBucket(key, { ...o, cost: 81, floor: 20 }),
      scripts.tokenBucket(key, { ...o, cost: 20 }),
      scripts.tokenBucket(key, { ...o, cost: 1 }),
    ]);
    assert.ok(elapsedMs < 500, `elapsed ${elapsedMs} ms`);
    results.slice(0, 8).forEach((r, i) => assert.deepEqual(r, { allowed: true, waitMs: 0, level: 90 - 10 * i }));
    const [ninth, tooBig, rest, empty] = results.slice(8);
    assert.ok(ninth !== undefined && tooBig !== undefined && rest !== undefined && empty !== undefined);
    // 10 units above the floor at 1 unit/s: 10 s, less the refill since the first call.
    assert.equal(ninth.allowed, false);
    assert.equal(ninth.level, 20);
    assert.ok(ninth.waitMs <= 10_000 && ninth.waitMs >= 10_000 - Math.ceil(elapsedMs), `wait ${ninth.waitMs}`);
    assert.deepEqual(tooBig, { allowed: false, waitMs: -1, level: 20 });
    assert.deepEqual(rest, { allowed: true, waitMs: 0, level: 0 });
    assert.equal(empty.allowed, false);
    assert.ok(empty.waitMs <= 1000 && empty.waitMs >= 1000 - Math.ceil(elapsedMs), `wait ${empty.waitMs}`);
    // The whole bucket fits a floor-0 call, one unit more never does.
    assert.deepEqual(await scripts.tokenBucket(capKey('test', 'other'), { ...o, cost: 101 }), { allowed: false, waitMs: -1, level: 100 });
    assert.deepEqual(await scripts.tokenBucket(capKey('test', 'other'), { ...o, cost: 80, floor: 20 }), { allowed: true, waitMs: 0, level: 20 });
  });

  test('force takes the bucket into debt and the next call waits (deficit + cost) / rate', async () => {
    const o = { capacity: 100, ratePerSec: 10, ttlMs: 1000 };
    const { results, elapsedMs } = await bracketed(c, () => [
      scripts.tokenBucket(key, { ...o, cost: 100 }),
      scripts.tokenBucket(key, { ...o, cost: 50, force: true }),
      scripts.tokenBucket(key, { ...o, cost: 1 }),
      scripts.tokenBucket(key, { ...o, cost: 200, force: true }),
    ]);
    assert.ok(elapsedMs < 100, `elapsed ${elapsedMs} ms`);
    const [drain, debt, next, huge] = results;
    assert.deepEqual(drain, { allowed: true, waitMs: 0, level: 0 });
    assert.deepEqual(debt, { allowed: true, waitMs: 0, level: -50 });
    assert.ok(next !== undefined && huge !== undefined);
    assert.equal(next.allowed, false);
    assert.equal(next.level, -50);
    // (50 + 1) units at 10/s = 5100 ms, less the refill since the first call.
    assert.ok(next.waitMs <= 5100 && next.waitMs >= 5100 - Math.ceil(elapsedMs), `wait ${next.waitMs}`);
    // Force even beyond capacity: the debt is what the provider said was spent.
    assert.deepEqual(huge, { allowed: true, waitMs: 0, level: -250 });
    // The key lives until the bucket is full again (350 units at 10/s = 35 s), not just the 1 s ttl.
    const pttl = await c.pttl(key);
    assert.ok(pttl > 34_000 && pttl <= 35_000, `pttl ${pttl}`);
  });

  test('the key expires no earlier than ttl, and no earlier than the bucket is full again', async () => {
    const o = { capacity: 100, ratePerSec: 10, ttlMs: 1000 };
    await scripts.tokenBucket(key, { ...o, cost: 1 });
    const short = await c.pttl(key);
    assert.ok(short > 900 && short <= 1000, `ttl wins over 100 ms of refill: pttl ${short}`);
    await scripts.tokenBucket(key, { ...o, cost: 50 });
    const long = await c.pttl(key);
    assert.ok(long > 5000 && long <= 5100, `51 units at 10/s: pttl ${long}`);
  });

  test('repeated small calls do not drift: 1000 calls of 0.1 take exactly 100 units', async () => {
    const o = { capacity: 1000, ratePerSec: 1e-6, cost: 0.1, ttlMs: 60_000 };
    const results = await Promise.all(Array.from({ length: 1000 }, () => scripts.tokenBucket(key, o)));
    assert.ok(results.every((r) => r.allowed));
    const level = Number(await c.hget(key, 'l'));
    assert.ok(Math.abs(level - 900) < 1e-5, `level ${level}`);
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 0 }), { allowed: true, waitMs: 0, level: 900 });
  });

  test('lease grants whole blocks, partial blocks, and 0 below min with the wait until min fits', async () => {
    const o = { capacity: 100, ratePerSec: 1, ttlMs: 60_000 };
    const { results, elapsedMs } = await bracketed(c, () => [
      scripts.lease(key, { ...o, want: 30, min: 5 }),
      scripts.lease(key, { ...o, want: 100, min: 5 }),
      scripts.lease(key, { ...o, want: 10, min: 5 }),
    ]);
    assert.ok(elapsedMs < 500, `elapsed ${elapsedMs} ms`);
    const [whole, partial, none] = results;
    assert.deepEqual(whole, { granted: 30, waitMs: 0, level: 70 });
    assert.deepEqual(partial, { granted: 70, waitMs: 0, level: 0 });
    assert.ok(none !== undefined);
    assert.equal(none.granted, 0);
    assert.equal(none.level, 0);
    assert.ok(none.waitMs <= 5000 && none.waitMs >= 5000 - Math.ceil(elapsedMs), `wait ${none.waitMs}`);
    // Unused units go back through token-bucket.lua with a negative cost.
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: -25 }), { allowed: true, waitMs: 0, level: 25 });

    const other = capKey('test', 'floored');
    assert.deepEqual(await scripts.lease(other, { ...o, want: 100, min: 1, floor: 20 }), { granted: 80, waitMs: 0, level: 20 });
    assert.deepEqual(await scripts.lease(other, { ...o, want: 100, min: 81, floor: 20 }), { granted: 0, waitMs: -1, level: 20 });
    assert.deepEqual(await scripts.lease(other, { ...o, want: 5, min: 1 }), { granted: 5, waitMs: 0, level: 15 });
  });

  test('NOSCRIPT after SCRIPT FLUSH reloads the script transparently', async () => {
    const o = { capacity: 100, ratePerSec: 0.001, ttlMs: 60_000 };
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 10 }), { allowed: true, waitMs: 0, level: 90 });
    assert.deepEqual(await scripts.lease(key, { ...o, want: 10, min: 1 }), { granted: 10, waitMs: 0, level: 80 });
    await c.config('RESETSTAT');
    assert.equal(await c.script('FLUSH'), 'OK');
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 10 }), { allowed: true, waitMs: 0, level: 70 });
    assert.deepEqual(await scripts.lease(key, { ...o, want: 10, min: 1 }), { granted: 10, waitMs: 0, level: 60 });
    assert.equal((await info(c, 'errorstats')).get('errorstat_NOSCRIPT'), 'count=2', 'each script met NOSCRIPT once');
    assert.equal((await commandStats(c, 'eval'))?.calls, 2, 'and was sent again as EVAL');
    assert.deepEqual(await scripts.tokenBucket(key, { ...o, cost: 10 }), { allowed: true, waitMs: 0, level: 50 });
    assert.equal((await commandStats(c, 'evalsha'))?.calls, 3, 'then EVALSHA again');
  });

  test('invalid arguments are RangeErrors and never reach Redis', async () => {
    const o = { capacity: 100, ratePerSec: 10, cost: 1, ttlMs: 1000 };
    const l = { capacity: 100, ratePerSec: 10, want: 10, min: 1, ttlMs: 1000 };
    await c.config('RESETSTAT');
    const bad: [string, Promise<unknown>][] = [
      ['negative capacity', scripts.tokenBucket(key, { ...o, capacity: -1 })],
      ['zero capacity', scripts.tokenBucket(key, { ...o, capacity: 0 })],
      ['NaN rate', scripts.tokenBucket(key, { ...o, ratePerSec: Number.NaN })],
      ['infinite cost', scripts.tokenBucket(key, { ...o, cost: Number.POSITIVE_INFINITY })],
      ['negative floor', scripts.tokenBucket(key, { ...o, floor: -1 })],
      ['floor above capacity', scripts.tokenBucket(key, { ...o, floor: 101 })],
      ['zero ttl', scripts.tokenBucket(key, { ...o, ttlMs: 0 })],
      ['empty key', scripts.tokenBucket('', o)],
      ['min 0', scripts.lease(key, { ...l, min: 0 })],
      ['want below min', scripts.lease(key, { ...l, want: 1, min: 2 })],
      ['fractional want', scripts.lease(key, { ...l, want: 1.5 })],
      ['negative lease capacity', scripts.lease(key, { ...l, capacity: -5 })],
    ];
    for (const [what, call] of bad) await assert.rejects(call, RangeError, what);
    assert.equal(await commandStats(c, 'evalsha'), undefined);
    assert.equal(await commandStats(c, 'eval'), undefined);
  });

  test('defineCapScripts defines once per connection', () => {
    assert.equal(defineCapScripts(c), scripts);
  });

  test('keys are namespaced by cluster and hash-tagged on the bucket', () => {
    assert.equal(capKey('prod', 'deployment:gpt-4o'), 'qr:prod:cap:{deployment:gpt-4o}');
    const k = capKey('c1', 'tenant:acme:tokens');
    assert.equal(k.slice(k.indexOf('{') + 1, k.indexOf('}')), 'tenant:acme:tokens', 'the hash tag is the bucket name');
    for (const [cluster, bucket] of [['', 'b'], ['c', ''], ['c{', 'b'], ['c', 'b}'], ['c', '{b}']] as const) {
      assert.throws(() => capKey(cluster, bucket), RangeError, `${cluster} / ${bucket}`);
    }
  });

  test('Redis CPU per call (INFO commandstats usec_per_call)', async (t) => {
    const n = 2000;
    const o = { capacity: 1e9, ratePerSec: 1, cost: 1, ttlMs: 60_000 };
    const l = { capacity: 1e9, ratePerSec: 1, want: 100, min: 1, ttlMs: 60_000 };
    await scripts.tokenBucket(key, o); // loaded on this socket: every call below is an EVALSHA
    await c.config('RESETSTAT');
    for (let i = 0; i < n; i++) await scripts.tokenBucket(key, o);
    const bucket = await commandStats(c, 'evalsha');
    await scripts.lease(key, l);
    await c.config('RESETSTAT');
    for (let i = 0; i < n; i++) await scripts.lease(key, l);
    const lease = await commandStats(c, 'evalsha');
    assert.equal(bucket?.calls, n);
    assert.equal(lease?.calls, n);
    assert.equal(await commandStats(c, 'eval'), undefined, 'no call resent the script text');
    assert.ok(bucket.usecPerCall > 0 && lease.usecPerCall > 0);
    t.diagnostic(`token-bucket.lua: ${bucket.usecPerCall} µs of Redis CPU per call; lease.lua: ${lease.usecPerCall} µs (${n} calls each)`);
  });
});
