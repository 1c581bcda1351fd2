/**
 * Fair shares of a deployment quota with real components: the gateway in-process (fake clock) in
 * front of the real simulator, and leases and the demand exchange on a real redis-server. A tenant
 * over its share takes only above the reserve and gets 429 `share_exhausted`; a tenant within its
 * share takes the reserve too; the exchange gives every node every node's report and leaves out
 * one that does not validate.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { DemandExchange, fairDemandKey } from '../../src/fairshare/exchange.ts';
import { FairShares } from '../../src/fairshare/shares.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { capKey } from '../../src/globalcap/keys.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const chat = { model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] };
const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

describe('fair share on a node without Redis (gateway in-process, real simulator)', () => {
  let sim: { url: string; close(): Promise<void> } | undefined;
  let app: FastifyInstance | undefined;
  const clock = new ManualClock();

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [
          { id: 'a', keys: ['key-a-000000'], limits: [] },
          { id: 'b', keys: ['key-b-000000'], limits: [] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { rpm: 10 }, headroom: 1, fair_share: { reserve: 0.2 } }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    app = buildGateway({ config, clock, logger: false });
    await app.ready();
  });
  after(async () => {
    await app?.close();
    await sim?.close();
  });

  test('a flooding tenant gets its share and what lies above the reserve; the quiet one keeps the reserve', async () => {
    const gw = app as FastifyInstance;
    const send = async (key: string) => gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth(key), payload: chat });
    // b asks once: its demand is known (one request in 2 s ≈ 37.5 a minute with the margin, more
    // than half of 10), so a and b each have a share of 5 of the 10 requests a minute.
    assert.equal((await send('key-b-000000')).statusCode, 200);
    assert.equal((await send('key-a-000000')).statusCode, 200);
    // The node's own table is recomputed every 250 ms: now it counts both.
    clock.advance(300);
    const a: number[] = [];
    for (let i = 0; i < 7; i++) a.push((await send('key-a-000000')).statusCode);
    // a's share bucket holds two requests (5 a minute: max(2 s of it, 2 requests)): one left; then 5
    // over its share above the reserve of 2 (level 7 → 2), then refused.
    assert.deepEqual(a, [200, 200, 200, 200, 200, 200, 429]);
    const refused = await send('key-a-000000');
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-error'], 'share_exhausted');
    assert.match((refused.json() as { error: { message: string } }).error.message, /tenant a's fair share of the provider quota of deployment sim/);
    // The earlier of: a's share bucket holds a request again (1 of 5 a minute: 12 s less the 300 ms
    // refilled) and the quota above the reserve covers one (level 2 → 3 at 10 a minute: 6 s less 300 ms).
    assert.equal(refused.headers['retry-after-ms'], '5700');
    // b is within its share: it takes the reserve.
    assert.equal((await send('key-b-000000')).statusCode, 200);
    assert.equal((await send('key-a-000000')).headers['x-quotaring-error'], 'share_exhausted');
    assert.equal((await simStats((sim as { url: string }).url)).requests, 9);
  });
});

describe("a request over its share waits up to its tier's max_wait (gateway in-process, real simulator)", () => {
  let sim: { url: string; close(): Promise<void> } | undefined;
  let app: FastifyInstance | undefined;
  let url = '';
  const clock = new ManualClock();
  const MAX_WAIT = 1_500;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        priorities: [
          { name: 'interactive', max_wait: 0 },
          { name: 'batch', floor: 0, max_wait: MAX_WAIT },
        ],
        tenants: [
          { id: 'a', keys: ['key-a-000000'], priority: 'batch', limits: [{ concurrent: 1 }] },
          { id: 'b', keys: ['key-b-000000'], priority: 'interactive', limits: [] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { rpm: 10 }, headroom: 1, fair_share: { reserve: 0.2 } }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    app = buildGateway({ config, clock, logger: false });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await app?.close();
    await sim?.close();
  });

  test('it waits, then gets 429 share_exhausted at its deadline, or is admitted when its share refills; a client that leaves holds nothing', async () => {
    const gw = app as FastifyInstance;
    const send = async (key: string) => gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth(key), payload: chat });
    const served = async (): Promise<number> => (await simStats((sim as { url: string }).url)).requests;
    // As in the test above: b's demand known, a takes its share and what lies above the reserve.
    assert.equal((await send('key-b-000000')).statusCode, 200);
    assert.equal((await send('key-a-000000')).statusCode, 200);
    clock.advance(300);
    for (let i = 0; i < 6; i++) assert.equal((await send('key-a-000000')).statusCode, 200, `a's request ${i}`);
    assert.equal(await served(), 8);

    // Over its share, a's batch request waits its tier's max_wait (no refill: the clock stands still), then 429.
    const started = performance.now();
    const refused = await send('key-a-000000');
    const tookMs = performance.now() - started;
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-error'], 'share_exhausted');
    assert.ok(tookMs >= MAX_WAIT, `answered after ${tookMs} ms`);
    const queued = Number(refused.headers['x-quotaring-queued-ms']);
    assert.ok(queued >= MAX_WAIT && queued <= tookMs + 1, `x-quotaring-queued-ms ${queued}`);
    assert.match((refused.json() as { error: { message: string } }).error.message, /other tenants within their shares use the rest now\. Waited \d+\.\ds \(max_wait of priority batch\)\. Please try again in 5\.7s\.$/);
    assert.equal(refused.headers['retry-after-ms'], '5700');
    assert.equal(await served(), 8);

    // A client that leaves while waiting: answered by no one, charged nothing, its slot (concurrent: 1) free.
    const aborted = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: auth('key-a-000000'), body: JSON.stringify(chat), signal: AbortSignal.timeout(200) }).then(
      () => 'answered',
      (e: unknown) => (e as Error).name,
    );
    assert.equal(aborted, 'TimeoutError');
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(await served(), 8);

    // Waiting while the share refills (6 s of the fake clock: one request in a's share, one above the reserve): admitted.
    const waiting = send('key-a-000000');
    await new Promise((r) => setTimeout(r, 100));
    clock.advance(6_000);
    const admitted = await waiting;
    assert.equal(admitted.statusCode, 200);
    assert.ok(Number(admitted.headers['x-quotaring-queued-ms']) >= 100, `x-quotaring-queued-ms ${admitted.headers['x-quotaring-queued-ms']}`);
    assert.equal(await served(), 9);
    // b, within its share, was never made to wait.
    const b = await send('key-b-000000');
    assert.equal(b.statusCode, 200);
    assert.equal(b.headers['x-quotaring-queued-ms'], undefined);
  });
});

describe('fair share on a real Redis', () => {
  let redis: RunningRedis;

  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    await redis.flush();
  });

  test('a take with a reserve leases only above it; one without takes the reserve', async () => {
    const leases = (): CapLeases => new CapLeases({ cluster: 'fs', deployments: { gpt: { rpm: 100, headroom: 1 } }, scripts: defineCapScripts(redis.client()), liveNodes: () => 2 });
    const over = leases();
    const within = leases();
    try {
      // Node "over" takes with a reserve of 0.1 (10 requests) until refused.
      let taken = 0;
      for (let i = 0; i < 200; i++) {
        let r = over.take('gpt', { tokens: 0 }, 0.1);
        if (!r.ok) r = await over.takeAfterRenewals('gpt', { tokens: 0 }, r, 0.1);
        if (!r.ok) break;
        taken++;
      }
      assert.ok(taken >= 89 && taken <= 91, `taken above the reserve: ${taken}`);
      const level = Number(await redis.client().hget(capKey('fs', 'deployment:gpt:rpm'), 'l'));
      assert.ok(level >= 10 && level < 11.5, `level left: ${level}`);
      // Node "within" takes the reserve.
      let reserve = 0;
      for (let i = 0; i < 20; i++) {
        let r = within.take('gpt', { tokens: 0 });
        if (!r.ok) r = await within.takeAfterRenewals('gpt', { tokens: 0 }, r);
        if (!r.ok) break;
        reserve++;
      }
      assert.ok(reserve >= 10 && reserve <= 11, `taken of the reserve: ${reserve}`);
    } finally {
      await over.close();
      await within.close();
    }
  });

  test('the exchange gives each node every report; a report that does not validate is left out', async () => {
    const clock = new ManualClock(Date.now());
    const spec = { name: 'gpt', buckets: [{ kind: 'tokens' as const, capacity: 60_000 }], reserve: 0.1 };
    const make = (id: string) => {
      const shares = new FairShares({ clock, deployments: [spec], tenantSpec: () => ({ weight: 1, floor: 0 }), liveNodes: () => 2 });
      return { shares, exchange: new DemandExchange({ redis: redis.client(), cluster: 'fs', nodeId: id, shares, log: { warn: () => undefined } }) };
    };
    const n1 = make('n1');
    const n2 = make('n2');
    n1.shares.ask('big', 'gpt', { requests: 1, tokens: 50_000 });
    n2.shares.ask('small', 'gpt', { requests: 1, tokens: 100 });
    await redis.client().hset(fairDemandKey('fs', 'gpt'), 'evil', `${Date.now()}|{"v":1,"kinds":["tokens"],"t":[["x",[-5],1,0]]}`);
    assert.equal(await n1.exchange.exchange('gpt'), true);
    assert.equal(await n2.exchange.exchange('gpt'), true);
    assert.equal(await n1.exchange.exchange('gpt'), true);
    for (const n of [n1, n2]) {
      const v = n.shares.view('gpt');
      assert.equal(v?.source, 'cluster');
      assert.equal(v?.nodes, 2);
      assert.deepEqual(
        v?.tenants.map((t) => [t.tenant, t.kinds[0]?.demand]),
        [
          ['big', 1_875_000],
          ['small', 3_750],
        ],
      );
    }
    assert.equal(n1.exchange.counts.invalid, 2);
    // small's share is its demand; big gets the rest.
    const small = n2.shares.view('gpt')?.tenants.find((t) => t.tenant === 'small')?.kinds[0];
    assert.equal(small?.share, 3_750);
    const big = n1.shares.view('gpt')?.tenants.find((t) => t.tenant === 'big')?.kinds[0];
    assert.equal(big?.share, 56_250);
  });

  test('Redis stopped: the exchange fails, the last cluster table is kept for 2 s, then the node shares capacity / live nodes over its own tenants', async () => {
    const own = await startRedis();
    const clock = new ManualClock(Date.now());
    const spec = { name: 'gpt', buckets: [{ kind: 'tokens' as const, capacity: 60_000 }], reserve: 0.1 };
    const shares = new FairShares({ clock, deployments: [spec], tenantSpec: () => ({ weight: 1, floor: 0 }), liveNodes: () => 2 });
    const client = own.client();
    const exchange = new DemandExchange({ redis: client, cluster: 'fs', nodeId: 'n1', shares, log: { warn: () => undefined } });
    shares.ask('small', 'gpt', { requests: 1, tokens: 100 });
    assert.equal(await exchange.exchange('gpt'), true);
    assert.equal(shares.view('gpt')?.source, 'cluster');
    await own.stop();
    assert.equal(await exchange.exchange('gpt'), false);
    assert.equal(exchange.counts.failed, 1);
    clock.advance(2_000);
    assert.equal(shares.view('gpt')?.source, 'cluster');
    clock.advance(1);
    const v = shares.view('gpt');
    assert.equal(v?.source, 'local');
    // Alone on the node: its share is the node's part, 60,000 / 2 live nodes.
    assert.equal(v?.tenants.find((t) => t.tenant === 'small')?.kinds[0]?.share, 30_000);
    client.disconnect();
  });
});
