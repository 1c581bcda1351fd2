/**
 * A budgeted tenant's requests that the client abandons, through a real node over HTTP (in-process
 * gateway listening on 127.0.0.1, fake clock for the limits) in front of real simulators. The money
 * follows the tokens' rule (docs/limits.md, "Two-phase tokens" and "Budgets"):
 *
 * - a stream aborted mid-way settles on the prompt at the input price plus the output delivered at
 *   the output price (no usage chunk came): exact to the micro-dollar, and the very tokens the
 *   tokens limit was charged;
 * - a request abandoned after it was sent upstream but before its first byte came back is charged
 *   its prompt (the provider has it and bills it);
 * - a request abandoned before it reached the provider (waiting out a provider 429) is charged
 *   nothing: its whole reservation comes back;
 * - in every case the reservation and the concurrency slot are released.
 *
 * Spend is read from the node's tenant state route (`GET /_quotaring/v1/tenants/:id`, signed) and
 * the `x-quotaring-budget-remaining-usd` header.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { TEST_SECRET, signedRequest } from '../helpers/cluster-secret.ts';
import { simStats } from '../helpers/processes.ts';

const KEY = 'key-abort-00000';
/** USD per million tokens: input 1 µ$ a token, output 4 µ$ (so every cost is whole micro-dollars). */
const PRICES = { input: 1, output: 4 };
const BUDGET = 1_000_000; // $1 a day, in micro-dollars
const messages = [{ role: 'user', content: 'tell me a long story' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));
const headers = (extra: Record<string, string> = {}) => ({ authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...extra });

/** The state of the tenant's limits on the node: micro-dollars left of the budget, tokens left, free slots. */
interface Left {
  readonly usd: number;
  readonly tokens: number;
  readonly slots: number;
}

describe('client aborts of a budgeted tenant (real HTTP)', () => {
  /** Streams one token at once, then one every 10 s: a client that read the first one aborts long before the second. */
  let slow: Awaited<ReturnType<typeof startSimulator>>;
  /** Streams 20 tokens a second. */
  let paced: Awaited<ReturnType<typeof startSimulator>>;
  /** A provider quota of 1 request a minute: the second request gets a 429 whose wait the node sits out. */
  let limited: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url = '';

  before(async () => {
    slow = await startSimulator({ port: 0, tokensPerSecond: 0.1 });
    paced = await startSimulator({ port: 0, tokensPerSecond: 20 });
    limited = await startSimulator({ port: 0, quota: { rpm: 1 } });
    const forward = ['x-sim-output-tokens', 'x-sim-ttft-ms'];
    const config = buildConfig(
      {
        server: { log_level: 'silent', idle_timeout: 0 },
        tenants: [{ id: 'acme', keys: [KEY], limits: [{ usd: 1, window: '1d' }, { tokens: 1_000_000, window: '1d' }, { concurrent: 1 }] }],
        models: [
          { name: 'slow', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim-slow'], prices: PRICES },
          { name: 'paced', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim-paced'], prices: PRICES },
          { name: 'limited', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim-limited'], prices: PRICES },
        ],
        deployments: [
          { name: 'sim-slow', provider: 'openai', base_url: slow.url, api_key_env: 'SIM_KEY', forward_headers: forward },
          { name: 'sim-paced', provider: 'openai', base_url: paced.url, api_key_env: 'SIM_KEY', forward_headers: forward },
          { name: 'sim-limited', provider: 'openai', base_url: limited.url, api_key_env: 'SIM_KEY', forward_headers: forward, max_retry_wait: '5m' },
        ],
      },
      'budget-abort.yaml',
      { SIM_KEY: 'sim-key-abort' },
    );
    // A fixed clock: the tokens bucket does not refill and the day does not end during the test.
    app = buildGateway({ config, clock: new ManualClock(Date.parse('2025-06-02T12:00:00Z')), clusterSecret: TEST_SECRET, logger: false });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`;
  });
  after(async () => {
    const closing = app.close();
    app.server.closeAllConnections();
    await closing;
    await Promise.all([slow.close(), paced.close(), limited.close()]);
  });

  async function left(): Promise<Left> {
    const res = await signedRequest(`${url}/_quotaring/v1/tenants/acme`);
    const body = (await res.body.json()) as { limits: { name: string; remaining: number; usd?: { spent: string } }[] };
    assert.equal(res.statusCode, 200, JSON.stringify(body));
    const of = (name: string): number => {
      const l = body.limits.find((x) => x.name === name);
      assert.ok(l !== undefined, `${name} in ${JSON.stringify(body.limits)}`);
      return l.remaining;
    };
    return { usd: of('cost/1d'), tokens: of('tokens/1d'), slots: of('concurrent') };
  }

  /** The state once the aborted request has been settled and released (its slot free again), within 20 s. */
  async function settled(): Promise<Left> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const now = await left();
      if (now.slots === 1 || Date.now() > deadline) return now;
      await sleep(20);
    }
  }

  /** Opens a stream, reads until `enough(text so far)`, then aborts. @returns the response headers and the text read. */
  async function streamThenAbort(model: string, maxTokens: number, enough: (text: string) => boolean, extra: Record<string, string> = {}): Promise<{ headers: Headers; text: string }> {
    const abort = new AbortController();
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers(extra), body: JSON.stringify({ model, max_tokens: maxTokens, stream: true, messages }), signal: abort.signal });
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!enough(text)) {
      const { value, done } = await reader.read();
      assert.equal(done, false, `the stream ended before the test aborted it: ${text}`);
      text += decoder.decode(value, { stream: true });
    }
    abort.abort();
    await reader.cancel().catch(() => {});
    return { headers: res.headers, text };
  }

  /** Content tokens (` the`) in the SSE text a client read. */
  const contentTokens = (text: string): number => text.split('\n').filter((l) => l.startsWith('data: {') && l.includes('"content":" the"')).length;

  test('a stream aborted after its first token: prompt × input + 1 × output, slot and reservation released', async () => {
    const before = await left();
    assert.deepEqual(before, { usd: BUDGET, tokens: 1_000_000, slots: 1 });
    const { headers: h, text } = await streamThenAbort('slow', 100, (t) => contentTokens(t) >= 1);
    assert.equal(contentTokens(text), 1);
    // The reservation: prompt at the input price + 100 reserved output tokens at the output price.
    assert.equal(h.get('x-quotaring-budget'), 'cost/1d');
    assert.equal(h.get('x-quotaring-budget-remaining-usd'), `0.${String(BUDGET - (PROMPT * 1 + 100 * 4)).padStart(6, '0')}`);
    const after = await settled();
    assert.deepEqual(after, { usd: BUDGET - (PROMPT * 1 + 1 * 4), tokens: 1_000_000 - (PROMPT + 1), slots: 1 });
  });

  test('a stream aborted mid-way is charged exactly the tokens the tokens limit was charged, priced', async () => {
    const before = await left();
    const { text } = await streamThenAbort('paced', 400, (t) => contentTokens(t) >= 5);
    const read = contentTokens(text);
    const after = await settled();
    assert.equal(after.slots, 1);
    // Output tokens the node saw go by (some may have been on their way to the client when it left).
    const delivered = before.tokens - after.tokens - PROMPT;
    assert.ok(delivered >= read && delivered < 400, `delivered ${delivered}, the client read ${read}`);
    assert.equal(before.usd - after.usd, PROMPT * 1 + delivered * 4);
    // The provider streamed at least what the node counted (the simulator counts what it wrote).
    const written = (await simStats(paced.url)).byKey['sim-key-abort']?.completionTokens ?? 0;
    assert.ok(written >= delivered, `simulator wrote ${written}, node counted ${delivered}`);
  });

  test('aborted after the request went upstream, before its first byte came back: the prompt is charged', async () => {
    const before = await left();
    const abort = new AbortController();
    const pending = fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers({ 'x-sim-ttft-ms': '60000' }), body: JSON.stringify({ model: 'slow', max_tokens: 50, stream: true, messages }), signal: abort.signal });
    // The simulator has the request (it waits 60 s before its first byte).
    const deadline = Date.now() + 20_000;
    while ((await simStats(slow.url)).inFlight === 0 && Date.now() < deadline) await sleep(20);
    assert.equal((await simStats(slow.url)).inFlight, 1);
    assert.equal((await left()).usd, before.usd - (PROMPT + 50 * 4), 'reserved while it runs');
    abort.abort();
    await assert.rejects(pending);
    assert.deepEqual(await settled(), { usd: before.usd - PROMPT * 1, tokens: before.tokens - PROMPT, slots: 1 });
  });

  test('aborted before it reached the provider (waiting out a provider 429): the whole reservation comes back', async () => {
    // The provider's one request a minute, spent by a first request (settled on its usage).
    const first = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers({ 'x-sim-output-tokens': '3' }), body: JSON.stringify({ model: 'limited', max_tokens: 10, messages }) });
    assert.equal(first.status, 200);
    const usage = ((await first.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [PROMPT, 3]);
    const before = await settled();
    const abort = new AbortController();
    const pending = fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers(), body: JSON.stringify({ model: 'limited', max_tokens: 50, stream: true, messages }), signal: abort.signal });
    // The node got the provider's 429 and sits out its wait (about a minute), the request reserved.
    const deadline = Date.now() + 20_000;
    while ((await simStats(limited.url)).rateLimited === 0 && Date.now() < deadline) await sleep(20);
    assert.equal((await simStats(limited.url)).rateLimited, 1);
    assert.deepEqual(await left(), { usd: before.usd - (PROMPT + 50 * 4), tokens: before.tokens - (PROMPT + 50), slots: 0 });
    abort.abort();
    await assert.rejects(pending);
    assert.deepEqual(await settled(), before);
    assert.equal((await simStats(limited.url)).requests, 2, 'the abandoned request was not sent again');
  });
});
