/**
 * The provider simulator: wire formats (JSON and SSE) with exact usage, quota 429s with provider
 * headers on a fake clock, faults, auth, counters, and a real server for pacing, drops and
 * client disconnects.
 */
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { getEncoding } from 'js-tiktoken';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildSimulator, startSimulator } from '../../src/simulator/server.ts';
import { FaultPicker, Mulberry32 } from '../../src/simulator/faults.ts';
import { formatGoDuration, rfc3339After } from '../../src/providers/rate-limit-headers.ts';
import { OUTPUT_UNIT, outputLength } from '../../src/simulator/output-tokens.ts';
import type { SimulatorStats } from '../../src/simulator/stats.ts';
import type { ArrivalsSnapshot } from '../../src/simulator/arrivals.ts';

const OPENAI = { authorization: 'Bearer k1' };
const ANTHROPIC = { 'x-api-key': 'k1', 'anthropic-version': '2023-06-01' };
/** `hello world` as one user message: 3 (message) + 1 (`user`) + 2 (`hello world`) + 3 (reply priming) under o200k/cl100k. */
const HELLO = [{ role: 'user', content: 'hello world' }];
const HELLO_PROMPT = 9;
/** The same for Anthropic, cl100k_base stand-in: 3 (priming) + 3 (message) + 2 (`hello world`). */
const HELLO_INPUT = 8;

type Json = Record<string, unknown>;

interface SseEvent {
  event: string | null;
  data: string;
}

/** Splits an SSE body into events (`event:` line when present, `data:` line). */
function parseSse(body: string): SseEvent[] {
  assert.ok(body.endsWith('\n\n'), 'a stream ends with a blank line');
  return body
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      let event: string | null = null;
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data = line.slice(6);
        else assert.fail(`unexpected SSE line ${JSON.stringify(line)}`);
      }
      return { event, data };
    });
}

async function chat(app: FastifyInstance, body: Json, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...OPENAI, ...headers }, payload: { model: 'gpt-4o-mini', messages: HELLO, ...body } });
}

async function messages(app: FastifyInstance, body: Json, headers: Record<string, string> = {}) {
  return app.inject({ method: 'POST', url: '/v1/messages', headers: { ...ANTHROPIC, ...headers }, payload: { model: 'claude-test', max_tokens: 32, messages: HELLO, ...body } });
}

async function stats(app: FastifyInstance): Promise<SimulatorStats> {
  return (await app.inject({ url: '/sim/stats' })).json();
}

describe('output text', () => {
  test('" the" repeated n times is exactly n tokens in cl100k_base and o200k_base', () => {
    for (const name of ['cl100k_base', 'o200k_base'] as const) {
      const enc = getEncoding(name);
      for (const n of [1, 2, 3, 16, 255, 1000]) assert.equal(enc.encode(OUTPUT_UNIT.repeat(n)).length, n, `${name} × ${n}`);
    }
  });

  test('length: header capped by max_tokens, else max_tokens, else the default', () => {
    assert.deepEqual(outputLength('5', 3, 16), { tokens: 3, hitCap: true });
    assert.deepEqual(outputLength('2', 10, 16), { tokens: 2, hitCap: false });
    assert.deepEqual(outputLength('7', undefined, 16), { tokens: 7, hitCap: false });
    assert.deepEqual(outputLength(undefined, 10, 16), { tokens: 10, hitCap: true });
    assert.deepEqual(outputLength(undefined, undefined, 16), { tokens: 16, hitCap: false });
    assert.equal(typeof outputLength('-1', undefined, 16), 'string');
    assert.equal(typeof outputLength('1.5', undefined, 16), 'string');
  });
});

describe('header formats', () => {
  test('Go durations as OpenAI prints them', () => {
    assert.equal(formatGoDuration(0), '0s');
    assert.equal(formatGoDuration(20), '20ms');
    assert.equal(formatGoDuration(0.2), '1ms');
    assert.equal(formatGoDuration(1000), '1s');
    assert.equal(formatGoDuration(1574), '1.574s');
    assert.equal(formatGoDuration(1500), '1.5s');
    assert.equal(formatGoDuration(59_880), '59.88s');
    assert.equal(formatGoDuration(360_000), '6m0s');
    assert.equal(formatGoDuration(61_050), '1m1.05s');
    assert.equal(formatGoDuration(3_600_000), '1h0m0s');
  });

  test('RFC 3339 reset times, whole seconds rounded up', () => {
    assert.equal(rfc3339After(1_700_000_000_000, 0), '2023-11-14T22:13:20Z');
    assert.equal(rfc3339After(1_700_000_000_000, 60_000), '2023-11-14T22:14:20Z');
    assert.equal(rfc3339After(1_700_000_000_000, 1), '2023-11-14T22:13:21Z');
  });
});

describe('OpenAI chat completions', () => {
  test('JSON with exact usage; finish_reason length at max_tokens, stop otherwise', async () => {
    const app = buildSimulator();
    const capped = await chat(app, { max_tokens: 3 });
    assert.equal(capped.statusCode, 200);
    assert.equal(capped.headers['content-type'], 'application/json; charset=utf-8');
    const c = capped.json();
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.model, 'gpt-4o-mini');
    assert.deepEqual(c.choices, [{ index: 0, message: { role: 'assistant', content: ' the the the', refusal: null, annotations: [] }, logprobs: null, finish_reason: 'length' }]);
    assert.deepEqual(c.usage, { prompt_tokens: HELLO_PROMPT, completion_tokens: 3, total_tokens: HELLO_PROMPT + 3 });

    const dflt = (await chat(app, {})).json();
    assert.equal(dflt.choices[0].finish_reason, 'stop');
    assert.deepEqual(dflt.usage, { prompt_tokens: HELLO_PROMPT, completion_tokens: 16, total_tokens: HELLO_PROMPT + 16 });

    const completion = (await chat(app, { max_completion_tokens: 4, max_tokens: 9 })).json();
    assert.equal(completion.usage.completion_tokens, 4, 'max_completion_tokens wins over max_tokens');
    assert.equal(completion.choices[0].finish_reason, 'length');
  });

  test('x-sim-output-tokens sets the length, capped by max_tokens; an invalid value is a 400', async () => {
    const app = buildSimulator({ defaultOutputTokens: 5 });
    const short = (await chat(app, { max_tokens: 10 }, { 'x-sim-output-tokens': '2' })).json();
    assert.equal(short.usage.completion_tokens, 2);
    assert.equal(short.choices[0].finish_reason, 'stop');
    const cut = (await chat(app, { max_tokens: 3 }, { 'x-sim-output-tokens': '50' })).json();
    assert.equal(cut.usage.completion_tokens, 3);
    assert.equal(cut.choices[0].finish_reason, 'length');
    const free = (await chat(app, {}, { 'x-sim-output-tokens': '40' })).json();
    assert.equal(free.usage.completion_tokens, 40);
    assert.equal(free.choices[0].message.content, OUTPUT_UNIT.repeat(40));
    assert.equal((await chat(app, {})).json().usage.completion_tokens, 5, 'defaultOutputTokens');
    const bad = await chat(app, {}, { 'x-sim-output-tokens': 'many' });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.type, 'invalid_request_error');
  });

  test('SSE without include_usage: role chunk, one chunk per token, finish chunk, [DONE]; no usage anywhere', async () => {
    const app = buildSimulator();
    const res = await chat(app, { stream: true, max_tokens: 4 });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8');
    const events = parseSse(res.body);
    assert.equal(events.length, 1 + 4 + 1 + 1);
    assert.ok(events.every((e) => e.event === null), 'OpenAI sends no event: lines');
    assert.equal(events.at(-1)?.data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    const id = chunks[0]?.['id'];
    for (const c of chunks) {
      assert.equal(c['object'], 'chat.completion.chunk');
      assert.equal(c['id'], id);
      assert.equal(c['model'], 'gpt-4o-mini');
      assert.equal('usage' in c, false);
    }
    assert.deepEqual(chunks[0]?.['choices'], [{ index: 0, delta: { role: 'assistant', content: '', refusal: null }, logprobs: null, finish_reason: null }]);
    for (let i = 1; i <= 4; i++) assert.deepEqual(chunks[i]?.['choices'], [{ index: 0, delta: { content: ' the' }, logprobs: null, finish_reason: null }]);
    assert.deepEqual(chunks[5]?.['choices'], [{ index: 0, delta: {}, logprobs: null, finish_reason: 'length' }]);
  });

  test('SSE with include_usage: every chunk has usage null except one last chunk with choices [] and the usage', async () => {
    const app = buildSimulator();
    const res = await chat(app, { stream: true, stream_options: { include_usage: true } }, { 'x-sim-output-tokens': '6' });
    const events = parseSse(res.body);
    assert.equal(events.at(-1)?.data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    assert.equal(chunks.length, 1 + 6 + 1 + 1);
    const withUsage = chunks.filter((c) => c['usage'] !== null);
    assert.equal(withUsage.length, 1);
    assert.equal(withUsage[0], chunks.at(-1));
    assert.deepEqual(withUsage[0]?.['choices'], []);
    assert.deepEqual(withUsage[0]?.['usage'], { prompt_tokens: HELLO_PROMPT, completion_tokens: 6, total_tokens: HELLO_PROMPT + 6 });
    assert.ok(chunks.slice(0, -1).every((c) => 'usage' in c && c['usage'] === null));
    assert.equal((chunks.at(-2)?.['choices'] as Json[])[0]?.['finish_reason'], 'stop');

    const off = parseSse((await chat(app, { stream: true, stream_options: { include_usage: false } })).body);
    assert.ok(off.slice(0, -1).every((e) => !('usage' in (JSON.parse(e.data) as Json))));
  });
});

describe('OpenAI embeddings', () => {
  test('one deterministic unit vector of 8 floats per input, usage prompt tokens only; base64 like the SDK asks', async () => {
    const app = buildSimulator();
    const send = (input: unknown, extra: Json = {}) =>
      app.inject({ method: 'POST', url: '/v1/embeddings', headers: OPENAI, payload: { model: 'text-embedding-3-small', input, ...extra } });
    const res = await send(['hello world', 'the the the']);
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.equal(body.object, 'list');
    assert.deepEqual(body.usage, { prompt_tokens: 5, total_tokens: 5 });
    assert.equal(body.data.length, 2);
    assert.deepEqual(body.data.map((d: Json) => [d['object'], d['index']]), [['embedding', 0], ['embedding', 1]]);
    const v = body.data[0].embedding as number[];
    assert.equal(v.length, 8);
    assert.ok(Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) < 1e-6, 'unit length');
    assert.deepEqual((await send('hello world')).json().data[0].embedding, v, 'same input, same vector');
    assert.notDeepEqual(body.data[1].embedding, v);

    const b64 = (await send('hello world', { encoding_format: 'base64' })).json().data[0].embedding as string;
    const buf = Buffer.from(b64, 'base64');
    assert.equal(buf.length, 32);
    assert.deepEqual(Array.from(new Float32Array(buf.buffer, buf.byteOffset, 8)), v);

    assert.equal((await send([[1, 2, 3], [4, 5]])).json().usage.prompt_tokens, 5, 'token arrays count their length');
    const bad = await send(undefined);
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.param, 'input');
  });
});

describe('Anthropic messages', () => {
  test('JSON with usage and stop_reason', async () => {
    const app = buildSimulator();
    const res = await messages(app, { max_tokens: 3 });
    assert.equal(res.statusCode, 200);
    const m = res.json();
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.deepEqual(m.content, [{ type: 'text', text: ' the the the' }]);
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.input_tokens, HELLO_INPUT, 'cl100k_base, the stand-in for Claude');
    assert.equal(m.usage.output_tokens, 3);
    assert.equal((await messages(app, { max_tokens: 30 }, { 'x-sim-output-tokens': '4' })).json().stop_reason, 'end_turn');
  });

  test('SSE event sequence with event: lines, message_start output_tokens 1, cumulative message_delta usage', async () => {
    const app = buildSimulator();
    const res = await messages(app, { stream: true, max_tokens: 20 }, { 'x-sim-output-tokens': '3' });
    assert.equal(res.statusCode, 200);
    const events = parseSse(res.body);
    assert.deepEqual(
      events.map((e) => e.event),
      ['message_start', 'content_block_start', 'ping', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    const data = events.map((e) => JSON.parse(e.data) as Json);
    for (let i = 0; i < events.length; i++) assert.equal(data[i]?.['type'], events[i]?.event, 'event name = data type');
    const start = data[0]?.['message'] as Json;
    assert.deepEqual(start['usage'], { input_tokens: HELLO_INPUT, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1, service_tier: 'standard' });
    assert.deepEqual(start['content'], []);
    assert.deepEqual(data[3]?.['delta'], { type: 'text_delta', text: ' the' });
    assert.deepEqual(data[7], { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } });
  });

  test('x-sim-anthropic-delta-input repeats the input fields in message_delta, or sends input_tokens 0', async () => {
    const app = buildSimulator();
    const deltaUsage = async (variant: string) => {
      const events = parseSse((await messages(app, { stream: true, max_tokens: 2 }, { 'x-sim-anthropic-delta-input': variant })).body);
      return (JSON.parse(events.find((e) => e.event === 'message_delta')?.data ?? '{}') as Json)['usage'];
    };
    assert.deepEqual(await deltaUsage('repeat'), { input_tokens: HELLO_INPUT, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 2 });
    assert.deepEqual(await deltaUsage('zero'), { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 2 });
    assert.equal((await messages(app, { stream: true }, { 'x-sim-anthropic-delta-input': 'twice' })).statusCode, 400);
  });
});

describe('auth and validation', () => {
  test('missing key: 401 in each provider shape, counted as a request and an error', async () => {
    const app = buildSimulator();
    const o = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: { model: 'gpt-4o-mini', messages: HELLO } });
    assert.equal(o.statusCode, 401);
    assert.equal(o.json().error.type, 'invalid_request_error');
    assert.equal(o.json().error.code, null);
    const a = await app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': '' }, payload: { model: 'claude-test', messages: HELLO } });
    assert.equal(a.statusCode, 401);
    assert.deepEqual(a.json(), { type: 'error', error: { type: 'authentication_error', message: 'x-api-key header is required' } });
    const bearer = await app.inject({ method: 'POST', url: '/v1/messages', headers: { authorization: 'Bearer k9' }, payload: { model: 'claude-test', messages: HELLO } });
    assert.equal(bearer.statusCode, 200, 'the Anthropic SDK 1.x sends its apiKey as a Bearer token');
    const s = await stats(app);
    assert.equal(s.requests, 3);
    assert.equal(s.errors, 2);
    assert.deepEqual(Object.keys(s.byKey), ['k9']);
  });

  test('invalid JSON and missing model: 400 in provider shape', async () => {
    const app = buildSimulator();
    const json = { 'content-type': 'application/json' };
    const o = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...OPENAI, ...json }, payload: '{"model":' });
    assert.equal(o.statusCode, 400);
    assert.equal(o.json().error.type, 'invalid_request_error');
    const a = await app.inject({ method: 'POST', url: '/v1/messages', headers: { ...ANTHROPIC, ...json }, payload: 'nope' });
    assert.equal(a.statusCode, 400);
    assert.equal(a.json().type, 'error');
    assert.equal(a.json().error.type, 'invalid_request_error');
    const noModel = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: OPENAI, payload: { messages: HELLO } });
    assert.equal(noModel.statusCode, 400);
    assert.equal(noModel.json().error.param, 'model');
    const noMessages = await app.inject({ method: 'POST', url: '/v1/messages', headers: ANTHROPIC, payload: { model: 'claude-test' } });
    assert.equal(noMessages.statusCode, 400);
    assert.equal(noMessages.json().error.type, 'invalid_request_error');
    assert.equal((await chat(app, { max_tokens: 0 })).statusCode, 400);
    const s = await stats(app);
    assert.equal(s.requests, 5);
    assert.equal(s.errors, 5);
    assert.equal(s.completed, 0);
  });

  test('unknown route: 404 in OpenAI shape; model list in both shapes', async () => {
    const app = buildSimulator();
    const nf = await app.inject({ method: 'POST', url: '/v1/nope', headers: OPENAI });
    assert.equal(nf.statusCode, 404);
    assert.equal(nf.json().error.code, 'unknown_url');
    const list = (await app.inject({ url: '/v1/models', headers: OPENAI })).json();
    assert.equal(list.object, 'list');
    assert.ok(list.data.some((m: Json) => m['id'] === 'gpt-4o-mini' && m['object'] === 'model'));
    const alist = (await app.inject({ url: '/v1/models', headers: ANTHROPIC })).json();
    assert.equal(alist.has_more, false);
    assert.ok(alist.data.every((m: Json) => m['type'] === 'model'));
    assert.equal((await app.inject({ url: '/v1/models' })).statusCode, 401);
  });
});

describe('quota', () => {
  test('rpm 3: exactly 3 admitted, the 4th is a 429 with OpenAI body and headers; one refills after 20 s; keys are separate', async () => {
    const clock = new ManualClock();
    const app = buildSimulator({ clock, quota: { rpm: 3 } });
    const first = await chat(app, { max_tokens: 2 });
    assert.equal(first.statusCode, 200);
    assert.equal(first.headers['x-ratelimit-limit-requests'], '3');
    assert.equal(first.headers['x-ratelimit-remaining-requests'], '2');
    assert.equal(first.headers['x-ratelimit-reset-requests'], '20s');
    assert.equal(first.headers['x-ratelimit-limit-tokens'], undefined, 'no TPM configured');
    assert.equal((await chat(app, { max_tokens: 2 })).statusCode, 200);
    assert.equal((await chat(app, { max_tokens: 2 })).statusCode, 200);
    const refused = await chat(app, { max_tokens: 2 });
    assert.equal(refused.statusCode, 429);
    assert.deepEqual(refused.json(), {
      error: {
        message: 'Rate limit reached for requests per min (RPM) on gpt-4o-mini: Limit 3, Used 3, Requested 1. Please try again in 20s.',
        type: 'requests',
        param: null,
        code: 'rate_limit_exceeded',
      },
    });
    assert.equal(refused.headers['x-ratelimit-remaining-requests'], '0');
    assert.equal(refused.headers['x-ratelimit-reset-requests'], '1m0s');
    assert.equal(refused.headers['retry-after'], '20');
    assert.equal(refused.headers['retry-after-ms'], '20000');
    assert.equal((await chat(app, { max_tokens: 2 }, { authorization: 'Bearer k2' })).statusCode, 200, 'another key has its own quota');

    clock.advance(19_999);
    assert.equal((await chat(app, { max_tokens: 2 })).statusCode, 429);
    clock.advance(1);
    const again = await chat(app, { max_tokens: 2 });
    assert.equal(again.statusCode, 200);
    assert.equal(again.headers['x-ratelimit-remaining-requests'], '0');
    const s = await stats(app);
    assert.equal(s.rateLimited, 2);
    assert.equal(s.completed, 5);
    assert.deepEqual(s.byKey['k1'], { requests: 6, promptTokens: 4 * HELLO_PROMPT, completionTokens: 8, rateLimited: 2 });
  });

  test('tpm 100: admission charges prompt + max_tokens, settles to actual usage, refuses on tokens', async () => {
    const clock = new ManualClock();
    const app = buildSimulator({ clock, quota: { tpm: 100 } });
    // 9 prompt + 50 reserved, 10 generated → settles at 19.
    const a = await chat(app, { max_tokens: 50 }, { 'x-sim-output-tokens': '10' });
    assert.equal(a.statusCode, 200);
    assert.equal(a.headers['x-ratelimit-remaining-tokens'], '41');
    const b = await chat(app, { max_tokens: 50 }, { 'x-sim-output-tokens': '10' });
    assert.equal(b.headers['x-ratelimit-remaining-tokens'], '22', '100 − 19 − 59');
    // The bucket holds 100 − 19 − 19 = 62 after two settlements: 9 + 60 = 69 does not fit.
    const refused = await chat(app, { max_tokens: 60 });
    assert.equal(refused.statusCode, 429);
    const err = refused.json().error;
    assert.equal(err.type, 'tokens');
    assert.equal(err.code, 'rate_limit_exceeded');
    assert.equal(err.message, 'Rate limit reached for tokens per min (TPM) on gpt-4o-mini: Limit 100, Used 38, Requested 69. Please try again in 4.2s.');
    assert.equal(refused.headers['x-ratelimit-remaining-tokens'], '62');
    assert.equal(refused.headers['retry-after-ms'], '4200', '7 tokens at 100/60 000 per ms');
    assert.equal(refused.headers['retry-after'], '5');
    clock.advance(4_199);
    assert.equal((await chat(app, { max_tokens: 60 })).statusCode, 429);
    clock.advance(1);
    assert.equal((await chat(app, { max_tokens: 60 })).statusCode, 200);

    const tooLarge = await chat(app, { max_tokens: 200 });
    assert.equal(tooLarge.statusCode, 429);
    assert.match(tooLarge.json().error.message, /^Request too large for gpt-4o-mini on tokens per min \(TPM\): Limit 100, Requested 209\./);
    assert.equal(tooLarge.headers['retry-after'], undefined, 'never admissible: no retry hint');
  });

  test('Anthropic 429: rate_limit_error body, retry-after and anthropic-ratelimit-* headers with RFC 3339 resets', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const app = buildSimulator({ clock, quota: { rpm: 2, tpm: 1000 } });
    const ok = await messages(app, { max_tokens: 8 });
    assert.equal(ok.statusCode, 200);
    assert.equal(ok.headers['anthropic-ratelimit-requests-limit'], '2');
    assert.equal(ok.headers['anthropic-ratelimit-requests-remaining'], '1');
    assert.equal(ok.headers['anthropic-ratelimit-requests-reset'], '2023-11-14T22:13:50Z');
    assert.equal(ok.headers['anthropic-ratelimit-tokens-limit'], '1000');
    assert.equal(ok.headers['anthropic-ratelimit-tokens-remaining'], '984', '8 input + 8 max_tokens');
    assert.equal(ok.headers['x-ratelimit-limit-requests'], undefined, 'OpenAI headers only on OpenAI routes');
    await messages(app, { max_tokens: 8 });
    const refused = await messages(app, { max_tokens: 8 });
    assert.equal(refused.statusCode, 429);
    assert.equal(refused.json().type, 'error');
    assert.equal(refused.json().error.type, 'rate_limit_error');
    assert.equal(refused.headers['retry-after'], '30');
    assert.equal(refused.headers['retry-after-ms'], undefined);
    assert.equal(refused.headers['anthropic-ratelimit-requests-remaining'], '0');
    assert.equal(refused.headers['anthropic-ratelimit-requests-reset'], '2023-11-14T22:14:20Z');
  });

  test('POST /sim/reset zeroes the counters and refills every quota', async () => {
    const clock = new ManualClock();
    const app = buildSimulator({ clock, quota: { rpm: 1 } });
    await chat(app, {});
    assert.equal((await chat(app, {})).statusCode, 429);
    assert.equal((await app.inject({ method: 'POST', url: '/sim/reset' })).statusCode, 200);
    assert.deepEqual(await stats(app), { requests: 0, completed: 0, promptTokens: 0, completionTokens: 0, rateLimited: 0, errors: 0, dropped: 0, aborted: 0, inFlight: 0, peakInFlight: 0, countTokens: 0, byKey: {} });
    assert.equal((await chat(app, {})).statusCode, 200);
  });
});

describe('faults', () => {
  test('x-sim-fault error: OpenAI 500 server_error, Anthropic 529 overloaded_error; the request counts, its tokens are refunded', async () => {
    const clock = new ManualClock();
    const app = buildSimulator({ clock, quota: { rpm: 10, tpm: 1000 } });
    const o = await chat(app, { max_tokens: 50 }, { 'x-sim-fault': 'error' });
    assert.equal(o.statusCode, 500);
    assert.equal(o.json().error.type, 'server_error');
    const a = await messages(app, {}, { 'x-sim-fault': 'error' });
    assert.equal(a.statusCode, 529);
    assert.deepEqual(a.json(), { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
    const next = await chat(app, { max_tokens: 50 });
    assert.equal(next.headers['x-ratelimit-remaining-requests'], '7');
    assert.equal(next.headers['x-ratelimit-remaining-tokens'], '941', '1000 − 59: the failed requests used no tokens');
    const s = await stats(app);
    assert.equal(s.errors, 2);
    assert.equal(s.completed, 1);
    assert.equal(s.promptTokens, HELLO_PROMPT);
  });

  test('x-sim-fault echo-key*: the received credentials echoed in the body and x-sim-echo-* headers; 401/429/500; a mid-stream error event; nothing charged', async () => {
    const app = buildSimulator({ quota: { rpm: 10 } });
    const o = await chat(app, {}, { 'x-sim-fault': 'echo-key' });
    assert.equal(o.statusCode, 401);
    assert.equal(o.headers['x-sim-echo-authorization'], 'Bearer k1');
    assert.deepEqual(o.json(), {
      error: { message: 'Incorrect API key provided. Received authorization: "Bearer k1", x-api-key: "".', type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
      received: { authorization: 'Bearer k1', 'x-api-key': '' },
    });
    const limited = await messages(app, {}, { 'x-sim-fault': 'echo-key-429' });
    assert.equal(limited.statusCode, 429);
    assert.equal(limited.headers['x-should-retry'], 'false');
    assert.equal(limited.headers['x-sim-echo-x-api-key'], 'k1');
    assert.equal(limited.json().error.type, 'rate_limit_error');
    assert.equal((await chat(app, {}, { 'x-sim-fault': 'echo-key-500' })).statusCode, 500);
    assert.equal((await chat(app, {}, { 'x-sim-fault': 'echo-key-stream' })).statusCode, 401, 'a JSON request gets the 401');
    const stream = await chat(app, { stream: true }, { 'x-sim-fault': 'echo-key-stream' });
    assert.equal(stream.statusCode, 200);
    const events = parseSse(stream.body);
    assert.deepEqual(JSON.parse(events.at(-1)?.data ?? ''), { error: { message: 'Incorrect API key provided. Received authorization: "Bearer k1", x-api-key: "".', type: 'server_error', param: null, code: null } });
    const anthropicStream = parseSse((await messages(app, { stream: true }, { 'x-sim-fault': 'echo-key-stream' })).body);
    assert.equal(anthropicStream[0]?.event, 'message_start');
    assert.equal(anthropicStream.at(-1)?.event, 'error');
    assert.equal(JSON.parse(anthropicStream.at(-1)?.data ?? '').error.type, 'api_error');
    // Refused before the quota: the next request still has 10 − 1 requests left after it.
    assert.equal((await chat(app, {})).headers['x-ratelimit-remaining-requests'], '9');
    assert.equal((await stats(app)).errors, 6);
  });

  test('random faults follow the seed exactly', async () => {
    const run = async (seed: number) => {
      const app = buildSimulator({ seed, faults: { errorRate: 0.25 } });
      const codes: number[] = [];
      for (let i = 0; i < 40; i++) codes.push((await chat(app, { max_tokens: 1 })).statusCode);
      return codes;
    };
    const a = await run(7);
    assert.deepEqual(await run(7), a);
    assert.notDeepEqual(await run(8), a);
    const picker = new FaultPicker(7, { errorRate: 0.25, dropRate: 0, slowRate: 0 });
    const expected = Array.from({ length: 40 }, () => (picker.pick(false, undefined) === 'error' ? 500 : 200));
    assert.deepEqual(a, expected);
    assert.equal(a.filter((c) => c === 500).length, expected.filter((c) => c === 500).length);
    assert.ok(a.includes(500) && a.includes(200));
  });

  test('PRNG and picker: pinned values, three draws per request, drop only for streams, header overrides', () => {
    const r = new Mulberry32(1);
    assert.deepEqual([r.next(), r.next()].map((x) => Math.round(x * 1e9)), [627073941, 2735721]);
    const all = new FaultPicker(1, { errorRate: 0, dropRate: 1, slowRate: 1 });
    assert.equal(all.pick(true, undefined), 'drop');
    assert.equal(all.pick(false, undefined), 'slow');
    assert.equal(all.pick(false, 'drop'), 'none');
    assert.equal(all.pick(true, 'none'), 'none');
    assert.equal(all.pick(false, 'error'), 'error');
    assert.equal(new FaultPicker(1, { errorRate: 1, dropRate: 1, slowRate: 1 }).pick(true, undefined), 'error');
  });

  test('slow and x-sim-ttft-ms delay the reply by that many ms', async () => {
    const app = buildSimulator({ faults: { slowMs: 60 } });
    let t = performance.now();
    assert.equal((await chat(app, {}, { 'x-sim-fault': 'slow' })).statusCode, 200);
    assert.ok(performance.now() - t >= 59, `slow took ${performance.now() - t} ms`);
    t = performance.now();
    const res = await chat(app, { stream: true }, { 'x-sim-ttft-ms': '40' });
    assert.ok(performance.now() - t >= 39);
    assert.equal(parseSse(res.body).length, 1 + 16 + 1 + 1);
    assert.equal((await chat(app, {}, { 'x-sim-ttft-ms': '-1' })).statusCode, 400);
  });
});

describe('real server', () => {
  async function readStream(url: string, body: Json, headers: Record<string, string>, stopAfterChunks = Infinity) {
    const ac = new AbortController();
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal: ac.signal });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const dec = new TextDecoder();
    let text = '';
    let error: unknown = null;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
        if ((text.match(/"delta":\{"content"/g) ?? []).length >= stopAfterChunks) {
          ac.abort();
          break;
        }
      }
    } catch (err) {
      error = err;
    }
    return { status: res.status, text, error };
  }

  test('paced stream: 10 tokens at 100/s take ≥ 90 ms after the first', async () => {
    const sim = await startSimulator({ tokensPerSecond: 100 });
    try {
      const t = performance.now();
      const r = await readStream(`${sim.url}/v1/chat/completions`, { model: 'gpt-4o-mini', messages: HELLO, stream: true, max_tokens: 10 }, OPENAI);
      const elapsed = performance.now() - t;
      assert.equal(r.error, null);
      assert.equal((r.text.match(/"delta":\{"content"/g) ?? []).length, 10);
      assert.ok(r.text.endsWith('data: [DONE]\n\n'));
      assert.ok(elapsed >= 89 && elapsed < 1000, `took ${elapsed} ms`);
    } finally {
      await sim.close();
    }
  });

  test('drop: the stream sends half its tokens then the socket is destroyed; counted as dropped', async () => {
    const sim = await startSimulator({});
    try {
      const r = await readStream(`${sim.url}/v1/chat/completions`, { model: 'gpt-4o-mini', messages: HELLO, stream: true, max_tokens: 10 }, { ...OPENAI, 'x-sim-fault': 'drop' });
      assert.equal(r.status, 200);
      assert.notEqual(r.error, null, 'the client sees the connection cut');
      assert.equal((r.text.match(/"delta":\{"content"/g) ?? []).length, 5);
      assert.ok(!r.text.includes('[DONE]'));
      const s = (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
      assert.equal(s.dropped, 1);
      assert.equal(s.completed, 0);
      assert.equal(s.completionTokens, 5);
      assert.equal(s.inFlight, 0);
    } finally {
      await sim.close();
    }
  });

  test('client disconnect stops the stream: counted as aborted, settled on the tokens sent, no timer left', async () => {
    const clock = new ManualClock();
    const sim = await startSimulator({ tokensPerSecond: 50, quota: { tpm: 10_000 }, clock });
    try {
      const timersBefore = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
      const body = { model: 'claude-test', max_tokens: 500, messages: HELLO, stream: true };
      const ac = new AbortController();
      const res = await fetch(`${sim.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', ...ANTHROPIC }, body: JSON.stringify(body), signal: ac.signal });
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let text = '';
      while ((text.match(/content_block_delta/g) ?? []).length < 6) {
        const { value } = await reader.read();
        text += new TextDecoder().decode(value);
      }
      ac.abort();
      let s: SimulatorStats;
      for (let i = 0; ; i++) {
        s = (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
        if (s.aborted === 1 || i > 100) break;
        await sleep(10);
      }
      assert.equal(s.aborted, 1);
      assert.equal(s.inFlight, 0);
      assert.equal(s.completed, 0);
      const sent = s.completionTokens;
      assert.ok(sent >= 3 && sent < 20, `sent ${sent}`);
      await sleep(100);
      assert.equal(((await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats).completionTokens, sent, 'nothing more was generated');
      assert.equal(process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length, timersBefore, 'the pacing timer was cleared');
      // Settled at input + sent: the next request sees 10 000 − (input + sent) − (input + 1).
      const probe = await fetch(`${sim.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', ...ANTHROPIC }, body: JSON.stringify({ model: 'claude-test', max_tokens: 1, messages: HELLO }) });
      assert.equal(probe.headers.get('anthropic-ratelimit-tokens-remaining'), String(10_000 - (HELLO_INPUT + sent) - (HELLO_INPUT + 1)));
      await probe.text();
    } finally {
      await sim.close();
    }
  });

  test('peakInFlight: the most replies running at once since the start or the last reset (a reset starts it at those still running)', async () => {
    const sim = await startSimulator({ tokensPerSecond: 20 });
    try {
      const read = async (): Promise<SimulatorStats> => (await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats;
      const long = (): Promise<unknown> => readStream(`${sim.url}/v1/chat/completions`, { model: 'gpt-4o-mini', messages: HELLO, stream: true, max_tokens: 10 }, OPENAI);
      const three = [long(), long(), long()];
      await sleep(100);
      assert.deepEqual([(await read()).inFlight, (await read()).peakInFlight], [3, 3]);
      await Promise.all(three);
      assert.deepEqual([(await read()).inFlight, (await read()).peakInFlight], [0, 3]);
      const one = long();
      await sleep(100);
      await fetch(`${sim.url}/sim/reset`, { method: 'POST' });
      assert.equal((await read()).peakInFlight, 1);
      await one;
    } finally {
      await sim.close();
    }
  });

  test('close() ends open streams', async () => {
    const sim = await startSimulator({ tokensPerSecond: 10 });
    const pending = readStream(`${sim.url}/v1/chat/completions`, { model: 'gpt-4o-mini', messages: HELLO, stream: true, max_tokens: 1000 }, OPENAI);
    await sleep(50);
    const t = performance.now();
    await sim.close();
    assert.ok(performance.now() - t < 1000);
    const r = await pending;
    assert.ok(!r.text.includes('[DONE]'));
  });
});

describe('arrival log (GET /sim/arrivals)', () => {
  async function arrivals(app: FastifyInstance, query = ''): Promise<ArrivalsSnapshot> {
    const res = await app.inject({ url: `/sim/arrivals${query}` });
    assert.equal(res.statusCode, 200, res.body);
    return res.json();
  }

  test('each request on a model route: arrival time on the simulator clock, user, status, key, traceparent; ?since filters', async () => {
    const clock = new ManualClock();
    const t0 = clock.now();
    const app = buildSimulator({ clock, quota: { rpm: 2 } });
    assert.equal((await chat(app, { user: 'tenant-a' })).statusCode, 200);
    clock.advance(5);
    assert.equal((await messages(app, { metadata: { user_id: 'tenant-b' } })).statusCode, 200);
    clock.advance(5);
    assert.equal((await chat(app, { user: 'tenant-a', stream: true })).statusCode, 429, 'rpm 2 on k1');
    clock.advance(5);
    assert.equal((await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: { model: 'gpt-4o-mini', messages: HELLO, user: 'no-key' } })).statusCode, 401);
    clock.advance(5);
    assert.equal((await chat(app, { model: '', user: 'tenant-c' }, { authorization: 'Bearer k2' })).statusCode, 400);
    clock.advance(5);
    // The user is a string clipped to 128 chars, or null; Anthropic's is metadata.user_id only.
    assert.equal((await chat(app, { user: 'u'.repeat(300) }, { authorization: 'Bearer k3' })).statusCode, 200);
    // The traceparent a request carried is kept as received.
    const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    assert.equal((await chat(app, { user: 42 }, { authorization: 'Bearer k3', traceparent: TRACEPARENT })).statusCode, 200);
    assert.equal((await messages(app, { user: 'not-anthropic' }, { 'x-api-key': 'k4' })).statusCode, 200);
    clock.advance(5);
    const bedrock = await app.inject({ method: 'POST', url: '/model/claude-test/converse', headers: { authorization: 'Bearer bedrock-key' }, payload: { messages: [{ role: 'user', content: [{ text: 'hello world' }] }] } });
    assert.equal(bedrock.statusCode, 200, bedrock.body);
    // Not model routes: not logged.
    assert.equal((await app.inject({ method: 'POST', url: '/v1/messages/count_tokens', headers: ANTHROPIC, payload: { model: 'claude-test', messages: HELLO } })).statusCode, 200);
    assert.equal((await app.inject({ url: '/v1/models', headers: OPENAI })).statusCode, 200);

    const all = await arrivals(app);
    assert.deepEqual(all, {
      arrivals: [
        { at: t0, user: 'tenant-a', status: 200, key: 'k1', traceparent: null },
        { at: t0 + 5, user: 'tenant-b', status: 200, key: 'k1', traceparent: null },
        { at: t0 + 10, user: 'tenant-a', status: 429, key: 'k1', traceparent: null },
        { at: t0 + 15, user: null, status: 401, key: '', traceparent: null },
        { at: t0 + 20, user: 'tenant-c', status: 400, key: 'k2', traceparent: null },
        { at: t0 + 25, user: 'u'.repeat(128), status: 200, key: 'k3', traceparent: null },
        { at: t0 + 25, user: null, status: 200, key: 'k3', traceparent: TRACEPARENT },
        { at: t0 + 25, user: null, status: 200, key: 'k4', traceparent: null },
        { at: t0 + 30, user: null, status: 200, key: 'bedrock-key', traceparent: null },
      ],
      evicted: 0,
    });
    assert.deepEqual(await arrivals(app, `?since=${t0 + 25}`), { arrivals: all.arrivals.slice(5), evicted: 0 });
    assert.deepEqual(await arrivals(app, `?since=${t0 + 31}`), { arrivals: [], evicted: 0 });
    const bad = await app.inject({ url: '/sim/arrivals?since=soon' });
    assert.equal(bad.statusCode, 400);
    assert.match(bad.body, /since must be a time in ms/);
  });

  test('POST /sim/reset empties the log', async () => {
    const app = buildSimulator({ arrivalLogSize: 2 });
    for (let i = 0; i < 3; i++) await chat(app, { user: `u${i}` });
    assert.equal((await arrivals(app)).evicted, 1);
    assert.equal((await app.inject({ method: 'POST', url: '/sim/reset' })).statusCode, 200);
    assert.deepEqual(await arrivals(app), { arrivals: [], evicted: 0 });
    await chat(app, { user: 'after' });
    assert.deepEqual((await arrivals(app)).arrivals.map((a) => a.user), ['after']);
  });

  test('bounded: the last arrivalLogSize kept, oldest first, the rest counted as evicted; the size is validated', async () => {
    const clock = new ManualClock();
    const app = buildSimulator({ clock, arrivalLogSize: 3 });
    for (let i = 0; i < 7; i++) {
      await chat(app, { user: `u${i}` });
      clock.advance(1);
    }
    const got = await arrivals(app);
    assert.deepEqual(got.arrivals.map((a) => [a.user, a.at - clock.now()]), [['u4', -3], ['u5', -2], ['u6', -1]]);
    assert.equal(got.evicted, 4);
    assert.deepEqual((await arrivals(app, `?since=${clock.now() - 2}`)).arrivals.map((a) => a.user), ['u5', 'u6']);
    for (const bad of [0, -1, 1.5]) assert.throws(() => buildSimulator({ arrivalLogSize: bad }), /arrivalLogSize must be a positive integer/);
  });

  test('real server: a client that leaves before the reply is status 0; a dropped stream is the 200 it started with', async () => {
    const sim = await startSimulator({ ttftMs: 300 });
    try {
      const post = (body: Json, headers: Record<string, string> = {}, signal?: AbortSignal) =>
        fetch(`${sim.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...OPENAI, ...headers }, body: JSON.stringify({ model: 'gpt-4o-mini', messages: HELLO, ...body }), ...(signal === undefined ? {} : { signal }) });
      const ac = new AbortController();
      const left = post({ user: 'left' }, {}, ac.signal).catch((err: Error) => err.name);
      for (let i = 0; ((await (await fetch(`${sim.url}/sim/stats`)).json()) as SimulatorStats).inFlight === 0 && i < 100; i++) await sleep(10);
      ac.abort();
      assert.equal(await left, 'AbortError');
      const dropped = await post({ user: 'dropped', stream: true, max_tokens: 10 }, { 'x-sim-fault': 'drop' });
      await dropped.text().catch(() => '');
      await (await post({ user: 'served' })).text();
      let got: ArrivalsSnapshot;
      for (let i = 0; ; i++) {
        got = (await (await fetch(`${sim.url}/sim/arrivals`)).json()) as ArrivalsSnapshot;
        if (got.arrivals.every((a) => a.status !== null) || i > 100) break;
        await sleep(10);
      }
      assert.deepEqual(got.arrivals.map((a) => [a.user, a.status]), [['left', 0], ['dropped', 200], ['served', 200]]);
    } finally {
      await sim.close();
    }
  });
});
