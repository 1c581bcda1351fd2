/**
 * CentralLimiter (central-store mode) on a real redis-server: exact reply shapes, all-or-nothing
 * admission, too_large, duplicate, settle refunds and debits (also from another process's
 * connection: the reservation lives in Redis), concurrency slots (release, renew, stale slots
 * purged on acquire), the reservation sweep, key names hash-tagged by tenant, and one script call
 * per acquire and per settle+release.
 *
 * Numbers: rate limits use 10-minute windows unless a test waits, so a token bucket of 1000 tokens
 * refills one token per 600 ms and a test's few ms of Redis time never change a floored
 * `remaining`; a bucket's `resetMs` right after taking c tokens is exactly c × 600 ms, a window's
 * exactly 600000 ms. Where refill or ageing during the test matters, bounds allow the Redis time
 * measured around the calls (TIME before and after).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { CentralLimiter, centralKey } from '../../src/central/central-limiter.ts';
import type { AcquireResult, LimitSpec, Policy } from '../../src/limiter/types.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const W = 600_000;

/** Redis TIME in ms (the scripts' clock). */
async function redisNow(c: Redis): Promise<number> {
  const [s, us] = (await c.time()) as unknown as [string, string];
  return Number(s) * 1000 + Number(us) / 1000;
}

/** Calls per command (INFO commandstats) since the last CONFIG RESETSTAT. */
async function commandCounts(c: Redis): Promise<Record<string, number>> {
  const text = await c.info('commandstats');
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) out[m[1] as string] = Number(m[2]);
  return out;
}

function refusal(r: AcquireResult) {
  assert.equal(r.ok, false, `expected a refusal, got ${JSON.stringify(r)}`);
  if (r.ok) throw new Error('unreachable');
  return r;
}

const requests: LimitSpec = { name: 'requests/10m', kind: 'requests', limit: 5, windowMs: W, algorithm: 'sliding_window' };
const tokensBucket: LimitSpec = { name: 'tokens/10m', kind: 'tokens', limit: 1000, windowMs: W, algorithm: 'token_bucket' };
const tokensWindow: LimitSpec = { name: 'tokens-w/10m', kind: 'tokens', limit: 1000, windowMs: W, algorithm: 'sliding_window' };
const slots: LimitSpec = { name: 'concurrent', kind: 'concurrent', limit: 2, leaseTtlMs: W };

describe('CentralLimiter on a real Redis', () => {
  let redis: RunningRedis;
  let c: Redis;
  let c2: Redis;
  const policies = new Map<string, Policy>();
  let limiter: CentralLimiter;
  /** A second limiter on its own connection: another gateway process. */
  let other: CentralLimiter;

  before(async () => {
    redis = await startRedis();
    c = redis.client();
    c2 = redis.client();
    limiter = new CentralLimiter({ redis: c, cluster: 'test', policyFor: (t) => policies.get(t) });
    other = new CentralLimiter({ redis: c2, cluster: 'test', policyFor: (t) => policies.get(t) });
  });
  after(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    await redis.flush();
    policies.clear();
  });

  test('reply shapes: every applicable limit, exact remaining and resetMs after one admission', async () => {
    policies.set('t', { limits: [requests, tokensBucket, tokensWindow, slots] });
    const r = await limiter.acquire('t', { id: 'a', tokens: 100 });
    assert.deepEqual(r, {
      ok: true,
      limits: [
        { name: 'requests/10m', kind: 'requests', limit: 5, remaining: 4, resetMs: W },
        { name: 'tokens/10m', kind: 'tokens', limit: 1000, remaining: 900, resetMs: 100 * 600 },
        { name: 'tokens-w/10m', kind: 'tokens', limit: 1000, remaining: 900, resetMs: W },
        { name: 'concurrent', kind: 'concurrent', limit: 2, remaining: 1, resetMs: W },
      ],
    });
    // No policy → unlimited without a Redis call; peek of a fresh tenant reads full.
    assert.deepEqual(await limiter.acquire('nobody', { id: 'x', tokens: 5 }), { ok: true, limits: [] });
    policies.set('fresh', { limits: [tokensBucket] });
    assert.deepEqual(await limiter.peek('fresh'), [{ name: 'tokens/10m', kind: 'tokens', limit: 1000, remaining: 1000, resetMs: 0 }]);
    await assert.rejects(limiter.acquire('t', { id: 'b', tokens: -1 }), RangeError);
    await assert.rejects(limiter.acquire('t', { id: '', tokens: 1 }), RangeError);
    await assert.rejects(limiter.settle('t', 'a', Number.NaN), RangeError);
  });

  test('all or nothing: a refusal by one limit takes nothing from the others; retryAfterMs is exact', async () => {
    policies.set('t', { limits: [requests, tokensBucket, tokensWindow] });
    const t0 = await redisNow(c);
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 900 })).ok, true);
    const r = refusal(await limiter.acquire('t', { id: 'b', tokens: 200 }));
    const t1 = await redisNow(c);
    assert.equal(r.reason, 'limited');
    assert.equal(r.limit, 'tokens/10m', 'the first refusing limit in policy order');
    assert.equal(r.kind, 'tokens');
    // The bucket needs 100 tokens at 1000 per 600 s: 60 s; the window frees only when `a` leaves
    // (600 s after it was admitted, within [t0, t1]): the max of the two, W minus the age of `a`.
    assert.ok(r.retryAfterMs <= W && r.retryAfterMs >= W - Math.ceil(t1 - t0), `retryAfterMs ${r.retryAfterMs}`);
    assert.deepEqual(
      r.limits.map((l) => l.remaining),
      [4, 100, 100],
    );
    assert.equal(await c.zcard(centralKey('test', 't', 'w:requests/10m')), 1, 'no entry for the refused request');
    assert.equal(await c.hexists(centralKey('test', 't', 'r'), 'b'), 0, 'no reservation for it');
  });

  test('too_large: a cost above a capacity is refused at once (retryAfterMs 0), nothing taken', async () => {
    policies.set('t', { limits: [requests, tokensBucket] });
    const r = refusal(await limiter.acquire('t', { id: 'a', tokens: 1001 }));
    assert.deepEqual(
      { reason: r.reason, limit: r.limit, kind: r.kind, retryAfterMs: r.retryAfterMs },
      { reason: 'too_large', limit: 'tokens/10m', kind: 'tokens', retryAfterMs: 0 },
    );
    assert.deepEqual(
      r.limits.map((l) => l.remaining),
      [5, 1000],
    );
    const q = refusal(await limiter.acquire('t', { id: 'b', tokens: 1, requests: 6 }));
    assert.equal(q.limit, 'requests/10m');
    assert.equal(q.reason, 'too_large');
  });

  test('duplicate: an open id is refused; once settled and released it can be used again', async () => {
    policies.set('t', { limits: [requests, tokensBucket] });
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 10 })).ok, true);
    const d = refusal(await other.acquire('t', { id: 'a', tokens: 10 }));
    assert.deepEqual(
      { reason: d.reason, limit: d.limit, retryAfterMs: d.retryAfterMs, remaining: d.limits.map((l) => l.remaining) },
      { reason: 'duplicate', limit: 'requests/10m', retryAfterMs: 0, remaining: [4, 990] },
    );
    assert.deepEqual(await other.finish('t', 'a', 10), { settle: { settled: true, deltaTokens: 0 }, released: true });
    assert.equal(await c.hexists(centralKey('test', 't', 'r'), 'a'), 0, 'settled + released → record deleted');
    const again = await limiter.acquire('t', { id: 'a', tokens: 5 });
    assert.equal(again.ok, true);
    assert.deepEqual(
      again.limits.map((l) => l.remaining),
      [3, 985],
    );
  });

  test('settle refunds and debits buckets and windows, once, from another connection', async () => {
    policies.set('t', { limits: [tokensBucket, tokensWindow] });
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 500 })).ok, true);
    assert.deepEqual(await other.settle('t', 'a', 200), { settled: true, deltaTokens: -300 });
    assert.deepEqual(await other.settle('t', 'a', 200), { settled: false, deltaTokens: 0 }, 'idempotent');
    assert.deepEqual(await limiter.settle('t', 'nope', 1), { settled: false, deltaTokens: 0 });
    assert.deepEqual(
      (await limiter.peek('t')).map((l) => l.remaining),
      [800, 800],
    );
    assert.equal(await c.get(centralKey('test', 't', 's:tokens-w/10m')), '200', 'the window sum');
    const wttl = await c.pttl(centralKey('test', 't', 'w:tokens-w/10m'));
    assert.ok(wttl > W - 1000 && wttl <= W, `the window keeps its expiry through a settlement: ${wttl}`);
    // A refund never fills a bucket above capacity; the window entry's cost never goes below 0.
    assert.equal((await limiter.acquire('t', { id: 'z', tokens: 10 })).ok, true);
    assert.deepEqual(await limiter.settle('t', 'z', 0), { settled: true, deltaTokens: -10 });
    assert.deepEqual(
      (await limiter.peek('t')).map((l) => l.remaining),
      [800, 800],
    );

    assert.equal((await limiter.acquire('t', { id: 'b', tokens: 100 })).ok, true);
    assert.deepEqual(await other.settle('t', 'b', 1500), { settled: true, deltaTokens: 1400 });
    const debited = await limiter.peek('t');
    assert.deepEqual(
      debited.map((l) => l.remaining),
      [0, 0],
    );
    assert.equal(await c.get(centralKey('test', 't', 's:tokens-w/10m')), '1700', 'a debit may take a window above its limit');
    const used = Number(await c.hget(centralKey('test', 't', 'b:tokens/10m'), 'u'));
    assert.ok(used <= 1700 && used > 1699, `bucket used ${used} ≈ 200 + 1500 (− refill of a few ms)`);
    // Even 0 tokens wait: the bucket must climb from −700 to 0 (420 s), the window until `b` leaves.
    const r = refusal(await limiter.acquire('t', { id: 'c', tokens: 0 }));
    assert.equal(r.limit, 'tokens/10m');
    assert.ok(r.retryAfterMs > W - 1000 && r.retryAfterMs <= W, `retryAfterMs ${r.retryAfterMs}`);
  });

  test('concurrency: release frees a slot; a refusal waits min(hint, earliest expiry)', async () => {
    policies.set('t', { limits: [slots] });
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 0 })).ok, true);
    assert.equal((await limiter.acquire('t', { id: 'b', tokens: 0 })).ok, true);
    const r = refusal(await limiter.acquire('t', { id: 'c', tokens: 0 }));
    assert.deepEqual(
      { reason: r.reason, limit: r.limit, kind: r.kind, retryAfterMs: r.retryAfterMs },
      { reason: 'limited', limit: 'concurrent', kind: 'concurrent', retryAfterMs: 1000 },
    );
    assert.equal(await other.release('t', 'a'), true);
    assert.equal(await other.release('t', 'a'), false, 'idempotent');
    assert.equal((await limiter.acquire('t', { id: 'c', tokens: 0 })).ok, true);
    assert.deepEqual((await c.zrange(centralKey('test', 't', 'c:concurrent'), 0, -1)).sort(), ['b', 'c']);
  });

  test('stale slots (leases not released) are purged on acquire', async () => {
    policies.set('t', { limits: [{ name: 'two', kind: 'concurrent', limit: 2, leaseTtlMs: 300 }] });
    const key = centralKey('test', 't', 'c:two');
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 0 })).ok, true);
    await sleep(150);
    assert.equal((await limiter.acquire('t', { id: 'b', tokens: 0 })).ok, true);
    const r = refusal(await limiter.acquire('t', { id: 'd', tokens: 0 }));
    assert.ok(r.retryAfterMs > 100 && r.retryAfterMs <= 150, `retryAfterMs ${r.retryAfterMs}: until a's lease expires`);
    await sleep(200); // a's lease (300 ms) expired, b's has ~100 ms left
    assert.deepEqual((await c.zrange(key, 0, -1)).sort(), ['a', 'b'], 'the stale slot is still stored before the next acquire');
    assert.equal((await limiter.acquire('t', { id: 'c', tokens: 0 })).ok, true);
    assert.deepEqual((await c.zrange(key, 0, -1)).sort(), ['b', 'c']);
    // a's reservation lived as long as its lease: it is gone too.
    assert.equal(await limiter.release('t', 'a'), false);
    assert.deepEqual(await limiter.settle('t', 'a', 1), { settled: false, deltaTokens: 0 });
    // The semaphore key expires with its last lease.
    const ttl = await c.pttl(key);
    assert.ok(ttl > 250 && ttl <= 300, `semaphore key ttl ${ttl}`);
  });

  test('renew extends a live slot; released or unknown ids do not renew', async () => {
    policies.set('t', { limits: [{ name: 'one', kind: 'concurrent', limit: 1, leaseTtlMs: 400 }] });
    assert.equal((await limiter.acquire('t', { id: 'a', tokens: 0 })).ok, true);
    await sleep(250);
    const t0 = await redisNow(c);
    assert.equal(await other.renew('t', 'a'), true);
    const t1 = await redisNow(c);
    const exp = Number(await c.zscore(centralKey('test', 't', 'c:one'), 'a'));
    assert.ok(exp >= t0 + 400 && exp <= t1 + 400, `lease expiry ${exp - t0} ms after renew`);
    await sleep(250); // 500 ms after admission: past the first lease, within the renewed one
    const r = refusal(await limiter.acquire('t', { id: 'b', tokens: 0 }));
    assert.ok(r.retryAfterMs > 50 && r.retryAfterMs <= 150, `retryAfterMs ${r.retryAfterMs}`);
    assert.equal(await limiter.release('t', 'a'), true);
    assert.equal(await limiter.renew('t', 'a'), false);
    assert.equal(await limiter.renew('t', 'nope'), false);
    assert.equal((await limiter.acquire('t', { id: 'b', tokens: 0 })).ok, true);
  });

  test('model-scoped limits apply only to their model', async () => {
    const scoped: LimitSpec = { name: 'tokens/m', kind: 'tokens', limit: 100, windowMs: W, algorithm: 'token_bucket', model: 'm' };
    policies.set('t', { limits: [requests, scoped] });
    const a = await limiter.acquire('t', { id: 'a', tokens: 80, model: 'm' });
    assert.deepEqual(
      a.limits.map((l) => [l.name, l.remaining]),
      [
        ['requests/10m', 4],
        ['tokens/m', 20],
      ],
    );
    assert.equal(refusal(await limiter.acquire('t', { id: 'b', tokens: 80, model: 'm' })).limit, 'tokens/m');
    const c1 = await limiter.acquire('t', { id: 'c', tokens: 80 });
    assert.deepEqual(
      c1.limits.map((l) => [l.name, l.remaining]),
      [['requests/10m', 3]],
    );
  });

  test('keys: namespaced by cluster, hash-tagged by tenant, with the expiries of the state they hold', async () => {
    policies.set('acme', { limits: [requests, tokensBucket, tokensWindow, slots] });
    assert.equal((await limiter.acquire('acme', { id: 'a', tokens: 100 })).ok, true);
    const keys = (await c.keys('*')).sort();
    assert.deepEqual(keys, [
      'qr:test:central:{acme}:b:tokens/10m',
      'qr:test:central:{acme}:c:concurrent',
      'qr:test:central:{acme}:r',
      'qr:test:central:{acme}:s:requests/10m',
      'qr:test:central:{acme}:s:tokens-w/10m',
      'qr:test:central:{acme}:w:requests/10m',
      'qr:test:central:{acme}:w:tokens-w/10m',
    ]);
    const ttl = async (suffix: string) => c.pttl(centralKey('test', 'acme', suffix));
    const bucket = await ttl('b:tokens/10m');
    assert.ok(bucket > 59_000 && bucket <= 60_000, `bucket kept until full again: ${bucket}`);
    for (const s of ['w:requests/10m', 's:requests/10m', 'w:tokens-w/10m', 's:tokens-w/10m', 'c:concurrent', 'r']) {
      const v = await ttl(s);
      assert.ok(v > W - 1000 && v <= W, `${s} kept one window (or lease): ${v}`);
    }
    assert.throws(() => centralKey('test', 'a{b}', 'r'), RangeError);
    assert.throws(() => new CentralLimiter({ redis: c, cluster: '', policyFor: () => undefined }), RangeError);
  });

  test('one script call per acquire and one per settle + release (finish)', async (t) => {
    policies.set('t', { limits: [requests, tokensBucket, tokensWindow, slots] });
    await limiter.acquire('t', { id: 'warm', tokens: 1 }); // EVAL once per socket, then EVALSHA
    await limiter.finish('t', 'warm', 1);
    await c.config('RESETSTAT');
    for (let i = 0; i < 20; i++) {
      assert.equal((await limiter.acquire('t', { id: `r${i}`, tokens: 1, requests: 0 })).ok, true);
      assert.equal((await limiter.finish('t', `r${i}`, 1)).released, true);
    }
    const counts = await commandCounts(c);
    // 20 × (acquire + finish) = 40 EVALSHA round trips, no EVAL once the scripts are cached.
    assert.equal(counts['evalsha'], 40);
    assert.equal(counts['eval'], undefined);
    // commandstats also counts the commands the scripts run inside; reported, not asserted.
    const inner = Object.entries(counts)
      .filter(([k]) => k !== 'evalsha' && !k.startsWith('config'))
      .reduce((n, [, v]) => n + v, 0);
    t.diagnostic(`commands run inside the scripts per request (acquire + finish, 4 limits): ${inner / 20}`);
  });

  test('reservations never settled nor released are swept once they outnumber the mark (64)', async () => {
    // Reservations live as long as the policy's longest lease: 150 ms for the first 40, then 10 s
    // (a reload), so the hash itself outlives the 40 expired records.
    policies.set('t', { limits: [{ name: 'many', kind: 'concurrent', limit: 100, leaseTtlMs: 150 }] });
    for (let i = 0; i < 40; i++) assert.equal((await limiter.acquire('t', { id: `old${i}`, tokens: 0 })).ok, true);
    policies.set('t', { limits: [{ name: 'many', kind: 'concurrent', limit: 100, leaseTtlMs: 10_000 }] });
    assert.equal((await limiter.acquire('t', { id: 'keep', tokens: 0 })).ok, true);
    await sleep(200);
    const rk = centralKey('test', 't', 'r');
    assert.equal(await c.hlen(rk), 41, 'expired records stay until a sweep');
    for (let i = 0; i < 30; i++) assert.equal((await limiter.acquire('t', { id: `new${i}`, tokens: 0 })).ok, true);
    // The 65th record (new23) triggered a sweep of the 40 expired ones; 25 live → the mark stays 64.
    assert.equal(await c.hlen(rk), 1 + 30 + 1);
    assert.equal(await c.hget(rk, ''), '64');
    assert.equal(await c.hexists(rk, 'old0'), 0);
  });
});
