/**
 * The gateway in-process (fastify.inject, fake clock) in front of a real simulator server:
 * bad input, and the window rolling over three minutes of fake time.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { freePort, simStats } from '../helpers/processes.ts';

const KEY = 'key-acme-00000';

function gatewayConfig(simUrl: string, limits: unknown[]) {
  return buildConfig(
    {
      server: { body_limit: '64kb', log_level: 'silent' },
      tenants: [{ id: 'acme', keys: [KEY], limits }],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] },
        { name: 'claude-test', encoding: 'none', deployments: ['sim-anthropic'] },
      ],
      deployments: [
        { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY' },
        { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'SIM_KEY' },
      ],
    },
    'test.yaml',
    { SIM_KEY: 'sim-key' },
  );
}

const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const chat = (extra: Record<string, unknown> = {}) => ({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }], ...extra });

describe('bad input gets a clear 4xx and changes nothing', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  before(async () => {
    sim = await startSimulator({ port: 0 });
    app = buildGateway({
      config: gatewayConfig(sim.url, [{ requests: 5, window: '1m' }, { tokens: 1000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }]),
      clock: new ManualClock(),
      logger: false,
    });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  const cases: { name: string; url?: string; headers?: Record<string, string>; payload: string | Buffer; status: number; code: string; type?: string }[] = [
    { name: 'malformed JSON', payload: '{"model":', status: 400, code: 'invalid_json' },
    { name: 'empty body', payload: '', status: 400, code: 'invalid_json' },
    { name: 'wrong content type', headers: { 'content-type': 'text/plain' }, payload: JSON.stringify(chat()), status: 415, code: 'unsupported_media_type' },
    { name: 'missing model', payload: JSON.stringify(chat({ model: undefined })), status: 400, code: 'invalid_request' },
    { name: 'missing messages', payload: JSON.stringify(chat({ messages: undefined })), status: 400, code: 'invalid_request' },
    { name: 'unknown model', payload: JSON.stringify(chat({ model: 'gpt-9' })), status: 404, code: 'model_not_found' },
    { name: 'negative max_tokens', payload: JSON.stringify(chat({ max_tokens: -5 })), status: 400, code: 'invalid_request' },
    { name: 'non-integer max_tokens', payload: JSON.stringify(chat({ max_tokens: 2.5 })), status: 400, code: 'invalid_request' },
    { name: 'body over the limit', payload: JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(70_000) }] })), status: 413, code: 'body_too_large' },
    { name: 'invalid UTF-8', payload: Buffer.concat([Buffer.from('{"model":"gpt-4o-mini","messages":[{"role":"user","content":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}]}')]), status: 400, code: 'invalid_encoding' },
    { name: 'missing key', headers: { authorization: '' }, payload: JSON.stringify(chat()), status: 401, code: 'invalid_api_key' },
    { name: 'unknown key', headers: { authorization: 'Bearer nope-nope-nope' }, payload: JSON.stringify(chat()), status: 401, code: 'invalid_api_key' },
    { name: 'Anthropic model on the OpenAI route', payload: JSON.stringify(chat({ model: 'claude-test' })), status: 400, code: 'wrong_endpoint' },
    { name: 'unknown route', url: '/v1/no-such-api', payload: JSON.stringify(chat()), status: 404, code: 'not_found' },
    { name: 'Anthropic: missing max_tokens', url: '/v1/messages', payload: JSON.stringify({ model: 'claude-test', messages: [{ role: 'user', content: 'x' }] }), status: 400, code: 'invalid_request', type: 'invalid_request_error' },
    { name: 'Anthropic: unknown key', url: '/v1/messages', headers: { authorization: '', 'x-api-key': 'nope-nope-nope' }, payload: '{}', status: 401, code: 'invalid_api_key', type: 'authentication_error' },
    { name: 'Anthropic: malformed JSON', url: '/v1/messages', payload: '[', status: 400, code: 'invalid_json', type: 'invalid_request_error' },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const res = await app.inject({ method: 'POST', url: c.url ?? '/v1/chat/completions', headers: { ...auth, ...c.headers }, payload: c.payload });
      assert.equal(res.statusCode, c.status, res.body);
      assert.equal(res.headers['x-quotaring-error'], c.code);
      const body = res.json() as Record<string, unknown>;
      if (c.type !== undefined) {
        assert.equal(body.type, 'error');
        assert.equal((body.error as Record<string, unknown>).type, c.type);
      } else {
        assert.equal((body.error as Record<string, unknown>).code, c.code);
      }
    });
  }

  test('after all of them: no counter moved, no slot held, nothing reached the provider', async () => {
    const before = await simStats(sim.url);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: chat() });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['x-ratelimit-remaining-requests'], '4');
    const prompt = countOpenAIChat({ messages: [{ role: 'user', content: 'hello' }] }, exactCounter('o200k_base'));
    assert.equal(res.headers['x-ratelimit-remaining-tokens'], String(1000 - prompt - 5));
    assert.equal((await simStats(sim.url)).requests, before.requests + 1);
    assert.equal(before.requests, 0);
  });
});

describe('one request a second for 3 minutes of fake time against {tpm 10k}', () => {
  let sim: { url: string; close(): Promise<void> };
  before(async () => {
    sim = await startSimulator({ port: 0 });
  });
  after(async () => sim.close());

  for (const [algorithm, steady] of [['sliding_window', 7_000], ['token_bucket', 9_950]] as const) {
    test(`${algorithm}: all admitted, remaining holds at ${steady}`, async () => {
      const clock = new ManualClock();
      const app = buildGateway({ config: gatewayConfig(sim.url, [{ tokens: 10_000, window: '1m', algorithm }]), clock, logger: false });
      const messages = [{ role: 'user', content: 'hello' }];
      const prompt = countOpenAIChat({ messages }, exactCounter('o200k_base'));
      const payload = { model: 'gpt-4o-mini', max_tokens: 50 - prompt, messages };
      const remaining: number[] = [];
      for (let i = 0; i < 180; i++) {
        const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload });
        assert.equal(res.statusCode, 200, `request ${i}: ${res.body}`);
        remaining.push(Number(res.headers['x-ratelimit-remaining-tokens']));
        clock.advance(1_000);
      }
      await app.close();
      if (algorithm === 'sliding_window') {
        assert.deepEqual(remaining.slice(0, 3), [9_950, 9_900, 9_850]);
        assert.ok(remaining.slice(59).every((r) => r === 7_000), `remaining ${remaining.slice(59, 70).join(',')}`);
      } else {
        assert.ok(remaining.every((r) => r === 9_950), `remaining ${remaining.slice(0, 10).join(',')}`);
      }
    });
  }
});

describe('upstream failures refund the tenant and reach the client in the provider\'s shape', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  const limits = [{ requests: 100, window: '1m', algorithm: 'sliding_window' }, { tokens: 10_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }];
  const remaining = async (): Promise<[number, number]> => {
    // A probe of max_tokens 1 whose prompt is known; returns what it saw before its own reservation.
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: chat({ max_tokens: 1 }) });
    assert.equal(res.statusCode, 200, res.body);
    const prompt = countOpenAIChat({ messages: [{ role: 'user', content: 'hello' }] }, exactCounter('o200k_base'));
    return [Number(res.headers['x-ratelimit-remaining-requests']) + 1, Number(res.headers['x-ratelimit-remaining-tokens']) + prompt + 1];
  };
  before(async () => {
    sim = await startSimulator({ port: 0, quota: { rpm: 1_000, tpm: 1_000 } });
    const raw = gatewayConfig(sim.url, limits).config;
    const closedPort = await freePort();
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [{ id: 'acme', keys: [KEY], limits }],
        models: [
          ...raw.models.map((m) => ({ name: m.name, encoding: m.encoding, estimator: m.estimator, deployments: [...m.deployments] })),
          { name: 'gpt-down', encoding: 'o200k_base', deployments: ['down'] },
        ],
        deployments: [
          { name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-fault'] },
          { name: 'sim-anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-fault'] },
          { name: 'down', provider: 'openai', base_url: `http://127.0.0.1:${closedPort}`, api_key_env: 'SIM_KEY' },
        ],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
    app = buildGateway({ config, clock: new ManualClock(), logger: false });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('a provider 5xx is relayed and its tokens refunded', async () => {
    const [requestsBefore, tokensBefore] = await remaining();
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...auth, 'x-sim-fault': 'error' }, payload: chat({ max_tokens: 100 }) });
    assert.equal(res.statusCode, 500);
    assert.equal((res.json() as { error: { type: string } }).error.type, 'server_error');
    assert.equal(res.headers['x-ratelimit-limit-tokens'], '10000');
    const [requestsAfter, tokensAfter] = await remaining();
    assert.equal(requestsAfter, requestsBefore - 2, 'the failed request and the first probe count as requests');
    assert.equal(tokensAfter, tokensBefore - (await probeCost()), 'only the first probe was charged');
  });

  test('an unreachable deployment answers 502 upstream_unavailable and refunds', async () => {
    const [, tokensBefore] = await remaining();
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: chat({ model: 'gpt-down', max_tokens: 100 }) });
    assert.equal(res.statusCode, 502);
    assert.equal(res.headers['x-quotaring-error'], 'upstream_unavailable');
    assert.equal((res.json() as { error: { code: string } }).error.code, 'upstream_unavailable');
    const [, tokensAfter] = await remaining();
    assert.equal(tokensAfter, tokensBefore - (await probeCost()));
  });

  test('a provider 429 is relayed as sent, with the tenant\'s rate-limit headers, and refunded', async () => {
    const [, tokensBefore] = await remaining();
    // The simulator's 1,000 tokens/min quota cannot take 2,000 tokens: its 429 comes back as sent.
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: chat({ max_tokens: 2_000 }) });
    assert.equal(res.statusCode, 429);
    assert.equal(res.headers['x-quotaring-error'], undefined, 'not our limit');
    assert.equal((res.json() as { error: { type: string } }).error.type, 'tokens');
    assert.equal(res.headers['x-ratelimit-limit-tokens'], '10000', 'the tenant\'s limits, not the provider organisation\'s');
    const [, tokensAfter] = await remaining();
    assert.equal(tokensAfter, tokensBefore - (await probeCost()));
  });

  test('an Anthropic 529 overloaded is relayed in Anthropic\'s shape', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...auth, 'x-sim-fault': 'error' },
      payload: { model: 'claude-test', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(res.statusCode, 529);
    assert.deepEqual((res.json() as { type: string; error: { type: string } }).error.type, 'overloaded_error');
  });

  /** Tokens a probe is charged once settled: its prompt plus its one output token. */
  async function probeCost(): Promise<number> {
    return countOpenAIChat({ messages: [{ role: 'user', content: 'hello' }] }, exactCounter('o200k_base')) + 1;
  }
});
