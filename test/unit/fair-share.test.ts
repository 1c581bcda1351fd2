/**
 * Fair shares of a deployment quota: the water-filling rule (weights, floors, leftover), the
 * per-second usage window, and a node's verdicts from its own and the cluster's demand.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { FairShares } from '../../src/fairshare/shares.ts';
import type { DemandReport, TenantShareSpec } from '../../src/fairshare/shares.ts';
import { KindUsage } from '../../src/fairshare/usage.ts';
import { waterFill } from '../../src/fairshare/water-fill.ts';

const c = (id: string, demand: number, weight = 1, floor = 0) => ({ id, demand, weight, floor });
const shares = (r: ReturnType<typeof waterFill>) => Object.fromEntries([...r.share].map(([k, v]) => [k, Math.round(v * 1000) / 1000]));

describe('waterFill', () => {
  test('a tenant asking less than its share gets all it asks; the rest goes to the others by weight', () => {
    // 54,000 a window; A asks 5x, B and C 6,000 each, D 16,200.
    const r = waterFill(54_000, [c('A', 270_000), c('B', 6_000), c('C', 6_000), c('D', 16_200)]);
    assert.deepEqual(shares(r), { A: 25_800, B: 6_000, C: 6_000, D: 16_200 });
    assert.equal(r.level, 25_800);
  });

  test('weights 2:1:1:1 split what is left in proportion', () => {
    const r = waterFill(50_000, [c('A', 100_000, 2), c('B', 100_000), c('C', 100_000), c('D', 100_000)]);
    assert.deepEqual(shares(r), { A: 20_000, B: 10_000, C: 10_000, D: 10_000 });
    assert.equal(r.level, 10_000);
  });

  test('a floor is held for its tenant even when it asks nothing; demand above it is water-filled', () => {
    const r = waterFill(10_000, [c('A', 50_000), c('B', 0, 1, 3_000), c('C', 1_000)]);
    assert.deepEqual(shares(r), { A: 6_000, B: 3_000, C: 1_000 });
    const r2 = waterFill(10_000, [c('A', 50_000), c('B', 9_000, 1, 3_000)]);
    // B: its floor 3,000 plus half of the 7,000 left (both unmet above their floors).
    assert.deepEqual(shares(r2), { A: 3_500, B: 6_500 });
  });

  test('floors beyond the capacity are scaled down to fit', () => {
    const r = waterFill(1_000, [c('A', 5_000, 1, 1_000), c('B', 5_000, 1, 1_000)]);
    assert.deepEqual(shares(r), { A: 500, B: 500 });
  });

  test('with demand below capacity the line rises over everyone, so shares sum to the capacity', () => {
    const r = waterFill(10_000, [c('A', 1_000), c('B', 3_000)]);
    assert.deepEqual(shares(r), { A: 4_000, B: 6_000 });
    assert.equal(r.level, 6_000);
  });

  test('repeated ids (a spread tenant reported by two nodes) add their demand', () => {
    const r = waterFill(10_000, [c('A', 2_000), c('A', 2_000), c('B', 100_000)]);
    assert.deepEqual(shares(r), { A: 4_000, B: 6_000 });
  });

  test('no claims: the whole capacity is the line; bad numbers throw', () => {
    assert.equal(waterFill(100, []).level, 100);
    assert.throws(() => waterFill(-1, []), RangeError);
    assert.throws(() => waterFill(1, [c('A', Number.NaN)]), RangeError);
    assert.throws(() => waterFill(1, [c('A', 1, 0)]), RangeError);
  });
});

describe('KindUsage', () => {
  const tuning = { windowMs: 60_000, tauMs: 2_000, margin: 0.25, burstMs: 2_000 };

  test('used counts a window of 1 s slots', () => {
    const u = new KindUsage(tuning);
    u.use(10_500, 600);
    u.use(30_200, 400);
    assert.equal(u.used(30_200), 1_000);
    assert.equal(u.used(70_000), 400);
    assert.equal(u.used(90_000), 0);
  });

  test('demand: the window of asks, or the decayed rate of a tenant that just started, with the margin', () => {
    const u = new KindUsage(tuning);
    for (let t = 0; t < 60_000; t += 1_000) u.ask(t, 100);
    // 6,000 asked in the window (its decayed rate says about the same), × 1.25.
    assert.ok(Math.abs(u.demand(59_999) - 7_500) < 150, String(u.demand(59_999)));
    const fresh = new KindUsage(tuning);
    for (let t = 0; t < 6_000; t += 100) fresh.ask(t, 100);
    // 1,000 units/s for 6 s: the rate (≈ 60,000 a window) is counted, not the 6,000 asked so far.
    assert.ok(fresh.demand(6_000) > 50_000, String(fresh.demand(6_000)));
  });

  test('a settlement corrects what was used and asked', () => {
    const u = new KindUsage(tuning);
    u.ask(0, 1_000);
    u.use(0, 1_000);
    u.correct(500, -400);
    assert.equal(u.used(1_000), 600);
  });
});

describe('FairShares', () => {
  const clock = new ManualClock(1_000_000);
  const specOf = (weights: Record<string, TenantShareSpec>) => (t: string) => weights[t] ?? { weight: 1, floor: 0 };
  const build = (weights: Record<string, TenantShareSpec> = {}, live = 1) =>
    new FairShares({ clock, deployments: [{ name: 'sim', buckets: [{ kind: 'tokens', capacity: 60_000 }], reserve: 0.1 }], tenantSpec: specOf(weights), liveNodes: () => live });

  test('alone on a node without reports: within the share of capacity / live nodes at its pace, bursts of two requests', () => {
    const f = build({}, 2);
    // One tenant asking: its share is the node's whole part, 30,000 a minute (500 a second); its share
    // bucket holds max(2 s of it, 2 × 1,000) = 2,000.
    for (let i = 0; i < 2; i++) {
      const v = f.ask('A', 'sim', { requests: 1, tokens: 1_000 });
      assert.equal(v?.within, true, `request ${i}`);
      f.used('A', 'sim', { requests: 1, tokens: 1_000 }, 1, true);
    }
    const over = f.ask('A', 'sim', { requests: 1, tokens: 1_000 });
    assert.equal(over?.within, false);
    assert.equal(over?.waitMs, 2_000);
    // An admission over the share spends nothing of the share bucket.
    f.used('A', 'sim', { requests: 1, tokens: 1_000 }, 1, false);
    clock.advance(2_000);
    assert.equal(f.ask('A', 'sim', { requests: 1, tokens: 1_000 })?.within, true);
    assert.equal(f.view('sim')?.source, 'local');
    assert.equal(f.view('sim')?.tenants[0]?.kinds[0]?.used, 3_000);
    assert.equal(f.ask('A', 'other', { requests: 1, tokens: 1 }), undefined);
  });

  test("the cluster's reports decide: a small tenant's share is its demand, the big one gets the rest", () => {
    const f = build();
    f.ask('B', 'sim', { requests: 1, tokens: 100 });
    const remote: DemandReport = { v: 1, kinds: ['tokens'], t: [['A', [300_000], 1, 0]] };
    f.received('sim', [
      { node: 'n2', report: remote },
      { node: 'n1', report: f.report('sim') as DemandReport },
    ]);
    const view = f.view('sim');
    assert.equal(view?.source, 'cluster');
    assert.equal(view?.nodes, 2);
    const b = view?.tenants.find((t) => t.tenant === 'B')?.kinds[0];
    const a = view?.tenants.find((t) => t.tenant === 'A')?.kinds[0];
    // B asked 100 in the window; its decayed rate (100 / τ 2 s × 60 s = 3,000) × 1.25 is its demand.
    assert.equal(b?.demand, 3_750);
    assert.equal(b?.share, 3_750);
    assert.equal(a?.share, 56_250);
    // The cluster table goes stale after 2 s: back to the local rule.
    clock.advance(2_001);
    assert.equal(f.view('sim')?.source, 'local');
  });

  test('a tenant no report names gets the water line times its weight, plus its floor', () => {
    const f = build({ N: { weight: 2, floor: 0.1 } });
    f.received('sim', [{ node: 'n2', report: { v: 1, kinds: ['tokens'], t: [['A', [300_000], 1, 0], ['B', [300_000], 1, 0]] } }]);
    // Line 30,000; N: 2 × 30,000 + 0.1 × 60,000.
    assert.equal(f.view('sim')?.buckets[0]?.level, 30_000);
    assert.equal(f.ask('N', 'sim', { requests: 1, tokens: 1 })?.within, true);
    assert.equal(f.view('sim')?.tenants.find((t) => t.tenant === 'N')?.kinds[0]?.share, 66_000);
  });

  test('reports of another config (other kinds) are left out', () => {
    const f = build();
    f.received('sim', [{ node: 'n2', report: { v: 1, kinds: ['requests', 'tokens'], t: [['A', [10, 300_000], 1, 0]] } }]);
    assert.equal(f.view('sim')?.nodes, 0);
    assert.deepEqual(f.view('sim')?.tenants, []);
  });
});
