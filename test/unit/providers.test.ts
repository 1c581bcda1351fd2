import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ERRORS, GatewayError, errorBody } from '../../src/errors.ts';
import { anthropicRateLimitHeaders, openAIRateLimitHeaders, retryAfterHeaders } from '../../src/providers/rate-limit-headers.ts';
import { AnthropicStreamObserver, anthropicUsage, parseMessagesRequest } from '../../src/providers/anthropic/messages.ts';
import { OpenAIChatStreamObserver, parseChatRequest, upstreamChatBody } from '../../src/providers/openai/chat.ts';
import { parseEmbeddingsRequest } from '../../src/providers/openai/embeddings.ts';
import { jsonField } from '../../src/providers/json-field.ts';
import { SseSplitter } from '../../src/providers/sse.ts';

const enc = (s: string) => new TextEncoder().encode(s);

describe('SSE splitter', () => {
  test('splits across chunk boundaries and keeps exact bytes', () => {
    const s = new SseSplitter();
    assert.deepEqual(s.push(enc('data: {"a":1}\n\nda')), [{ raw: 'data: {"a":1}\n\n', event: '', data: '{"a":1}' }]);
    assert.deepEqual(s.push(enc('ta: [DONE]\n')), []);
    assert.deepEqual(s.push(enc('\nevent: ping\r\ndata: {}\r\n\r\n')), [
      { raw: 'data: [DONE]\n\n', event: '', data: '[DONE]' },
      { raw: 'event: ping\r\ndata: {}\r\n\r\n', event: 'ping', data: '{}' },
    ]);
    assert.equal(s.rest(), '');
  });
  test('multi-byte characters split over chunks', () => {
    const s = new SseSplitter();
    const bytes = enc('data: é\n\n');
    assert.deepEqual(s.push(bytes.slice(0, 7)), []);
    assert.equal(s.push(bytes.slice(7))[0]?.data, 'é');
  });
});

describe('OpenAI chat', () => {
  test('request fields', () => {
    const r = parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, n: 2, stream: true });
    assert.equal(r.maxOutput, 10);
    assert.equal(r.choices, 2);
    assert.equal(r.clientWantsUsage, false);
    assert.equal(parseChatRequest({ model: 'm', messages: [{ role: 'user' }], max_completion_tokens: 7, max_tokens: 99 }).maxOutput, 7);
  });
  test('bad requests name the field', () => {
    const bad: [unknown, string][] = [
      [[], 'The request body must be a JSON object.'],
      [{ messages: [{ role: 'user' }] }, '"model" is required and must be a non-empty string.'],
      [{ model: 'm' }, '"messages" is required and must be a non-empty array.'],
      [{ model: 'm', messages: [] }, '"messages" is required and must be a non-empty array.'],
      [{ model: 'm', messages: ['x'] }, '"messages[0]" must be an object.'],
      [{ model: 'm', messages: [{}] }, '"messages[0].role" is required and must be a string.'],
      [{ model: 'm', messages: [{ role: 'user' }], max_tokens: -1 }, '"max_tokens" must be an integer from 1 to 10000000.'],
      [{ model: 'm', messages: [{ role: 'user' }], max_tokens: 1.5 }, '"max_tokens" must be an integer from 1 to 10000000.'],
      [{ model: 'm', messages: [{ role: 'user' }], max_tokens: '5' }, '"max_tokens" must be an integer from 1 to 10000000.'],
      [{ model: 'm', messages: [{ role: 'user' }], stream: 'yes' }, '"stream" must be a boolean.'],
      [{ model: 'm', messages: [{ role: 'user' }], stream_options: 3 }, '"stream_options" must be an object.'],
    ];
    for (const [body, message] of bad) {
      assert.throws(() => parseChatRequest(body), (err: unknown) => err instanceof GatewayError && err.code === 'invalid_request' && err.message === message);
    }
  });
  test('upstream body asks for usage on streams only', () => {
    const r = parseChatRequest({ model: 'pub', messages: [{ role: 'user' }], stream: true, stream_options: { include_usage: false } });
    assert.deepEqual(upstreamChatBody(r, 'up'), { model: 'up', messages: [{ role: 'user' }], stream: true, stream_options: { include_usage: true } });
    const j = parseChatRequest({ model: 'pub', messages: [{ role: 'user' }] });
    assert.deepEqual(upstreamChatBody(j, 'up'), { model: 'up', messages: [{ role: 'user' }] });
  });
  test('stream observer hides the usage chunk unless asked, and counts delivered tokens', () => {
    const events = [
      'data: {"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}\n\n',
      'data: {"choices":[{"delta":{"content":" the"}}],"usage":null}\n\n',
      'data: {"choices":[{"delta":{"content":" the"}}],"usage":null}\n\n',
      'data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}\n\n',
      'data: {"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":2,"total_tokens":52}}\n\n',
      'data: [DONE]\n\n',
    ];
    for (const wants of [false, true]) {
      const split = new SseSplitter();
      const obs = new OpenAIChatStreamObserver(wants);
      const kept = split.push(enc(events.join(''))).filter((e) => obs.onEvent(e)).map((e) => e.raw);
      assert.equal(kept.length, wants ? 6 : 5);
      assert.equal(kept.includes(events[4]!), wants);
      assert.deepEqual(obs.usage(), { input: 50, output: 2 });
      assert.equal(obs.deliveredOutput, 2);
    }
  });
});

describe('OpenAI embeddings', () => {
  test('inputs', () => {
    for (const input of ['a', ['a', 'b'], [1, 2], [[1], [2, 3]]]) assert.deepEqual(parseEmbeddingsRequest({ model: 'e', input }).input, input);
    for (const input of [undefined, '', [], [''], [1.5], [[]], 5]) {
      assert.throws(() => parseEmbeddingsRequest({ model: 'e', input }), (err: unknown) => err instanceof GatewayError && err.param === 'input');
    }
  });
});

describe('Anthropic messages', () => {
  test('max_tokens is required', () => {
    assert.equal(parseMessagesRequest({ model: 'c', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).maxOutput, 5);
    assert.throws(() => parseMessagesRequest({ model: 'c', messages: [{ role: 'user' }] }), /max_tokens: Field required/);
  });
  test('JSON usage includes cache tokens, and says which are cache reads and writes', () => {
    assert.deepEqual(anthropicUsage({ input_tokens: 10, cache_creation_input_tokens: 5, cache_read_input_tokens: 2, output_tokens: 7 }), { input: 17, output: 7, cacheRead: 2, cacheWrite: 5 });
    assert.deepEqual(anthropicUsage({ input_tokens: 10, output_tokens: 7 }), { input: 10, output: 7 });
  });
  const stream = (delta: string) =>
    [
      `event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":50,"cache_read_input_tokens":3,"output_tokens":1}}}\n\n`,
      'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":" the"}}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":" the"}}\n\n',
      `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":${delta}}\n\n`,
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ].join('');
  test('message_delta that repeats input fields, or carries 0, settles the same', () => {
    const totals = ['{"output_tokens":2}', '{"input_tokens":50,"cache_read_input_tokens":3,"output_tokens":2}', '{"input_tokens":0,"output_tokens":2}'].map((d) => {
      const obs = new AnthropicStreamObserver();
      for (const e of new SseSplitter().push(enc(stream(d)))) assert.equal(obs.onEvent(e), true);
      assert.equal(obs.deliveredOutput, 2);
      return obs.usage();
    });
    assert.deepEqual(totals, [{ input: 53, output: 2, cacheRead: 3 }, { input: 53, output: 2, cacheRead: 3 }, { input: 53, output: 2, cacheRead: 3 }]);
  });
  test('usage is unknown until message_delta', () => {
    const obs = new AnthropicStreamObserver();
    for (const e of new SseSplitter().push(enc(stream('{"output_tokens":2}').split('event: message_delta')[0]!))) obs.onEvent(e);
    assert.equal(obs.usage(), undefined);
  });
});

describe('error catalogue', () => {
  test('codes and statuses are pinned', () => {
    assert.deepEqual(Object.fromEntries(Object.entries(ERRORS).map(([k, v]) => [k, v.status])), {
      invalid_api_key: 401,
      invalid_json: 400,
      invalid_encoding: 400,
      unsupported_media_type: 415,
      body_too_large: 413,
      headers_too_large: 431,
      request_timeout: 408,
      invalid_request: 400,
      model_not_found: 404,
      wrong_endpoint: 400,
      not_found: 404,
      response_not_found: 404,
      rate_limit_exceeded: 429,
      share_exhausted: 429,
      budget_exceeded: 429,
      request_too_large: 429,
      misdirected: 421,
      not_owner: 409,
      forward_loop: 508,
      cluster_auth_failed: 401,
      upstream_unavailable: 502,
      upstream_timeout: 504,
      limiter_unavailable: 503,
      no_healthy_node: 503,
      node_starting: 503,
      internal_error: 500,
    });
  });
  test('bodies in each dialect', () => {
    assert.deepEqual(errorBody('openai', 'invalid_request', 'bad', { param: 'model' }), { error: { message: 'bad', type: 'invalid_request_error', param: 'model', code: 'invalid_request' } });
    assert.deepEqual(errorBody('anthropic', 'invalid_api_key', 'no'), { type: 'error', error: { type: 'authentication_error', message: 'no' } });
  });
});

describe('rate-limit headers', () => {
  const limits = [
    { name: 'requests/1m', kind: 'requests', limit: 100, remaining: 98, resetMs: 1_200 },
    { name: 'tokens/1m', kind: 'tokens', limit: 300, remaining: 0, resetMs: 60_000 },
    { name: 'tokens/1d', kind: 'tokens', limit: 5_000, remaining: 4_700, resetMs: 5_184 },
    { name: 'concurrent', kind: 'concurrent', limit: 2, remaining: 1, resetMs: 0 },
  ] as const;
  test('OpenAI headers report the binding limit of each kind', () => {
    assert.deepEqual(openAIRateLimitHeaders(limits), {
      'x-ratelimit-limit-requests': '100',
      'x-ratelimit-remaining-requests': '98',
      'x-ratelimit-reset-requests': '1.2s',
      'x-ratelimit-limit-tokens': '300',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '1m0s',
    });
  });
  test('Anthropic headers carry RFC 3339 resets', () => {
    const h = anthropicRateLimitHeaders(limits, Date.UTC(2026, 0, 1));
    assert.equal(h['anthropic-ratelimit-tokens-reset'], '2026-01-01T00:01:00Z');
    assert.equal(h['anthropic-ratelimit-requests-reset'], '2026-01-01T00:00:02Z');
    assert.equal(h['anthropic-ratelimit-requests-remaining'], '98');
  });
  test('retry-after rounds up to whole seconds, at least 1', () => {
    assert.deepEqual(retryAfterHeaders(1_234.2), { 'retry-after': '2', 'retry-after-ms': '1235' });
    assert.deepEqual(retryAfterHeaders(3), { 'retry-after': '1', 'retry-after-ms': '3' });
    assert.deepEqual(retryAfterHeaders(2_500, false), { 'retry-after': '3' });
  });
});

describe('jsonField', () => {
  test('reads the last usage object without parsing the rest', () => {
    const text = JSON.stringify({ choices: [{ message: { content: 'say "usage": {"x":1} } please' } }], usage: { prompt_tokens: 5, completion_tokens: 2, details: { cached: 1 } } });
    assert.deepEqual(jsonField(text, 'usage'), { prompt_tokens: 5, completion_tokens: 2, details: { cached: 1 } });
  });
  test('null, absent and malformed', () => {
    assert.equal(jsonField('{"a":1,"usage":null}', 'usage'), null);
    assert.equal(jsonField('{"a":1}', 'usage'), undefined);
    assert.equal(jsonField('not json', 'usage'), undefined);
    assert.deepEqual(jsonField('{"usage": {"a": "}"}}', 'usage'), { a: '}' });
  });
});
