/**
 * A budget through a handoff mid-window between two real gateway nodes (in-process, listening on
 * 127.0.0.1, signed internal calls) over a real redis-server, in front of a real simulator: the
 * tenant spends on node A; node B joins and owns it; B decides from the same spend (the request A
 * still has in flight counted at its reservation); when that request ends on A, its settlement is
 * forwarded over HTTP (`POST /_quotaring/v1/settlements`, the cost as a pico-dollar string) and B's
 * spend is exact to the micro-dollar. (`budget-handoff.test.ts` covers the same at the limiter's
 * level.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { TenantStateStore } from '../../src/coord/handoff/state-store.ts';
import type { Member } from '../../src/coord/types.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { TEST_SECRET, signedRequest } from '../helpers/cluster-secret.ts';
import { TestMembership } from '../helpers/membership.ts';
import { freePort, simStats } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';

const messages = [{ role: 'user', content: 'who keeps my spend?' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));
const BUDGET = 1_000_000; // $1, micro-dollars
/** Each request: 100 output tokens reserved at 4 µ$, 30 produced; the prompt at 1 µ$ a token. */
const RESERVATION = PROMPT + 100 * 4;
const COST = PROMPT + 30 * 4;

describe('a budget through a handoff between two gateway nodes (real Redis, HTTP)', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  const apps: FastifyInstance[] = [];
  let A: Member;
  let B: Member;
  let tenant = '';
  let key = '';

  before(async () => {
    redis = await startRedis();
    sim = await startSimulator({ port: 0 });
    A = { id: 'node-a', url: `http://127.0.0.1:${await freePort()}` };
    B = { id: 'node-b', url: `http://127.0.0.1:${await freePort()}` };
    const ring = createRing([A, B]);
    tenant = Array.from({ length: 200 }, (_, i) => `tenant-${i}`).find((t) => ring.owner(t)?.id === B.id) ?? '';
    key = `key-${tenant}-0000`;
  });
  after(async () => {
    for (const app of apps) {
      nodeHandoff(app)?.stop();
      const closing = app.close();
      app.server.closeAllConnections();
      await closing;
    }
    await sim.close();
    await redis.stop();
  });

  async function startNode(self: Member, members: Member[]): Promise<{ app: FastifyInstance; membership: TestMembership }> {
    const config = buildConfig(
      {
        server: { log_level: 'silent', state_dir: '' },
        // A fixed window of 366 days: no renewal during the test.
        tenants: [{ id: tenant, keys: [key], limits: [{ usd: 1, window: '366d' }] }],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: { input: 1, output: 4 } }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens', 'x-sim-ttft-ms'] }],
      },
      'budget-handoff-gateway.yaml',
      { SIM_KEY: 'sim-key-handoff' },
    );
    const membership = new TestMembership(createRing(members));
    const app = buildGateway({ config, logger: false, clusterSecret: TEST_SECRET, cluster: { self, membership, store: new TenantStateStore(redis.client(), 'budget-handoff') } });
    apps.push(app);
    await app.listen({ host: '127.0.0.1', port: Number(new URL(self.url).port) });
    const handoff = nodeHandoff(app);
    assert.ok(handoff !== undefined);
    await handoff.start();
    handoff.joined();
    return { app, membership };
  }

  const chat = async (node: Member, extra: Record<string, string> = {}) => {
    const res = await request(`${node.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim-output-tokens': '30', ...extra },
      body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 100, messages }),
    });
    return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
  };

  /** The budget's micro-dollars spent, as `node` sees it (signed tenant state route); undefined where it does not decide. */
  async function spent(node: Member): Promise<number | undefined> {
    const res = await signedRequest(`${node.url}/_quotaring/v1/tenants/${tenant}`);
    const body = (await res.body.json()) as { here: boolean; limits: { name: string; used: number }[] };
    assert.equal(res.statusCode, 200, JSON.stringify(body));
    return body.here ? body.limits.find((l) => l.name === 'cost/366d')?.used : undefined;
  }

  test('B decides from A\'s spend; A\'s request in flight settles on B exactly', async () => {
    const a = await startNode(A, [A]);
    for (let i = 0; i < 3; i++) {
      const res = await chat(A);
      assert.equal(res.status, 200, res.text);
    }
    assert.equal(await spent(A), 3 * COST);

    // One more on A, held upstream (first byte in 10 s, ample for B to start and take the tenant on a loaded machine) across the handoff.
    const inFlight = chat(A, { 'x-sim-ttft-ms': '10000' });
    const deadline = Date.now() + 20_000;
    while ((await simStats(sim.url)).inFlight === 0 && Date.now() < deadline) await sleep(20);
    assert.equal((await simStats(sim.url)).inFlight, 1);
    assert.equal(await spent(A), 3 * COST + RESERVATION);

    // B joins; the tenant is B's in the ring of two.
    const b = await startNode(B, [A, B]);
    a.membership.set(createRing([A, B]));
    const handoffB = nodeHandoff(b.app);
    assert.ok(handoffB !== undefined);
    while (!handoffB.claimed().has(tenant) && Date.now() < deadline) await sleep(10);
    await handoffB.ready(tenant);
    assert.equal((await simStats(sim.url)).inFlight, 1, 'the request was still in flight on A when B took the tenant');
    assert.equal(await spent(A), undefined, 'A no longer decides for the tenant');
    assert.equal(await spent(B), 3 * COST + RESERVATION, 'B has A\'s spend, the request in flight at its reservation');

    // B decides from that spend.
    const onB = await chat(B);
    assert.equal(onB.status, 200, onB.text);
    assert.equal(onB.headers['x-quotaring-budget-remaining-usd'], `0.${String(BUDGET - 3 * COST - RESERVATION - RESERVATION).padStart(6, '0')}`);
    assert.equal(await spent(B), 4 * COST + RESERVATION);

    // The request A admitted ends there: its settlement goes to B over HTTP, with its exact cost.
    const held = await inFlight;
    assert.equal(held.status, 200, held.text);
    const expected = 5 * COST;
    for (const end = Date.now() + 20_000; (await spent(B)) !== expected && Date.now() < end; ) await sleep(20);
    assert.equal(await spent(B), expected);
    assert.equal(nodeHandoff(a.app)?.stats.forwarded, 1);
  });
});
