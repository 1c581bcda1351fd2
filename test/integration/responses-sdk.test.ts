/**
 * OpenAI's Responses API with the official `openai` client (`responses.create`, `.stream`,
 * `.retrieve`, `.cancel`), over real HTTP on 127.0.0.1:
 * 1. the bundled simulator is driven directly, to show it speaks what the client expects: the
 *    Response object and its usage (reasoning and cached tokens), the SSE event sequence with
 *    sequence numbers, `previous_response_id`, background mode (queued → in progress → completed),
 *    retrieve and cancel, `AzureOpenAI`'s path, OpenAI's 400/404/429;
 * 2. then the same client calls a gateway node (in-process) whose deployments are simulators:
 *    exact reservations (prompt + max_output_tokens, stored context estimated) and settlements
 *    (read back from the tenant's `x-ratelimit-remaining-tokens`), JSON and streaming, an aborted
 *    stream releasing its slot, the provider's 429 relayed with its wait, a background response
 *    settled once by the GET that shows it finished (GETs charged nothing), and failover from a
 *    deployment without the Responses API to chat-completions and Anthropic deployments, translated.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import OpenAI, { AzureOpenAI } from 'openai';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { responsesPromptForCounting } from '../../src/providers/translate/responses-to-chat.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import type { SimulatorStats } from '../../src/simulator/stats.ts';
import { countAnthropicMessages, countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';

const UPSTREAM_KEY = 'openai-upstream-key-123';
const FORWARD = ['x-sim-output-tokens', 'x-sim-reasoning-tokens', 'x-sim-background-ms'];
const o200k = exactCounter('o200k_base');
/** Prompt tokens of a Responses body as the gateway and the simulator count them (o200k, chat rules). */
const promptOf = (body: Record<string, unknown>): number => countOpenAIChat(responsesPromptForCounting(body).chat, o200k);
const HI = promptOf({ input: 'hi' });

type Sim = { url: string; close(): Promise<void> };

async function stats(sim: Sim): Promise<SimulatorStats> {
  return (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
}

const usage = (input: number, output: number, reasoning = 0, cached = 0) => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: reasoning },
  total_tokens: input + output,
});

describe('the simulator speaks the Responses API to the official client', () => {
  let sim: Sim;
  before(async () => {
    sim = await startSimulator({ quota: { rpm: 1_000 } });
  });
  after(async () => sim.close());
  const client = (key: string) => new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: key, maxRetries: 0 });

  test('create (JSON): a response with a reasoning item and a message; usage with reasoning tokens; incomplete at max_output_tokens', async () => {
    const openai = client('sim-r1');
    const r = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 20 }, { headers: { 'x-sim-output-tokens': '5', 'x-sim-reasoning-tokens': '3' } });
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
    assert.equal(r.output_text, ' the'.repeat(5));
    assert.deepEqual(r.usage, usage(HI, 8, 3));
    assert.equal(r.max_output_tokens, 20);
    const cut = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '30', 'x-sim-reasoning-tokens': '6' } });
    assert.equal(cut.status, 'incomplete');
    assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
    assert.deepEqual(cut.usage, usage(HI, 16, 6), 'reasoning and visible output share the cap');
  });

  test('stream: created, in_progress, item and part added, a delta per token, done events, completed with the usage; sequence numbers from 0', async () => {
    const openai = client('sim-r2');
    const body = { model: 'gpt-4o-mini', instructions: 'Be brief.', input: [{ role: 'user' as const, content: [{ type: 'input_text' as const, text: 'hello' }] }] };
    const stream = openai.responses.stream(body, { headers: { 'x-sim-output-tokens': '3' } });
    const events: string[] = [];
    for await (const e of stream) {
      assert.equal(e.sequence_number, events.length);
      events.push(e.type);
    }
    assert.deepEqual(events, [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const final = await stream.finalResponse();
    assert.equal(final.output_text, ' the'.repeat(3));
    assert.deepEqual(final.usage, usage(promptOf(body), 3));
    // Stored: retrieve gives the same response.
    const got = await openai.responses.retrieve(final.id);
    assert.equal(got.status, 'completed');
    assert.deepEqual(got.usage, final.usage);
  });

  test('previous_response_id: its input and output are this prompt too (cached from 1024 tokens); unknown or another key\'s: 400', async () => {
    const openai = client('sim-r3');
    const first = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '4' } });
    const second = await openai.responses.create({ model: 'gpt-4o-mini', input: 'more', previous_response_id: first.id }, { headers: { 'x-sim-output-tokens': '2' } });
    assert.deepEqual(second.usage, usage(HI + 4 + promptOf({ input: 'more' }), 2));
    const long = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '1500' } });
    const third = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', previous_response_id: long.id }, { headers: { 'x-sim-output-tokens': '1' } });
    assert.equal(third.usage?.input_tokens_details.cached_tokens, Math.floor((HI + 1500) / 128) * 128);
    await assert.rejects(client('sim-other').responses.create({ model: 'gpt-4o-mini', input: 'x', previous_response_id: first.id }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.param, 'previous_response_id');
      return true;
    });
    await assert.rejects(client('sim-other').responses.retrieve(first.id), OpenAI.NotFoundError);
    await assert.rejects(openai.responses.create({ model: 'gpt-4o-mini', input: 'x', max_output_tokens: 8 }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.match(err.message, /Expected a value >= 16, but got 8/);
      return true;
    });
  });

  test('background: queued with usage null, in progress, then completed with its usage; cancel stops another', async () => {
    const openai = client('sim-r4');
    const bg = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', background: true }, { headers: { 'x-sim-output-tokens': '2', 'x-sim-background-ms': '300' } });
    assert.equal(bg.status, 'queued');
    assert.equal(bg.usage, null);
    assert.equal(bg.background, true);
    assert.equal((await openai.responses.retrieve(bg.id)).status, 'in_progress');
    await sleep(350);
    const done = await openai.responses.retrieve(bg.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.usage, usage(HI, 2));
    const other = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', background: true }, { headers: { 'x-sim-output-tokens': '2', 'x-sim-background-ms': '60000' } });
    const cancelled = await openai.responses.cancel(other.id);
    assert.equal(cancelled.status, 'cancelled');
    assert.deepEqual(cancelled.usage, usage(HI, 0));
  });

  test('AzureOpenAI: responses at /openai/responses?api-version=…, api-key; Azure\'s 429 names Responses_Create', async () => {
    const limited = await startSimulator({ quota: { rpm: 1 } });
    try {
      const az = new AzureOpenAI({ endpoint: limited.url, apiKey: 'sim-az', apiVersion: '2025-04-01-preview', maxRetries: 0 });
      const { data, response } = await az.responses.create({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
      assert.equal(new URL(response.url).pathname, '/openai/responses');
      assert.equal(data.output_text, ' the the');
      await assert.rejects(az.responses.create({ model: 'gpt-4o-mini', input: 'hi' }), (err: unknown) => {
        assert.ok(err instanceof OpenAI.RateLimitError);
        assert.match(err.message, /Responses_Create Operation/);
        assert.ok(Number(err.headers.get('retry-after-ms')) > 0);
        return true;
      });
    } finally {
      await limited.close();
    }
  });
});

const key = (id: string): string => `key-${id}-0000`;
const tenant = (id: string, limits: unknown[]) => ({ id, keys: [key(id)], limits });
const tokens10k = [{ tokens: 10_000, window: '1m', algorithm: 'sliding_window' }];
const STORED = 500;

describe('the official client → quotaring → the simulator (Responses API)', () => {
  let sim: Sim;
  let limited: Sim;
  let slow: Sim;
  let app: FastifyInstance;
  let url = '';
  let deadPort = 0;

  before(async () => {
    sim = await startSimulator({});
    limited = await startSimulator({ quota: { rpm: 1 } });
    slow = await startSimulator({ tokensPerSecond: 50 });
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    deadPort = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const common = { api_key_env: 'OPENAI_KEY', forward_headers: FORWARD };
    app = buildGateway({
      config: buildConfig(
        {
          server: { log_level: 'silent' },
          tenants: [
            tenant('json', tokens10k),
            tenant('stream', tokens10k),
            tenant('abort', [...tokens10k, { concurrent: 1 }]),
            tenant('limited', tokens10k),
            tenant('prev', tokens10k),
            tenant('bg', [...tokens10k, { concurrent: 1 }]),
            tenant('other', tokens10k),
            tenant('failover', tokens10k),
            tenant('claude', tokens10k),
            tenant('azure', tokens10k),
          ],
          models: [
            { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', stored_context_tokens: STORED, deployments: ['openai'] },
            { name: 'gpt-limited', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-limited'] },
            { name: 'gpt-slow', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-slow'] },
            { name: 'gpt-failover', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-down', 'chat-only'] },
            { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['openai-down', 'anthropic'] },
            { name: 'gpt-az', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-v1'] },
          ],
          deployments: [
            { name: 'openai', provider: 'openai', base_url: sim.url, ...common },
            { name: 'openai-limited', provider: 'openai', base_url: limited.url, ...common, max_retry_wait: 0 },
            { name: 'openai-slow', provider: 'openai', base_url: slow.url, ...common },
            { name: 'openai-down', provider: 'openai', base_url: `http://127.0.0.1:${deadPort}`, ...common },
            { name: 'chat-only', provider: 'openai', base_url: sim.url, responses_api: 'chat', ...common },
            { name: 'anthropic', provider: 'anthropic', base_url: sim.url, ...common },
            { name: 'az-v1', provider: 'azure', base_url: `${sim.url}/openai/v1`, upstream_model: 'gpt-4o-mini', ...common },
          ],
        },
        'responses.yaml',
        { OPENAI_KEY: UPSTREAM_KEY },
      ),
      logger: false,
    });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await app.close();
    await Promise.all([sim.close(), limited.close(), slow.close()]);
  });

  const client = (id: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: key(id), maxRetries: 0 });
  const remainingTokens = (headers: Headers): number => Number(headers.get('x-ratelimit-remaining-tokens'));

  test('JSON: reserves prompt + max_output_tokens, settles on the reported usage (reasoning included)', async () => {
    const openai = client('json');
    const sent = (await stats(sim)).byKey[UPSTREAM_KEY]?.requests ?? 0;
    const first = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 100 }, { headers: { 'x-sim-output-tokens': '2', 'x-sim-reasoning-tokens': '5' } }).withResponse();
    assert.deepEqual(first.data.usage, usage(HI, 7, 5));
    assert.equal(first.data.output_text, ' the the');
    assert.equal(remainingTokens(first.response.headers), 10_000 - (HI + 100), 'reserved prompt + max_output_tokens');
    assert.ok(first.response.headers.get('x-quotaring-request-id'));
    assert.equal((await stats(sim)).byKey[UPSTREAM_KEY]?.requests, sent + 1, 'sent upstream with the deployment\'s key');
    const second = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(second.response.headers), 10_000 - (HI + 7) - (HI + 16), 'the first settled on input + output (reasoning included)');
  });

  test('stream: every event passed in order; settled on response.completed\'s usage; no max_output_tokens reserves the model default', async () => {
    const openai = client('stream');
    const stream = openai.responses.stream({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '4', 'x-sim-reasoning-tokens': '2' } });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 4);
    const final = await stream.finalResponse();
    assert.deepEqual(final.usage, usage(HI, 6, 2));
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (HI + 6) - (HI + 16));
  });

  test('an aborted stream releases its slot at once and settles on the prompt + the deltas delivered', async () => {
    const openai = client('abort');
    const controller = new AbortController();
    const stream = await openai.responses.create({ model: 'gpt-slow', input: 'hi', max_output_tokens: 500, stream: true }, { headers: { 'x-sim-output-tokens': '400' }, signal: controller.signal });
    let deltas = 0;
    for await (const e of stream) {
      if (e.type === 'response.output_text.delta' && ++deltas === 3) {
        controller.abort();
        break;
      }
    }
    // The slot (concurrent: 1) is free again and the tokens settled on what was delivered: at most a few more deltas than read.
    let probe: Awaited<ReturnType<ReturnType<OpenAI['responses']['create']>['withResponse']>> | undefined;
    for (let i = 0; i < 50 && probe === undefined; i++) {
      try {
        probe = await openai.responses.create({ model: 'gpt-slow', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
      } catch (err) {
        if (!(err instanceof OpenAI.RateLimitError)) throw err;
        await sleep(20);
      }
    }
    assert.ok(probe !== undefined, 'the slot came back');
    const used = 10_000 - remainingTokens(probe.response.headers) - (HI + 16);
    assert.ok(used >= HI + 3 && used < HI + 60, `settled on prompt + delivered, got ${used}`);
  });

  test('the provider\'s 429 (rpm 1, max_retry_wait 0): relayed in OpenAI\'s shape with its wait; the reservation refunded', async () => {
    const openai = client('limited');
    await openai.responses.create({ model: 'gpt-limited', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } });
    await assert.rejects(openai.responses.create({ model: 'gpt-limited', input: 'hi', max_output_tokens: 16 }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.status, 429);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.match(err.message, /Rate limit reached for requests per min \(RPM\)/);
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 0 && ms <= 60_000, `retry-after-ms ${ms}`);
      return true;
    });
    const probe = await fetch(`${url}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${key('limited')}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }) });
    assert.equal(probe.status, 200);
    assert.equal(remainingTokens(probe.headers), 10_000 - (HI + 1) - (HI + 16), 'the refused request kept nothing');
  });

  test('previous_response_id: one this node relayed reserves its input + output exactly; an unknown one reserves stored_context_tokens; both settle on the usage', async () => {
    const openai = client('prev');
    const first = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '4' } }).withResponse();
    let spent = HI + 4;
    const more = promptOf({ input: 'more' });
    const second = await openai.responses.create({ model: 'gpt-4o-mini', input: 'more', previous_response_id: first.data.id, max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.deepEqual(second.data.usage, usage(HI + 4 + more, 2));
    assert.equal(remainingTokens(second.response.headers), 10_000 - spent - (HI + 4 + more + 16), 'the known context reserved exactly');
    spent += HI + 4 + more + 2;
    // A response created at the provider directly (same upstream key): the node never saw it.
    const direct = await new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: UPSTREAM_KEY, maxRetries: 0 }).responses.create({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '9' } });
    const third = await openai.responses.create({ model: 'gpt-4o-mini', input: 'more', previous_response_id: direct.id, max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    assert.deepEqual(third.data.usage, usage(HI + 9 + more, 1));
    assert.equal(remainingTokens(third.response.headers), 10_000 - spent - (more + STORED + 16), 'unknown context: stored_context_tokens reserved');
    spent += HI + 9 + more + 1;
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - spent - (HI + 16), 'settled exactly on the reported usage');
    // Another tenant cannot continue or read it.
    await assert.rejects(client('other').responses.create({ model: 'gpt-4o-mini', input: 'x', previous_response_id: first.data.id }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.NotFoundError);
      assert.equal(err.code, 'response_not_found');
      assert.equal(err.param, 'previous_response_id');
      return true;
    });
    await assert.rejects(client('other').responses.retrieve(first.data.id), (err: unknown) => err instanceof OpenAI.NotFoundError && err.code === 'response_not_found');
  });

  test('background: the slot released at once, the reservation held until a GET shows it completed, then settled once; GETs charged nothing', async () => {
    const openai = client('bg');
    const headers = { 'x-sim-output-tokens': '3', 'x-sim-background-ms': '400' };
    const created = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 200, background: true }, { headers }).withResponse();
    assert.equal(created.data.status, 'queued');
    assert.equal(remainingTokens(created.response.headers), 10_000 - (HI + 200));
    // concurrent: 1 — the background response does not hold the slot.
    const during = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    assert.equal(remainingTokens(during.response.headers), 10_000 - (HI + 200) - (HI + 16), 'still reserved while it runs');
    const running = await openai.responses.retrieve(created.data.id).withResponse();
    assert.equal(running.data.status, 'in_progress');
    assert.equal(running.response.headers.get('x-ratelimit-remaining-tokens'), null, 'a GET is not an admission');
    await sleep(450);
    const done = await openai.responses.retrieve(created.data.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.usage, usage(HI, 3));
    const again = await openai.responses.retrieve(created.data.id);
    assert.equal(again.status, 'completed');
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (HI + 3) - (HI + 1) - (HI + 16), 'settled exactly once, on the GET that showed it completed');
    // Cancel and delete are passed through too.
    const other = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 100, background: true }, { headers: { 'x-sim-background-ms': '60000' } });
    const cancelled = await openai.responses.cancel(other.id);
    assert.equal(cancelled.status, 'cancelled');
    const afterCancel = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(afterCancel.response.headers), 10_000 - (HI + 3) - (HI + 1) - (HI + 16) - HI - (HI + 16), 'the cancel settled it on its usage (input only)');
    const deleted = await openai.responses.delete(other.id).withResponse();
    assert.equal(deleted.response.status, 200);
    await assert.rejects(openai.responses.retrieve(other.id), OpenAI.NotFoundError);
  });

  test('failover to a deployment without the Responses API: translated to chat completions (JSON and stream), settled on the chat usage', async () => {
    const openai = client('failover');
    const json = await openai.responses.create({ model: 'gpt-failover', instructions: 'Be brief.', input: 'hi', max_output_tokens: 50 }, { headers: { 'x-sim-output-tokens': '3' } }).withResponse();
    assert.equal(json.response.headers.get('x-quotaring-deployment'), 'chat-only');
    assert.equal(json.data.object, 'response');
    assert.equal(json.data.status, 'completed');
    assert.equal(json.data.output_text, ' the'.repeat(3));
    const prompt = promptOf({ instructions: 'Be brief.', input: 'hi' });
    assert.deepEqual(json.data.usage, usage(prompt, 3));
    assert.equal(remainingTokens(json.response.headers), 10_000 - (prompt + 50));
    const stream = openai.responses.stream({ model: 'gpt-failover', input: 'hi', max_output_tokens: 50 }, { headers: { 'x-sim-output-tokens': '4' } });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 4);
    assert.equal(types.at(-1), 'response.completed');
    const final = await stream.finalResponse();
    assert.equal(final.output_text, ' the'.repeat(4));
    assert.deepEqual(final.usage, usage(HI, 4));
    const probe = await openai.responses.create({ model: 'gpt-failover', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (prompt + 3) - (HI + 4) - (HI + 16));
    // What only the Responses API can do is not translated: no deployment left for it.
    await assert.rejects(openai.responses.create({ model: 'gpt-failover', input: 'hi', background: true }), (err: unknown) => err instanceof OpenAI.APIError && err.status !== undefined && err.status >= 500);
  });

  test('failover to an Anthropic deployment: translated through chat (JSON and stream), settled on Anthropic\'s usage', async () => {
    const openai = client('claude');
    const json = await openai.responses.create({ model: 'claude-test', input: 'hi', max_output_tokens: 40 }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.equal(json.response.headers.get('x-quotaring-deployment'), 'anthropic');
    assert.equal(json.data.output_text, ' the the');
    const anthropicPrompt = countAnthropicMessages({ messages: [{ role: 'user', content: 'hi' }] }, exactCounter('cl100k_base'));
    assert.deepEqual(json.data.usage, usage(anthropicPrompt, 2));
    const stream = openai.responses.stream({ model: 'claude-test', input: 'hi', max_output_tokens: 40 }, { headers: { 'x-sim-output-tokens': '3' } });
    for await (const e of stream) void e;
    const final = await stream.finalResponse();
    assert.equal(final.output_text, ' the'.repeat(3));
    assert.deepEqual(final.usage, usage(anthropicPrompt, 3));
    const cl100kHi = countOpenAIChat(responsesPromptForCounting({ input: 'hi' }).chat, exactCounter('cl100k_base'));
    const probe = await openai.responses.create({ model: 'claude-test', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (anthropicPrompt + 2) - (anthropicPrompt + 3) - (cl100kHi + 16));
  });

  test('Azure clients: /openai/v1/responses and AzureOpenAI\'s /openai/responses (api-key tenant key) on an Azure v1 deployment', async () => {
    const v1 = new OpenAI({ baseURL: `${url}/openai/v1`, apiKey: key('azure'), maxRetries: 0 });
    const a = await v1.responses.create({ model: 'gpt-az', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    assert.equal(a.data.output_text, ' the');
    assert.equal(remainingTokens(a.response.headers), 10_000 - (HI + 16));
    const az = new AzureOpenAI({ endpoint: url, apiKey: key('azure'), apiVersion: '2025-04-01-preview', maxRetries: 0 });
    const b = await az.responses.create({ model: 'gpt-az', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.equal(new URL(b.response.url).pathname, '/openai/responses');
    assert.equal(remainingTokens(b.response.headers), 10_000 - (HI + 1) - (HI + 16));
    const got = await az.responses.retrieve(b.data.id);
    assert.deepEqual(got.usage, usage(HI, 2));
  });
});
