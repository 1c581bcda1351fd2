/**
 * End to end through router → node (real processes: the simulator, two static nodes, a router),
 * driven by the official `openai` and `@anthropic-ai/sdk` SDKs: a tenant with a $0.01 budget and known prices is admitted
 * while its settled spend plus the next request's reservation stays within $0.01, and the first
 * request that would pass it is refused with 429 `budget_exceeded` in OpenAI's error shape (the SDK
 * raises a RateLimitError carrying the code; Anthropic's `rate_limit_error` with
 * `x-quotaring-error: budget_exceeded`), never reaching the provider. The expected count is
 * computed from the prices and the simulator's token counts, and asserted exactly.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { Member } from '../../src/coord/types.ts';
import { countAnthropicMessages, countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const env = { SIM_KEY: 'sim-key-budget-e2e' };
const KEY = 'key-penny-00000';
const KEY_A = 'key-penny-anthropic';
const messages = [{ role: 'user' as const, content: 'How many of these fit in a cent?' }];
/** The prompt as the node counts it (exact, o200k) and as the simulator reports it. */
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));
/** USD per million tokens: 1 µ$ per input token, 4 µ$ per output token. */
const PRICES = { input: 1, output: 4 };
/** Each request asks for at most 600 output tokens; the simulator produces 500. */
const MAX = 600;
const OUT = 500;
/** $0.01 in micro-dollars. */
const BUDGET = 10_000;
const micros = (n: number): string => `0.${String(n).padStart(6, '0')}`;

describe('a $0.01 budget through router → node with the openai SDK', () => {
  const procs: Running[] = [];
  let routerUrl = '';
  let simUrl = '';

  before(async () => {
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const members: Member[] = [];
    for (let i = 1; i <= 2; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      // A fixed window of 366 days (aligned to the Unix epoch): it does not renew during the test.
      tenants: [
        { id: 'penny', keys: [KEY], limits: [{ usd: '0.01', window: '366d' }] },
        { id: 'penny-a', keys: [KEY_A], limits: [{ usd: '0.01', window: '366d' }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: PRICES },
        { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['sim-anthropic'], prices: PRICES },
      ],
      deployments: [
        { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] },
        { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] },
      ],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env));
    routerUrl = (await startStaticNodesAndRouter(config, env, members, procs)).routerUrl;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
  });

  test('admitted while settled spend + the next reservation ≤ $0.01; the first that would pass it gets 429 budget_exceeded', async () => {
    // The default retries: the SDK must not retry a budget refusal (x-should-retry: false).
    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: KEY });
    const body = { model: 'gpt-4o-mini', max_tokens: MAX, messages };
    const opts = { headers: { 'x-sim-output-tokens': String(OUT) } };
    // Reserved: prompt × input + max output × output. Settled on the simulator's usage (prompt, 500).
    const reservation = PROMPT * 1 + MAX * 4;
    const cost = PROMPT * 1 + OUT * 4;
    const expected = Math.floor((BUDGET - reservation) / cost) + 1;
    assert.equal(expected, 4, `prompt ${PROMPT}: the prices and sizes give 4 requests`);

    let spent = 0;
    let reset: string | null = null;
    for (let i = 0; i < expected; i++) {
      // Half of them streamed: a stream settles on its usage chunk exactly like a JSON reply.
      let usage: OpenAI.CompletionUsage | undefined;
      let headers: Headers;
      if (i % 2 === 0) {
        const res = await client.chat.completions.create(body, opts).withResponse();
        usage = res.data.usage;
        headers = res.response.headers;
      } else {
        const res = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }, opts).withResponse();
        for await (const chunk of res.data) if (chunk.usage != null) usage = chunk.usage;
        headers = res.response.headers;
      }
      assert.deepEqual([usage?.prompt_tokens, usage?.completion_tokens], [PROMPT, OUT], `request ${i}`);
      assert.equal(headers.get('x-quotaring-budget'), 'cost/366d');
      assert.equal(headers.get('x-quotaring-budget-limit-usd'), '0.010000');
      // What was left after this request's reservation.
      assert.equal(headers.get('x-quotaring-budget-remaining-usd'), micros(BUDGET - spent - reservation), `request ${i}`);
      reset ??= headers.get('x-quotaring-budget-reset');
      assert.equal(headers.get('x-quotaring-budget-reset'), reset);
      spent += cost;
    }
    assert.ok(spent + reservation > BUDGET && spent - cost + reservation <= BUDGET);

    const before = await simStats(simUrl);
    const started = Date.now();
    await assert.rejects(client.chat.completions.create(body, opts), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError, String(err));
      assert.equal(err.status, 429);
      assert.equal(err.code, 'budget_exceeded');
      assert.equal(err.type, 'insufficient_quota');
      assert.equal(
        (err.error as { message?: string }).message,
        `Budget cost/366d of tenant penny is spent: $${micros(spent)} of $0.010000 used (requests in flight included) and it may cost up to $${micros(reservation)} (prompt ${PROMPT} + max output ${MAX} tokens at gpt-4o-mini prices). It renews at ${reset}.`,
      );
      assert.equal(err.headers.get('x-quotaring-error'), 'budget_exceeded');
      assert.equal(err.headers.get('x-should-retry'), 'false');
      assert.equal(err.headers.get('retry-after'), null);
      assert.equal(err.headers.get('x-quotaring-budget-remaining-usd'), micros(BUDGET - spent));
      return true;
    });
    // Not retried by the SDK (its default backoff would take ≥ 0.5 s per retry), and never upstream.
    assert.ok(Date.now() - started < 5_000);
    assert.equal((await simStats(simUrl)).requests, before.requests, 'a refused request never reaches the provider');
    assert.equal(before.requests, expected);

    // A request whose reservation still fits the rest is admitted: the refusal was exactly at the line.
    const left = BUDGET - spent;
    const small = Math.floor((left - PROMPT) / 4);
    const fits = await client.chat.completions.create({ ...body, max_tokens: small }, { headers: { 'x-sim-output-tokens': '1' } }).withResponse();
    assert.equal(fits.response.headers.get('x-quotaring-budget-remaining-usd'), micros(left - PROMPT - small * 4));
    await assert.rejects(client.chat.completions.create({ ...body, max_tokens: small }, opts), (err: unknown) => err instanceof OpenAI.RateLimitError && err.code === 'budget_exceeded');
  });

  test('the same line with the Anthropic SDK on /v1/messages: 429 rate_limit_error with x-quotaring-error budget_exceeded, not retried', async () => {
    const client = new Anthropic({ baseURL: routerUrl, apiKey: KEY_A });
    const prompt = countAnthropicMessages({ messages }, exactCounter('cl100k_base'));
    const body = { model: 'claude-test', max_tokens: MAX, messages };
    const opts = { headers: { 'x-sim-output-tokens': String(OUT) } };
    const reservation = prompt * 1 + MAX * 4;
    const cost = prompt * 1 + OUT * 4;
    const expected = Math.floor((BUDGET - reservation) / cost) + 1;
    let spent = 0;
    for (let i = 0; i < expected; i++) {
      let input: number | undefined;
      let output: number | undefined;
      let headers: Headers;
      if (i % 2 === 0) {
        const res = await client.messages.create(body, opts).withResponse();
        input = res.data.usage.input_tokens;
        output = res.data.usage.output_tokens;
        headers = res.response.headers;
      } else {
        const res = await client.messages.create({ ...body, stream: true }, opts).withResponse();
        for await (const event of res.data) {
          if (event.type === 'message_start') input = event.message.usage.input_tokens;
          if (event.type === 'message_delta') output = event.usage.output_tokens;
        }
        headers = res.response.headers;
      }
      assert.deepEqual([input, output], [prompt, OUT], `request ${i}`);
      assert.equal(headers.get('x-quotaring-budget-remaining-usd'), micros(BUDGET - spent - reservation), `request ${i}`);
      spent += cost;
    }
    const before = await simStats(simUrl);
    await assert.rejects(client.messages.create(body, opts), (err: unknown) => {
      assert.ok(err instanceof Anthropic.RateLimitError, String(err));
      assert.equal(err.status, 429);
      assert.equal((err.error as { error?: { type?: string } }).error?.type, 'rate_limit_error');
      assert.equal(err.headers?.get('x-quotaring-error'), 'budget_exceeded');
      assert.equal(err.headers?.get('x-should-retry'), 'false');
      assert.equal(err.headers?.get('x-quotaring-budget-remaining-usd'), micros(BUDGET - spent));
      return true;
    });
    assert.equal((await simStats(simUrl)).requests, before.requests, 'a refused request never reaches the provider');
  });
});
