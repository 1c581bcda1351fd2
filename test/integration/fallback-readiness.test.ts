/**
 * Fallback and start-up against a real Redis (issue 13, item 5): a node leaves fallback after
 * Redis comes back without any request calling the cap (the background probe); a cold start with
 * a burst of first requests does not open the breaker against a healthy Redis (scripts loaded,
 * guard warm-up); `/readyz` answers 503 naming what the node waits for (`ring`, `handoff`,
 * `scripts`) until it is in its ring, has its handoffs and has loaded its scripts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import type { LoadedConfig } from '../../src/config/load.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { RECONNECT_MAX_MS } from '../../src/redis/connection.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import { TestMembership } from '../helpers/membership.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const KEY = 'key-ready-0000';
const PROBE_MS = 200;
const chat = { model: 'gpt-4o-mini', max_tokens: 20, messages: [{ role: 'user', content: 'hello' }] };

/** The value of one series in a Prometheus text exposition (exact label set), or undefined. */
function series(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[3] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) return Number(m[4]);
  }
  return undefined;
}

describe('fallback and readiness with a real Redis', () => {
  let redis: RunningRedis;
  let sim: { url: string; close(): Promise<void> };
  const apps: FastifyInstance[] = [];

  const config = (name: string, url = redis.url): LoadedConfig =>
    buildConfig(
      {
        server: { log_level: 'silent' },
        cluster: { name, redis: { url, probe_interval: `${PROBE_MS}ms` } },
        tenants: [{ id: 'a', keys: [KEY], limits: [] }],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { rpm: 100_000, tpm: 10_000_000 } }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
  const post = (app: FastifyInstance) => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, payload: chat });
  const metrics = async (app: FastifyInstance): Promise<string> => (await app.inject({ url: '/metrics' })).body;
  const fallbackActive = async (app: FastifyInstance): Promise<number | undefined> => series(await metrics(app), 'quotaring_fallback_active');
  const readyz = async (app: FastifyInstance): Promise<{ status: number; body: unknown }> => {
    const res = await app.inject({ url: '/readyz' });
    return { status: res.statusCode, body: res.json() };
  };
  /** Polls `check` every 20 ms until it is true or `ms` passed; returns the ms it took, or undefined. */
  const within = async (ms: number, check: () => Promise<boolean>): Promise<number | undefined> => {
    const start = Date.now();
    while (Date.now() - start <= ms) {
      if (await check()) return Date.now() - start;
      await sleep(20);
    }
    return undefined;
  };

  before(async () => {
    redis = await startRedis();
    sim = await startSimulator({ port: 0 });
  });
  after(async () => {
    for (const app of apps) await app.close();
    await sim.close();
    await redis.stop();
  });

  test('Redis killed then restarted: the node leaves fallback with no request sent, within the reconnect delay plus one probe interval', async () => {
    const app = buildGateway({ config: config('probe'), logger: false });
    apps.push(app);
    await app.ready();
    assert.ok((await within(10_000, async () => (await readyz(app)).status === 200)) !== undefined, 'never ready');
    assert.equal((await post(app)).statusCode, 200);
    assert.equal(await fallbackActive(app), 0);

    await redis.kill();
    assert.ok((await within(5_000, async () => (await fallbackActive(app)) === 1)) !== undefined, 'did not enter fallback when the connection dropped');
    // Longer than a probe interval in fallback, no traffic.
    await sleep(3 * PROBE_MS);
    assert.equal(await fallbackActive(app), 1);

    await redis.restart();
    // The connection comes back within RECONNECT_MAX_MS; the probe then leaves fallback at once
    // (on `ready`) or at its next tick. Slack for a loaded machine; before the probe it never left.
    const took = await within(RECONNECT_MAX_MS + PROBE_MS + 3_000, async () => (await fallbackActive(app)) === 0);
    assert.ok(took !== undefined, 'still in fallback after Redis came back, with no request sent');
    const text = await metrics(app);
    assert.equal(series(text, 'quotaring_fallback_transitions_total', { state: 'left' }), 1);
    assert.equal((await post(app)).statusCode, 200);
  });

  test('a cold start with 50 concurrent first requests against a healthy Redis: breaker never opens, no fallback', async () => {
    const app = buildGateway({ config: config('cold'), logger: false });
    apps.push(app);
    await app.ready();
    // No wait for readiness: the burst meets the node as it connects and loads its scripts.
    const statuses = (await Promise.all(Array.from({ length: 50 }, () => post(app)))).map((r) => r.statusCode);
    assert.deepEqual(new Set(statuses), new Set([200]));
    await within(5_000, async () => (await readyz(app)).status === 200);
    const again = (await Promise.all(Array.from({ length: 50 }, () => post(app)))).map((r) => r.statusCode);
    assert.deepEqual(new Set(again), new Set([200]));
    const text = await metrics(app);
    // Series at 0 are not exposed (counters set from the guard's stats).
    assert.ok((series(text, 'quotaring_redis_guard_calls_total', { guard: 'cap', result: 'ok' }) ?? 0) > 0, 'no Redis call answered');
    assert.equal(series(text, 'quotaring_redis_guard_calls_total', { guard: 'cap', result: 'open' }) ?? 0, 0);
    assert.equal(series(text, 'quotaring_fallback_transitions_total', { state: 'entered' }) ?? 0, 0);
    assert.equal(series(text, 'quotaring_fallback_active'), 0);
  });

  test('/readyz: 503 naming ring until the membership includes the node, 503 naming scripts while Redis does not answer, then 200', async () => {
    const a: Member = { id: 'node-a', url: 'http://127.0.0.1:1' };
    const b: Member = { id: 'node-b', url: 'http://127.0.0.1:2' };
    const membership = new TestMembership(createRing([b]));
    // Redis frozen: the decision connection cannot load the scripts yet.
    redis.signal('SIGSTOP');
    let app: FastifyInstance;
    try {
      app = buildGateway({ config: config('ready'), logger: false, clusterSecret: TEST_SECRET, cluster: { self: a, membership } });
      apps.push(app);
      await app.ready();
      const handoff = nodeHandoff(app);
      assert.ok(handoff !== undefined);
      assert.deepEqual(await readyz(app), { status: 503, body: { status: 'starting', waiting: ['ring', 'handoff', 'scripts'] } });
      await handoff.start();
      await membership.start();
      handoff.joined();
      assert.deepEqual(await readyz(app), { status: 503, body: { status: 'starting', waiting: ['ring', 'scripts'] } });
      membership.set(createRing([a, b]));
      assert.deepEqual(await readyz(app), { status: 503, body: { status: 'starting', waiting: ['scripts'] } });
    } finally {
      redis.signal('SIGCONT');
    }
    assert.ok((await within(10_000, async () => (await readyz(app)).status === 200)) !== undefined, 'not ready after Redis answered');
    assert.deepEqual(await readyz(app), { status: 200, body: { status: 'ready' } });
    // Leaving the ring again: not ready (waiting for ring).
    membership.set(createRing([b]));
    assert.deepEqual(await readyz(app), { status: 503, body: { status: 'starting', waiting: ['ring'] } });
  });
});
