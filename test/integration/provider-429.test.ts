/**
 * Provider 429s through the gateway (in-process, real clock) against a scripted upstream (a real
 * node:http server that answers from a queue): a 429 with a wait is retried after that wait while
 * the request's waits fit in `max_retry_wait`, and otherwise relayed with the provider's wait as
 * retry-after; a 429 of type `insufficient_quota` is relayed at once with `x-should-retry: false`
 * and drains nothing; the tenant is charged only what a successful attempt used.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';

const KEY = 'key-acme-00000';
const TIGHT_KEY = 'key-tight-0000';
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const chat = { model: 'gpt-4o-mini', max_tokens: 100, messages: [{ role: 'user', content: 'hello' }] };

interface Scripted {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body: unknown;
}

const ok: Scripted = {
  status: 200,
  body: { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 8, completion_tokens: 2, total_tokens: 10 } },
};
const rateLimited = (headers: Record<string, string>): Scripted => ({
  status: 429,
  headers,
  body: { error: { message: 'Rate limit reached for requests', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
});
const billing: Scripted = {
  status: 429,
  headers: { 'retry-after': '1' },
  body: { error: { message: 'You exceeded your current quota, please check your plan and billing details.', type: 'insufficient_quota', param: null, code: 'insufficient_quota' } },
};

describe('provider 429: retried within max_retry_wait, else relayed with its wait', () => {
  let upstream: Server;
  let queue: Scripted[] = [];
  let seen: { at: number; headers: IncomingHttpHeaders }[] = [];
  let app: FastifyInstance;

  before(async () => {
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push({ at: Date.now(), headers: req.headers });
        const next = queue.shift() ?? ok;
        res.writeHead(next.status, { 'content-type': 'application/json', ...next.headers });
        res.end(JSON.stringify(next.body));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [
          { id: 'acme', keys: [KEY], limits: [{ tokens: 10_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }] },
          { id: 'tight', keys: [TIGHT_KEY], limits: [{ requests: 2, window: '1m', algorithm: 'sliding_window' }] },
        ],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['retrying'] },
          { name: 'gpt-relay', encoding: 'o200k_base', estimator: 'exact', deployments: ['relaying'] },
        ],
        deployments: [
          { name: 'retrying', provider: 'openai', base_url: url, api_key_env: 'UP_KEY', max_retry_wait: '2s', quota: { rpm: 600 } },
          { name: 'relaying', provider: 'openai', base_url: url, api_key_env: 'UP_KEY', max_retry_wait: 0 },
        ],
      },
      'test.yaml',
      { UP_KEY: 'up-key' },
    );
    app = buildGateway({ config, logger: false });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await new Promise((resolve) => upstream.close(resolve));
  });
  beforeEach(() => {
    queue = [];
    seen = [];
  });

  const send = (model = 'gpt-4o-mini') => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: { ...chat, model } });

  test('a 429 whose reset header names a 300 ms wait is retried after it; the client sees one 200, charged once', async () => {
    queue = [rateLimited({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '300ms' })];
    const res = await send();
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(seen.length, 2, 'the first attempt and one retry');
    assert.ok((seen[1]?.at ?? 0) - (seen[0]?.at ?? 0) >= 300, `retried after ${(seen[1]?.at ?? 0) - (seen[0]?.at ?? 0)} ms`);
    // Charged the reported usage (10) once: reserved 108 (prompt 8 + 100), settled on 10.
    const probe = await send();
    assert.equal(probe.statusCode, 200);
    assert.equal(Number(probe.headers['x-ratelimit-remaining-tokens']), 10_000 - 10 - 108);
  });

  test('waits adding up beyond max_retry_wait (2 s): retried once (1.5 s), then the second 429 (1.5 s more) is relayed with its wait', async () => {
    queue = [rateLimited({ 'retry-after-ms': '1500' }), rateLimited({ 'retry-after-ms': '1500' })];
    const res = await send();
    assert.equal(res.statusCode, 429);
    assert.equal(seen.length, 2);
    assert.equal(res.headers['retry-after-ms'], '1500');
    assert.equal(res.headers['retry-after'], '2', 'added for clients that read only retry-after (whole seconds, rounded up)');
    assert.equal((res.json() as { error: { code: string } }).error.code, 'rate_limit_exceeded');
    assert.equal(res.headers['x-quotaring-error'], undefined, 'the provider\'s 429, not ours');
  });

  test('max_retry_wait 0: x-ratelimit-reset-tokens 1.574s is relayed at once as retry-after 2, retry-after-ms 1574; the tokens are refunded', async () => {
    const before = Number((await send('gpt-relay')).headers['x-ratelimit-remaining-tokens']);
    seen = [];
    queue = [rateLimited({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '1.574s' })];
    const res = await send('gpt-relay');
    assert.equal(res.statusCode, 429);
    assert.equal(seen.length, 1, 'not retried');
    assert.equal(res.headers['retry-after'], '2');
    assert.equal(res.headers['retry-after-ms'], '1574');
    const probe = await send('gpt-relay');
    // Since `before`: the first probe settled on 10 (108 reserved given back, 10 used), the second
    // reserved 108; the 429 was charged nothing.
    assert.equal(Number(probe.headers['x-ratelimit-remaining-tokens']), before - 10);
  });

  test('the provider asks 1.574 s but the tenant\'s own limit asks longer: the client is told the later (the tenant\'s)', async () => {
    const tight = { authorization: `Bearer ${TIGHT_KEY}`, 'content-type': 'application/json' };
    const first = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: tight, payload: { ...chat, model: 'gpt-relay' } });
    assert.equal(first.statusCode, 200);
    seen = [];
    queue = [rateLimited({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '1.574s' })];
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: tight, payload: { ...chat, model: 'gpt-relay' } });
    assert.equal(res.statusCode, 429);
    assert.equal(seen.length, 1);
    // Its 2 requests a minute are spent (the relayed one counts as a request): the next fits when the first leaves the window.
    const ms = Number(res.headers['retry-after-ms']);
    assert.ok(ms > 58_000 && ms <= 60_000, `retry-after-ms ${ms}`);
    assert.equal(res.headers['retry-after'], String(Math.ceil(ms / 1_000)));
  });

  test('insufficient_quota: relayed at once with x-should-retry false, no retry, no cooldown of the deployment quota; the tokens are refunded', async () => {
    const before = Number((await send()).headers['x-ratelimit-remaining-tokens']);
    seen = [];
    queue = [billing];
    const res = await send();
    assert.equal(res.statusCode, 429);
    assert.equal(seen.length, 1);
    assert.equal(res.headers['x-should-retry'], 'false');
    assert.equal((res.json() as { error: { type: string } }).error.type, 'insufficient_quota');
    // No cooldown: the deployment's quota (rpm 600 × 0.9) still admits the next request at once.
    const next = await send();
    assert.equal(next.statusCode, 200);
    assert.equal(seen.length, 2);
    // Since `before`: the first probe settled on 10 (108 reserved given back, 10 used), the next
    // reserved 108; the relayed 429 was charged nothing.
    assert.equal(Number(next.headers['x-ratelimit-remaining-tokens']), before - 10);
  });

  test('a rate-limit 429 relayed by a quota deployment drains it: the next request is refused by the gateway without reaching the provider', async () => {
    queue = [rateLimited({ 'retry-after-ms': '60000' })];
    const res = await send();
    assert.equal(res.statusCode, 429);
    assert.equal(seen.length, 1, 'a 60 s wait is beyond max_retry_wait: relayed');
    const next = await send();
    assert.equal(next.statusCode, 429);
    assert.equal(next.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.equal(seen.length, 1, 'the drained quota refused it locally');
  });
});
