/**
 * End to end through router → node (real processes: the simulator, two static nodes, a router):
 * the openai SDK's `AzureOpenAI` client with quotaring as its endpoint (classic deployment paths,
 * the tenant key in `api-key`), Azure deployments upstream (a classic deployment URL with its
 * api-version, and the v1 API), legacy completions, Anthropic's `messages.countTokens`, Azure's
 * content filter relayed, and a tenant refusal in the shape the client reads.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { AzureOpenAI } from 'openai';
import type { Member } from '../../src/coord/types.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const API_VERSION = '2024-10-21';
const env = { AZ_KEY: 'azure-e2e-upstream-key' };
const HI = [{ role: 'user' as const, content: 'hi' }];
const HI_TOKENS = countOpenAIChat({ messages: HI }, exactCounter('o200k_base'));
const key = (id: string): string => `key-${id}-0000`;

describe('AzureOpenAI and countTokens through router → node → the simulator', () => {
  const procs: Running[] = [];
  let routerUrl = '';
  let simUrl = '';

  before(async () => {
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const members: Member[] = [];
    for (let i = 1; i <= 2; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const forward = ['x-sim-output-tokens', 'x-sim-fault'];
    const tokens = { tokens: 10_000, window: '1m', algorithm: 'sliding_window' };
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      tenants: [
        ...['json', 'stream', 'cmpl', 'filter', 'count'].map((id) => ({ id, keys: [key(id)], limits: [tokens] })),
        { id: 'tight', keys: [key('tight')], limits: [{ requests: 1, window: '1m', algorithm: 'sliding_window' }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-classic'] },
        { name: 'gpt-v1', encoding: 'o200k_base', estimator: 'exact', deployments: ['az-v1'] },
        { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic'] },
      ],
      deployments: [
        { name: 'az-classic', provider: 'azure', base_url: `${simUrl}/openai/deployments/gpt-4o-mini?api-version=${API_VERSION}`, api_key_env: 'AZ_KEY', forward_headers: forward },
        { name: 'az-v1', provider: 'azure', base_url: `${simUrl}/openai/v1`, api_key_env: 'AZ_KEY', upstream_model: 'gpt-4o-mini', forward_headers: forward },
        { name: 'anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'AZ_KEY' },
      ],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env));
    routerUrl = (await startStaticNodesAndRouter(config, env, members, procs)).routerUrl;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
  });

  const azure = (id: string) => new AzureOpenAI({ endpoint: routerUrl, apiKey: key(id), apiVersion: API_VERSION, maxRetries: 0 });
  const remaining = (headers: Headers): number => Number(headers.get('x-ratelimit-remaining-tokens'));

  test('chat JSON: reserved prompt + max_tokens, settled on the simulator\'s usage', async () => {
    const client = azure('json');
    const first = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: HI }, { headers: { 'x-sim-output-tokens': '3' } }).withResponse();
    assert.deepEqual(first.data.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 3, total_tokens: HI_TOKENS + 3 });
    assert.equal(remaining(first.response.headers), 10_000 - (HI_TOKENS + 10));
    const second = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: HI }).withResponse();
    assert.equal(remaining(second.response.headers), 10_000 - (HI_TOKENS + 3) - (HI_TOKENS + 10));
    assert.equal((await simStats(simUrl)).byKey[env.AZ_KEY]?.promptTokens, 2 * HI_TOKENS);
  });

  test('chat stream with include_usage on a v1-API deployment: one usage chunk, last; settled exactly', async () => {
    const client = azure('stream');
    const stream = await client.chat.completions.create({ model: 'gpt-v1', max_tokens: 30, messages: HI, stream: true, stream_options: { include_usage: true } }, { headers: { 'x-sim-output-tokens': '7' } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks.filter((c) => c.usage != null).length, 1);
    assert.deepEqual(chunks.at(-1)?.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 7, total_tokens: HI_TOKENS + 7 });
    const probe = await client.chat.completions.create({ model: 'gpt-v1', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 7) - (HI_TOKENS + 1));
  });

  test('completions JSON and stream', async () => {
    const client = azure('cmpl');
    const json = await client.completions.create({ model: 'gpt-4o-mini', prompt: 'hello', max_tokens: 4 }).withResponse();
    assert.deepEqual(json.data.usage, { prompt_tokens: 1, completion_tokens: 4, total_tokens: 5 });
    assert.equal(remaining(json.response.headers), 10_000 - 5);
    const stream = await client.completions.create({ model: 'gpt-4o-mini', prompt: 'hello', max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, ' the'.repeat(6));
    assert.equal(usage?.total_tokens, 7);
    const probe = await client.completions.create({ model: 'gpt-4o-mini', prompt: 'hello', max_tokens: 1 }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - 5 - 7 - 2);
  });

  test('Azure\'s content-filter 400 relayed in its shape; nothing charged', async () => {
    const client = azure('filter');
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 5, messages: HI }, { headers: { 'x-sim-fault': 'content-filter' } }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.code, 'content_filter');
      assert.equal((err.error as { innererror: { code: string } }).innererror.code, 'ResponsibleAIPolicyViolation');
      return true;
    });
    const probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 1));
  });

  test('a tenant refusal reaches AzureOpenAI as a RateLimitError with retry-after-ms; it never reaches the simulator', async () => {
    const client = azure('tight');
    await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI });
    const before = (await simStats(simUrl)).requests;
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: HI }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, 'rate_limit_exceeded');
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 50_000 && ms <= 60_000, `retry-after-ms ${ms}`);
      assert.equal(err.headers.get('x-ratelimit-remaining-requests'), '0');
      return true;
    });
    assert.equal((await simStats(simUrl)).requests, before);
  });

  test('messages.countTokens (free by default): the simulator\'s count, nothing charged', async () => {
    const client = new Anthropic({ baseURL: routerUrl, apiKey: key('count'), maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'How many tokens?' }];
    const counted = await client.messages.countTokens({ model: 'claude-test', messages });
    const created = await client.messages.create({ model: 'claude-test', max_tokens: 1, messages }).withResponse();
    assert.equal(counted.input_tokens, created.data.usage.input_tokens);
    assert.equal(created.response.headers.get('anthropic-ratelimit-tokens-remaining'), String(10_000 - counted.input_tokens - 1));
    assert.equal((await simStats(simUrl)).countTokens, 1);
  });
});
