/**
 * Values read back from Redis are not trusted (issue 14, finding 5; docs/security.md, "Values read
 * from Redis"). Each test writes a hostile value straight into the key the code reads, on a real
 * redis-server, then shows it cannot grant more than the limit, hold a slot past its lease, or block
 * a tenant for more than a window; and that a corrupt value starts the tenant conservatively (its
 * limits used up for one window), counted and logged, never with fresh limits.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ManualClock } from '../../src/clock.ts';
import { Handoff } from '../../src/coord/handoff/handoff.ts';
import { HotSet, hotKey } from '../../src/coord/hot/hot-set.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { TenantStateStore, stateKey } from '../../src/coord/handoff/state-store.ts';
import type { Member } from '../../src/coord/types.ts';
import { CentralLimiter, centralKey } from '../../src/central/central-limiter.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { capKey } from '../../src/globalcap/keys.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import { MAX_CLOCK_SKEW_MS } from '../../src/limiter/snapshot-bounds.ts';
import type { TenantSnapshot } from '../../src/limiter/snapshot.ts';
import type { Policy } from '../../src/limiter/types.ts';
import { TestMembership } from '../helpers/membership.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const FAR = 9e15;

let redis: RunningRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

describe('tenant state (handoff and checkpoints) read back from Redis', () => {
  const A: Member = { id: 'node-a', url: 'http://127.0.0.1:1' };
  const T = 'acme';
  const POLICY: Policy = {
    limits: [
      { name: 'tokens/1m', kind: 'tokens', limit: 20_000, windowMs: 60_000, algorithm: 'token_bucket' },
      { name: 'requests/1m', kind: 'requests', limit: 100, windowMs: 60_000, algorithm: 'sliding_window' },
      { name: 'concurrent', kind: 'concurrent', limit: 1, leaseTtlMs: 30_000 },
    ],
  };
  let cluster = 0;
  let clock: ManualClock;
  beforeEach(() => {
    cluster++;
    clock = new ManualClock(Date.now());
  });

  /** Writes `value` as the stored state of T (`<expiresAtMs> <json>`, the store's own format unless `raw`). */
  async function store(value: string | TenantSnapshot, raw = false): Promise<void> {
    const json = typeof value === 'string' ? value : JSON.stringify(value);
    await redis.client().hset(stateKey(`rv${cluster}`), T, raw ? json : `${clock.now() + 120_000} ${json}`);
  }

  /** A single node that owns T, loads its stored state, and records its warnings. */
  async function claim(policy: Policy = POLICY): Promise<{ limiter: Limiter; handoff: Handoff; warnings: string[] }> {
    const warnings: string[] = [];
    const limiter = new Limiter({ clock, policyFor: () => policy });
    const handoff = new Handoff({
      self: A,
      membership: new TestMembership(createRing([A])),
      limiter,
      store: new TenantStateStore(redis.client(), `rv${cluster}`, () => clock.now()),
      clock,
      checkpointMs: 60_000,
      stateTtlMs: () => 120_000,
      send: async () => {},
      log: { info: () => {}, warn: (_obj: object, msg: string) => void warnings.push(msg) },
    });
    await handoff.start();
    handoff.joined();
    await handoff.ready(T);
    handoff.stop();
    return { limiter, handoff, warnings };
  }

  /** Requests of `tokens` admitted out of `n`, each settled on its reservation and released. */
  function admitted(limiter: Limiter, n: number, tokens: number, prefix: string): number {
    let ok = 0;
    for (let i = 0; i < n; i++) {
      const id = `${prefix}${i}`;
      if (limiter.acquire(T, { id, tokens }).ok) {
        ok++;
        limiter.settle(T, id, tokens);
        limiter.release(T, id);
      }
    }
    return ok;
  }

  test('a bucket level of 1e300: of 100 requests of 5,000 tokens, exactly 4 pass a 20k limit (was 100); counted and logged', async () => {
    const now = clock.now();
    await store({
      v: 1,
      at: now,
      limits: [{ name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 1e300, refilledAt: now }],
      reservations: [],
    });
    const { limiter, handoff, warnings } = await claim();
    assert.equal(admitted(limiter, 100, 5_000, 'a'), 4);
    assert.equal(handoff.stats.loaded, 1);
    assert.equal(handoff.stats.clamped, 1);
    assert.deepEqual(warnings, ['tenant state in Redis out of range: values clamped to the limits']);
  });

  test('a concurrency slot dated 9e15 frees one lease TTL (30 s) after the load (was never)', async () => {
    await store({ v: 1, at: clock.now(), limits: [{ name: 'concurrent', algorithm: 'semaphore', leases: [['ghost', FAR]] }], reservations: [] });
    const { limiter } = await claim();
    assert.equal(limiter.acquire(T, { id: 'a', tokens: 1 }).ok, false);
    clock.advance(29_999);
    assert.equal(limiter.acquire(T, { id: 'b', tokens: 1 }).ok, false);
    clock.advance(1);
    assert.equal(limiter.acquire(T, { id: 'c', tokens: 1 }).ok, true);
  });

  test('a window entry and a bucket refill time in the future are clamped to now + the clock skew: the tenant is back after one window', async () => {
    const now = clock.now();
    await store({
      v: 1,
      at: now,
      limits: [
        { name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 0, refilledAt: FAR },
        { name: 'requests/1m', algorithm: 'sliding_window', kind: 'requests', entries: [[FAR, 100, 'x']] },
      ],
      reservations: [],
    });
    const { limiter, handoff } = await claim();
    assert.equal(handoff.stats.clamped, 1);
    assert.equal(limiter.acquire(T, { id: 'a', tokens: 1 }).ok, false);
    clock.advance(60_000 + MAX_CLOCK_SKEW_MS);
    assert.equal(admitted(limiter, 100, 5_000, 'b'), 4);
  });

  for (const [what, value, raw] of [
    ['not JSON', 'garbage', false],
    ['a snapshot of the wrong shape', '{"v":1,"at":"soon","limits":[],"reservations":[]}', false],
    ['a value without its expiry', 'garbage', true],
  ] as const) {
    test(`a corrupt state (${what}): the tenant is refused for one window, counted and logged, then served in full`, async () => {
      await store(value, raw);
      const { limiter, handoff, warnings } = await claim();
      assert.equal(handoff.stats.corrupt, 1);
      assert.equal(handoff.stats.loaded, 0);
      assert.deepEqual(warnings, ['tenant state in Redis is corrupt: its requests and tokens limits start used up for one window']);
      const refused = limiter.acquire(T, { id: 'a', tokens: 1 });
      assert.equal(refused.ok, false);
      assert.equal(refused.ok ? 0 : refused.retryAfterMs, 60_000);
      clock.advance(59_999);
      assert.equal(limiter.acquire(T, { id: 'b', tokens: 1 }).ok, false);
      clock.advance(1);
      assert.equal(admitted(limiter, 100, 5_000, 'c'), 4);
    });
  }

  test('an 80 MB state (3,000,000 leases) is never read: the claim completes, the tenant starts conservative, counted as corrupt, RSS grows < 100 MB (was ~10 s and 2.5 GB, or fresh limits on the read timeout)', async () => {
    const exp = clock.now() + 50_000;
    const head = `${clock.now() + 120_000} {"v":1,"at":${clock.now()},"limits":[{"name":"concurrent","algorithm":"semaphore","leases":[`;
    const parts: string[] = [];
    for (let i = 0; i < 3_000_000; i++) parts.push(`["l${i}",${exp}]`);
    const value = Buffer.from(`${head}${parts.join(',')}]}],"reservations":[]}`);
    parts.length = 0;
    assert.ok(value.length > 75_000_000, `${value.length} bytes`);
    await redis.client().hset(stateKey(`rv${cluster}`), T, value);
    global.gc?.();
    const rss = process.memoryUsage().rss;
    const started = Date.now();
    const { limiter, handoff, warnings } = await claim();
    const ms = Date.now() - started;
    const grown = process.memoryUsage().rss - rss;
    assert.ok(ms < 5_000, `claim took ${ms} ms`);
    assert.ok(grown < 100 * 1024 * 1024, `RSS grew ${Math.round(grown / 1024 / 1024)} MB`);
    assert.equal(handoff.stats.corrupt, 1);
    assert.equal(handoff.stats.loaded, 0);
    assert.deepEqual(warnings, ['tenant state in Redis is corrupt: its requests and tokens limits start used up for one window']);
    const refused = limiter.acquire(T, { id: 'a', tokens: 1 });
    assert.equal(refused.ok ? 0 : refused.retryAfterMs, 60_000);
    clock.advance(60_000);
    assert.equal(admitted(limiter, 100, 5_000, 'c'), 4);
  });

  test('100,000 leases (2.5 MB, under the byte cap) for a limit of 4: exactly the 4 latest-expiring are held, counted as clamped (was 100,000)', async () => {
    const now = clock.now();
    const policy: Policy = { limits: [{ name: 'concurrent', kind: 'concurrent', limit: 4, leaseTtlMs: 30_000 }] };
    // Lease i expires at now + 10 s + i/10 ms: the 4 latest at now + 19,999.6 … 19,999.9 ms.
    const leases = Array.from({ length: 100_000 }, (_, i): [string, number] => [`l${i}`, now + 10_000 + i / 10]);
    await store({ v: 1, at: now, limits: [{ name: 'concurrent', algorithm: 'semaphore', leases }], reservations: [] });
    const { limiter, handoff, warnings } = await claim(policy);
    assert.equal(handoff.stats.loaded, 1);
    assert.equal(handoff.stats.corrupt, 0);
    assert.equal(handoff.stats.clamped, 1);
    assert.deepEqual(warnings, ['tenant state in Redis out of range: values clamped to the limits']);
    const held = limiter.exportTenant(T)?.limits.find((l) => l.name === 'concurrent');
    assert.deepEqual(held?.algorithm === 'semaphore' ? held.leases.map(([id]) => id) : undefined, ['l99996', 'l99997', 'l99998', 'l99999']);
    assert.equal(limiter.acquire(T, { id: 'a', tokens: 1 }).ok, false);
    clock.advance(19_999);
    assert.equal(limiter.acquire(T, { id: 'b', tokens: 1 }).ok, false);
    clock.advance(1);
    assert.equal(limiter.acquire(T, { id: 'c', tokens: 1 }).ok, true);
  });
});

describe('global cap buckets (deployment quotas, spread tenants) read back by the Lua scripts', () => {
  let n = 0;
  /** A fresh bucket key, as CapLeases names a deployment's tokens bucket. */
  const bucket = (): string => capKey(`rv-cap${++n}`, 'deployment:gpt:tpm');
  /** capacity 10, refilled at 10 units/s: a window of 1 s. */
  const SMALL = { capacity: 10, ratePerSec: 10, ttlMs: 1_000 } as const;

  test('a deployment quota whose stored level is 1e300: of 100 takes of 5,000 tokens, at most 4 pass its 20k tokens a minute (held before this change too: a regression test)', async () => {
    const cluster = `rv-cap${++n}`;
    const c = redis.client();
    const [sec] = (await c.time()) as unknown as [string, string];
    await c.hset(capKey(cluster, 'deployment:gpt:tpm'), 'l', '1e300', 't', String(Number(sec) * 1000));
    const leases = new CapLeases({ cluster, deployments: { gpt: { tpm: 20_000, headroom: 1 } }, scripts: defineCapScripts(c) });
    let ok = 0;
    for (let i = 0; i < 100; i++) {
      const first = leases.take('gpt', { tokens: 5_000 });
      if ((first.ok ? first : await leases.takeAfterRenewals('gpt', { tokens: 5_000 }, first)).ok) ok++;
    }
    // Refill during the test adds 333 tokens a second: not another 5,000 within 15 s.
    assert.equal(ok, 4);
    await leases.close();
  });

  test('a corrupt stored level is an empty bucket (was a full one), written back so it refills from then', async () => {
    const c = redis.client();
    const scripts = defineCapScripts(c);
    const key = bucket();
    await c.hset(key, 'l', 'garbage', 't', 'garbage');
    const first = await scripts.tokenBucket(key, { ...SMALL, cost: 1 });
    assert.equal(first.allowed, false);
    assert.ok(first.waitMs > 0 && first.waitMs <= 100, `wait ${first.waitMs} ms`);
    assert.equal(Number.isFinite(Number(await c.hget(key, 'l'))), true, 'repaired');
    await sleep(150);
    assert.equal((await scripts.tokenBucket(key, { ...SMALL, cost: 1 })).allowed, true);
    // A lease from a corrupt bucket: nothing granted at first either.
    const other = bucket();
    await c.hset(other, 'l', 'nan', 't', '1');
    assert.equal((await scripts.lease(other, { ...SMALL, want: 5, min: 1 })).granted, 0);
  });

  test('a stored level of -1e300 is a debt of one window at most: the bucket is full again within two (was never)', async () => {
    const c = redis.client();
    const scripts = defineCapScripts(c);
    const key = bucket();
    const [sec] = (await c.time()) as unknown as [string, string];
    await c.hset(key, 'l', '-1e300', 't', String(Number(sec) * 1000));
    const r = await scripts.lease(key, { ...SMALL, want: 10, min: 10 });
    assert.equal(r.granted, 0);
    assert.ok(r.waitMs > 0 && r.waitMs <= 2_000, `wait ${r.waitMs} ms`);
    await sleep(r.waitMs + 50);
    assert.equal((await scripts.lease(key, { ...SMALL, want: 10, min: 10 })).granted, 10);
  });

  test('a stored time in the future (9e15) is clamped to Redis TIME: the bucket refills from now (was never)', async () => {
    const c = redis.client();
    const scripts = defineCapScripts(c);
    const key = bucket();
    await c.hset(key, 'l', '0', 't', String(FAR));
    assert.equal((await scripts.tokenBucket(key, { ...SMALL, cost: 1 })).allowed, false);
    assert.ok(Number(await c.hget(key, 't')) < FAR, 'the clamped time is written back');
    await sleep(250);
    assert.equal((await scripts.tokenBucket(key, { ...SMALL, cost: 1 })).allowed, true);
  });
});

describe('central-store mode: tenant limits held in Redis, read back by its Lua scripts', () => {
  let n = 0;
  const tokens = (windowMs: number): Policy['limits'][number] => ({ name: 'tokens', kind: 'tokens', limit: 20_000, windowMs, algorithm: 'token_bucket' });
  /** A central limiter for tenant T of a fresh cluster, and the key of each of its limits. */
  function central(policy: Policy) {
    const cluster = `rv-central${++n}`;
    const limiter = new CentralLimiter({ redis: redis.client(), cluster, policyFor: () => policy });
    return { limiter, key: (suffix: string) => centralKey(cluster, T, suffix) };
  }
  const T = 'acme';
  async function admitted(limiter: CentralLimiter, count: number, cost: number, prefix: string): Promise<number> {
    let ok = 0;
    for (let i = 0; i < count; i++) {
      const id = `${prefix}${i}`;
      if ((await limiter.acquire(T, { id, tokens: cost })).ok) {
        ok++;
        await limiter.settle(T, id, cost);
        await limiter.release(T, id);
      }
    }
    return ok;
  }

  test('a bucket whose units used are -1e300: of 100 requests of 5,000 tokens, exactly 4 pass a 20k limit (was 100)', async () => {
    const { limiter, key } = central({ limits: [tokens(60_000)] });
    const [sec] = (await redis.client().time()) as unknown as [string, string];
    await redis.client().hset(key('b:tokens'), 'u', '-1e300', 't', String(Number(sec) * 1000));
    assert.equal(await admitted(limiter, 100, 5_000, 'a'), 4);
  });

  test('a bucket whose stored value is garbage is used up (was fresh): refused, then served as it refills', async () => {
    const { limiter, key } = central({ limits: [tokens(1_000)] });
    await redis.client().hset(key('b:tokens'), 'u', 'garbage', 't', 'garbage');
    const r = await limiter.acquire(T, { id: 'a', tokens: 20_000 });
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.retryAfterMs > 900 && r.retryAfterMs <= 1_000, `retry after ${r.ok ? 0 : r.retryAfterMs} ms`);
    await sleep(1_050);
    assert.equal((await limiter.acquire(T, { id: 'b', tokens: 20_000 })).ok, true);
  });

  test('a concurrency slot dated 9e15 frees within one lease TTL (was never)', async () => {
    const { limiter, key } = central({ limits: [{ name: 'slots', kind: 'concurrent', limit: 1, leaseTtlMs: 300 }] });
    await redis.client().zadd(key('c:slots'), String(FAR), 'ghost');
    const r = await limiter.acquire(T, { id: 'a', tokens: 0 });
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.retryAfterMs <= 300, `retry after ${r.ok ? 0 : r.retryAfterMs} ms`);
    await sleep(350);
    assert.equal((await limiter.acquire(T, { id: 'b', tokens: 0 })).ok, true);
  });

  test('a window entry dated 9e15 and a running sum of -1e300 are clamped: the window is full for one window, then serves its limit (was never, or without limit)', async () => {
    const windowMs = 500;
    const { limiter, key } = central({ limits: [{ name: 'req', kind: 'requests', limit: 3, windowMs, algorithm: 'sliding_window' }] });
    await redis.client().zadd(key('w:req'), String(FAR), '3:0:ghost');
    await redis.client().set(key('s:req'), '-1e300');
    assert.equal(await admitted(limiter, 5, 0, 'a'), 0);
    await sleep(windowMs + 50);
    assert.equal(await admitted(limiter, 5, 0, 'b'), 3);
  });

  test('a corrupt reservation record is no reservation: acquire, settle and release answer instead of failing', async () => {
    const { limiter, key } = central({ limits: [tokens(60_000), { name: 'slots', kind: 'concurrent', limit: 2, leaseTtlMs: 60_000 }] });
    await redis.client().hset(key('r'), 'x', 'garbage');
    assert.equal((await limiter.acquire(T, { id: 'x', tokens: 10 })).ok, true);
    await redis.client().hset(key('r'), 'x', 'garbage');
    assert.deepEqual(await limiter.settle(T, 'x', 0), { settled: false, deltaTokens: 0 });
    assert.equal(await redis.client().hexists(key('r'), 'x'), 0, 'deleted');
  });
});

describe('the hot set read back from Redis', () => {
  test('an entry with k = 1000 and until = 9e15: spread over the ring\'s 3 members, clamped to one cooldown and written back, then it lapses (was hot forever over 1000)', async () => {
    const clock = new ManualClock(Date.now());
    const problems: string[] = [];
    await redis.client().hset(hotKey('rv-hot'), 'acme', JSON.stringify({ k: 1_000, until: FAR }), 'junk', '{"k":0,"until":1}');
    const set = new HotSet({ redis: redis.client(), cluster: 'rv-hot', clock, maxSpread: () => 3, maxTtlMs: 60_000, onInvalid: (t, p) => problems.push(`${t}: ${p}`) });
    await set.refresh();
    assert.equal(set.spreadOf('acme'), 3);
    assert.deepEqual(problems, ['acme: until 9000000000000000 beyond now + 60000 ms: clamped', 'junk: not a hot-set entry: deleted']);
    await sleep(50);
    assert.deepEqual(JSON.parse((await redis.client().hget(hotKey('rv-hot'), 'acme')) as string), { k: 1_000, until: clock.now() + 60_000 });
    clock.advance(60_000);
    await set.refresh();
    assert.equal(set.spreadOf('acme'), undefined);
    assert.equal(problems.length, 2, 'the written-back entry is in range');
  });
});
