/**
 * Fair shares for operators (`src/ops/fair-share-report.ts`): a tenant's `fair_share` array, the
 * series of the fair-share gauges (opted-in tenants only), the levels report's trimmed tables, and
 * the dashboard's script still parses.
 */
import assert from 'node:assert/strict';
import { Script } from 'node:vm';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { FairShares } from '../../src/fairshare/shares.ts';
import type { DeploymentShareView } from '../../src/fairshare/shares.ts';
import { DASHBOARD_HTML } from '../../src/ops/dashboard-page.ts';
import { allShareViews, fairShareSeries, shareLevels, tenantFairShare } from '../../src/ops/fair-share-report.ts';

const view = (deployment: string, tenants: [string, number, number, number][]): DeploymentShareView => ({
  deployment,
  source: 'local',
  nodes: 1,
  reserve: 0.1,
  buckets: [{ kind: 'requests', capacity: 100, level: 10 }],
  tenants: tenants.map(([tenant, demand, share, used]) => ({ tenant, kinds: [{ kind: 'requests', demand, share, used }] })),
});

describe('fair-share report', () => {
  test('fairShareSeries: one series per deployment, kind and opted-in tenant, with share and demand', () => {
    const views = [view('d1', [['a', 40, 30, 2], ['b', 12.5, 12.5, 1]]), view('d2', [['b', 7, 7, 0]])];
    assert.deepEqual(
      fairShareSeries(views, (t) => t === 'b'),
      [
        { deployment: 'd1', kind: 'requests', tenant: 'b', share: 12.5, demand: 12.5 },
        { deployment: 'd2', kind: 'requests', tenant: 'b', share: 7, demand: 7 },
      ],
    );
    assert.deepEqual(fairShareSeries(views, () => false), []);
  });

  test('shareLevels: the tenants with the most demand first (ties by id), the rest counted in omitted', () => {
    const [trimmed] = shareLevels([view('d1', [['c', 5, 5, 0], ['a', 9, 9, 0], ['b', 9, 9, 0], ['d', 1, 1, 0]])], 2);
    assert.deepEqual(trimmed?.tenants.map((t) => t.tenant), ['a', 'b']);
    assert.equal(trimmed?.omitted, 2);
    assert.equal(trimmed?.deployment, 'd1');
    const [all] = shareLevels([view('d1', [['a', 1, 1, 0]])], 20);
    assert.equal(all?.omitted, 0);
  });

  test('tenantFairShare and allShareViews read a FairShares: a tenant shows on the deployments it asks on', () => {
    const clock = new ManualClock();
    const fair = new FairShares({
      clock,
      deployments: [
        { name: 'd1', buckets: [{ kind: 'requests', capacity: 10 }], reserve: 0.2 },
        { name: 'd2', buckets: [{ kind: 'requests', capacity: 60 }, { kind: 'tokens', capacity: 6_000 }], reserve: 0 },
      ],
      tenantSpec: () => ({ weight: 1, floor: 0 }),
      liveNodes: () => 1,
    });
    fair.ask('a', 'd2', { requests: 1, tokens: 100 });
    fair.used('a', 'd2', { requests: 1, tokens: 100 }, 1);
    // Past the 250 ms between recomputes of the local table; with the clock unmoved before, demand
    // is max(asked 1, 1·e^(−0.15) × 30) × 1.25 = 32.277 requests and 3,227.662 tokens a minute. Alone,
    // a has the whole capacity.
    clock.advance(300);
    assert.deepEqual(tenantFairShare(fair, 'a'), [
      {
        deployment: 'd2',
        kinds: [
          { kind: 'requests', demand: 32.277, share: 60, used: 1 },
          { kind: 'tokens', demand: 3227.655, share: 6_000, used: 100 },
        ],
      },
    ]);
    assert.deepEqual(tenantFairShare(fair, 'nobody'), []);
    assert.deepEqual(allShareViews(fair).map((v) => [v.deployment, v.tenants.length]), [['d1', 0], ['d2', 1]]);
  });

  test('the dashboard page still carries a script that parses, with the fair-shares table', () => {
    const script = /<script>([\s\S]*)<\/script>/.exec(DASHBOARD_HTML)?.[1];
    assert.ok(script !== undefined);
    assert.doesNotThrow(() => new Script(script));
    assert.match(DASHBOARD_HTML, /<tbody id="shares">/);
    assert.match(script, /shareRows\(s\.nodes\)/);
  });
});
