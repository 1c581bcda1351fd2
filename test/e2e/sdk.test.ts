/**
 * End to end: the simulator and a gateway node as real processes, driven by the official `openai`
 * and `@anthropic-ai/sdk` clients.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { simStats, startStack } from '../helpers/processes.ts';
import type { Stack } from '../helpers/processes.ts';

/** Chat messages whose prompt counts exactly `n` tokens (o200k, with OpenAI's message overhead). */
function promptOf(n: number): { role: 'user'; content: string }[] {
  const counter = exactCounter('o200k_base');
  for (let k = 0; k <= n; k++) {
    const messages = [{ role: 'user' as const, content: ' the'.repeat(k) }];
    if (countOpenAIChat({ messages }, counter) === n) return messages;
  }
  throw new Error(`no prompt of ${n} tokens`);
}

const tenant = (id: string, limits: unknown[]) => ({ id, keys: [`key-${id}-0000`], limits });
const key = (id: string) => `key-${id}-0000`;
const openai = (stack: Stack, id: string, maxRetries = 0) => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: key(id), maxRetries });
const anthropic = (stack: Stack, id: string) => new Anthropic({ baseURL: stack.url, apiKey: key(id), maxRetries: 0 });

describe('gateway node with the SDKs (fast simulator)', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack([
      tenant('tpm', [{ requests: 100, window: '1m' }, { tokens: 300, window: '1m' }]),
      tenant('small', [{ tokens: 1000, window: '1m' }]),
      tenant('s1', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('s2', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('a1', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('a2', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('a3', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('retry', [{ requests: 1, window: '2s' }]),
      tenant('emb', [{ requests: 10, window: '1m' }, { tokens: 1000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('warm', []),
    ]);
    // Load both processes' tokenizers first, so the tests' requests follow each other within ms.
    await openai(stack, 'warm').chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1, messages: promptOf(10) });
    await anthropic(stack, 'warm').messages.create({ model: 'claude-test', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  });
  after(async () => stack.stop());

  test('{tpm 300, rpm 100}: prompt 50 + max_tokens 100 twice admitted, third refused', async () => {
    const client = openai(stack, 'tpm');
    const body = { model: 'gpt-4o-mini', max_tokens: 100, messages: promptOf(50) };
    const first = await client.chat.completions.create(body).withResponse();
    assert.deepEqual([first.data.usage?.prompt_tokens, first.data.usage?.completion_tokens], [50, 100]);
    assert.equal(first.response.headers.get('x-ratelimit-remaining-tokens'), '150');
    assert.equal(first.response.headers.get('x-ratelimit-remaining-requests'), '99');
    const second = await client.chat.completions.create(body).withResponse();
    assert.equal(second.response.headers.get('x-ratelimit-remaining-tokens'), '0');
    assert.equal(second.response.headers.get('x-ratelimit-remaining-requests'), '98');
    assert.equal(second.response.headers.get('x-ratelimit-limit-tokens'), '300');
    assert.equal(second.response.headers.get('x-ratelimit-limit-requests'), '100');
    const before = await simStats(stack.simUrl);
    await assert.rejects(client.chat.completions.create(body), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.status, 429);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.equal(err.type, 'tokens');
      assert.match(err.message, /tokens\/1m of tenant tpm/);
      const ms = Number(err.headers.get('retry-after-ms'));
      // 150 tokens at 300/min refill take 30 s, less the little time since the first request.
      assert.ok(ms > 28_000 && ms <= 30_000, `retry-after-ms ${ms}`);
      assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1000)));
      return true;
    });
    assert.equal((await simStats(stack.simUrl)).requests, before.requests, 'a refused request never reaches the provider');
  });

  test('{tpm 1000}: prompt 200 + max_tokens 1000 is request_too_large at once, not retried, never upstream', async () => {
    const client = openai(stack, 'small', 2);
    const before = await simStats(stack.simUrl);
    const started = Date.now();
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1000, messages: promptOf(200) }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.equal(err.code, 'request_too_large');
      assert.equal(err.headers.get('x-should-retry'), 'false');
      assert.equal(err.headers.get('retry-after'), null);
      assert.match(err.message, /needs 1200 tokens \(prompt 200 \+ max output 1000\) but the limit is 1000/);
      return true;
    });
    assert.ok(Date.now() - started < 2_000, 'the SDK did not wait to retry');
    assert.equal((await simStats(stack.simUrl)).requests, before.requests);
  });

  test('OpenAI stream: no usage chunk unless asked; with include_usage exactly one, last; both settle the same', async () => {
    const body = { model: 'gpt-4o-mini', max_tokens: 20, messages: promptOf(30), stream: true as const };
    const plain = await openai(stack, 's1').chat.completions.create(body);
    const plainChunks = [];
    for await (const chunk of plain) plainChunks.push(chunk);
    assert.equal(plainChunks.filter((c) => c.usage != null).length, 0);
    assert.equal(plainChunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), ' the'.repeat(20));

    const withUsage = await openai(stack, 's2').chat.completions.create({ ...body, stream_options: { include_usage: true } });
    const usageChunks = [];
    for await (const chunk of withUsage) usageChunks.push(chunk);
    const carrying = usageChunks.filter((c) => c.usage != null);
    assert.equal(carrying.length, 1);
    assert.equal(usageChunks.at(-1), carrying[0]);
    assert.deepEqual(carrying[0]?.usage, { prompt_tokens: 30, completion_tokens: 20, total_tokens: 50 });

    const probe = { model: 'gpt-4o-mini', max_tokens: 10, messages: promptOf(10) };
    const p1 = await openai(stack, 's1').chat.completions.create(probe).withResponse();
    const p2 = await openai(stack, 's2').chat.completions.create(probe).withResponse();
    // 100000 − 50 (settled stream) − 20 (probe reservation)
    assert.equal(p1.response.headers.get('x-ratelimit-remaining-tokens'), '99930');
    assert.equal(p2.response.headers.get('x-ratelimit-remaining-tokens'), '99930');
  });

  test('Anthropic stream: message_delta repeating input fields or carrying input 0 settles the same', async () => {
    const messages = [{ role: 'user' as const, content: 'Count to three.' }];
    for (const [id, variant] of [['a1', 'none'], ['a2', 'repeat'], ['a3', 'zero']] as const) {
      const client = anthropic(stack, id);
      const stream = await client.messages.create(
        { model: 'claude-test', max_tokens: 12, messages, stream: true },
        { headers: variant === 'none' ? {} : { 'x-sim-anthropic-delta-input': variant } },
      );
      const types: string[] = [];
      for await (const event of stream) types.push(event.type);
      assert.equal(types[0], 'message_start');
      assert.equal(types.at(-1), 'message_stop');
      assert.equal(types.filter((t) => t === 'content_block_delta').length, 12);
    }
    const remaining = [];
    for (const id of ['a1', 'a2', 'a3']) {
      const probe = await anthropic(stack, id).messages.create({ model: 'claude-test', max_tokens: 5, messages }).withResponse();
      assert.equal(probe.data.usage.output_tokens, 5);
      remaining.push(probe.response.headers.get('x-ratelimit-remaining-tokens'));
      assert.equal(probe.response.headers.get('anthropic-ratelimit-tokens-remaining'), remaining.at(-1));
    }
    assert.equal(new Set(remaining).size, 1, `remaining ${remaining.join(',')}`);
    const input = (await anthropic(stack, 'a1').messages.create({ model: 'claude-test', max_tokens: 1, messages })).usage.input_tokens;
    assert.equal(remaining[0], String(100_000 - (input + 12) - (input + 5)));
  });

  test('a 429 is honoured by the SDK\'s own retry', async () => {
    const client = openai(stack, 'retry', 2);
    const body = { model: 'gpt-4o-mini', max_tokens: 5, messages: promptOf(10) };
    await client.chat.completions.create(body);
    const before = await simStats(stack.simUrl);
    const started = Date.now();
    const second = await client.chat.completions.create(body).withResponse();
    const waited = Date.now() - started;
    assert.equal(second.response.status, 200);
    assert.ok(waited >= 1_500, `the SDK waited ${waited} ms (a request refills every 2 s)`);
    assert.equal((await simStats(stack.simUrl)).requests, before.requests + 1, 'only the admitted try reached the provider');
  });

  test('embeddings charge input tokens only', async () => {
    const res = await openai(stack, 'emb').embeddings.create({ model: 'text-embedding-3-small', input: ['hello world', 'the the the'] }).withResponse();
    assert.equal(res.data.usage.prompt_tokens, 5);
    assert.equal(res.data.data.length, 2);
    assert.equal(res.response.headers.get('x-ratelimit-remaining-tokens'), '995');
    assert.equal(res.response.headers.get('x-ratelimit-remaining-requests'), '9');
  });

  test('model list', async () => {
    const ids = [];
    for await (const model of openai(stack, 'emb').models.list()) ids.push(model.id);
    assert.deepEqual(ids, ['gpt-4o-mini', 'gpt-4o-est', 'text-embedding-3-small', 'claude-test']);
  });
});

describe('gateway node with the SDKs (streaming simulator at 50 tokens/s)', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack(
      [
        tenant('abort', [{ requests: 100, window: '1m' }, { tokens: 100_000, window: '1m' }, { concurrent: 1 }]),
        tenant('conc', [{ requests: 2, window: '1m' }, { tokens: 10_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }]),
        tenant('oabort', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }]),
        tenant('dropped', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }]),
        tenant('jabort', [{ tokens: 100_000, window: '1m', algorithm: 'sliding_window' }, { concurrent: 1 }]),
      ],
      { simArgs: ['--tps', '50'] },
    );
  });
  after(async () => stack.stop());

  test('{rpm 100, tpm 100k, concurrent 1}: aborted /v1/messages stream frees the slot within 1 s', async () => {
    const client = anthropic(stack, 'abort');
    const stream = await client.messages.create({ model: 'claude-test', max_tokens: 500, messages: [{ role: 'user', content: 'Write a long story.' }], stream: true });
    let deltas = 0;
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && ++deltas === 3) break; // leaving the loop aborts the request
    }
    assert.equal(deltas, 3);
    const aborted = Date.now();
    const body = { model: 'claude-test', max_tokens: 2, messages: [{ role: 'user' as const, content: 'Hi' }] };
    for (;;) {
      try {
        await client.messages.create(body);
        break;
      } catch (err) {
        assert.ok(err instanceof Anthropic.RateLimitError, String(err));
        assert.ok(Date.now() - aborted < 1_000, 'the slot was not freed within 1 s');
        await sleep(50);
      }
    }
    assert.ok(Date.now() - aborted < 1_000);
    await client.messages.create(body);
    await client.messages.create(body);
    await sleep(200);
    assert.equal((await simStats(stack.simUrl)).inFlight, 0, 'the upstream stream was cancelled');
  });

  test('{rpm 2, tpm 10k, concurrent 1}: a refusal for concurrency uses no request and no tokens', async () => {
    const client = openai(stack, 'conc');
    const body = { model: 'gpt-4o-mini', max_tokens: 100, messages: promptOf(50) };
    const holding = client.chat.completions.create({ ...body, stream: true }).withResponse();
    const held = await holding;
    assert.equal(held.response.headers.get('x-ratelimit-remaining-requests'), '1');
    await assert.rejects(client.chat.completions.create(body), (err: unknown) => {
      assert.ok(err instanceof OpenAI.RateLimitError);
      assert.match(err.message, /concurrent of tenant conc/);
      return true;
    });
    for await (const _chunk of held.data) {
      // drain the held stream: 100 tokens at 50/s
    }
    const next = await client.chat.completions.create({ ...body, max_tokens: 10 }).withResponse();
    // Had the refusal taken a request, this one would be refused (2 per minute).
    assert.equal(next.response.headers.get('x-ratelimit-remaining-requests'), '0');
    // 10000 − 150 (first, settled at 50 + 100) − 60 (this reservation)
    assert.equal(next.response.headers.get('x-ratelimit-remaining-tokens'), '9790');
  });

  test('a client that leaves before a JSON reply cancels the upstream call and frees the slot', async () => {
    const client = openai(stack, 'jabort');
    const controller = new AbortController();
    const pending = client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: promptOf(20) }, { signal: controller.signal, headers: { 'x-sim-ttft-ms': '5000' } });
    await sleep(300);
    assert.equal((await simStats(stack.simUrl)).inFlight, 1);
    controller.abort();
    await assert.rejects(pending, (err: unknown) => err instanceof OpenAI.APIUserAbortError);
    await sleep(300);
    assert.equal((await simStats(stack.simUrl)).inFlight, 0, 'the upstream call was cancelled');
    const next = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: promptOf(20) }).withResponse();
    // Settled on the prompt alone: 100000 − 20 − this reservation of 30.
    assert.equal(next.response.headers.get('x-ratelimit-remaining-tokens'), '99950');
  });

  test('a stream the provider drops mid-way fails for the client and settles on prompt plus delivered tokens', async () => {
    const client = openai(stack, 'dropped');
    const stream = await client.chat.completions.create(
      { model: 'gpt-4o-mini', max_tokens: 20, messages: promptOf(30), stream: true },
      { headers: { 'x-sim-fault': 'drop' } },
    );
    let content = 0;
    await assert.rejects(async () => {
      for await (const chunk of stream) if ((chunk.choices[0]?.delta.content ?? '') !== '') content++;
    });
    assert.equal(content, 10, 'the simulator drops after half the tokens');
    const probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: promptOf(10) }).withResponse();
    // 100000 − (30 prompt + 10 delivered) − 20 (probe reservation)
    assert.equal(probe.response.headers.get('x-ratelimit-remaining-tokens'), '99940');
  });

  test('aborted OpenAI stream settles on prompt plus delivered tokens and frees the slot', async () => {
    const client = openai(stack, 'oabort');
    const stream = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 1000, messages: promptOf(40), stream: true });
    let chunks = 0;
    for await (const chunk of stream) {
      if ((chunk.choices[0]?.delta.content ?? '') !== '' && ++chunks === 3) break;
    }
    await sleep(300);
    const probe = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: promptOf(10) }).withResponse();
    const remaining = Number(probe.response.headers.get('x-ratelimit-remaining-tokens'));
    const charged = 100_000 - 20 - remaining;
    assert.ok(charged >= 43 && charged <= 40 + 40, `charged ${charged}: prompt 40 + the few tokens delivered, not the 1000 reserved`);
  });
});
