/**
 * Leases that give back (issue 13, item 4), on a real redis-server: two nodes (two CapLeases, each
 * with its own connection and a manual clock for lease expiry; Redis TIME refills the buckets)
 * share one bucket. Unspent units return to Redis when a lease expires or the node closes; a small
 * bucket is never prefetched from; a refused renewal's wait is the bucket's real refill time.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import type { CapCall, CapLeasesOptions } from '../../src/globalcap/cap-leases.ts';
import { capKey } from '../../src/globalcap/keys.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

/** A spread tenant's `tokens: 10000/1d` limit, shared by its 2 nodes. */
const TOKENS = { kind: 'tokens' as const, name: 'tenant:acme:tokens:10000/86400000', capacity: 10_000, windowMs: 86_400_000 };
const TOKENS_KEY = capKey('it', TOKENS.name);

/** The bucket's level in Redis (a missing key is a full bucket), without refilling it. */
async function storedLevel(admin: Redis, key: string, capacity: number): Promise<number> {
  const l = await admin.hget(key, 'l');
  return l === null ? capacity : Number(l);
}

describe('leases that give back, on a real Redis', () => {
  let redis: RunningRedis;
  let admin: Redis;
  const open: CapLeases[] = [];

  before(async () => {
    redis = await startRedis();
    admin = redis.client();
  });
  after(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    for (const n of open.splice(0)) await n.close();
    await redis.flush();
  });

  function node(clock: ManualClock, extra: Partial<CapLeasesOptions> = {}): CapLeases {
    const leases = new CapLeases({ cluster: 'it', scripts: defineCapScripts(redis.client()), clock, sweepMs: 0, ...extra });
    leases.define('tenant:acme', { buckets: [TOKENS], share: () => 2 });
    open.push(leases);
    return leases;
  }

  /** A take, waiting for the renewals it starts (as the gateway does). */
  async function take(n: CapLeases, group: string, cost: { requests?: number; tokens: number }): Promise<ReturnType<CapLeases['take']>> {
    return n.takeAfterRenewals(group, cost, n.take(group, cost));
  }

  test('a tokens limit: units leased for a request that never spent them go back when the lease expires; 7,000 + 3,000 of 10,000 are then admitted', async () => {
    const clock = new ManualClock(Date.now());
    const [a, b] = [node(clock), node(clock)];
    // Node a leases for a request of 3,000 whose client went away before spending it.
    assert.deepEqual(a.take('tenant:acme', { tokens: 3000 }), { ok: false, waitMs: 5 });
    await a.whenRenewed('tenant:acme');
    assert.equal(a.buckets('tenant:acme')[0]?.balance, 3000);
    const leased = await storedLevel(admin, TOKENS_KEY, 10_000);
    assert.ok(leased >= 7000 && leased < 7001, `level ${leased} after the lease`);
    clock.advance(5000); // the lease expires
    await a.sweep();
    assert.equal(a.buckets('tenant:acme')[0]?.balance, 0);
    assert.equal(await storedLevel(admin, TOKENS_KEY, 10_000), 10_000, 'the 3,000 unspent tokens are back (the key is deleted when full)');
    assert.deepEqual(a.givenBack, { sent: 3000, answered: 3000 });
    assert.deepEqual(await take(b, 'tenant:acme', { tokens: 7000 }), { ok: true });
    assert.deepEqual(await take(b, 'tenant:acme', { tokens: 3000 }), { ok: true });
    assert.equal((await take(a, 'tenant:acme', { tokens: 1 })).ok, false, 'and no more: the limit holds');
  });

  test('a tokens limit: a node that spent 3,000 prefetches nothing, so a request of 7,000 on the other node is admitted at once', async () => {
    const clock = new ManualClock(Date.now());
    const [a, b] = [node(clock), node(clock)];
    assert.deepEqual(await take(a, 'tenant:acme', { tokens: 3000 }), { ok: true });
    await a.whenRenewed('tenant:acme');
    assert.equal(a.buckets('tenant:acme')[0]?.balance, 0, 'no block held ahead: 3,000 × 4 × 2 nodes > 10,000');
    assert.deepEqual(await take(b, 'tenant:acme', { tokens: 7000 }), { ok: true });
  });

  test('two nodes sharing a 2 rpm quota each get a request through', async () => {
    const clock = new ManualClock(Date.now());
    const quota = { deployments: { gpt: { rpm: 2, headroom: 1 } }, liveNodes: () => 2 };
    const [a, b] = [node(clock, quota), node(clock, quota)];
    assert.deepEqual(await take(a, 'gpt', { tokens: 0 }), { ok: true });
    await a.whenRenewed('gpt');
    assert.deepEqual(await take(b, 'gpt', { tokens: 0 }), { ok: true });
    await b.whenRenewed('gpt');
    const third = await take(a, 'gpt', { tokens: 0 });
    assert.equal(third.ok, false, 'the quota is spent');
    // One request refills in 30 s (2 a minute); a few ms of it passed since the second lease.
    assert.ok(!third.ok && third.waitMs > 29_000 && third.waitMs <= 30_000, JSON.stringify(third));
  });

  test("a refused renewal's wait is the bucket's real time to refill the request (the Lua's wait_ms, not × the nodes)", async () => {
    const clock = new ManualClock(Date.now());
    // tpm 60,000 at headroom 1: 1,000 tokens a second.
    const quota = { deployments: { gpt: { tpm: 60_000, headroom: 1 } }, liveNodes: () => 2 };
    const [a] = [node(clock, quota), node(clock, quota)];
    const key = capKey('it', 'deployment:gpt:tpm');
    // 1,000 tokens left, stamped in the future: the script clamps the time to now, so the level is
    // exactly 1,000 when the lease is asked (no refill since).
    await admin.hset(key, 'l', '1000', 't', String(Date.now() + 3_600_000));
    const refused = await take(a, 'gpt', { tokens: 5000 });
    // 4,000 tokens short at 1,000 a second: 4,000 ms (the node's clock has not moved since the answer).
    assert.deepEqual(refused, { ok: false, waitMs: 4000 });
  });

  test('close gives back the unspent units, including a grant answered after its call timed out', async () => {
    const clock = new ManualClock(Date.now());
    let late = true;
    // The first lease call "times out" (a blip) and its grant arrives 100 ms later, after close began.
    const call: CapCall = async (fn) => {
      if (late) {
        late = false;
        return { ok: false, open: false, late: fn().then(async (v) => (await sleep(100), v)) };
      }
      try {
        return { ok: true, value: await fn() };
      } catch {
        return { ok: false };
      }
    };
    const a = node(clock, { call });
    const b = node(clock);
    assert.deepEqual(await take(b, 'tenant:acme', { tokens: 2000 }), { ok: true });
    b.refund('tenant:acme', { tokens: 1500 }); // reserved 2,000, used 500
    assert.equal(a.take('tenant:acme', { tokens: 4000 }).ok, false);
    await a.whenRenewed('tenant:acme');
    await sleep(10);
    assert.ok((await storedLevel(admin, TOKENS_KEY, 10_000)) < 4001, 'the late grant was taken in Redis');
    await Promise.all([a.close(), b.close()]);
    const level = await storedLevel(admin, TOKENS_KEY, 10_000);
    // Only the 500 tokens used stay consumed (+ a few tokens refilled since).
    assert.ok(level >= 9500 && level < 9501, `level ${level}`);
  });
});

describe('give-back never admits beyond capacity nor loses units (random traffic, real Redis)', () => {
  let redis: RunningRedis;
  let admin: Redis;
  before(async () => {
    redis = await startRedis();
    admin = redis.client();
  });
  after(async () => {
    await redis.stop();
  });

  test('2 nodes, 300 random takes, refunds, abandoned leases and clock jumps: admitted ≤ capacity + refill; after close Redis holds exactly capacity − net usage (+ refill)', async () => {
    let seed = 13;
    const rnd = (): number => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const clock = new ManualClock(Date.now());
    const nodes = [0, 1].map(() => {
      const n = new CapLeases({ cluster: 'rnd', scripts: defineCapScripts(redis.client()), clock, sweepMs: 0 });
      n.define('t', { buckets: [{ ...TOKENS }], share: () => 2 });
      return n;
    });
    const key = capKey('rnd', TOKENS.name);
    const rate = 10_000 / 86_400_000; // tokens per ms
    const start = Date.now();
    let net = 0;
    for (let i = 0; i < 300; i++) {
      const n = nodes[Math.floor(rnd() * 2)] as CapLeases;
      const cost = 1 + Math.floor(rnd() * 3000);
      const r = rnd();
      if (r < 0.6) {
        const taken = await n.takeAfterRenewals('t', { tokens: cost }, n.take('t', { tokens: cost }));
        if (taken.ok) {
          net += cost;
          if (rnd() < 0.3) {
            const back = Math.floor(rnd() * cost);
            n.refund('t', { tokens: back });
            net -= back;
          }
        }
      } else if (r < 0.8) {
        n.take('t', { tokens: cost }); // a lease asked for a request that goes away
        await n.whenRenewed('t');
      } else {
        clock.advance(Math.floor(rnd() * 3000));
        await Promise.all(nodes.map((m) => m.sweep()));
      }
      const refill = (Date.now() - start) * rate;
      assert.ok(net <= 10_000 + refill, `step ${i}: admitted ${net} > 10,000 + ${refill}`);
    }
    assert.ok(net > 5000, `admitted only ${net}`);
    await Promise.all(nodes.map((m) => m.close()));
    const refill = (Date.now() - start) * rate;
    const level = await storedLevel(admin, key, 10_000);
    assert.ok(level >= 10_000 - net - 1e-6 && level <= Math.min(10_000, 10_000 - net + refill + 1e-6), `level ${level}, net usage ${net}, refill ≤ ${refill}`);
  });
});
