/**
 * Input limits without I/O (issue 14, findings 6 and 7): the JSON depth scan, the mapping of
 * framework errors to catalogue codes, the count limits of request parsing, prompt counting of odd
 * tool schemas, and the listener settings' defaults and checks.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';
import { GatewayError } from '../../src/errors.ts';
import { clientErrorOf } from '../../src/http/client-errors.ts';
import { jsonShapeFault, nestsDeeperThan } from '../../src/gateway/json-body.ts';
import { listenerOptions } from '../../src/http/listener.ts';
import { parseMessagesRequest } from '../../src/providers/anthropic/messages.ts';
import { parseChatRequest } from '../../src/providers/openai/chat.ts';
import { countAnthropicMessages, countOpenAIChat } from '../../src/tokens/index.ts';
import type { TextCounter } from '../../src/tokens/encoding.ts';

const deeper = (text: string, max: number): boolean => nestsDeeperThan(Buffer.from(text), max);

describe('JSON depth scan', () => {
  test('exact boundary: depth = max passes, max + 1 is refused', () => {
    for (const max of [1, 2, 64]) {
      assert.equal(deeper('['.repeat(max) + ']'.repeat(max), max), false, `${max}`);
      assert.equal(deeper('['.repeat(max + 1) + ']'.repeat(max + 1), max), true, `${max} + 1`);
    }
    assert.equal(deeper('{"a":{"b":[1,{"c":2}]}}', 4), false);
    assert.equal(deeper('{"a":{"b":[1,{"c":2}]}}', 3), true);
    assert.equal(deeper('[[],[],[[]]]', 3), false);
    assert.equal(deeper('1', 1), false);
  });
  test('brackets inside strings do not count, escaped quotes do not end them', () => {
    assert.equal(deeper('{"a":"[[[[{{{{"}', 1), false);
    assert.equal(deeper('{"a":"\\"[[[[\\\\"}', 1), false);
    assert.equal(deeper('{"a":"x\\\\","b":[[1]]}', 2), true, 'an escaped backslash before the closing quote ends the string');
    assert.equal(deeper('["\\\\\\"[[["]', 1), false, 'three backslashes: the quote is escaped');
  });
  test('an unterminated string is left to JSON.parse', () => {
    assert.equal(deeper('["[[[[[', 1), false);
  });
});

describe('JSON members scan (issue 13: one request\'s parse is bounded)', () => {
  const fault = (text: string, max: number): string | undefined => jsonShapeFault(Buffer.from(text), 64, max);
  test('keys and non-number elements count; the boundary is exact', () => {
    // 3 keys + 2 commas before keys = 5 members.
    assert.equal(fault('{"a":1,"b":"x","c":[]}', 5), undefined);
    assert.equal(fault('{"a":1,"b":"x","c":[]}', 4), 'members');
    // Array elements after the first: strings, objects, arrays, literals.
    assert.equal(fault('["a","b",{},[],true,null]', 5), undefined);
    assert.equal(fault('["a","b",{},[],true,null]', 4), 'members');
  });
  test('number elements are free, pretty-printed or not (embedding token ids)', () => {
    const tokens = JSON.stringify({ input: Array.from({ length: 300_000 }, (_, i) => i - 5) });
    assert.equal(fault(tokens, 1), undefined);
    assert.equal(fault(JSON.stringify({ input: [1, -2, 3.5] }, null, 2), 1), undefined);
    assert.equal(fault('[1, \n\t "x"]', 0), 'members');
  });
  test('colons and commas inside strings do not count', () => {
    assert.equal(fault(JSON.stringify({ content: 'a:b,c,d:e,"f":,'.repeat(1_000) }), 1), undefined);
  });
  test('the hostile body (280,000 keys, 3 MB) is refused; depth is still judged', () => {
    const body = JSON.stringify(Object.fromEntries(Array.from({ length: 280_000 }, (_, i) => [`k${i}`, i])));
    assert.equal(fault(body, 200_000), 'members');
    assert.equal(jsonShapeFault(Buffer.from('[[[]]]'), 2, 10), 'depth');
  });
});

describe('framework errors map to 4xx catalogue codes', () => {
  test('fastify codes, then any 4xx status by its status; 5xx and others are not client errors', () => {
    assert.deepEqual(clientErrorOf({ code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 }), { code: 'unsupported_media_type' });
    assert.deepEqual(clientErrorOf({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 }), { code: 'body_too_large' });
    assert.equal(clientErrorOf({ code: 'FST_ERR_BAD_URL', statusCode: 400 })?.code, 'invalid_request');
    assert.equal(clientErrorOf({ code: 'FST_ERR_CTP_INVALID_CONTENT_LENGTH', statusCode: 400 })?.code, 'invalid_request');
    assert.deepEqual(clientErrorOf({ code: 'FST_ERR_SOMETHING_NEW', statusCode: 415, message: 'nope' }), { code: 'unsupported_media_type', message: 'nope' });
    assert.deepEqual(clientErrorOf({ statusCode: 431 }), { code: 'headers_too_large' });
    assert.deepEqual(clientErrorOf({ statusCode: 408 }), { code: 'request_timeout' });
    assert.deepEqual(clientErrorOf({ statusCode: 405, message: 'Method not allowed' }), { code: 'invalid_request', message: 'Method not allowed' });
    assert.equal(clientErrorOf({ statusCode: 500 }), undefined);
    assert.equal(clientErrorOf(new RangeError('Maximum call stack size exceeded')), undefined);
    assert.equal(clientErrorOf('text'), undefined);
  });
});

describe('message and tool counts', () => {
  const msgs = (n: number) => Array.from({ length: n }, () => ({ role: 'user', content: 'x' }));
  const limits = { messages: 3, tools: 2 };
  const refused = (fn: () => unknown, param: string) => assert.throws(fn, (err: unknown) => err instanceof GatewayError && err.code === 'invalid_request' && err.param === param);
  test('chat: at the limit accepted, one over refused naming the field', () => {
    assert.equal(parseChatRequest({ model: 'm', messages: msgs(3), tools: [{}, {}], functions: [{}, {}] }, limits).model, 'm');
    refused(() => parseChatRequest({ model: 'm', messages: msgs(4) }, limits), 'messages');
    refused(() => parseChatRequest({ model: 'm', messages: msgs(1), tools: [{}, {}, {}] }, limits), 'tools');
    refused(() => parseChatRequest({ model: 'm', messages: msgs(1), functions: [{}, {}, {}] }, limits), 'functions');
  });
  test('messages: at the limit accepted, one over refused naming the field', () => {
    assert.equal(parseMessagesRequest({ model: 'c', max_tokens: 1, messages: msgs(3), tools: [{}, {}] }, limits).model, 'c');
    refused(() => parseMessagesRequest({ model: 'c', max_tokens: 1, messages: msgs(4) }, limits), 'messages');
    refused(() => parseMessagesRequest({ model: 'c', max_tokens: 1, messages: msgs(1), tools: [{}, {}, {}] }, limits), 'tools');
  });
  test('defaults: 10,000 messages and 512 tools', () => {
    assert.doesNotThrow(() => parseChatRequest({ model: 'm', messages: msgs(10_000), tools: Array.from({ length: 512 }, () => ({})) }));
    refused(() => parseChatRequest({ model: 'm', messages: msgs(10_001) }), 'messages');
    refused(() => parseChatRequest({ model: 'm', messages: msgs(1), tools: Array.from({ length: 513 }, () => ({})) }), 'tools');
  });
});

describe('prompt counting of odd tool schemas', () => {
  const chars: TextCounter = { name: 'chars', count: (text: string) => text.length };
  const odd = JSON.parse('{"toString":1,"valueOf":2}') as unknown;
  test('object types and enum items count as String() writes them, without throwing', () => {
    const withType = (type: unknown, items: unknown[] = []) => countOpenAIChat({ messages: [], tools: [{ type: 'function', function: { name: 'f', parameters: { properties: { a: { type, enum: items } } } } }] }, chars);
    assert.equal(withType(odd), withType({}));
    assert.equal(withType('string', [odd, [odd, null], 1]), withType('string', [{}, [{}, null], 1]));
    // Arrays of strings read as String() joins them, as before.
    assert.equal(withType(['string', 'null']), withType('string,null'));
  });
  test('a deeply nested tool input or schema does not throw', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 20_000; i++) deep = { a: deep };
    assert.ok(countAnthropicMessages({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', name: 'f', input: deep }] }], tools: [{ name: 'f', input_schema: deep }] }, chars) > 0);
  });
});

describe('listener settings', () => {
  const base = () => ({
    tenants: [{ id: 'acme', keys: ['key-acme-0001'] }],
    models: [{ name: 'm', encoding: 'o200k_base', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9090' }],
  });
  function problems(raw: unknown): readonly string[] {
    try {
      buildConfig(raw, 'q.yaml', {});
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      return err.problems;
    }
    assert.fail('expected a ConfigError');
  }
  test('defaults', () => {
    const { server, router } = buildConfig(base(), 'q.yaml', {}).config;
    const listener = { headers_timeout: 10_000, request_timeout: 60_000, keep_alive_timeout: 72_000, idle_timeout: 300_000, max_header_size: 16_384, max_headers: 100 };
    assert.deepEqual({ ...server, host: undefined, port: undefined, sweep_interval: undefined, state_dir: undefined, log_level: undefined, log_format: undefined, count_tokens: undefined, ratelimit_headers: undefined }, { host: undefined, port: undefined, sweep_interval: undefined, log_level: undefined, state_dir: undefined, log_format: undefined, count_tokens: undefined, ratelimit_headers: undefined, body_limit: 4 * 1_048_576, json_depth: 64, json_max_members: 200_000, max_messages: 10_000, max_tools: 512, ...listener });
    assert.deepEqual(router, { host: '127.0.0.1', port: 8080, ...listener });
  });
  test('contradictions are refused with the key path', () => {
    assert.deepEqual(problems({ ...base(), server: { headers_timeout: '2m' } }), ['q.yaml: server.headers_timeout: headers_timeout (120000 ms) cannot exceed request_timeout (60000 ms)']);
    assert.deepEqual(problems({ ...base(), router: { idle_timeout: '3m' } }), [
      'q.yaml: router.idle_timeout: idle_timeout (180000 ms) would cut requests that legitimately wait 180000 ms without a byte (longest priority max_wait + longest deployment headers_timeout, or a body_timeout): raise it or set 0',
    ]);
    assert.deepEqual(problems({ ...base(), router: { max_headers: 101 } }), ['q.yaml: router.max_headers: router.max_headers (101) cannot exceed server.max_headers (100)']);
    assert.equal(buildConfig({ ...base(), server: { idle_timeout: 0, request_timeout: 0, headers_timeout: '2m' } }, 'q.yaml', {}).config.server.idle_timeout, 0);
  });
  test('fastify options: request_timeout bounds the request, headers_timeout the headers, checked at most every second', () => {
    const { server } = buildConfig(base(), 'q.yaml', {}).config;
    const o = listenerOptions(server, () => assert.fail('not logged'));
    assert.equal(o.requestTimeout, 60_000);
    assert.equal(o.connectionTimeout, 300_000);
    assert.equal(o.keepAliveTimeout, 72_000);
    assert.deepEqual(o.http, { headersTimeout: 10_000, maxHeaderSize: 16_384, connectionsCheckingInterval: 1_000 });
  });
  test('node\'s header timer alone: a connection that never sent a byte is closed without an answer, one that started a request gets 408 with its catalogue code', async () => {
    // Without applyListenerLimits' own timer, node's (which runs from the connection's start) is the one that fires.
    const { server } = buildConfig({ ...base(), server: { headers_timeout: 200, request_timeout: 400 } }, 'q.yaml', {}).config;
    const app: FastifyInstance = Fastify(listenerOptions(server, () => app.log));
    const url = new URL(await app.listen({ host: '127.0.0.1', port: 0 }));
    const answer = (bytes: string): Promise<string> =>
      new Promise((resolve) => {
        const socket = net.connect(Number(url.port), '127.0.0.1', () => void (bytes === '' || socket.write(bytes)));
        let data = '';
        socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
        socket.on('error', () => {});
        socket.on('close', () => resolve(data));
      });
    try {
      const [silent, started] = await Promise.all([answer(''), answer('POST /v1/messages HTTP/1.1\r\nhost: x\r\n')]);
      assert.equal(silent, '');
      assert.match(started, /^HTTP\/1\.1 408 /);
      assert.match(started, /\r\nx-quotaring-error: request_timeout\r\n/);
      assert.match(started, /"code":"request_timeout"/);
    } finally {
      await app.close();
    }
  });
});
