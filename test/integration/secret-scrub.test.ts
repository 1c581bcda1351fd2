/**
 * No secret leaves (issue 14, finding 8): an upstream that echoes the credentials it received (the
 * simulator's `echo-key` faults: the `authorization` / `x-api-key` header in its error body and in
 * `x-sim-echo-*` headers) must not put the provider key into the tenant's reply, nor into a log
 * line. Through a real gateway (listening on 127.0.0.1) and a real simulator, for the OpenAI and
 * Anthropic routes, JSON and streams, 401/429/500 and mid-stream error events, and both translated
 * paths (a model whose first deployment is down fails over to the other wire format).
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { freePort } from '../helpers/processes.ts';

/** Tenant key. */
const TENANT_KEY = 'qr-tenant-scrub-0001';
/** Provider keys: shaped like nothing in particular, so only their literal values give them away. */
const OPENAI_KEY = 'provkey0penai7f3a9c21';
const ANTHROPIC_KEY = 'provkeyanthr0pic5e8d1b';
const SECRETS = [OPENAI_KEY, ANTHROPIC_KEY, TENANT_KEY];

interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
}

describe('echoed provider keys never reach the tenant or the logs', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url: string;
  let logText = '';

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const closed = `http://127.0.0.1:${await freePort()}`; // nothing listens: connection refused, fail over
    const fault = { forward_headers: ['x-sim-fault', 'x-sim-output-tokens'] };
    const config = buildConfig(
      {
        server: { log_level: 'info' },
        tenants: [{ id: 'acme', keys: [TENANT_KEY], limits: [{ requests: 1000, window: '1m' }] }],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim-openai'] },
          { name: 'claude-test', encoding: 'none', deployments: ['sim-anthropic'] },
          // First deployment unreachable: the request fails over to the other wire format (translated).
          { name: 'gpt-via-claude', encoding: 'o200k_base', deployments: ['openai-closed', 'sim-anthropic'] },
          { name: 'claude-via-gpt', encoding: 'none', deployments: ['anthropic-closed', 'sim-openai'] },
        ],
        deployments: [
          { name: 'sim-openai', provider: 'openai', base_url: sim.url, api_key_env: 'OPENAI_KEY', upstream_model: 'gpt-4o-mini', ...fault },
          { name: 'sim-anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'ANTHROPIC_KEY', upstream_model: 'claude-3-5-haiku-latest', ...fault },
          { name: 'openai-closed', provider: 'openai', base_url: closed, api_key_env: 'OPENAI_KEY' },
          { name: 'anthropic-closed', provider: 'anthropic', base_url: closed, api_key_env: 'ANTHROPIC_KEY' },
        ],
      },
      'scrub.yaml',
      { OPENAI_KEY, ANTHROPIC_KEY },
    );
    const logs = new PassThrough();
    logs.on('data', (chunk: Buffer) => {
      logText += chunk.toString();
    });
    app = buildGateway({ config, logStream: logs });
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  const send = async (route: 'openai' | 'anthropic', model: string, fault: string, stream: boolean): Promise<Reply> => {
    const openai = route === 'openai';
    const res = await request(`${url}${openai ? '/v1/chat/completions' : '/v1/messages'}`, {
      method: 'POST',
      headers: { ...(openai ? { authorization: `Bearer ${TENANT_KEY}` } : { 'x-api-key': TENANT_KEY }), 'content-type': 'application/json', 'x-sim-fault': fault, 'x-sim-output-tokens': '3' },
      body: JSON.stringify({ model, max_tokens: 8, stream, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
  };

  /** Asserts no secret in the reply's body or headers. */
  const assertClean = (reply: Reply): void => {
    const everything = `${reply.text}\n${JSON.stringify(reply.headers)}`;
    for (const secret of SECRETS) assert.ok(!everything.includes(secret), `a secret leaked:\n${everything}`);
  };

  /** A JSON error reply: valid JSON, the key redacted where the upstream echoed it. */
  const jsonError = (reply: Reply, status: number): { error: { message: string } } => {
    assert.equal(reply.status, status, reply.text);
    assertClean(reply);
    const body = JSON.parse(reply.text) as { error: { message: string } };
    assert.match(body.error.message, /\[redacted\]/);
    return body;
  };

  for (const route of ['openai', 'anthropic'] as const) {
    const model = route === 'openai' ? 'gpt-4o-mini' : 'claude-test';
    for (const [fault, status] of [['echo-key', 401], ['echo-key-429', 429], ['echo-key-500', 500]] as const) {
      test(`${route} route, JSON, ${fault}: ${status} relayed without the key (body and x-sim-echo-* headers)`, async () => {
        const reply = await send(route, model, fault, false);
        const body = jsonError(reply, status) as { error: { message: string }; received?: Record<string, string> };
        // The relayed body is the provider's, its credential fields redacted.
        // (The gateway sends the OpenAI key as Authorization: Bearer, the Anthropic key as x-api-key.)
        assert.deepEqual(body.received, route === 'openai' ? { authorization: '[redacted]', 'x-api-key': '' } : { authorization: '', 'x-api-key': '[redacted]' });
        assert.equal(reply.headers[route === 'openai' ? 'x-sim-echo-authorization' : 'x-sim-echo-x-api-key'], route === 'openai' ? 'Bearer [redacted]' : '[redacted]');
      });
    }
    test(`${route} route, stream request, echo-key: 401 JSON without the key`, async () => {
      jsonError(await send(route, model, 'echo-key', true), 401);
    });
    test(`${route} route, stream, a mid-stream error event echoing the key: relayed, redacted`, async () => {
      const reply = await send(route, model, 'echo-key-stream', true);
      assert.equal(reply.status, 200);
      assertClean(reply);
      const errorData = route === 'openai' ? /^data: (\{"error".*)$/m.exec(reply.text) : /^event: error\ndata: (.*)$/m.exec(reply.text);
      assert.ok(errorData !== null, reply.text);
      const event = JSON.parse(errorData[1] as string) as { error: { message: string } };
      assert.match(event.error.message, route === 'openai' ? /Received authorization: "Bearer \[redacted\]"/ : /x-api-key: "\[redacted\]"/);
    });
  }

  for (const [route, model] of [['openai', 'gpt-via-claude'], ['anthropic', 'claude-via-gpt']] as const) {
    test(`${route} route translated from the other format, JSON echo-key: 401 in the client's shape without the key`, async () => {
      const reply = await send(route, model, 'echo-key', false);
      jsonError(reply, 401);
      if (route === 'anthropic') assert.equal((JSON.parse(reply.text) as { type: string }).type, 'error');
    });
    test(`${route} route translated from the other format, stream error event: redacted`, async () => {
      const reply = await send(route, model, 'echo-key-stream', true);
      assert.equal(reply.status, 200);
      assertClean(reply);
      assert.match(reply.text, /\[redacted\]/);
    });
  }

  test('no log line carries a provider key or a tenant key', () => {
    assert.ok(logText.length > 0);
    for (const secret of SECRETS) assert.ok(!logText.includes(secret), `a secret in the logs:\n${logText}`);
  });
});
