/**
 * A deployment quota leased from a real Redis that then goes away: with `on_redis_failure: local`
 * (the default) requests keep being served within the node's share; with `closed` they get 503
 * `limiter_unavailable` in the provider's shape (never a "rate limit exceeded"), and nothing reaches
 * the provider.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';

const KEY = 'key-fail-00000';
const chat = { model: 'gpt-4o-mini', max_tokens: 500, messages: [{ role: 'user', content: 'hello' }] };

describe('deployment quotas when Redis goes away', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  let sim: { url: string; close(): Promise<void> };
  const apps: FastifyInstance[] = [];

  async function gateway(mode: 'local' | 'closed', limits: unknown[] = []): Promise<FastifyInstance> {
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        cluster: { name: `fail-${mode}`, redis: { url: redis.url }, on_redis_failure: mode },
        tenants: [{ id: 'a', keys: [KEY], limits }],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota: { tpm: 600_000 } }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    const app = buildGateway({ config, logger: false });
    apps.push(app);
    await app.ready();
    return app;
  }
  const post = (app: FastifyInstance) => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, payload: chat });

  before(async () => {
    redis = await startRedis();
    sim = await startSimulator({ port: 0 });
  });
  after(async () => {
    for (const app of apps) await app.close();
    await sim.close();
    await redis.stop();
  });

  test('local serves within the share; closed answers 503 limiter_unavailable, and the provider sees nothing of it', async () => {
    const local = await gateway('local');
    const closed = await gateway('closed');
    assert.equal((await post(local)).statusCode, 200);
    assert.equal((await post(closed)).statusCode, 200);
    await redis.stop();

    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) statuses.push((await post(local)).statusCode);
    assert.deepEqual(new Set(statuses), new Set([200]));

    const before = (await simStats(sim.url)).requests;
    let refused;
    for (let i = 0; i < 20 && refused === undefined; i++) {
      const res = await post(closed);
      if (res.statusCode !== 200) refused = res;
    }
    assert.ok(refused !== undefined, 'closed never refused while Redis was down');
    assert.equal(refused.statusCode, 503);
    assert.equal(refused.headers['x-quotaring-error'], 'limiter_unavailable');
    assert.equal(refused.headers['retry-after'], '1');
    const body = refused.json() as { error: { type: string; code: string; message: string } };
    assert.deepEqual([body.error.type, body.error.code], ['server_error', 'limiter_unavailable']);
    assert.doesNotMatch(refused.body, /undefined|NaN/);
    // Once refusing, every following request is refused too, and none reaches the provider.
    const served = (await simStats(sim.url)).requests - before;
    const next = await post(closed);
    assert.equal(next.statusCode, 503);
    assert.equal((await simStats(sim.url)).requests - before, served);
  });

  test('a node started while Redis is down serves tenant {rpm 10} within the fallback: 10 admitted, then a 429 with a positive integer retry-after, no undefined or NaN', async () => {
    await redis.stop();
    const app = await gateway('local', [{ requests: 10, window: '1m', algorithm: 'sliding_window' }]);
    const replies = [];
    for (let i = 0; i < 11; i++) replies.push(await post(app));
    assert.deepEqual(
      replies.map((r) => r.statusCode),
      [...Array<number>(10).fill(200), 429],
    );
    assert.deepEqual(
      replies.slice(0, 10).map((r) => r.headers['x-ratelimit-remaining-requests']),
      ['9', '8', '7', '6', '5', '4', '3', '2', '1', '0'],
    );
    const refused = replies[10]!;
    assert.equal(refused.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.match(String(refused.headers['retry-after']), /^[1-9]\d*$/);
    assert.match(String(refused.headers['retry-after-ms']), /^[1-9]\d*$/);
    for (const r of replies) {
      assert.doesNotMatch(JSON.stringify(r.headers), /undefined|NaN/);
      assert.doesNotMatch(r.body, /undefined|NaN/);
    }
  });
});
