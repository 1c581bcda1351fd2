/**
 * Failover between deployments through a real gateway (in-process, listening on 127.0.0.1) with the
 * official SDKs as clients: the model's first deployment is an OpenAI-format server that answers
 * 503 (a real node:http server), the second the bundled simulator's Anthropic Messages API.
 *
 * - A streaming chat completion (openai SDK, `stream_options.include_usage`) completes on the
 *   Anthropic deployment: the SDK parses every chunk, the text is the simulator's, the last chunk
 *   carries the usage Anthropic reported (prompt = Anthropic's input_tokens, completion = 7), the
 *   raw stream ends with `data: [DONE]`; the tenant is charged exactly that usage (its token
 *   bucket shows limit − usage once settled), and the reply names the deployment that served.
 * - The deployment that failed is not started on for 5 s: the next JSON request starts on the
 *   Anthropic deployment (translated) and is a valid `chat.completion`.
 * - An Anthropic client (`@anthropic-ai/sdk`) on a model whose first deployment is Anthropic (the
 *   503 server) and second the simulator's OpenAI API gets a valid Messages reply.
 * - Of two deployments with quotas (10 and 100 rpm), the one with the most headroom serves; with
 *   weights 3 and 1, requests are spread a, a, b, a (smooth weighted round-robin).
 * - A deployment whose replies start later than its soft_ttft (100 ms; the simulator's slow fault
 *   adds 300 ms) gets every other request moved away (soft_share 0.5) until fast replies bring its
 *   average back under the threshold.
 * - With no deployment left the client gets the 503 in its own format, and nothing is charged.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';
import { TEST_SECRET, signedRequest } from '../helpers/cluster-secret.ts';

const KEY = 'key-failover-01';
const LIMIT = 100_000;

describe('failover to the next deployment, across wire formats', () => {
  let down: Server;
  let downHits = 0;
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url: string;

  before(async () => {
    down = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        downHits++;
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'The server is overloaded.', type: 'server_error', param: null, code: null } }));
      });
    });
    await new Promise<void>((resolve) => down.listen(0, '127.0.0.1', resolve));
    const downUrl = `http://127.0.0.1:${(down.address() as AddressInfo).port}`;
    sim = await startSimulator({ port: 0, faults: { slowMs: 300 } });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [{ id: 'acme', keys: [KEY], limits: [{ tokens: LIMIT, window: '1m' }] }],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-down', 'claude-sim'] },
          { name: 'gpt-only', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-down'] },
          { name: 'claude-haiku', encoding: 'cl100k_base', deployments: ['anthropic-down', 'openai-sim'] },
          { name: 'gpt-pair', encoding: 'o200k_base', deployments: ['pair-small', 'pair-large'] },
          { name: 'gpt-soft', encoding: 'o200k_base', deployments: ['soft-slow', 'soft-fast'] },
          { name: 'gpt-weighted', encoding: 'o200k_base', deployments: ['soft-fast', 'openai-sim'], weights: [3, 1] },
        ],
        deployments: [
          { name: 'openai-down', provider: 'openai', base_url: downUrl, api_key_env: 'K' },
          { name: 'anthropic-down', provider: 'anthropic', base_url: downUrl, api_key_env: 'K' },
          { name: 'claude-sim', provider: 'anthropic', base_url: sim.url, api_key_env: 'K', upstream_model: 'claude-3-5-haiku-latest', forward_headers: ['x-sim-output-tokens'] },
          { name: 'openai-sim', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', forward_headers: ['x-sim-output-tokens'] },
          // Quota headroom decides between these two: 10 and 100 requests a minute (× 0.9 headroom).
          { name: 'pair-small', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', quota: { rpm: 10 } },
          { name: 'pair-large', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', quota: { rpm: 100 } },
          // Slow while the client asks the simulator for its slow fault (300 ms before the reply), which only this one forwards.
          { name: 'soft-slow', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', soft_ttft: '100ms', soft_share: 0.5, forward_headers: ['x-sim-fault'] },
          { name: 'soft-fast', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini' },
        ],
      },
      'test.yaml',
      { K: 'provider-key-0' },
    );
    app = buildGateway({ config, clusterSecret: TEST_SECRET, logger: false });
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await app.close();
    await sim.close();
    await new Promise<void>((resolve) => down.close(() => resolve()));
  });

  /** Sends a small chat request for `model` and returns the deployment that served it (`first`: the model's first, which the gateway does not name). */
  const servedBy = async (model: string, first: string, headers: Record<string, string> = {}): Promise<string> => {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model, max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    assert.equal(res.statusCode, 200);
    await res.body.dump();
    return String(res.headers['x-quotaring-deployment'] ?? first);
  };

  const remainingTokens = async (): Promise<number> => {
    const res = await signedRequest(`${url}/_quotaring/v1/tenants/acme`);
    return ((await res.body.json()) as { limits: { remaining: number }[] }).limits[0]?.remaining ?? -1;
  };

  test('an OpenAI stream completes on the Anthropic deployment: valid chunks, usage last, [DONE], charged what Anthropic reported', async () => {
    const before = await remainingTokens();
    const hits = downHits;
    const simBefore = await simStats(sim.url);
    // The raw stream, to see the exact ending.
    const raw = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sim-output-tokens': '7' },
      body: JSON.stringify({ model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, max_tokens: 50, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello' }] }),
    });
    assert.equal(raw.statusCode, 200);
    assert.equal(raw.headers['x-quotaring-deployment'], 'claude-sim');
    assert.match(String(raw.headers['content-type']), /^text\/event-stream/);
    const text = await raw.body.text();
    assert.ok(text.endsWith('data: [DONE]\n\n'), `stream ends with [DONE]: ${JSON.stringify(text.slice(-80))}`);
    const chunks = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as { object: string; choices: { delta: { content?: string }; finish_reason: string | null }[]; usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null });
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    const last = chunks.at(-1);
    assert.deepEqual(last?.choices, []);
    const usage = last?.usage;
    assert.ok(usage !== undefined && usage !== null);
    assert.equal(usage.completion_tokens, 7);
    assert.equal(usage.total_tokens, usage.prompt_tokens + 7);
    assert.equal(downHits - hits, 1, 'the OpenAI deployment was tried once');
    const simAfter = await simStats(sim.url);
    assert.equal(simAfter.requests - simBefore.requests, 1);
    assert.equal(simAfter.promptTokens - simBefore.promptTokens, usage.prompt_tokens, 'prompt tokens are what Anthropic counted');
    // Charged exactly Anthropic's usage: the bucket refilled meanwhile by at most a few tokens (100,000 per minute).
    const after = await remainingTokens();
    assert.ok(before - after <= usage.total_tokens && before - after >= usage.total_tokens - 30, `charged ${before - after}, usage ${usage.total_tokens}`);

    // The official SDK parses the same stream.
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
    const stream = await openai.chat.completions.create(
      { model: 'gpt-4o-mini', stream: true, stream_options: { include_usage: true }, max_tokens: 50, messages: [{ role: 'user', content: 'Say hello' }] },
      { headers: { 'x-sim-output-tokens': '5' } },
    );
    let content = '';
    let sdkUsage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) sdkUsage = chunk.usage;
    }
    assert.ok(content.length > 0);
    assert.equal(finish, 'stop');
    assert.equal(sdkUsage?.completion_tokens, 5);
  });

  test('within 5 s of its failure the down deployment is not started on: a JSON request starts on the Anthropic one, translated', async () => {
    const hits = downHits;
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
    const { data: res, response } = await openai.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '4' } }).withResponse();
    assert.equal(downHits, hits, 'openai-down was not tried');
    assert.equal(response.headers.get('x-quotaring-deployment'), 'claude-sim');
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.choices[0]?.message.role, 'assistant');
    assert.equal(res.choices[0]?.finish_reason, 'stop');
    assert.equal(res.usage?.completion_tokens, 4);
    assert.equal(res.model, 'gpt-4o-mini');
  });

  test('an Anthropic client fails over to an OpenAI-format deployment and gets a Messages reply', async () => {
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: url, maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: 'claude-haiku', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '3' } });
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.equal(msg.stop_reason, 'end_turn');
    assert.equal(msg.usage.output_tokens, 3);
    const stream = anthropic.messages.stream({ model: 'claude-haiku', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '6' } });
    const final = await stream.finalMessage();
    assert.equal(final.usage.output_tokens, 6);
    assert.ok(final.content.length > 0);
  });

  test('the deployment with the most quota headroom serves: after one request the small quota has less left than the large one', async () => {
    const served: string[] = [];
    for (let i = 0; i < 6; i++) served.push(await servedBy('gpt-pair', 'pair-small'));
    // Both full at first: the first in config order. Then pair-small has 8/9 left, pair-large 89/90 and more.
    assert.deepEqual(served, ['pair-small', 'pair-large', 'pair-large', 'pair-large', 'pair-large', 'pair-large']);
  });

  test('a soft failure: replies later than soft_ttft move every other request (soft_share 0.5) away until the deployment recovers', async () => {
    const send = (slow: boolean): Promise<string> => servedBy('gpt-soft', 'soft-slow', slow ? { 'x-sim-fault': 'slow' } : {});
    const slowPhase: string[] = [];
    for (let i = 0; i < 7; i++) slowPhase.push(await send(true));
    // The first reply (300 ms) makes soft-slow slow; then every second request that would start there moves.
    assert.deepEqual(slowPhase, ['soft-slow', 'soft-slow', 'soft-fast', 'soft-slow', 'soft-fast', 'soft-slow', 'soft-fast']);
    const recovery: string[] = [];
    for (let i = 0; i < 12; i++) recovery.push(await send(false));
    // Fast replies bring its average (weight 0.3 per reply) under 100 ms after 4 of them; from then on it serves every request.
    assert.deepEqual(recovery.slice(-4), ['soft-slow', 'soft-slow', 'soft-slow', 'soft-slow']);
    assert.ok(recovery.slice(0, 8).includes('soft-fast'), `still moving while slow: ${recovery.join(',')}`);
  });

  test('weights 3 and 1 spread requests by smooth weighted round-robin: a, a, b, a', async () => {
    const served: string[] = [];
    for (let i = 0; i < 8; i++) served.push(await servedBy('gpt-weighted', 'soft-fast'));
    assert.deepEqual(served, ['soft-fast', 'soft-fast', 'openai-sim', 'soft-fast', 'soft-fast', 'soft-fast', 'openai-sim', 'soft-fast']);
  });

  test('no deployment left: the 503 in the client\'s format, nothing charged', async () => {
    const before = await remainingTokens();
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-only', max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    assert.equal(res.statusCode, 503);
    const body = (await res.body.json()) as { error: { message: string; type: string } };
    assert.equal(body.error.message, 'The server is overloaded.');
    const after = await remainingTokens();
    assert.ok(after >= before, `refunded: ${before} → ${after}`);
  });
});
