/**
 * End to end through router → node (real processes: the simulator, two static nodes, a router) with
 * the official `openai` client's Responses API: JSON and streaming settled exactly on the simulator's
 * usage, `previous_response_id` (known context, then an unknown one at `stored_context_tokens`),
 * background mode settled once by the GET that shows it finished (GETs and DELETE passed through
 * the router uncharged), an aborted stream releasing its slot, a tenant refusal and the provider's
 * 429 in OpenAI's shape, and failover to a chat-completions deployment, translated.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import type { Member } from '../../src/coord/types.ts';
import { responsesPromptForCounting } from '../../src/providers/translate/responses-to-chat.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const env = { OPENAI_KEY: 'openai-e2e-upstream-key' };
const HI = countOpenAIChat(responsesPromptForCounting({ input: 'hi' }).chat, exactCounter('o200k_base'));
const MORE = countOpenAIChat(responsesPromptForCounting({ input: 'more' }).chat, exactCounter('o200k_base'));
const STORED = 300;
const key = (id: string): string => `key-${id}-0000`;
const usage = (input: number, output: number, reasoning = 0) => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: reasoning },
  total_tokens: input + output,
});

describe('the Responses API through router → node → the simulator', () => {
  const procs: Running[] = [];
  let routerUrl = '';
  let simUrl = '';

  before(async () => {
    const simPort = await freePort();
    const limitedPort = await freePort();
    const deadPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const limitedUrl = `http://127.0.0.1:${limitedPort}`;
    const members: Member[] = [];
    for (let i = 1; i <= 2; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const forward = ['x-sim-output-tokens', 'x-sim-reasoning-tokens', 'x-sim-background-ms'];
    const tokens = { tokens: 10_000, window: '1m', algorithm: 'sliding_window' };
    const common = { api_key_env: 'OPENAI_KEY', forward_headers: forward };
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      tenants: [
        ...['json', 'stream', 'prev', 'failover', 'limited'].map((id) => ({ id, keys: [key(id)], limits: [tokens] })),
        { id: 'bg', keys: [key('bg')], limits: [tokens, { concurrent: 1 }] },
        { id: 'tight', keys: [key('tight')], limits: [{ requests: 1, window: '1m', algorithm: 'sliding_window' }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', stored_context_tokens: STORED, deployments: ['openai'] },
        { name: 'gpt-failover', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-down', 'chat-only'] },
        { name: 'gpt-limited', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai-limited'] },
      ],
      deployments: [
        { name: 'openai', provider: 'openai', base_url: simUrl, ...common },
        { name: 'openai-down', provider: 'openai', base_url: `http://127.0.0.1:${deadPort}`, ...common },
        { name: 'chat-only', provider: 'openai', base_url: simUrl, responses_api: 'chat', ...common },
        { name: 'openai-limited', provider: 'openai', base_url: limitedUrl, max_retry_wait: 0, ...common },
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

  test('JSON and stream: reserved prompt + max_output_tokens, settled on the reported usage (reasoning included)', async () => {
    const openai = client('json');
    const first = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 64 }, { headers: { 'x-sim-output-tokens': '3', 'x-sim-reasoning-tokens': '4' } }).withResponse();
    assert.equal(first.response.status, 200);
    assert.deepEqual(first.data.usage, usage(HI, 7, 4));
    assert.equal(remaining(first.response.headers), 10_000 - (HI + 64));
    const stream = client('json').responses.stream({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 32 }, { headers: { 'x-sim-output-tokens': '5' } });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, 5);
    assert.equal(types.at(-1), 'response.completed');
    assert.deepEqual((await stream.finalResponse()).usage, usage(HI, 5));
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI + 7) - (HI + 5) - (HI + 16));
    assert.equal((await simStats(simUrl)).byKey[env.OPENAI_KEY]?.completionTokens, 7 + 5 + 16);
  });

  test('previous_response_id: the known context reserved exactly, an unknown one at stored_context_tokens; both settled exactly', async () => {
    const openai = client('prev');
    const first = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '4' } });
    const second = await openai.responses.create({ model: 'gpt-4o-mini', input: 'more', previous_response_id: first.id, max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.deepEqual(second.data.usage, usage(HI + 4 + MORE, 2));
    assert.equal(remaining(second.response.headers), 10_000 - (HI + 4) - (HI + 4 + MORE + 16));
    const direct = await new OpenAI({ baseURL: `${simUrl}/v1`, apiKey: env.OPENAI_KEY, maxRetries: 0 }).responses.create({ model: 'gpt-4o-mini', input: 'hi' }, { headers: { 'x-sim-output-tokens': '6' } });
    const third = await openai.responses.create({ model: 'gpt-4o-mini', input: 'more', previous_response_id: direct.id, max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    const spent = HI + 4 + (HI + 4 + MORE + 2);
    assert.equal(remaining(third.response.headers), 10_000 - spent - (MORE + STORED + 16));
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - spent - (HI + 6 + MORE + 1) - (HI + 16));
  });

  test('background: slot released, reservation held until a GET through the router shows it completed, settled once; DELETE passed through', async () => {
    const openai = client('bg');
    const created = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 200, background: true }, { headers: { 'x-sim-output-tokens': '3', 'x-sim-background-ms': '500' } }).withResponse();
    assert.equal(created.data.status, 'queued');
    assert.equal(remaining(created.response.headers), 10_000 - (HI + 200));
    const during = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    assert.equal(remaining(during.response.headers), 10_000 - (HI + 200) - (HI + 16));
    let done = await openai.responses.retrieve(created.data.id);
    for (let i = 0; i < 100 && done.status !== 'completed'; i++) {
      await sleep(50);
      done = await openai.responses.retrieve(created.data.id);
    }
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.usage, usage(HI, 3));
    await openai.responses.retrieve(created.data.id);
    const probe = await openai.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI + 3) - (HI + 1) - (HI + 16));
    const deleted = await openai.responses.delete(created.data.id).withResponse();
    assert.equal(deleted.response.status, 200);
    await assert.rejects(openai.responses.retrieve(created.data.id), OpenAI.NotFoundError);
  });

  test('an aborted stream releases the slot; refusals in OpenAI\'s shape: the tenant\'s limit, and the provider\'s 429 relayed', async () => {
    const tight = client('tight');
    await tight.responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } });
    await assert.rejects(tight.responses.create({ model: 'gpt-4o-mini', input: 'hi' }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.equal(err.headers.get('x-quotaring-error'), 'rate_limit_exceeded');
      assert.ok(Number(err.headers.get('retry-after-ms')) > 0);
      return true;
    });
    const limited = client('limited');
    await limited.responses.create({ model: 'gpt-limited', input: 'hi', max_output_tokens: 16 }, { headers: { 'x-sim-output-tokens': '1' } });
    await assert.rejects(limited.responses.create({ model: 'gpt-limited', input: 'hi', max_output_tokens: 16 }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.match(err.message, /Rate limit reached for requests per min/);
      assert.ok(Number(err.headers.get('retry-after-ms')) > 0);
      return true;
    });
  });

  test('failover from an unreachable deployment to one without the Responses API: translated to chat, settled on its usage', async () => {
    const openai = client('failover');
    const json = await openai.responses.create({ model: 'gpt-failover', input: 'hi', max_output_tokens: 40 }, { headers: { 'x-sim-output-tokens': '2' } }).withResponse();
    assert.equal(json.response.headers.get('x-quotaring-deployment'), 'chat-only');
    assert.equal(json.data.output_text, ' the the');
    assert.deepEqual(json.data.usage, usage(HI, 2));
    const stream = openai.responses.stream({ model: 'gpt-failover', input: 'hi', max_output_tokens: 40 }, { headers: { 'x-sim-output-tokens': '3' } });
    for await (const e of stream) void e;
    assert.equal((await stream.finalResponse()).output_text, ' the'.repeat(3));
    const probe = await openai.responses.create({ model: 'gpt-failover', input: 'hi', max_output_tokens: 16 }).withResponse();
    assert.equal(remaining(probe.response.headers), 10_000 - (HI + 2) - (HI + 3) - (HI + 16));
  });
});
