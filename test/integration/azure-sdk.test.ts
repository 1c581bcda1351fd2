/**
 * Azure OpenAI, legacy completions and Anthropic count_tokens with the official clients, over real
 * HTTP on 127.0.0.1:
 * 1. the bundled simulator is driven directly by `AzureOpenAI` (classic deployment URLs), the plain
 *    `OpenAI` client on Azure's v1 API and `@anthropic-ai/sdk` `messages.countTokens`, to show it
 *    speaks what the clients expect (paths, `api-key`, Azure's 401/404/429 and content filter);
 * 2. then the same clients call a gateway node (in-process) whose deployments are that simulator:
 *    exact reservations and settlements (read back from the tenant's `x-ratelimit-remaining-*`
 *    headers and the simulator's usage), JSON and streaming, Azure's 429 with `retry-after-ms`
 *    mapped, the content-filter 400 relayed in Azure's shape and refunded, an aborted stream
 *    releasing its slot, count_tokens free or charged one request, and failover from an Anthropic
 *    deployment to an Azure one with the request translated.
 * A capture server pins what quotaring sends Azure (path, api-version, `api-key` or bearer).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import OpenAI, { AzureOpenAI } from 'openai';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import type { SimulatorStats } from '../../src/simulator/stats.ts';
import { countAnthropicMessages, countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';

const API_VERSION = '2024-10-21';
const UPSTREAM_KEY = 'azure-upstream-key-123';
const FORWARD = ['x-sim-output-tokens', 'x-sim-fault'];
const HI = [{ role: 'user' as const, content: 'hi' }];
/** Prompt tokens of HI for gpt-4o-mini (o200k, with the message overhead): what both the gateway and the simulator count. */
const HI_TOKENS = countOpenAIChat({ messages: HI }, exactCounter('o200k_base'));

type Sim = { url: string; close(): Promise<void> };

async function stats(sim: Sim): Promise<SimulatorStats> {
  return (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
}

const key = (id: string): string => `key-${id}-0000`;
const tenant = (id: string, limits: unknown[]) => ({ id, keys: [key(id)], limits });
const tokens10k = [{ tokens: 10_000, window: '1m', algorithm: 'sliding_window' }];

async function gateway(raw: Record<string, unknown>): Promise<{ app: FastifyInstance; url: string }> {
  const app = buildGateway({ config: buildConfig({ server: { log_level: 'silent' }, ...raw }, 'azure.yaml', { AZ_KEY: UPSTREAM_KEY }), logger: false });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url };
}

describe('the simulator speaks Azure OpenAI, completions and count_tokens to the official clients', () => {
  let sim: Sim;
  before(async () => {
    sim = await startSimulator({ quota: { rpm: 2 } });
  });
  after(async () => sim.close());

  test('AzureOpenAI (classic deployment URL, api-key): JSON with prompt_filter_results and usage; a stream whose first chunk is the prompt filter; Azure\'s 429', async () => {
    const client = new AzureOpenAI({ endpoint: sim.url, apiKey: 'sim-az-1', apiVersion: API_VERSION, maxRetries: 0 });
    const { data, response } = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 4, messages: HI }).withResponse();
    assert.equal(new URL(response.url).pathname, '/openai/deployments/gpt-4o-mini/chat/completions');
    assert.equal(new URL(response.url).searchParams.get('api-version'), API_VERSION);
    assert.deepEqual(data.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 4, total_tokens: HI_TOKENS + 4 });
    assert.equal((data as unknown as { prompt_filter_results: unknown[] }).prompt_filter_results.length, 1);
    assert.equal(response.headers.get('x-ratelimit-remaining-requests'), '1');
    const stream = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: HI, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.deepEqual(chunks[0]?.choices, [], 'Azure\'s first chunk: prompt_filter_results, no choices, no usage');
    assert.equal(chunks[0]?.usage, undefined);
    assert.deepEqual(chunks.at(-1)?.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 3, total_tokens: HI_TOKENS + 3 });
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: HI }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, '429');
      assert.match(err.message, /ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit.*Please retry after \d+ seconds/);
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 0 && ms <= 30_000, `retry-after-ms ${ms}`);
      assert.equal(err.headers.get('x-ms-retry-after-ms'), String(ms));
      assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1_000)));
      assert.equal(err.headers.get('x-ratelimit-remaining-requests'), '0');
      return true;
    });
  });

  test('content filter: 400 content_filter with innererror ResponsibleAIPolicyViolation; no key: Azure\'s 401; no api-version: 404', async () => {
    const client = new AzureOpenAI({ endpoint: sim.url, apiKey: 'sim-az-2', apiVersion: API_VERSION, maxRetries: 0 });
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', messages: HI }, { headers: { 'x-sim-fault': 'content-filter' } }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.code, 'content_filter');
      assert.equal(err.param, 'prompt');
      const inner = (err.error as { innererror: { code: string; content_filter_result: { hate: { filtered: boolean } } } }).innererror;
      assert.equal(inner.code, 'ResponsibleAIPolicyViolation');
      assert.equal(inner.content_filter_result.hate.filtered, true);
      return true;
    });
    const body = JSON.stringify({ messages: HI });
    const noKey = await fetch(`${sim.url}/openai/deployments/d/chat/completions?api-version=${API_VERSION}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(noKey.status, 401);
    assert.equal(((await noKey.json()) as { error: { code: string } }).error.code, '401');
    const noVersion = await fetch(`${sim.url}/openai/deployments/d/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'api-key': 'k' }, body });
    assert.equal(noVersion.status, 404);
    assert.deepEqual(await noVersion.json(), { error: { code: '404', message: 'Resource not found' } });
  });

  test('the plain OpenAI client on the v1 API: completions JSON and stream (two prompts, n 2), usage counting every choice', async () => {
    const client = new OpenAI({ baseURL: `${sim.url}/openai/v1`, apiKey: 'sim-az-3', maxRetries: 0 });
    const json = await client.completions.create({ model: 'gpt-35-turbo-instruct', prompt: ['one', 'two'], max_tokens: 3 });
    assert.equal(json.choices.length, 2);
    assert.equal(json.usage?.completion_tokens, 6);
    const stream = await client.completions.create({ model: 'gpt-35-turbo-instruct', prompt: 'one', n: 2, max_tokens: 2, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices.map((c) => c.text).join('');
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, ' the'.repeat(4));
    assert.equal(usage?.completion_tokens, 4);
    assert.equal((await stats(sim)).byKey['sim-az-3']?.completionTokens, 10);
  });

  test('@anthropic-ai/sdk messages.countTokens: input_tokens as messages.create would report them, free', async () => {
    const client = new Anthropic({ baseURL: sim.url, apiKey: 'sim-an-1', maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'Count these words, please.' }];
    const counted = await client.messages.countTokens({ model: 'claude-test', messages });
    const created = await client.messages.create({ model: 'claude-test', max_tokens: 1, messages });
    assert.equal(counted.input_tokens, created.usage.input_tokens);
    assert.equal((await stats(sim)).countTokens, 1);
  });
});

describe('official clients → quotaring → the simulator', () => {
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
    // A port nothing listens on: an Anthropic deployment that cannot be reached.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    deadPort = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    ({ app, url } = await gateway({
      tenants: [
        tenant('json', tokens10k),
        tenant('stream', tokens10k),
        tenant('v1', tokens10k),
        tenant('cmpl', tokens10k),
        tenant('filter', tokens10k),
        tenant('limited', tokens10k),
        tenant('abort', [...tokens10k, { concurrent: 1 }]),
        tenant('count', [{ requests: 10, window: '1m', algorithm: 'sliding_window' }, ...tokens10k]),
        tenant('failover', tokens10k),
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-classic'] },
        { name: 'gpt-v1', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-v1'] },
        { name: 'gpt-limited', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-limited'] },
        { name: 'gpt-slow', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-slow'] },
        { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic'] },
        { name: 'claude-failover', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic-down', 'az-classic'] },
      ],
      deployments: [
        { name: 'az-classic', provider: 'azure', base_url: `${sim.url}/openai/deployments/gpt-4o-mini?api-version=${API_VERSION}`, api_key_env: 'AZ_KEY', forward_headers: FORWARD },
        { name: 'az-v1', provider: 'azure', base_url: `${sim.url}/openai/v1`, api_key_env: 'AZ_KEY', auth: 'bearer', upstream_model: 'gpt-4o-mini', forward_headers: FORWARD },
        { name: 'az-limited', provider: 'azure', base_url: `${limited.url}/openai/deployments/gpt-4o-mini?api-version=${API_VERSION}`, api_key_env: 'AZ_KEY', max_retry_wait: 0 },
        { name: 'az-slow', provider: 'azure', base_url: `${slow.url}/openai/deployments/gpt-4o-mini?api-version=${API_VERSION}`, api_key_env: 'AZ_KEY' },
        { name: 'anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'AZ_KEY' },
        { name: 'anthropic-down', provider: 'anthropic', base_url: `http://127.0.0.1:${deadPort}`, api_key_env: 'AZ_KEY' },
      ],
    }));
  });
  after(async () => {
    await app.close();
    await Promise.all([sim.close(), limited.close(), slow.close()]);
  });

  const azure = (id: string) => new AzureOpenAI({ endpoint: url, apiKey: key(id), apiVersion: API_VERSION, maxRetries: 0 });
  const remainingTokens = (headers: Headers): number => Number(headers.get('x-ratelimit-remaining-tokens'));

  test('AzureOpenAI, classic deployment URL, JSON: reserves prompt + max_tokens, settles on the simulator\'s usage', async () => {
    const client = azure('json');
    const before = (await stats(sim)).byKey[UPSTREAM_KEY]?.requests ?? 0;
    const first = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: HI }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.deepEqual(first.data.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 2, total_tokens: HI_TOKENS + 2 });
    assert.equal(remainingTokens(first.response.headers), 10_000 - (HI_TOKENS + 10), 'reserved prompt + max_tokens');
    assert.equal(first.response.headers.get('x-ratelimit-remaining-requests'), null, 'the tenant has no requests limit: Azure\'s own headers are not relayed');
    assert.equal((await stats(sim)).byKey[UPSTREAM_KEY]?.requests, before + 1, 'the simulator took quotaring\'s key (api-key) and the api-version of base_url');
    const second = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: HI }).withResponse();
    assert.equal(remainingTokens(second.response.headers), 10_000 - (HI_TOKENS + 2) - (HI_TOKENS + 10), 'the first settled on its usage');
  });

  test('AzureOpenAI stream on a v1-API deployment (bearer): no usage chunk unless asked, the prompt-filter chunk passed, settled exactly', async () => {
    const client = azure('stream');
    const stream = await client.chat.completions.create({ model: 'gpt-v1', max_tokens: 20, messages: HI, stream: true }, { headers: { 'x-sim-output-tokens': '5' } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.deepEqual(chunks[0]?.choices, [], 'Azure\'s prompt_filter_results chunk reaches the client');
    assert.equal(chunks.filter((c) => c.usage != null).length, 0, 'the usage chunk quotaring asked for is hidden');
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), ' the'.repeat(5));
    const probe = await client.chat.completions.create({ model: 'gpt-v1', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (HI_TOKENS + 5) - (HI_TOKENS + 1));
  });

  test('the plain OpenAI client on quotaring\'s /openai/v1 (Bearer tenant key) and /v1: same limits', async () => {
    const v1 = new OpenAI({ baseURL: `${url}/openai/v1`, apiKey: key('v1'), maxRetries: 0 });
    const a = await v1.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: HI }).withResponse();
    assert.equal(remainingTokens(a.response.headers), 10_000 - (HI_TOKENS + 3));
    const plain = new OpenAI({ baseURL: `${url}/v1`, apiKey: key('v1'), maxRetries: 0 });
    const b = await plain.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: HI }).withResponse();
    assert.equal(remainingTokens(b.response.headers), 10_000 - 2 * (HI_TOKENS + 3));
  });

  test('completions (AzureOpenAI JSON, plain client stream): reserve prompts + max_tokens × n × prompts, settle on usage', async () => {
    const client = azure('cmpl');
    // Two prompts of 1 token each, max_tokens 3: reserve 2 + 3 × 2 = 8; the simulator writes 3 per choice.
    const json = await client.completions.create({ model: 'gpt-4o-mini', prompt: ['hello', 'world'], max_tokens: 3 }).withResponse();
    assert.deepEqual(json.data.usage, { prompt_tokens: 2, completion_tokens: 6, total_tokens: 8 });
    assert.equal(remainingTokens(json.response.headers), 10_000 - 8);
    const plain = new OpenAI({ baseURL: `${url}/v1`, apiKey: key('cmpl'), maxRetries: 0 });
    // No max_tokens: OpenAI's default 16 is reserved; 4 tokens are written.
    const stream = await plain.completions.create({ model: 'gpt-4o-mini', prompt: 'hello', stream: true }, { headers: { 'x-sim-output-tokens': '4' } });
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usageChunks++;
    }
    assert.equal(text, ' the'.repeat(4));
    assert.equal(usageChunks, 0, 'hidden: the client did not ask for it');
    const probe = await plain.completions.create({ model: 'gpt-4o-mini', prompt: 'hello', max_tokens: 1 }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - 8 - (1 + 4) - (1 + 1));
  });

  test('Azure\'s content filter: the 400 relayed in Azure\'s shape (content_filter, ResponsibleAIPolicyViolation); the reservation refunded', async () => {
    const client = azure('filter');
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 50, messages: HI }, { headers: { 'x-sim-fault': 'content-filter' } }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.status, 400);
      assert.equal(err.code, 'content_filter');
      assert.equal((err.error as { innererror: { code: string } }).innererror.code, 'ResponsibleAIPolicyViolation');
      assert.equal(err.headers.get('x-quotaring-error'), null, 'the provider\'s error, not quotaring\'s');
      return true;
    });
    const probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (HI_TOKENS + 1), 'nothing kept for the filtered request');
  });

  test('Azure\'s 429 (rpm 1, max_retry_wait 0): relayed with retry-after-ms and retry-after, x-ms-retry-after-ms dropped, Azure\'s body; tokens refunded', async () => {
    const client = azure('limited');
    await client.chat.completions.create({ model: 'gpt-limited', max_tokens: 2, messages: HI });
    await assert.rejects(client.chat.completions.create({ model: 'gpt-limited', max_tokens: 2, messages: HI }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, '429');
      assert.match(err.message, /exceeded call rate limit/);
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 55_000 && ms <= 60_000, `retry-after-ms ${ms}: one request a minute`);
      assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1_000)));
      assert.equal(err.headers.get('x-ms-retry-after-ms'), null);
      assert.equal(err.headers.get('x-ratelimit-remaining-requests'), null, 'Azure\'s own remaining is not the tenant\'s');
      assert.equal(remainingTokens(err.headers), 10_000 - (HI_TOKENS + 2) - (HI_TOKENS + 2), 'the headers show the tenant at admission');
      return true;
    });
    const probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remainingTokens(probe.response.headers), 10_000 - (HI_TOKENS + 2) - (HI_TOKENS + 1), 'the refused attempt was refunded');
  });

  test('an aborted AzureOpenAI stream (50 tokens/s) frees the concurrency slot and settles on prompt + delivered tokens', async () => {
    const client = azure('abort');
    const stream = await client.chat.completions.create({ model: 'gpt-slow', max_tokens: 1000, messages: HI, stream: true });
    let content = 0;
    for await (const chunk of stream) {
      if ((chunk.choices[0]?.delta?.content ?? '') !== '' && ++content === 3) break;
    }
    // The slot comes back once the node sees the client leave.
    let probe: { response: Response } | undefined;
    for (let i = 0; i < 100 && probe === undefined; i++) {
      try {
        probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI }).withResponse();
      } catch (err) {
        assert.ok(err instanceof OpenAI.RateLimitError, String(err));
        await sleep(50);
      }
    }
    assert.ok(probe !== undefined, 'the slot was released');
    const charged = 10_000 - (HI_TOKENS + 1) - remainingTokens(probe.response.headers);
    assert.ok(charged >= HI_TOKENS + 3 && charged < HI_TOKENS + 40, `charged ${charged}: the prompt and the few tokens delivered, not the 1000 reserved`);
    await sleep(200);
    assert.equal((await stats(slow)).inFlight, 0, 'the upstream stream was cancelled');
  });

  test('count_tokens (default free): passed through, nothing charged to the tenant', async () => {
    const client = new Anthropic({ baseURL: url, apiKey: key('count'), maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'How many tokens is this?' }];
    const before = (await stats(sim)).countTokens;
    const counted = await client.messages.countTokens({ model: 'claude-test', messages }).withResponse();
    // It held a concurrency slot while in flight, and took no request: the tenant's view is unchanged.
    assert.equal(counted.response.headers.get('anthropic-ratelimit-requests-remaining'), '10', 'no request taken');
    assert.equal((await stats(sim)).countTokens, before + 1);
    const created = await client.messages.create({ model: 'claude-test', max_tokens: 1, messages }).withResponse();
    assert.equal(counted.data.input_tokens, created.data.usage.input_tokens);
    assert.equal(created.response.headers.get('anthropic-ratelimit-requests-remaining'), '9', 'only the messages request was counted');
    assert.equal(created.response.headers.get('anthropic-ratelimit-tokens-remaining'), String(10_000 - counted.data.input_tokens - 1));
  });

  test('failover with translation: an Anthropic client whose Anthropic deployment is down is served by the Azure deployment', async () => {
    const client = new Anthropic({ baseURL: url, apiKey: key('failover'), maxRetries: 0 });
    const reply = await client.messages.create({ model: 'claude-failover', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    assert.equal(reply.response.headers.get('x-quotaring-deployment'), 'az-classic');
    assert.equal(reply.data.type, 'message');
    assert.equal(reply.data.usage.output_tokens, 3);
    const probe = await client.messages.create({ model: 'claude-failover', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    // The first settled on the Azure deployment's usage (the translated chat prompt, counted by the
    // simulator); the probe is reserved on quotaring's count of the Messages prompt + 1.
    const reserved = countAnthropicMessages({ messages: [{ role: 'user', content: 'hi' }] }, exactCounter('cl100k_base')) + 1;
    assert.equal(Number(probe.response.headers.get('anthropic-ratelimit-tokens-remaining')), 10_000 - (reply.data.usage.input_tokens + 3) - reserved);
  });
});

describe('count_tokens charged one request (server.count_tokens: request)', () => {
  let sim: Sim;
  let app: FastifyInstance;
  let url = '';
  before(async () => {
    sim = await startSimulator({});
    ({ app, url } = await gateway({
      server: { log_level: 'silent', count_tokens: 'request' },
      tenants: [tenant('count', [{ requests: 2, window: '1m', algorithm: 'sliding_window' }, ...tokens10k])],
      models: [{ name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic'] }],
      deployments: [{ name: 'anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'AZ_KEY', quota: { rpm: 1 } }],
    }));
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('one request and no tokens per count; the third is refused in Anthropic\'s shape; the deployment quota (rpm 1) is not taken', async () => {
    const client = new Anthropic({ baseURL: url, apiKey: key('count'), maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'hello' }];
    const first = await client.messages.countTokens({ model: 'claude-test', messages }).withResponse();
    assert.equal(first.response.headers.get('anthropic-ratelimit-requests-remaining'), '1');
    assert.equal(first.response.headers.get('anthropic-ratelimit-tokens-remaining'), '10000');
    const second = await client.messages.countTokens({ model: 'claude-test', messages }).withResponse();
    assert.equal(second.response.headers.get('anthropic-ratelimit-requests-remaining'), '0', 'a quota of rpm 1 would have refused this one');
    assert.equal(second.response.headers.get('anthropic-ratelimit-tokens-remaining'), '10000');
    await assert.rejects(client.messages.countTokens({ model: 'claude-test', messages }), (err: unknown) => {
      assert.ok(err instanceof Anthropic.RateLimitError);
      assert.equal((err.error as { error: { type: string } }).error.type, 'rate_limit_error');
      assert.ok(Number(err.headers.get('retry-after')) > 0);
      return true;
    });
    assert.equal((await stats(sim)).countTokens, 2);
  });
});

describe('what quotaring sends Azure', () => {
  let capture: Server;
  let seen: { url: string; headers: IncomingHttpHeaders; body: Record<string, unknown> }[] = [];
  let app: FastifyInstance;
  let url = '';
  before(async () => {
    capture = createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        seen.push({ url: req.url ?? '', headers: req.headers, body: JSON.parse(text) as Record<string, unknown> });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'c', object: 'chat.completion', created: 1, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
      });
    });
    await new Promise<void>((resolve) => capture.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(capture.address() as AddressInfo).port}`;
    ({ app, url } = await gateway({
      tenants: [tenant('cap', [])],
      models: [
        { name: 'classic', encoding: 'o200k_base', deployments: ['classic'] },
        { name: 'v1', encoding: 'o200k_base', deployments: ['v1'] },
        { name: 'proxied', encoding: 'o200k_base', deployments: ['proxied'] },
      ],
      deployments: [
        { name: 'classic', provider: 'azure', base_url: `${base}/openai/deployments/my-gpt4o?api-version=${API_VERSION}`, api_key_env: 'AZ_KEY' },
        { name: 'v1', provider: 'azure', base_url: `${base}/openai/v1/`, api_key_env: 'AZ_KEY', auth: 'bearer', upstream_model: 'my-gpt4o' },
        { name: 'proxied', provider: 'openai', base_url: `${base}/gw?team=a`, api_key_env: 'AZ_KEY' },
      ],
    }));
  });
  after(async () => {
    await app.close();
    await new Promise((resolve) => capture.close(resolve));
  });

  test('classic: the path below the deployment URL, its api-version kept, the key in api-key; v1: bearer, the deployment as model; any base_url keeps its query', async () => {
    seen = [];
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key('cap'), maxRetries: 0 });
    for (const model of ['classic', 'v1', 'proxied']) await client.chat.completions.create({ model, messages: HI });
    await client.completions.create({ model: 'classic', prompt: 'x' });
    assert.deepEqual(
      seen.map((s) => s.url),
      [`/openai/deployments/my-gpt4o/chat/completions?api-version=${API_VERSION}`, '/openai/v1/chat/completions', '/gw/v1/chat/completions?team=a', `/openai/deployments/my-gpt4o/completions?api-version=${API_VERSION}`],
    );
    assert.equal(seen[0]?.headers['api-key'], UPSTREAM_KEY);
    assert.equal(seen[0]?.headers.authorization, undefined);
    assert.equal(seen[1]?.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
    assert.equal(seen[1]?.headers['api-key'], undefined);
    assert.equal(seen[1]?.body.model, 'my-gpt4o');
    assert.equal(seen[2]?.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
  });

  test('AzureOpenAI\'s deployment path names the model: /openai/deployments/{model}/chat/completions wins over the body', async () => {
    seen = [];
    const client = new AzureOpenAI({ endpoint: url, apiKey: key('cap'), apiVersion: API_VERSION, deployment: 'v1', maxRetries: 0 });
    await client.chat.completions.create({ model: 'classic', messages: HI });
    assert.equal(seen[0]?.url, '/openai/v1/chat/completions', 'served by model v1 (the path), not classic (the body)');
  });
});
