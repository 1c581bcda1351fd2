/**
 * The IETF RateLimit header fields (`server.ratelimit_headers: [ietf]`) on every limited reply of
 * an in-process gateway (fake clock) in front of a real simulator: JSON replies, streams, the
 * tenant's 429s, a deployment quota's 429 and Anthropic's route carry `RateLimit-Policy` and
 * `RateLimit` with exactly the values of the OpenAI-dialect `x-ratelimit-*` headers of the same
 * reply; with the option off no RateLimit field is sent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';

const KEY = 'key-acme-00000';
const QUOTA_KEY = 'key-quota-0000';

function config(simUrl: string, ratelimitHeaders: string[]) {
  return buildConfig(
    {
      server: { log_level: 'silent', ratelimit_headers: ratelimitHeaders },
      tenants: [
        { id: 'acme', keys: [KEY], limits: [{ requests: 3, window: '1m' }, { requests: 100, window: '1d' }, { tokens: 20_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 4 }] },
        { id: 'quota', keys: [QUOTA_KEY], limits: [] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] },
        { name: 'quota-model', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim-quota'] },
        { name: 'claude-test', encoding: 'none', deployments: ['sim-anthropic'] },
      ],
      deployments: [
        { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY' },
        { name: 'sim-quota', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', quota: { rpm: 1, tpm: 1_000_000 }, headroom: 1 },
        { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'SIM_KEY' },
      ],
    },
    'test.yaml',
    { SIM_KEY: 'sim-key' },
  );
}

const headers = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const chat = (model: string, extra: Record<string, unknown> = {}) => ({ model, max_tokens: 5, messages: [{ role: 'user', content: 'hello' }], ...extra });

/** Ms of a Go duration as `x-ratelimit-reset-*` prints it (`0s`, `177ms`, `12.001s`, `1m0s`, `1h0m0s`). */
function goDurationMs(s: string): number {
  const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$/.exec(s);
  assert.ok(m !== null && s !== '', `a Go duration: ${s}`);
  return Number(m[1] ?? 0) * 3_600_000 + Number(m[2] ?? 0) * 60_000 + Math.round(Number(m[3] ?? 0) * 1000) + Number(m[4] ?? 0);
}

/** The RateLimit fields a `x-ratelimit-*` set implies, as exact strings (requests and tokens items). */
function expectedFromOpenAI(h: Record<string, unknown>): { policy: string[]; current: string[] } {
  const policy: string[] = [];
  const current: string[] = [];
  for (const kind of ['requests', 'tokens'] as const) {
    const limit = h[`x-ratelimit-limit-${kind}`];
    if (limit === undefined) continue;
    const t = Math.ceil(goDurationMs(String(h[`x-ratelimit-reset-${kind}`])) / 1000);
    policy.push(kind === 'tokens' ? `"tokens";q=${String(limit)};qu="tokens"` : `"requests";q=${String(limit)}`);
    current.push(`"${kind}";r=${String(h[`x-ratelimit-remaining-${kind}`])};t=${t}`);
  }
  return { policy, current };
}

/** Asserts the reply's RateLimit fields carry exactly its `x-ratelimit-*` values (plus concurrency where the tenant has it). */
function assertSameValues(h: Record<string, unknown>, concurrency?: string): void {
  const want = expectedFromOpenAI(h);
  assert.ok(want.policy.length > 0, 'the reply has x-ratelimit-* headers');
  const policy = String(h['ratelimit-policy']).split(', ');
  const current = String(h['ratelimit']).split(', ');
  assert.deepEqual(policy.slice(0, want.policy.length), want.policy);
  assert.deepEqual(current.slice(0, want.current.length), want.current);
  if (concurrency === undefined) {
    assert.equal(policy.length, want.policy.length);
  } else {
    assert.equal(policy[want.policy.length], '"concurrency";q=4;qu="concurrent-requests"');
    assert.equal(current[want.current.length], concurrency);
  }
}

describe('IETF RateLimit header fields, server.ratelimit_headers: [ietf]', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  const clock = new ManualClock();
  before(async () => {
    sim = await startSimulator({ port: 0 });
    app = buildGateway({ config: config(sim.url, ['ietf']), clock, logger: false });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('a JSON reply: the binding requests limit (1m, least remaining), tokens, and a free concurrency slot', async () => {
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini') });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers['x-ratelimit-limit-requests'], '3');
    assert.equal(res.headers['x-ratelimit-remaining-requests'], '2');
    assertSameValues(res.headers, '"concurrency";r=3');
    assert.match(String(res.headers['ratelimit']), /^"requests";r=2;t=\d+, "tokens";r=\d+;t=\d+, "concurrency";r=3$/);
  });

  test('a stream: the headers sent before the first event', async () => {
    clock.advance(100);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini', { stream: true, stream_options: { include_usage: true } }) });
    assert.equal(res.statusCode, 200, res.body);
    assert.match(String(res.headers['content-type']), /text\/event-stream/);
    assert.match(res.body, /data: \[DONE\]/);
    assert.equal(res.headers['x-ratelimit-remaining-requests'], '1');
    assertSameValues(res.headers, '"concurrency";r=3');
  });

  test("Anthropic's route: the IETF fields beside both dialects", async () => {
    clock.advance(100);
    const res = await app.inject({ method: 'POST', url: '/v1/messages', headers: headers(KEY), payload: chat('claude-test') });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers['anthropic-ratelimit-requests-remaining'], '0');
    assertSameValues(res.headers, '"concurrency";r=3');
  });

  test("the tenant's 429: r=0 for requests, and retry-after", async () => {
    clock.advance(100);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini') });
    assert.equal(res.statusCode, 429, res.body);
    assert.equal(res.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.equal(res.headers['x-ratelimit-remaining-requests'], '0');
    assert.ok(res.headers['retry-after'] !== undefined);
    assertSameValues(res.headers, '"concurrency";r=4');
    assert.match(String(res.headers['ratelimit']), /^"requests";r=0;t=60, /);
  });

  test("a 429 request_too_large of the tokens limit", async () => {
    clock.advance(61_000);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini', { max_tokens: 50_000 }) });
    assert.equal(res.statusCode, 429, res.body);
    assert.equal(res.headers['x-quotaring-error'], 'request_too_large');
    assertSameValues(res.headers, '"concurrency";r=4');
  });

  test("a deployment quota's 429: the quota's state for the kinds the tenant has no limit of", async () => {
    assert.equal((await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(QUOTA_KEY), payload: chat('quota-model') })).statusCode, 200);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(QUOTA_KEY), payload: chat('quota-model') });
    assert.equal(res.statusCode, 429, res.body);
    assert.equal(res.headers['x-ratelimit-limit-requests'], '1');
    assert.equal(res.headers['x-ratelimit-remaining-requests'], '0');
    assertSameValues(res.headers);
    assert.match(String(res.headers['ratelimit-policy']), /^"requests";q=1, "tokens";q=1000000;qu="tokens"$/);
  });

  test('a tenant without limits gets no RateLimit field on a JSON reply; a 401 carries none', async () => {
    const free = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(QUOTA_KEY), payload: chat('gpt-4o-mini') });
    assert.equal(free.statusCode, 200, free.body);
    assert.equal(free.headers['x-ratelimit-limit-requests'], undefined);
    assert.equal(free.headers['ratelimit'], undefined);
    assert.equal(free.headers['ratelimit-policy'], undefined);
    const denied = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers('nope-nope-nope'), payload: chat('gpt-4o-mini') });
    assert.equal(denied.statusCode, 401);
    assert.equal(denied.headers['ratelimit'], undefined);
  });
});

describe('IETF RateLimit header fields off (the default)', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  before(async () => {
    sim = await startSimulator({ port: 0 });
    app = buildGateway({ config: config(sim.url, []), clock: new ManualClock(), logger: false });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('JSON, stream and 429 replies carry x-ratelimit-* and no RateLimit field', async () => {
    const replies = [];
    replies.push(await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini') }));
    replies.push(await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini', { stream: true }) }));
    replies.push(await app.inject({ method: 'POST', url: '/v1/messages', headers: headers(KEY), payload: chat('claude-test') }));
    replies.push(await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: chat('gpt-4o-mini') }));
    assert.deepEqual(replies.map((r) => r.statusCode), [200, 200, 200, 429]);
    for (const r of replies) {
      assert.ok(r.headers['x-ratelimit-limit-requests'] !== undefined);
      assert.equal(r.headers['ratelimit'], undefined);
      assert.equal(r.headers['ratelimit-policy'], undefined);
    }
  });
});
