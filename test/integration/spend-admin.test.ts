/**
 * Budgets through the admin API, on a real gateway in front of the simulator: the tenant's and its
 * key's budgets read back with exact micro-dollar figures and their periods; a top-up
 * (`POST /admin/v1/tenants/:tenant/spend`) that lets through the very request refused before it,
 * logged with the admin's address; bad inputs refused with exact statuses and nothing changed; the
 * change kept through a restart (it is limiter state) and in the owner's checkpoint, from which a
 * node that takes over after a crash starts (real redis-server); and the same through a router,
 * which forwards the change to the tenant's owner over a signed internal route (an unsigned call is
 * refused).
 *
 * Prices: input 1 µ$/token, output 4 µ$/token. Each request reserves prompt + 50 × 4 µ$ and settles
 * on prompt + 7 × 4 µ$ (the simulator answers exactly 7 output tokens).
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { Handoff } from '../../src/coord/handoff/handoff.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import { TenantStateStore } from '../../src/coord/handoff/state-store.ts';
import type { Member } from '../../src/coord/types.ts';
import { changeTenantSpend } from '../../src/peer/tenant-spend.ts';
import { stateTtlMs } from '../../src/gateway/state-file.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import { buildGateway, nodeLocalState, registerNodeAdmin } from '../../src/gateway/server.ts';
import { buildAdminServer } from '../../src/ops/admin-server.ts';
import { startRouter } from '../../src/router/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { TEST_SECRET, TEST_SECRET_ENV } from '../helpers/cluster-secret.ts';
import { TestMembership } from '../helpers/membership.ts';
import { startRedis } from '../helpers/redis.ts';

const KEY = 'key-acme-00000';
const CI_KEY = 'key-acme-ci-000';
const TOKEN = 'admin-token-spend-0123456789';
/** 2025-03-10 23:30 UTC: the key's 1d window is [03-10 00:00Z, 03-11 00:00Z); New York's March [03-01 05:00Z, 04-01 04:00Z). */
const T0 = Date.parse('2025-03-10T23:30:00Z');

function rawConfig(simUrl: string): Record<string, unknown> {
  return {
    server: { log_level: 'info' },
    tenants: [
      {
        id: 'acme',
        keys: [KEY, { key: CI_KEY, id: 'ci', limits: [{ usd: '0.001', window: '1d' }] }],
        limits: [{ usd: '0.01', period: 'month', time_zone: 'America/New_York' }, { tokens: 1_000_000, window: '1m' }],
      },
    ],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: { input: 1, output: 4 } }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] }],
  };
}

const chat = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 50, messages: [{ role: 'user', content: 'how much does this cost?' }] });
const clientHeaders = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim-output-tokens': '7' });
const adminHeaders = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };

/** `micros` µ$ as the admin API writes dollars. */
const usd = (micros: number): string => `${Math.floor(micros / 1e6)}.${String(micros % 1e6).padStart(6, '0')}`;

interface Budget {
  name: string;
  key: string | null;
  usd: { limit: string; spent: string; remaining: string };
  periodStart: string;
  resetsAt: string;
  resetMs: number;
}
interface Usage {
  limits: (Budget & { kind: string })[];
}

/** JSON log lines written to a stream. */
function logLines(): { stream: PassThrough; lines: Record<string, unknown>[] } {
  const stream = new PassThrough();
  const lines: Record<string, unknown>[] = [];
  let rest = '';
  stream.on('data', (chunk: Buffer) => {
    const parts = (rest + chunk.toString('utf8')).split('\n');
    rest = parts.pop() ?? '';
    for (const p of parts) if (p.trim() !== '') lines.push(JSON.parse(p) as Record<string, unknown>);
  });
  return { stream, lines };
}

const budgetOf = (u: Usage, name: string): Budget => {
  const b = u.limits.find((l) => l.name === name);
  assert.ok(b !== undefined, JSON.stringify(u.limits));
  return { name: b.name, key: b.key, usd: b.usd, periodStart: b.periodStart, resetsAt: b.resetsAt, resetMs: b.resetMs };
};

describe('a node: budgets in the admin API', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  let admin: FastifyInstance;
  const clock = new ManualClock(T0);
  const log = logLines();
  const stateDir = mkdtempSync(join(tmpdir(), 'quotaring-spend-'));
  /** Settled cost of each admitted request of the `ci` key so far, µ$. */
  let spent = 0;
  let refusedBody = '';

  const send = () => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: clientHeaders(CI_KEY), payload: chat });
  const usage = async (): Promise<Usage> => {
    const res = await admin.inject({ method: 'GET', url: '/admin/v1/tenants/acme', headers: adminHeaders });
    assert.equal(res.statusCode, 200, res.body);
    return res.json() as Usage;
  };
  const change = (body: unknown, tenant = 'acme', raw?: string) =>
    admin.inject({ method: 'POST', url: `/admin/v1/tenants/${tenant}/spend`, headers: adminHeaders, payload: raw ?? JSON.stringify(body) });

  before(async () => {
    sim = await startSimulator({ port: 0 });
    app = buildGateway({ config: buildConfig(rawConfig(sim.url), 'spend.yaml', { SIM_KEY: 'sim-key' }), clock, logStream: log.stream, stateDir });
    await app.ready();
    admin = buildAdminServer(TOKEN, app.log);
    registerNodeAdmin(app, admin, async () => ({ handedOff: 0, ring: '' }));
    await admin.ready();
  });
  after(async () => {
    await admin.close();
    await app.close();
    await sim.close();
  });

  test('fresh budgets: the tenant\'s and the key\'s, with their periods', async () => {
    const u = await usage();
    assert.deepEqual(budgetOf(u, 'cost/month'), {
      name: 'cost/month',
      key: null,
      usd: { limit: '0.010000', spent: '0.000000', remaining: '0.010000' },
      periodStart: '2025-03-01T05:00:00Z',
      resetsAt: '2025-04-01T04:00:00Z',
      resetMs: Date.parse('2025-04-01T04:00:00Z') - T0,
    });
    assert.deepEqual(budgetOf(u, 'cost/1d#ci'), {
      name: 'cost/1d#ci',
      key: 'ci',
      usd: { limit: '0.001000', spent: '0.000000', remaining: '0.001000' },
      periodStart: '2025-03-10T00:00:00Z',
      resetsAt: '2025-03-11T00:00:00Z',
      resetMs: 30 * 60_000,
    });
  });

  test('the key spends its budget: exact spend read back, then 429 budget_exceeded', async () => {
    for (let i = 0; i < 100; i++) {
      const res = await send();
      if (res.statusCode === 429) {
        assert.equal(res.headers['x-quotaring-error'], 'budget_exceeded');
        assert.equal(res.headers['x-quotaring-budget'], 'cost/1d#ci');
        refusedBody = res.body;
        break;
      }
      assert.equal(res.statusCode, 200, res.body);
      const u = (res.json() as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
      assert.equal(u.completion_tokens, 7);
      spent += u.prompt_tokens * 1 + 7 * 4;
    }
    assert.notEqual(refusedBody, '');
    const u = await usage();
    assert.deepEqual(budgetOf(u, 'cost/1d#ci').usd, { limit: '0.001000', spent: usd(spent), remaining: usd(1000 - spent) });
    // The key's requests count toward the tenant's budget too.
    assert.deepEqual(budgetOf(u, 'cost/month').usd, { limit: '0.010000', spent: usd(spent), remaining: usd(10_000 - spent) });
  });

  test('bad inputs: exact statuses and codes, nothing changed', async () => {
    const before = await usage();
    const cases: [unknown, number, string, string?][] = [
      [{ limit: 'cost/1d', key: 'ci', credit_usd: '-1' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: 'abc' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: '0.0000001' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: 5 }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: '0' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: '1', set_spent_usd: '0' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', credit_usd: '1', extra: true }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'ci', set_spent_usd: '0.001001' }, 400, 'invalid_request'],
      [{ limit: 'cost/week', credit_usd: '1' }, 400, 'invalid_request'],
      [{ limit: 'tokens/1m', credit_usd: '1' }, 400, 'invalid_request'],
      [{ limit: 'cost/month', key: 'ci', credit_usd: '1' }, 400, 'invalid_request'],
      [{ limit: 'cost/1d', key: 'nope', credit_usd: '1' }, 404, 'not_found'],
      [{ credit_usd: '1' }, 404, 'not_found', 'nobody'],
      [undefined, 400, 'invalid_request'],
    ];
    for (const [body, status, code, tenant] of cases) {
      const res = body === undefined ? await change(undefined, tenant, '{"limit": ') : await change(body, tenant);
      assert.equal(res.statusCode, status, `${JSON.stringify(body)}: ${res.body}`);
      const err = (res.json() as { error: { code: string; type: string; message: string } }).error;
      assert.equal(err.code, code, JSON.stringify(body));
      assert.equal(err.type, 'invalid_request_error');
    }
    const noToken = await admin.inject({ method: 'POST', url: '/admin/v1/tenants/acme/spend', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ limit: 'cost/1d', key: 'ci', credit_usd: '1' }) });
    assert.equal(noToken.statusCode, 401);
    assert.deepEqual(await usage(), before);
    assert.equal(log.lines.filter((l) => l.msg === 'budget spend changed').length, 0);
    // Still refused.
    assert.equal((await send()).statusCode, 429);
  });

  test('a top-up admits the request refused before it, and is logged', async () => {
    const res = await change({ limit: 'cost/1d', key: 'ci', credit_usd: '$0.0005' });
    assert.equal(res.statusCode, 200, res.body);
    const after = spent - 500;
    const body = res.json() as { tenant: string; node: string; limit: string; key: string; op: string; amountUsd: string; spentBefore: string; spentAfter: string; budget: Budget };
    assert.deepEqual(
      { tenant: body.tenant, limit: body.limit, key: body.key, op: body.op, amountUsd: body.amountUsd, spentBefore: body.spentBefore, spentAfter: body.spentAfter, usd: body.budget.usd },
      { tenant: 'acme', limit: 'cost/1d#ci', key: 'ci', op: 'credit', amountUsd: '0.000500', spentBefore: usd(spent), spentAfter: usd(after), usd: { limit: '0.001000', spent: usd(after), remaining: usd(1000 - after) } },
    );
    const line = log.lines.find((l) => l.msg === 'budget spend changed');
    assert.ok(line !== undefined);
    assert.deepEqual(
      { level: line.level, tenant: line.tenant, key: line.key, limit: line.limit, op: line.op, amountUsd: line.amountUsd, spentBefore: line.spentBefore, spentAfter: line.spentAfter, admin: line.admin },
      { level: 30, tenant: 'acme', key: 'ci', limit: 'cost/1d#ci', op: 'credit', amountUsd: '0.000500', spentBefore: usd(spent), spentAfter: usd(after), admin: '127.0.0.1' },
    );
    // The tenant's own budget is not topped up.
    assert.deepEqual(budgetOf(await usage(), 'cost/month').usd.spent, usd(spent));
    const admitted = await send();
    assert.equal(admitted.statusCode, 200, `${admitted.body} (refused before: ${refusedBody})`);
    const u = (admitted.json() as { usage: { prompt_tokens: number } }).usage;
    spent = after + u.prompt_tokens + 7 * 4;
    assert.deepEqual(budgetOf(await usage(), 'cost/1d#ci').usd.spent, usd(spent));
  });

  test('a credit larger than the spend leaves 0; set_spent_usd sets it; the tenant\'s one budget needs no name', async () => {
    const cleared = await change({ key: 'ci', credit_usd: '100' });
    assert.equal(cleared.statusCode, 200, cleared.body);
    assert.equal((cleared.json() as { spentAfter: string }).spentAfter, '0.000000');
    const set = await change({ set_spent_usd: '0.0099' });
    assert.equal(set.statusCode, 200, set.body);
    assert.deepEqual((set.json() as { limit: string; op: string; budget: Budget }).budget.usd, { limit: '0.010000', spent: '0.009900', remaining: '0.000100' });
    // The tenant's budget now refuses the key's request (its reservation is above $0.0001).
    const refused = await send();
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-budget'], 'cost/month');
  });

  test('the change is limiter state: kept through a restart (the state file)', async () => {
    const kept = await usage();
    await nodeLocalState(app)?.save();
    const restarted = buildGateway({ config: buildConfig(rawConfig(sim.url), 'spend.yaml', { SIM_KEY: 'sim-key' }), clock, logger: false, stateDir });
    await restarted.ready();
    const admin2 = buildAdminServer(TOKEN, restarted.log);
    registerNodeAdmin(restarted, admin2, async () => ({ handedOff: 0, ring: '' }));
    try {
      await nodeLocalState(restarted)?.restore();
      const res = await admin2.inject({ method: 'GET', url: '/admin/v1/tenants/acme', headers: adminHeaders });
      const u = res.json() as Usage;
      assert.deepEqual(budgetOf(u, 'cost/month'), budgetOf(kept, 'cost/month'));
      assert.deepEqual(budgetOf(u, 'cost/1d#ci'), budgetOf(kept, 'cost/1d#ci'));
    } finally {
      await admin2.close();
      await restarted.close();
    }
  });
});

describe('a router: a spend change forwarded to the tenant\'s owner', () => {
  let sim: { url: string; close(): Promise<void> };
  let node: FastifyInstance;
  let nodeUrl: string;
  let router: Awaited<ReturnType<typeof startRouter>>;
  const nodeLog = logLines();
  const routerLog = logLines();

  const send = () => request(`${router.url}/v1/chat/completions`, { method: 'POST', headers: clientHeaders(CI_KEY), body: chat });
  const viaRouter = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
    const res = await request(`${router.adminUrl}${path}`, { method, headers: adminHeaders, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> };
  };
  const ciBudget = async (): Promise<Budget> => {
    const res = await viaRouter('GET', '/admin/v1/tenants/acme');
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.askedNode, 'node-1');
    return budgetOf(res.body as unknown as Usage, 'cost/1d#ci');
  };

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(rawConfig(sim.url), 'spend.yaml', { SIM_KEY: 'sim-key' });
    node = buildGateway({ config, clusterSecret: TEST_SECRET, clock: new ManualClock(T0), logStream: nodeLog.stream });
    nodeUrl = await node.listen({ host: '127.0.0.1', port: 0 });
    router = await startRouter({ config, membership: new StaticMembership([{ id: 'node-1', url: nodeUrl }]), logStream: routerLog.stream, host: '127.0.0.1', port: 0, adminPort: 0, env: { QUOTARING_ADMIN_TOKEN: TOKEN, ...TEST_SECRET_ENV } });
  });
  after(async () => {
    await router.close();
    await node.close();
    await sim.close();
  });

  test('spend read through the router, a top-up applied on the owner and logged on both, bad inputs relayed', async () => {
    let spent = 0;
    let refused = false;
    for (let i = 0; i < 100 && !refused; i++) {
      const res = await send();
      if (res.statusCode === 429) {
        assert.equal(res.headers['x-quotaring-error'], 'budget_exceeded');
        await res.body.dump();
        refused = true;
        break;
      }
      assert.equal(res.statusCode, 200);
      spent += ((await res.body.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens + 7 * 4;
    }
    assert.ok(refused);
    assert.deepEqual((await ciBudget()).usd, { limit: '0.001000', spent: usd(spent), remaining: usd(1000 - spent) });

    const before = await ciBudget();
    assert.deepEqual(await viaRouter('POST', '/admin/v1/tenants/acme/spend', { key: 'ci', credit_usd: '-5' }).then((r) => [r.status, (r.body.error as { code: string }).code, r.body.askedNode]), [400, 'invalid_request', 'node-1']);
    assert.deepEqual(await viaRouter('POST', '/admin/v1/tenants/acme/spend', { key: 'nope', credit_usd: '5' }).then((r) => [r.status, (r.body.error as { code: string }).code]), [404, 'not_found']);
    assert.deepEqual(await viaRouter('POST', '/admin/v1/tenants/nobody/spend', { credit_usd: '5' }).then((r) => [r.status, (r.body.error as { code: string }).code]), [404, 'not_found']);
    // The internal route answers only calls signed with the cluster secret.
    const unsigned = await request(`${nodeUrl}/_quotaring/v1/tenants/acme/spend`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ change: { key: 'ci', credit_usd: '5' }, admin: { remote: 'x', via: 'y' } }) });
    assert.equal(unsigned.statusCode, 401);
    assert.equal(unsigned.headers['x-quotaring-error'], 'cluster_auth_failed');
    await unsigned.body.dump();
    assert.deepEqual(await ciBudget(), before);

    const topUp = await viaRouter('POST', '/admin/v1/tenants/acme/spend', { limit: 'cost/1d#ci', credit_usd: '0.001' });
    assert.equal(topUp.status, 200, JSON.stringify(topUp.body));
    assert.deepEqual([topUp.body.askedNode, topUp.body.node, topUp.body.spentBefore, topUp.body.spentAfter], ['node-1', 'single', usd(spent), '0.000000']);
    assert.deepEqual((await ciBudget()).usd, { limit: '0.001000', spent: '0.000000', remaining: '0.001000' });
    const admitted = await send();
    assert.equal(admitted.statusCode, 200);
    await admitted.body.dump();

    const ownerLine = nodeLog.lines.find((l) => l.msg === 'budget spend changed');
    assert.ok(ownerLine !== undefined);
    assert.deepEqual(
      [ownerLine.tenant, ownerLine.key, ownerLine.limit, ownerLine.spentBefore, ownerLine.spentAfter, ownerLine.admin, ownerLine.via],
      ['acme', 'ci', 'cost/1d#ci', usd(spent), '0.000000', '127.0.0.1', `router-${new URL(router.url).port}`],
    );
    const routerLine = routerLog.lines.find((l) => l.msg === 'budget spend changed on the owner');
    assert.ok(routerLine !== undefined);
    assert.deepEqual([routerLine.tenant, routerLine.limit, routerLine.spentAfter, routerLine.admin, routerLine.askedNode], ['acme', 'cost/1d#ci', '0.000000', '127.0.0.1', 'node-1']);
  });
});

describe('a spend change in the owner\'s checkpoint (real Redis)', () => {
  test('the node taking over after the owner crashed starts from the changed spend', async () => {
    const redis = await startRedis();
    const connections: Redis[] = [];
    const clock = new ManualClock(T0);
    const config = buildConfig(rawConfig('http://127.0.0.1:1'), 'spend.yaml', { SIM_KEY: 'sim-key' });
    const quiet = { info: () => {}, warn: () => {} };
    const node = async (self: Member) => {
      const connection = new Redis(redis.url);
      connections.push(connection);
      const limiter = new Limiter({ clock, policyFor: (t) => config.policies.get(t) });
      const handoff = new Handoff({ self, membership: new TestMembership(createRing([self])), limiter, store: new TenantStateStore(connection, 'spend'), clock, waitMs: 250, checkpointMs: 60_000, stateTtlMs: (t) => stateTtlMs(config.policies.get(t)), send: async () => {}, log: quiet });
      await handoff.start();
      handoff.joined();
      return { limiter, handoff };
    };
    const changes: Record<string, unknown>[] = [];
    const log = { info: (fields: Record<string, unknown>, msg: string) => changes.push({ ...fields, msg }) } as unknown as FastifyBaseLogger;
    try {
      const a = await node({ id: 'node-a', url: 'http://127.0.0.1:1' });
      await a.handoff.ready('acme');
      assert.equal(a.limiter.acquire('acme', { id: 'r', tokens: 0, key: 'ci', cost: 800_000_000n }).ok, true); // 800 µ$
      a.handoff.touched('acme');
      await a.handoff.checkpoint();
      const deps = { config, limiter: a.limiter, handoff: a.handoff, node: () => 'node-a', clock, log };
      const answer = await changeTenantSpend(deps, 'acme', { key: 'ci', credit_usd: '0.0003' }, { remote: '10.0.0.9' });
      assert.equal(answer.status, 200);
      assert.deepEqual(changes.map((l) => [l.msg, l.limit, l.spentBefore, l.spentAfter, l.admin]), [['budget spend changed', 'cost/1d#ci', '0.000800', '0.000500', '10.0.0.9']]);
      await a.handoff.checkpoint();
      a.handoff.stop(); // a crash: no handoff
      const b = await node({ id: 'node-b', url: 'http://127.0.0.1:2' });
      await b.handoff.ready('acme');
      assert.deepEqual(
        b.limiter.budgets('acme').map((v) => [v.name, v.spentPico]),
        [
          ['cost/month', 800_000_000n],
          ['cost/1d#ci', 500_000_000n],
        ],
      );
      b.handoff.stop();
    } finally {
      for (const c of connections) c.disconnect();
      await redis.stop();
    }
  });
});
