/**
 * The IETF RateLimit header fields: Structured Fields serialization (RFC 9651 §4.1) as exact
 * strings, and `RateLimit-Policy` / `RateLimit` carrying the same binding limits as OpenAI's
 * `x-ratelimit-*`.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { buildConfig } from '../../src/config/load.ts';
import type { LimitState } from '../../src/limiter/types.ts';
import { ietfRateLimitHeaders, resetSeconds } from '../../src/providers/ietf-rate-limit-headers.ts';
import { openAIRateLimitHeaders } from '../../src/providers/rate-limit-headers.ts';
import { serializeBareItem, serializeItem, serializeList } from '../../src/providers/structured-fields.ts';

describe('Structured Fields serialization (RFC 9651 §4.1)', () => {
  test('bare items: Integer, String (escaped), Token, Byte Sequence, Boolean', () => {
    assert.equal(serializeBareItem(0), '0');
    assert.equal(serializeBareItem(30000), '30000');
    assert.equal(serializeBareItem(-7), '-7');
    assert.equal(serializeBareItem(999_999_999_999_999), '999999999999999');
    assert.equal(serializeBareItem('tokens'), '"tokens"');
    assert.equal(serializeBareItem('a "q" \\ b'), '"a \\"q\\" \\\\ b"');
    assert.equal(serializeBareItem({ token: 'foo/bar:1' }), 'foo/bar:1');
    assert.equal(serializeBareItem({ bytes: new TextEncoder().encode('trial121323') }), ':dHJpYWwxMjEzMjM=:');
    assert.equal(serializeBareItem(true), '?1');
    assert.equal(serializeBareItem(false), '?0');
  });
  test('values the format cannot carry are refused', () => {
    assert.throws(() => serializeBareItem(1.5), /not an Integer/);
    assert.throws(() => serializeBareItem(1_000_000_000_000_000), /not an Integer/);
    assert.throws(() => serializeBareItem('é'), /printable ASCII/);
    assert.throws(() => serializeBareItem('a\nb'), /printable ASCII/);
    assert.throws(() => serializeBareItem({ token: '1abc' }), /not a Token/);
    assert.throws(() => serializeItem({ value: 'x', params: [['Q', 1]] }), /parameter key/);
  });
  test("items with parameters and lists: the draft's examples", () => {
    assert.equal(serializeItem({ value: 'default', params: [['r', 50], ['t', 30]] }), '"default";r=50;t=30');
    assert.equal(
      serializeItem({ value: 'peruser', params: [['q', 65535], ['qu', 'content-bytes'], ['w', 10], ['pk', { bytes: Buffer.from('sdfjLJUOUH', 'base64') }]] }),
      '"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUA==:',
    );
    assert.equal(serializeItem({ value: 'x', params: [['flag', true]] }), '"x";flag');
    assert.equal(
      serializeList([
        { value: 'burst', params: [['q', 100], ['w', 60]] },
        { value: 'daily', params: [['q', 1000], ['w', 86400]] },
      ]),
      '"burst";q=100;w=60, "daily";q=1000;w=86400',
    );
    assert.equal(serializeList([]), '');
  });
});

const state = (name: string, kind: LimitState['kind'], limit: number, remaining: number, resetMs: number): LimitState => ({ name, kind, limit, remaining, resetMs });

describe('RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10 §3, §4)', () => {
  test('one item per kind, the binding limit of each, exact strings', () => {
    const limits = [
      state('requests/1m', 'requests', 60, 59, 1_000),
      state('requests/1d', 'requests', 1000, 12, 86_000_000),
      state('tokens/1m', 'tokens', 20000, 19941, 177),
      state('concurrent', 'concurrent', 4, 3, 0),
      state('cost/month', 'cost', 5_000_000, 4_000_000, 3_600_000),
    ];
    assert.deepEqual(ietfRateLimitHeaders(limits), {
      'ratelimit-policy': '"requests";q=1000, "tokens";q=20000;qu="tokens", "concurrency";q=4;qu="concurrent-requests"',
      ratelimit: '"requests";r=12;t=86000, "tokens";r=19941;t=1, "concurrency";r=3',
    });
  });
  test('the same limit, remaining and reset instant as x-ratelimit-*', () => {
    const limits = [state('requests/1m', 'requests', 5, 0, 12_001), state('tokens/1m', 'tokens', 30000, 1234, 11_500)];
    const openai = openAIRateLimitHeaders(limits);
    assert.equal(openai['x-ratelimit-limit-requests'], '5');
    assert.equal(openai['x-ratelimit-reset-requests'], '12.001s');
    assert.deepEqual(ietfRateLimitHeaders(limits), {
      'ratelimit-policy': '"requests";q=5, "tokens";q=30000;qu="tokens"',
      ratelimit: '"requests";r=0;t=13, "tokens";r=1234;t=12',
    });
  });
  test('no requests, tokens or concurrency limit: no field', () => {
    assert.deepEqual(ietfRateLimitHeaders([]), {});
    assert.deepEqual(ietfRateLimitHeaders([state('cost/1d', 'cost', 1, 1, 1)]), {});
  });
  test('reset seconds round up, never negative', () => {
    assert.equal(resetSeconds(0), 0);
    assert.equal(resetSeconds(-5), 0);
    assert.equal(resetSeconds(0.2), 1);
    assert.equal(resetSeconds(1000), 1);
    assert.equal(resetSeconds(1001), 2);
  });
});

describe('config server.ratelimit_headers', () => {
  const base = (server: Record<string, unknown>) => ({
    server,
    tenants: [{ id: 'acme', keys: ['key-acme-00000'], limits: [{ requests: 5, window: '1m' }] }],
    models: [{ name: 'm', encoding: 'none', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:1', api_key_env: 'SIM_KEY' }],
  });
  test('off by default; ietf accepted; unknown dialects and repeats refused', () => {
    assert.deepEqual(buildConfig(base({}), 'test.yaml', { SIM_KEY: 'k' }).config.server.ratelimit_headers, []);
    assert.deepEqual(buildConfig(base({ ratelimit_headers: ['ietf'] }), 'test.yaml', { SIM_KEY: 'k' }).config.server.ratelimit_headers, ['ietf']);
    assert.throws(() => buildConfig(base({ ratelimit_headers: ['draft-7'] }), 'test.yaml', { SIM_KEY: 'k' }), /ratelimit_headers/);
    assert.throws(() => buildConfig(base({ ratelimit_headers: ['ietf', 'ietf'] }), 'test.yaml', { SIM_KEY: 'k' }), /ratelimit_headers/);
  });
});
