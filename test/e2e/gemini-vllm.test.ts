/**
 * End to end through router → node (real processes: two simulators, two static nodes, a router):
 * the openai client calling models whose deployments are `provider: gemini` (the simulator's
 * `/v1beta/openai` prefix) and `provider: vllm` (its `/vllm` root, no key), JSON and streaming with
 * exact settlement (thinking tokens included for Gemini), and Gemini's 429 — its wait only in the
 * body's RetryInfo — reaching the client as OpenAI's RateLimitError with `retry-after-ms`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import type { Member } from '../../src/coord/types.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const env = { GEMINI_API_KEY: 'gemini-e2e-upstream-key' };
const HI = [{ role: 'user' as const, content: 'hi' }];
/** The simulator counts non-OpenAI model names with cl100k; the models below use the same encoding. */
const HI_TOKENS = countOpenAIChat({ messages: HI }, exactCounter('cl100k_base'));
const key = (id: string): string => `key-${id}-0000`;

describe('Gemini and vLLM deployments through router → node → the simulator', () => {
  const procs: Running[] = [];
  let routerUrl = '';
  let simUrl = '';
  let limitedUrl = '';

  before(async () => {
    const [simPort, limitedPort] = [await freePort(), await freePort()];
    simUrl = `http://127.0.0.1:${simPort}`;
    limitedUrl = `http://127.0.0.1:${limitedPort}`;
    const members: Member[] = [];
    for (let i = 1; i <= 2; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const forward = ['x-sim-output-tokens', 'x-sim-reasoning-tokens'];
    const tokens = { tokens: 10_000, window: '1m', algorithm: 'sliding_window' };
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      tenants: ['gemini', 'stream', 'limited', 'vllm'].map((id) => ({ id, keys: [key(id)], limits: [tokens] })),
      models: [
        { name: 'gemini-flash', encoding: 'cl100k_base', estimator: 'exact', deployments: ['gemini'] },
        { name: 'gemini-limited', encoding: 'cl100k_base', estimator: 'exact', deployments: ['gemini-limited'] },
        { name: 'llama', encoding: 'cl100k_base', estimator: 'exact', deployments: ['vllm'] },
      ],
      deployments: [
        { name: 'gemini', provider: 'gemini', base_url: `${simUrl}/v1beta/openai`, api_key_env: 'GEMINI_API_KEY', upstream_model: 'gemini-2.0-flash', forward_headers: forward },
        { name: 'gemini-limited', provider: 'gemini', base_url: `${limitedUrl}/v1beta/openai`, api_key_env: 'GEMINI_API_KEY', max_retry_wait: '1s' },
        { name: 'vllm', provider: 'vllm', base_url: `${simUrl}/vllm`, upstream_model: 'meta-llama/Llama-3.1-8B-Instruct', forward_headers: forward },
      ],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env));
    procs.push(await runCli(['simulate', '--port', String(limitedPort), '--rpm', '1'], `${limitedUrl}/sim/stats`, env));
    routerUrl = (await startStaticNodesAndRouter(config, env, members, procs)).routerUrl;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
  });

  const client = (id: string) => new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: key(id), maxRetries: 0 });
  const remaining = (headers: Headers): number => Number(headers.get('x-ratelimit-remaining-tokens'));

  test('Gemini JSON: reserved prompt + max_tokens, settled on total_tokens (visible + thinking)', async () => {
    const c = client('gemini');
    const first = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 12, messages: HI }, { headers: { 'x-sim-output-tokens': '3', 'x-sim-reasoning-tokens': '4' } }).withResponse();
    assert.deepEqual(first.data.usage, { completion_tokens: 3, prompt_tokens: HI_TOKENS, total_tokens: HI_TOKENS + 7 });
    assert.equal(remaining(first.response.headers), 10_000 - (HI_TOKENS + 12));
    const probe = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 7) - (HI_TOKENS + 1));
    assert.equal((await simStats(simUrl)).byKey[env.GEMINI_API_KEY]?.completionTokens, 7 + 1);
  });

  test('Gemini stream (usage on its last content chunk) and a vLLM stream with include_usage: settled exactly', async () => {
    const g = client('stream');
    const stream = await g.chat.completions.create({ model: 'gemini-flash', max_tokens: 30, messages: HI, stream: true }, { headers: { 'x-sim-output-tokens': '5', 'x-sim-reasoning-tokens': '2' } });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, ' the'.repeat(5));
    const probe = await g.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 7) - (HI_TOKENS + 1));

    const v = client('vllm');
    const vs = await v.chat.completions.create({ model: 'llama', max_tokens: 20, messages: HI, stream: true, stream_options: { include_usage: true } }, { headers: { 'x-sim-output-tokens': '6' } });
    const chunks = [];
    for await (const chunk of vs) chunks.push(chunk);
    assert.deepEqual(chunks.at(-1)?.usage, { prompt_tokens: HI_TOKENS, completion_tokens: 6, total_tokens: HI_TOKENS + 6 });
    const vp = await v.chat.completions.create({ model: 'llama', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(vp.response.headers), 10_000 - (HI_TOKENS + 6) - (HI_TOKENS + 1));
  });

  test('Gemini\'s 429 (RetryInfo ~60 s, beyond max_retry_wait): a RateLimitError in OpenAI\'s shape with retry-after-ms; refunded', async () => {
    const c = client('limited');
    await c.chat.completions.create({ model: 'gemini-limited', max_tokens: 2, messages: HI });
    await assert.rejects(c.chat.completions.create({ model: 'gemini-limited', max_tokens: 2, messages: HI }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.match(err.message, /You exceeded your current quota/);
      const ms = Number(err.headers.get('retry-after-ms'));
      assert.ok(ms > 50_000 && ms <= 60_000, `retry-after-ms ${ms}`);
      assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1_000)));
      return true;
    });
    assert.equal((await simStats(limitedUrl)).rateLimited, 1);
    const probe = await c.chat.completions.create({ model: 'gemini-flash', max_tokens: 1, messages: HI }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI_TOKENS + 2) - (HI_TOKENS + 1), 'the refused request was refunded');
  });
});
