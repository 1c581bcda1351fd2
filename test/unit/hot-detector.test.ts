/**
 * HotDetector on a fake clock: the decayed rate (1 s time constant), promotion only after the rate
 * stayed above the threshold for `sustainMs`, one promotion per crossing, a failed promotion retried
 * at the next crossing, refreshes of a spread tenant only while rate × k ≥ threshold / 2, at most
 * every `refreshMs`; the config refuses detection without Redis.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { HotDetector } from '../../src/gateway/hot-detector.ts';

function setup(opts: { fail?: boolean } = {}) {
  const clock = new ManualClock(0);
  const promoted: string[] = [];
  const refreshed: string[] = [];
  const d = new HotDetector({
    clock,
    thresholdRps: 40,
    sustainMs: 1_000,
    refreshMs: 1_000,
    promote: async (t) => {
      promoted.push(t);
      if (opts.fail === true) throw new Error('Redis down');
    },
    refresh: async (t) => {
      refreshed.push(t);
    },
  });
  /** `rps` requests a second for `ms`, evenly spaced. */
  const drive = (tenant: string, rps: number, ms: number, spreadK?: number): void => {
    const gap = 1_000 / rps;
    for (let t = 0; t < ms; t += gap) {
      clock.advance(gap);
      if (spreadK === undefined) d.observe(tenant);
      else d.observeSpread(tenant, spreadK);
    }
  };
  return { clock, d, promoted, refreshed, drive };
}

test('a steady rate converges to itself (1 s time constant)', () => {
  const { d, drive } = setup();
  drive('a', 20, 5_000);
  assert.ok(Math.abs(d.rate('a') - 20) < 0.6, `rate ${d.rate('a')}`);
  assert.equal(d.rate('nobody'), 0);
});

test('promoted once, only after the rate stayed above the threshold for sustainMs', async () => {
  const { d, promoted, drive } = setup();
  drive('a', 100, 1_000); // the rate climbs past 40 after ~0.5 s: not sustained for 1 s yet
  assert.deepEqual(promoted, []);
  drive('a', 100, 1_000);
  assert.deepEqual(promoted, ['a']);
  await Promise.resolve();
  drive('a', 100, 2_000);
  assert.deepEqual(promoted, ['a'], 'one promotion per crossing while the first is in flight or done');
  assert.ok(d.rate('a') > 95 && d.rate('a') < 101, `rate ${d.rate('a')}`);
  drive('b', 30, 5_000); // below the threshold
  assert.deepEqual(promoted, ['a']);
});

test('a burst shorter than sustainMs is not promoted; a failed promotion is tried again at the next crossing', async () => {
  const { clock, promoted, drive } = setup({ fail: true });
  drive('a', 100, 1_200); // above 40 from ~0.5 s to 1.2 s: 0.7 s, not sustained
  clock.advance(1_000); // idle: the rate decays to ~26
  drive('a', 1, 3_000);
  assert.deepEqual(promoted, []);
  drive('a', 100, 2_000);
  assert.deepEqual(promoted, ['a']);
  await new Promise((r) => setImmediate(r));
  drive('a', 100, 2_000);
  assert.deepEqual(promoted, ['a', 'a']);
});

test('a spread tenant (k 3) is refreshed while its share here × 3 ≥ half the threshold, at most every refreshMs', async () => {
  const { refreshed, drive } = setup();
  // 10 × 3 = 30 ≥ 20: the rate here passes 20 / 3 after ~1 s, then one refresh a second.
  for (let i = 0; i < 5; i++) {
    drive('a', 10, 1_000, 3);
    await new Promise((r) => setImmediate(r));
  }
  assert.ok(refreshed.length >= 3 && refreshed.length <= 5, `${refreshed.length} refreshes`);
  const before = refreshed.length;
  // 2 × 3 = 6 < 20: no refresh once the rate has decayed (at most one while it does).
  for (let i = 0; i < 10; i++) {
    drive('a', 2, 1_000, 3);
    await new Promise((r) => setImmediate(r));
  }
  assert.ok(refreshed.length - before <= 1, `${refreshed.length - before} refreshes at a low rate`);
});

test('config: threshold_rps needs cluster.redis', () => {
  const base = {
    tenants: [{ id: 't', keys: ['key-t-000000000'] }],
    models: [{ name: 'm', encoding: 'none', deployments: ['d'] }],
    deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
  };
  assert.throws(() => buildConfig({ ...base, cluster: { hot: { threshold_rps: 10 } } }, 'x.yaml', {}), /hot tenant detection needs cluster.redis.url/);
  const ok = buildConfig({ ...base, cluster: { redis: { url: 'redis://127.0.0.1:6379' }, hot: { threshold_rps: 10 } } }, 'x.yaml', {});
  assert.deepEqual(ok.config.cluster.hot, { threshold_rps: 10, spread: 3, sustain: 5_000, cooldown: 60_000 });
});
