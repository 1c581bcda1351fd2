/**
 * `mode: central` end to end in-process: two gateways (as two nodes behind a round-robin router)
 * share one real redis-server; every decision is a Lua call there, so a tenant's limits hold across
 * both, refusals carry the same headers as in the sharded mode, settlement refunds what was not
 * used, and a Redis that is gone gives 503 `limiter_unavailable`, never a 429.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startRedis } from '../helpers/redis.ts';

const KEY = 'key-central-000';
const messages = [{ role: 'user', content: 'hello' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));

describe('mode: central', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  let sim: { url: string; close(): Promise<void> };
  const apps: FastifyInstance[] = [];

  before(async () => {
    redis = await startRedis();
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(
      {
        mode: 'central',
        server: { log_level: 'silent' },
        cluster: { name: 'central-it', redis: { url: redis.url } },
        tenants: [{ id: 'acme', keys: [KEY], limits: [{ requests: 5, window: '1m', algorithm: 'sliding_window' }, { tokens: 10_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 2 }] }],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    for (let i = 0; i < 2; i++) {
      const app = buildGateway({ config, logger: false });
      await app.ready();
      apps.push(app);
    }
  });
  after(async () => {
    for (const app of apps) await app.close();
    await sim.close();
    await redis.stop();
  });

  const post = (app: FastifyInstance, maxTokens: number) =>
    app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sim-output-tokens': '10' }, payload: { model: 'gpt-4o-mini', max_tokens: maxTokens, messages } });

  test('the limits hold across both gateways: 5 requests a minute in all, the 6th refused with the tenant\'s headers', async () => {
    const statuses: number[] = [];
    const remaining: string[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await post(apps[i % 2] as FastifyInstance, 100);
      statuses.push(res.statusCode);
      remaining.push(String(res.headers['x-ratelimit-remaining-requests']));
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
    assert.deepEqual(remaining, ['4', '3', '2', '1', '0', '0']);
    const refused = await post(apps[1] as FastifyInstance, 100);
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.ok(Number(refused.headers['retry-after']) >= 1);
  });

  test('settlement is a second call: after 5 requests reserving prompt + 100, the tokens used are 5 × (prompt + the 10 the simulator answered)', async () => {
    const keys = await redis.client().keys('qr:central-it:central:{acme}:*');
    assert.ok(keys.length > 0, 'the tenant\'s state lives in Redis, hash-tagged by tenant');
    const refused = await post(apps[0] as FastifyInstance, 1);
    assert.equal(refused.statusCode, 429, 'the requests limit is spent');
    const used = 10_000 - Number(refused.headers['x-ratelimit-remaining-tokens']);
    assert.equal(used, 5 * (PROMPT + 10), 'each reservation of prompt + 100 settled on prompt + 10');
  });

  test('Redis gone: 503 limiter_unavailable in the provider\'s shape, never a 429', async () => {
    await redis.stop();
    const res = await post(apps[0] as FastifyInstance, 10);
    assert.equal(res.statusCode, 503);
    assert.equal(res.headers['x-quotaring-error'], 'limiter_unavailable');
    assert.equal((res.json() as { error: { code: string } }).error.code, 'limiter_unavailable');
    redis = await startRedis();
  });
});
