/**
 * Deployment provider quotas on a node without Redis (each node enforces its share locally): the
 * gateway in-process (fake clock) in front of a real simulator server. A request the quota cannot
 * take gets 429 before the provider sees it and charges the tenant nothing; a tenant refusal gives
 * the quota back; a provider 429 drains the quota so the next request is refused locally.
 */
import assert from 'node:assert/strict';
import { after, beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';

const chat = (maxTokens: number) => ({ model: 'gpt-4o-mini', max_tokens: maxTokens, messages: [{ role: 'user', content: 'hello' }] });
const auth = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

describe('deployment quotas on a node without Redis', () => {
  let sim: { url: string; close(): Promise<void> } | undefined;
  let app: FastifyInstance | undefined;
  let clock: ManualClock;

  async function start(quota: { rpm?: number; tpm?: number; algorithm?: string }, tenantLimits: unknown[], simQuota?: { rpm?: number; tpm?: number }, headroom = 1): Promise<FastifyInstance> {
    sim = await startSimulator({ port: 0, ...(simQuota === undefined ? {} : { quota: simQuota }) });
    clock = new ManualClock();
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [
          { id: 'a', keys: ['key-a-000000'], limits: tenantLimits },
          { id: 'b', keys: ['key-b-000000'], limits: [] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', quota, headroom }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    app = buildGateway({ config, clock, logger: false });
    await app.ready();
    return app;
  }

  beforeEach(async () => {
    await app?.close();
    await sim?.close();
    app = undefined;
    sim = undefined;
  });
  after(async () => {
    await app?.close();
    await sim?.close();
  });

  test('requests beyond the rpm quota get 429 before reaching the provider, with a retry-after; the tenant is not charged', async () => {
    const gw = await start({ rpm: 3 }, [{ requests: 100, window: '1m', algorithm: 'sliding_window' }]);
    const remaining: (string | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-a-000000'), payload: chat(5) });
      assert.equal(res.statusCode, 200, res.body);
      remaining.push(res.headers['x-ratelimit-remaining-requests'] as string);
    }
    assert.deepEqual(remaining, ['99', '98', '97']);
    const refused = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-a-000000'), payload: chat(5) });
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.match((refused.json() as { error: { message: string } }).error.message, /provider quota of deployment sim/);
    // 3 per minute refill one every 20 s.
    assert.equal(refused.headers['retry-after'], '20');
    assert.equal(refused.headers['retry-after-ms'], '20000');
    assert.equal((await simStats(sim!.url)).requests, 3);
    // The refused request cost the tenant nothing: its next admission shows 96 left.
    clock.advance(20_000);
    const next = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-a-000000'), payload: chat(5) });
    assert.equal(next.statusCode, 200, next.body);
    assert.equal(next.headers['x-ratelimit-remaining-requests'], '96');
  });

  test("a tenant's refusal gives the deployment quota back to other tenants", async () => {
    const gw = await start({ rpm: 3 }, [{ requests: 2, window: '1m', algorithm: 'sliding_window' }]);
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-a-000000'), payload: chat(5) })).statusCode);
    assert.deepEqual(statuses, [200, 200, 429]);
    const b1 = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
    assert.equal(b1.statusCode, 200, 'the third request of a was refused by its own limit and took no quota');
    const b2 = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
    assert.equal(b2.statusCode, 429);
    assert.match((b2.json() as { error: { message: string } }).error.message, /provider quota of deployment sim/);
  });

  test('a request larger than the tpm quota can ever take: 429 request_too_large, x-should-retry false', async () => {
    const gw = await start({ tpm: 100 }, []);
    const res = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(500) });
    assert.equal(res.statusCode, 429);
    assert.equal(res.headers['x-quotaring-error'], 'request_too_large');
    assert.equal(res.headers['x-should-retry'], 'false');
    assert.equal((await simStats(sim!.url)).requests, 0);
  });

  test("a provider 429 is relayed and drains the node's share: the next request is refused without reaching the provider", async () => {
    // The simulator allows 1 request a minute itself; our quota believes in 100.
    const gw = await start({ rpm: 100 }, [], { rpm: 1 });
    assert.equal((await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) })).statusCode, 200);
    const limited = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
    assert.equal(limited.statusCode, 429);
    assert.equal(limited.headers['x-quotaring-error'], undefined, "the provider's own 429, relayed");
    const before = (await simStats(sim!.url)).requests;
    await new Promise((resolve) => setTimeout(resolve, 20));
    const refused = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.equal((await simStats(sim!.url)).requests, before);
  });

  test("an rpm refusal says type requests and names the requests; a tpm one says tokens; the quota's x-ratelimit-* headers come where the tenant has no limit of its own", async () => {
    const gw = await start({ rpm: 2, tpm: 1_000_000 }, [{ requests: 100, window: '1m' }]);
    for (let i = 0; i < 2; i++) assert.equal((await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) })).statusCode, 200);
    const refused = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
    assert.equal(refused.statusCode, 429);
    const error = (refused.json() as { error: { type: string; message: string } }).error;
    assert.equal(error.type, 'requests');
    assert.match(error.message, /provider quota of deployment sim .*requests \(rpm\) ran out \(limit 2 a minute.*remaining 0; requested 1\)/);
    // Tenant b has no limits: the quota's state, both kinds (OpenAI's shape: limit, remaining, reset as a Go duration).
    assert.equal(refused.headers['x-ratelimit-limit-requests'], '2');
    assert.equal(refused.headers['x-ratelimit-remaining-requests'], '0');
    assert.equal(refused.headers['x-ratelimit-reset-requests'], '1m0s');
    assert.equal(refused.headers['x-ratelimit-limit-tokens'], '1000000');
    assert.match(String(refused.headers['x-ratelimit-remaining-tokens']), /^\d+$/);
    assert.equal(refused.headers['retry-after'], '30');
    // Tenant a has its own requests limit: only the quota's tokens headers.
    const a = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-a-000000'), payload: chat(5) });
    assert.equal(a.statusCode, 429);
    assert.equal(a.headers['x-ratelimit-limit-requests'], undefined);
    assert.equal(a.headers['x-ratelimit-limit-tokens'], '1000000');

    await app?.close();
    await sim?.close();
    const tpm = await start({ rpm: 1_000, tpm: 60 }, []);
    assert.equal((await tpm.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(20) })).statusCode, 200);
    const out = await tpm.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(40) });
    assert.equal(out.statusCode, 429);
    const tokensError = (out.json() as { error: { type: string; message: string } }).error;
    assert.equal(tokensError.type, 'tokens');
    assert.match(tokensError.message, /tokens \(tpm\) ran out \(limit 60 a minute/);
    assert.equal(out.headers['x-ratelimit-limit-tokens'], '60');
  });

  /** Sends requests of tenant b each second for `seconds`, as many as are admitted; @returns the clock ms of each admission. */
  async function admittedEachSecond(gw: FastifyInstance, seconds: number): Promise<number[]> {
    const at: number[] = [];
    for (let s = 0; s < seconds; s++) {
      for (;;) {
        const res = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth('key-b-000000'), payload: chat(5) });
        if (res.statusCode !== 200) break;
        at.push(clock.now());
      }
      clock.advance(1_000);
    }
    return at;
  }

  /** The most admissions in any 60 s window [t, t + 60 s) over `at` (sorted). */
  function mostInAMinute(at: readonly number[]): number {
    let most = 0;
    for (let i = 0, j = 0; i < at.length; i++) {
      while ((at[i] as number) - (at[j] as number) >= 60_000) j++;
      most = Math.max(most, i - j + 1);
    }
    return most;
  }

  test('quota.algorithm sliding_window: no 60 s window admits more than the quota, from idle and at steady load; token_bucket admits up to about 2 x quota x headroom in the first minute', { timeout: 120_000 }, async () => {
    const sliding = await start({ rpm: 100, algorithm: 'sliding_window' }, [], undefined, 0.9);
    const admitted = await admittedEachSecond(sliding, 240);
    assert.ok(mostInAMinute(admitted) <= 100, `sliding_window admitted ${mostInAMinute(admitted)} in a 60 s window of a 100 rpm quota`);
    // It still uses the quota: at steady load, 90 a minute (quota x headroom).
    const lastMinute = admitted.filter((t) => t >= clock.now() - 60_000).length;
    assert.ok(lastMinute >= 88 && lastMinute <= 100, `last minute: ${lastMinute}`);

    await app?.close();
    await sim?.close();
    const bucket = await start({ rpm: 100 }, [], undefined, 0.9);
    const burst = mostInAMinute(await admittedEachSecond(bucket, 120));
    // A full bucket (90) plus a minute of refill (90): the bound docs/limits.md states.
    assert.ok(burst > 100 && burst <= 180, `token_bucket admitted ${burst} in a 60 s window`);
  });
});
