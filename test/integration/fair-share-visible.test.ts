/**
 * Fair shares made visible, with exact numbers: the gateway in-process (fake clock that advances
 * only when told) in front of the real simulator, deployment `sim` with `quota: {rpm: 10}`,
 * `headroom: 1`, `fair_share: {reserve: 0.2}` and no Redis (the node's local table: capacity 10 /
 * 1 live node). Tenant `a` (`metrics: true`) asks 3 times and `b` once at t0; 300 ms later (past
 * the 250 ms between recomputes of the local table) their demand is
 * max(asked in window, decayed rate × 60 s) × 1.25 with τ = 2 s:
 * a: max(3, 3·e^(−0.15)/2 s × 60 s) × 1.25 = 96.83, b: 1·e^(−0.15) × 30 × 1.25 = 32.277 (rounded to
 * 3 decimals), both above half of 10, so each has a share of 5 (water line 5).
 *
 * Read through the node's admin API (`GET /admin/v1/tenants/:id` `fair_share`,
 * `GET /admin/v1/deployments/:name/shares`), the node's internal routes (signed: the same table,
 * and the levels report the dashboard draws) and `GET /metrics`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway, registerNodeAdmin } from '../../src/gateway/server.ts';
import { buildAdminServer } from '../../src/ops/admin-server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { signedRequest, TEST_SECRET } from '../helpers/cluster-secret.ts';

const chat = { model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] };
const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const ADMIN_TOKEN = 'admin-token-fair-share-visible';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** The value of one series in Prometheus text (exact label set), or undefined. */
function series(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[3] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) return Number(m[4]);
  }
  return undefined;
}

describe('fair shares in the admin API, metrics and levels report (gateway in-process, real simulator)', () => {
  let sim: { url: string; close(): Promise<void> } | undefined;
  let app: FastifyInstance | undefined;
  let adminApp: FastifyInstance | undefined;
  let url = '';
  const clock = new ManualClock();

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [
          { id: 'a', keys: ['key-a-000000'], metrics: true, limits: [] },
          { id: 'b', keys: ['key-b-000000'], limits: [] },
        ],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] },
          { name: 'gpt-4o', encoding: 'o200k_base', estimator: 'exact', deployments: ['plain'] },
        ],
        deployments: [
          { name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { rpm: 10 }, headroom: 1, fair_share: { reserve: 0.2 } },
          { name: 'plain', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { rpm: 10 } },
        ],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    // The cluster secret only lets the test call the node's internal routes (signed) on its own.
    app = buildGateway({ config, clock, logger: false, clusterSecret: TEST_SECRET });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
    adminApp = buildAdminServer(ADMIN_TOKEN, app.log);
    registerNodeAdmin(app, adminApp, async () => ({ handedOff: 0, ring: '' }));
    await adminApp.ready();
  });
  after(async () => {
    await adminApp?.close();
    await app?.close();
    await sim?.close();
  });

  const send = async (key: string) => (app as FastifyInstance).inject({ method: 'POST', url: '/v1/chat/completions', headers: auth(key), payload: chat });
  const adminGet = async (path: string) => (adminApp as FastifyInstance).inject({ method: 'GET', url: path, headers: admin });
  const metrics = async () => (await (app as FastifyInstance).inject({ method: 'GET', url: '/metrics' })).body;

  const view = (usedA: number) => ({
    deployment: 'sim',
    source: 'local',
    nodes: 1,
    reserve: 0.2,
    buckets: [{ kind: 'requests', capacity: 10, level: 5 }],
    tenants: [
      { tenant: 'a', kinds: [{ kind: 'requests', demand: 96.83, share: 5, used: usedA }] },
      { tenant: 'b', kinds: [{ kind: 'requests', demand: 32.277, share: 5, used: 1 }] },
    ],
  });

  test('each tenant\'s demand, share and used: per tenant, per deployment, in the levels report and in metrics', async () => {
    assert.equal((await send('key-b-000000')).statusCode, 200);
    for (let i = 0; i < 3; i++) assert.equal((await send('key-a-000000')).statusCode, 200);
    clock.advance(300);

    const a = await adminGet('/admin/v1/tenants/a');
    assert.equal(a.statusCode, 200);
    assert.deepEqual((a.json() as { fair_share: unknown }).fair_share, [{ deployment: 'sim', kinds: [{ kind: 'requests', demand: 96.83, share: 5, used: 3 }] }]);
    const b = await adminGet('/admin/v1/tenants/b');
    assert.deepEqual((b.json() as { fair_share: unknown }).fair_share, [{ deployment: 'sim', kinds: [{ kind: 'requests', demand: 32.277, share: 5, used: 1 }] }]);

    const table = await adminGet('/admin/v1/deployments/sim/shares');
    assert.equal(table.statusCode, 200);
    assert.deepEqual(table.json(), view(3));
    // The node's internal route (signed, as a member calls it) answers the same table.
    const internal = await signedRequest(`${url}/_quotaring/v1/deployments/sim/shares`);
    assert.equal(internal.statusCode, 200);
    assert.deepEqual(await internal.body.json(), view(3));
    // What the router's live stream (and the dashboard) gets from this node.
    const levels = await signedRequest(`${url}/_quotaring/v1/levels`);
    assert.deepEqual(((await levels.body.json()) as { shares: unknown }).shares, [{ ...view(3), omitted: 0 }]);

    const text = await metrics();
    assert.equal(series(text, 'quotaring_fair_share', { deployment: 'sim', kind: 'requests', tenant: 'a' }), 5);
    assert.equal(series(text, 'quotaring_fair_demand', { deployment: 'sim', kind: 'requests', tenant: 'a' }), 96.83);
    // b has no metrics: true: no series of its own.
    assert.equal(series(text, 'quotaring_fair_share', { deployment: 'sim', kind: 'requests', tenant: 'b' }), undefined);
    assert.equal(series(text, 'quotaring_fair_demand', { deployment: 'sim', kind: 'requests', tenant: 'b' }), undefined);
    // No Redis: no exchange, no series; no refusal yet.
    assert.doesNotMatch(text, /^quotaring_fair_exchanges_total\{/m);
    assert.doesNotMatch(text, /^quotaring_fair_share_refusals_total\{/m);
  });

  test('a refusal over the share is counted by deployment; used follows at once, the table every 250 ms', async () => {
    // Same instant: a has 2 more within its share of 5 (bucket 6 → 4), 2 over it above the reserve of 2 (→ 2), then a refusal.
    const codes: number[] = [];
    for (let i = 0; i < 5; i++) codes.push((await send('key-a-000000')).statusCode);
    assert.deepEqual(codes, [200, 200, 200, 200, 429]);
    const text = await metrics();
    assert.equal(series(text, 'quotaring_fair_share_refusals_total', { deployment: 'sim' }), 1);
    assert.equal(series(text, 'quotaring_decisions_total', { result: 'limited', limit_kind: 'quota', priority: 'interactive' }), 1);
    // The clock did not move: the table (demand, share) is the one of 300 ms; used counts the 4 admitted since.
    assert.deepEqual((await adminGet('/admin/v1/deployments/sim/shares')).json(), view(7));
    assert.equal(series(text, 'quotaring_fair_demand', { deployment: 'sim', kind: 'requests', tenant: 'a' }), 96.83);
  });

  test('an unknown deployment, or one not shared fairly, is 404 not_found in the error shape', async () => {
    for (const name of ['nope', 'plain']) {
      const res = await adminGet(`/admin/v1/deployments/${name}/shares`);
      assert.equal(res.statusCode, 404);
      assert.equal(res.headers['x-quotaring-error'], 'not_found');
      assert.deepEqual(res.json(), { error: { message: `No fair-shared deployment ${name} on this node.`, type: 'invalid_request_error', param: null, code: 'not_found' } });
      const internal = await signedRequest(`${url}/_quotaring/v1/deployments/${name}/shares`);
      assert.equal(internal.statusCode, 404);
      assert.deepEqual(await internal.body.json(), { error: { message: `No fair-shared deployment ${name} on this node.`, type: 'invalid_request_error', param: null, code: 'not_found' } });
    }
    // Without the admin token: 401, as every admin route.
    assert.equal((await (adminApp as FastifyInstance).inject({ method: 'GET', url: '/admin/v1/deployments/sim/shares' })).statusCode, 401);
  });
});
