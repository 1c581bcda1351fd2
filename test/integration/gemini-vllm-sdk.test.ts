/**
 * Gemini's and vLLM's OpenAI-compatible servers with the official `openai` client, over real HTTP
 * on 127.0.0.1:
 * 1. the bundled simulator is driven directly (`baseURL` `…/v1beta/openai/` and `…/vllm/v1`) to show
 *    what differs from OpenAI: Gemini's array-wrapped errors and RetryInfo 429 (which the client
 *    cannot read: "status code (no body)"), its usage on the last content chunk without
 *    include_usage and thinking tokens only in `total_tokens`; vLLM's flat `"object":"error"` body
 *    and usage only with include_usage;
 * 2. then the same client calls a gateway node (in-process) whose deployments are `provider: gemini`
 *    and `provider: vllm` on that simulator: exact reservations and settlements (read back from the
 *    tenant's `x-ratelimit-remaining-tokens`), JSON and streaming, Gemini's 429 retried after its
 *    RetryInfo wait or relayed with `retry-after`/`retry-after-ms` in OpenAI's shape, vLLM's errors
 *    in OpenAI's shape, and an Anthropic client served by a Gemini deployment, translated.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import type { SimulatorStats } from '../../src/simulator/stats.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';

const GEMINI_KEY = 'gemini-upstream-key-123';
const FORWARD = ['x-sim-output-tokens', 'x-sim-reasoning-tokens', 'x-sim-fault'];
const HI = [{ role: 'user' as const, content: 'hi' }];
/** Prompt tokens of HI as the simulator counts them for a non-OpenAI model name (cl100k, message overhead included). */
const HI_TOKENS = countOpenAIChat({ messages: HI }, exactCounter('cl100k_base'));

type Sim = { url: string; close(): Promise<void> };

async function stats(sim: Sim): Promise<SimulatorStats> {
  return (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
}

describe('the simulator speaks Gemini\'s and vLLM\'s OpenAI compatibility to the openai client', () => {
  let sim: Sim;
  before(async () => {
    sim = await startSimulator({ quota: { rpm: 2 } });
  });
  after(async () => sim.close());

  test('Gemini: JSON usage without thinking in completion_tokens; a stream whose last content chunk carries the usage unasked; the 429 the client cannot read', async () => {
    const client = new OpenAI({ baseURL: `${sim.url}/v1beta/openai/`, apiKey: 'sim-gem-1', maxRetries: 0 });
    const { data, response } = await client.chat.completions.create({ model: 'gemini-2.0-flash', max_tokens: 10, messages: HI }, { headers: { 'x-sim-output-tokens': '3', 'x-sim-reasoning-tokens': '4' } }).withResponse();
    assert.equal(new URL(response.url).pathname, '/v1beta/openai/chat/completions');
    assert.deepEqual(data.usage, { completion_tokens: 3, prompt_tokens: HI_TOKENS, total_tokens: HI_TOKENS + 3 + 4 });
    assert.equal(response.headers.get('x-ratelimit-remaining-requests'), null, 'Gemini sends no rate-limit headers');
    const stream = await client.chat.completions.create({ model: 'gemini-2.0-flash', max_tokens: 2, messages: HI, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks.length, 3, 'two content chunks and the last one; no role chunk, no choices: [] chunk');
    assert.equal(chunks.at(-1)?.choices[0]?.finish_reason, 'length');
    assert.deepEqual(chunks.at(-1)?.usage, { completion_tokens: 2, prompt_tokens: HI_TOKENS, total_tokens: HI_TOKENS + 2 });
    const raw = await fetch(`${sim.url}/v1beta/openai/chat/completions`, { method: 'POST', headers: { authorization: 'Bearer sim-gem-1', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gemini-2.0-flash', messages: HI }) });
    assert.equal(raw.status, 429);
    assert.equal(raw.headers.get('retry-after'), null, 'the wait is only in the body');
    const body = (await raw.json()) as [{ error: { code: number; status: string; message: string; details: { '@type': string; retryDelay?: string }[] } }];
    assert.ok(Array.isArray(body), 'wrapped in an array');
    assert.equal(body[0].error.status, 'RESOURCE_EXHAUSTED');
    assert.match(body[0].error.details.find((d) => d['@type'].endsWith('RetryInfo'))?.retryDelay ?? '', /^\d+\.\d{3}s$/);
    assert.match(body[0].error.message, /Please retry in \d+\.\d{3}s\./);
    await assert.rejects(client.embeddings.create({ model: 'text-embedding-004', input: 'x' }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.error, undefined, 'the openai client finds no error object in an array');
      return true;
    });
  });

  test('vLLM: no key needed, usage only with include_usage, flat "object":"error" bodies', async () => {
    const client = new OpenAI({ baseURL: `${sim.url}/vllm/v1`, apiKey: 'EMPTY', maxRetries: 0 });
    const plain = await client.chat.completions.create({ model: 'meta-llama/Llama-3.1-8B-Instruct', max_tokens: 2, messages: HI, stream: true });
    let usageChunks = 0;
    for await (const chunk of plain) if (chunk.usage) usageChunks++;
    assert.equal(usageChunks, 0);
    const asked = await client.chat.completions.create({ model: 'meta-llama/Llama-3.1-8B-Instruct', max_tokens: 2, messages: HI, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of asked) chunks.push(chunk);
    assert.deepEqual(chunks.at(-1)?.choices, []);
    assert.equal(chunks.at(-1)?.usage?.completion_tokens, 2);
    const raw = await fetch(`${sim.url}/vllm/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: 'hi' }) });
    assert.equal(raw.status, 400);
    const body = (await raw.json()) as Record<string, unknown>;
    assert.equal(body.object, 'error');
    assert.equal(body.type, 'BadRequestError');
    assert.equal(body.code, 400);
    const byKey = (await stats(sim)).byKey;
    assert.equal(byKey['EMPTY']?.requests, 2, 'a key sent is a key counted');
    assert.equal(byKey['vllm-no-key']?.requests, 1, 'none is needed');
  });
});

describe('the openai client → quotaring → Gemini and vLLM deployments on the simulator', () => {
  let sim: Sim;
  let limited: Sim;
  let paced: Sim;
  let app: FastifyInstance;
  let url = '';
  const key = (id: string): string => `key-${id}-0000`;

  before(async () => {
    sim = await startSimulator({});
    limited = await startSimulator({ quota: { rpm: 1 } });
    // One request every 5 s once its burst of 12 is spent: a refused request waits under 5 s (RetryInfo), within max_retry_wait.
    paced = await startSimulator({ quota: { rpm: 12 } });
    const tokens = [{ tokens: 10_000, window: '1m', algorithm: 'sliding_window' }];
    app = buildGateway({
      config: buildConfig(
        {
          server: { log_level: 'silent' },
          tenants: ['json', 'stream', 'limited', 'retry', 'vllm', 'vllm-err', 'anthropic'].map((id) => ({ id, keys: [key(id)], limits: tokens })),
          models: [
            { name: 'gemini-flash', encoding: 'cl100k_base', estimator: 'exact', deployments: ['gemini'] },
            { name: 'gemini-limited', encoding: 'cl100k_base', estimator: 'exact', deployments: ['gemini-limited'] },
            { name: 'gemini-paced', encoding: 'cl100k_base', estimator: 'exact', deployments: ['gemini-paced'] },
            { name: 'llama', encoding: 'cl100k_base', estimator: 'exact', deployments: ['vllm'] },
            { name: 'claude-or-gemini', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic-down', 'gemini'] },
          ],
          deployments: [
            { name: 'gemini', provider: 'gemini', base_url: `${sim.url}/v1beta/openai`, api_key_env: 'GEMINI_API_KEY', upstream_model: 'gemini-2.0-flash', forward_headers: FORWARD },
            { name: 'gemini-limited', provider: 'gemini', base_url: `${limited.url}/v1beta/openai/`, api_key_env: 'GEMINI_API_KEY', max_retry_wait: 0 },
            { name: 'gemini-paced', provider: 'gemini', base_url: `${paced.url}/v1beta/openai`, api_key_env: 'GEMINI_API_KEY', max_retry_wait: '30s' },
            { name: 'anthropic-down', provider: 'anthropic', base_url: 'http://127.0.0.1:1', api_key_env: 'GEMINI_API_KEY' },
            { name: 'vllm', provider: 'vllm', base_url: `${sim.url}/vllm`, upstream_model: 'meta-llama/Llama-3.1-8B-Instruct', forward_headers: FORWARD },
          ],
        },
        'gemini.yaml',
        { GEMINI_API_KEY: GEMINI_KEY },
      ),
      logger: false,
    });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await app.close();
    await Promise.all([sim.close(), limited.close(), paced.close()]);
  });

  const client = (id: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: key(id), maxRetries: 0 });
  const remaining = (headers: Headers): number => Number(headers.get('x-ratelimit-remaining-tokens'));

  test('Gemini JSON: reserves prompt + max_tokens, settles on total_tokens (thinking included), the key sent as a bearer token', async () => {
    const c = client('json');
    const first = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 20, messages: HI }, { headers: { 'x-sim-output-tokens': '3', 'x-sim-reasoning-tokens': '5' } }).withResponse();
    assert.deepEqual(first.data.usage, { completion_tokens: 3, prompt_tokens: HI_TOKENS, total_tokens: HI_TOKENS + 8 }, 'Gemini\'s usage reaches the client as Gemini wrote it');
    assert.equal(remaining(first.response.headers), 10_000 - (HI_TOKENS + 20));
    assert.equal((await stats(sim)).byKey[GEMINI_KEY]?.requests, 1, 'the simulator took the Gemini key from Authorization: Bearer, on /v1beta/openai/chat/completions');
    const probe = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 8) - (HI_TOKENS + 1), 'settled on prompt + 3 visible + 5 thinking, not on prompt + completion_tokens');
  });

  test('Gemini stream without include_usage: the usage on the last content chunk passes as Gemini sent it; settled exactly', async () => {
    const c = client('stream');
    const stream = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 30, messages: HI, stream: true }, { headers: { 'x-sim-output-tokens': '6', 'x-sim-reasoning-tokens': '2' } });
    let text = '';
    const chunks = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(text, ' the'.repeat(6));
    assert.equal(chunks.at(-1)?.choices[0]?.finish_reason, 'stop', 'the last chunk (finish_reason and usage) is not hidden');
    const probe = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 8) - (HI_TOKENS + 1));
  });

  test('Gemini\'s 429 (rpm 1, max_retry_wait 0): a RateLimitError in OpenAI\'s shape, its RetryInfo as retry-after and retry-after-ms; refunded', async () => {
    const c = client('limited');
    await c.chat.completions.create({ model: 'gemini-limited', max_tokens: 2, messages: HI });
    await assert.rejects(c.chat.completions.create({ model: 'gemini-limited', max_tokens: 2, messages: HI }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.equal(err.type, 'requests');
      assert.match(err.message, /You exceeded your current quota.*Please retry in/s);
      assert.equal((err.error as { status: string }).status, 'RESOURCE_EXHAUSTED', 'Gemini\'s status name kept');
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 55_000 && ms <= 60_000, `retry-after-ms ${ms}: one request a minute`);
      assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1_000)));
      assert.equal(err.headers.get('x-quotaring-error'), null, 'the provider\'s 429, relayed');
      return true;
    });
    const probe = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 2) - (HI_TOKENS + 1), 'the refused request was refunded');
  });

  test('Gemini\'s 429 whose RetryInfo fits max_retry_wait is retried after it: the client sees a success', async () => {
    // Spend the deployment's burst directly, as another user of the same Gemini key would.
    const direct = { method: 'POST', headers: { authorization: `Bearer ${GEMINI_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gemini-paced', max_tokens: 1, messages: HI }) };
    for (let i = 0; i < 20 && (await fetch(`${paced.url}/v1beta/openai/chat/completions`, direct)).status !== 429; i++);
    const second = await client('retry').chat.completions.create({ model: 'gemini-paced', max_tokens: 2, messages: HI });
    assert.equal(second.usage?.completion_tokens, 2);
    const s = (await stats(paced)).byKey[GEMINI_KEY];
    assert.equal(s?.rateLimited, 2, 'the direct call that found the burst spent, then quotaring\'s first attempt');
    assert.equal(s?.requests, 12 + 1 + 2);
  });

  test('vLLM (no key): JSON and a stream with include_usage settle exactly; a stream without it hides the usage chunk quotaring asked for', async () => {
    const c = client('vllm');
    const json = await c.chat.completions.create({ model: 'llama', max_tokens: 9, messages: HI }, { headers: { 'x-sim-output-tokens': '4' } }).withResponse();
    assert.equal(json.data.usage?.completion_tokens, 4);
    assert.equal(remaining(json.response.headers), 10_000 - (HI_TOKENS + 9));
    const asked = await c.chat.completions.create({ model: 'llama', max_tokens: 9, messages: HI, stream: true, stream_options: { include_usage: true } }, { headers: { 'x-sim-output-tokens': '5' } });
    const chunks = [];
    for await (const chunk of asked) chunks.push(chunk);
    assert.deepEqual(chunks.at(-1)?.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 5, total_tokens: HI_TOKENS + 5 });
    const unasked = await c.chat.completions.create({ model: 'llama', max_tokens: 9, messages: HI, stream: true }, { headers: { 'x-sim-output-tokens': '2' } });
    let usageChunks = 0;
    for await (const chunk of unasked) if (chunk.usage) usageChunks++;
    assert.equal(usageChunks, 0);
    const probe = await c.chat.completions.create({ model: 'llama', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 4) - (HI_TOKENS + 5) - (HI_TOKENS + 2) - (HI_TOKENS + 1));
    assert.equal((await stats(sim)).byKey['vllm-no-key']?.completionTokens, 4 + 5 + 2 + 1);
  });

  test('vLLM\'s flat error body reaches the openai client in OpenAI\'s shape, with vLLM\'s message; nothing charged', async () => {
    const c = client('vllm-err');
    await assert.rejects(c.chat.completions.create({ model: 'llama', max_tokens: 3, messages: HI }, { headers: { 'x-sim-output-tokens': 'many' } }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.match(err.message, /^400 x-sim-output-tokens must be a non-negative integer/);
      assert.deepEqual(err.error, { message: 'x-sim-output-tokens must be a non-negative integer, got "many"', type: 'invalid_request_error', param: null, code: null });
      return true;
    });
    const probe = await c.chat.completions.create({ model: 'llama', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 1));
  });

  test('an Anthropic client failed over to a Gemini deployment: translated, and Gemini\'s error message found in its array', async () => {
    const c = new Anthropic({ baseURL: url, apiKey: key('anthropic'), maxRetries: 0 });
    const msg = await c.messages.create({ model: 'claude-or-gemini', max_tokens: 10, messages: HI }, { headers: { 'x-sim-output-tokens': '2' } });
    assert.equal(msg.content[0]?.type === 'text' ? msg.content[0].text : '', ' the the');
    await assert.rejects(c.messages.create({ model: 'claude-or-gemini', max_tokens: 10, messages: HI }, { headers: { 'x-sim-output-tokens': 'x' } }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.BadRequestError);
      assert.match(err.message, /Deployment gemini: x-sim-output-tokens must be a non-negative integer/);
      return true;
    });
  });
});
