/**
 * Router pieces without sockets: suspect marks on a fake clock, member choice, header filtering,
 * connection-failure classification, body buffering, and the routes answered without a node.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import type { Member, Membership, Ring } from '../../src/coord/types.ts';
import { chooseMember, fallbackFor } from '../../src/router/choose-member.ts';
import { isConnectFailure } from '../../src/router/forward.ts';
import { endToEndHeaders } from '../../src/router/hop-by-hop.ts';
import { isReplayable, requestBodyOf } from '../../src/router/request-body.ts';
import { buildRouter } from '../../src/router/server.ts';
import { Suspects } from '../../src/router/suspects.ts';
import { Departures } from '../../src/router/departures.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';

const m = (id: string): Member => ({ id, url: `http://127.0.0.1:1/${id}` });
const [A, B, C] = [m('a'), m('b'), m('c')] as const;

/** Owner order = list order for every tenant. */
function listRing(order: readonly Member[]): Ring {
  return { version: order.map((x) => x.id).join(''), members: order, owner: () => order[0], range: (_t, k) => order.slice(0, k) };
}

describe('Suspects', () => {
  test('a timed mark ends exactly healthCheckMs later; a longer mark is kept', () => {
    const clock = new ManualClock(1_000);
    const s = new Suspects(clock);
    s.markFor('a', 1_000);
    clock.advance(500);
    s.markFor('a', 100); // shorter: ignored
    clock.advance(499);
    assert.equal(s.has('a'), true);
    clock.advance(1);
    assert.equal(s.has('a'), false);
    assert.deepEqual(s.list(), []);
  });
  test('a failed health check marks until cleared, whatever the time', () => {
    const clock = new ManualClock();
    const s = new Suspects(clock);
    s.markDown('b');
    s.markFor('a', 10);
    clock.advance(1e9);
    assert.deepEqual(s.list(), ['b']);
    s.clear('b');
    assert.equal(s.has('b'), false);
  });
  test('marks of members that left are forgotten', () => {
    const s = new Suspects(new ManualClock());
    s.markDown('a');
    s.markDown('b');
    s.retain(new Set(['b']));
    assert.deepEqual(s.list(), ['b']);
  });
});

describe('Departures', () => {
  const m = (id: string): Member => ({ id, url: `http://127.0.0.1/${id}` });
  test('remembers members that left for keepMs, forgets them when they come back', () => {
    const clock = new ManualClock();
    const departures = new Departures(clock, 1_000);
    const abc = createRing([m('a'), m('b'), m('c')]);
    const ab = createRing([m('a'), m('b')]);
    departures.update(abc, ab);
    assert.deepEqual([departures.has('a'), departures.has('c')], [false, true]);
    clock.advance(1_000);
    assert.equal(departures.has('c'), true);
    clock.advance(1);
    assert.equal(departures.has('c'), false);
    departures.update(abc, ab);
    departures.update(ab, abc);
    assert.equal(departures.has('c'), false);
  });
});

describe('chooseMember', () => {
  const ring = listRing([A, B, C]);
  const none = (): boolean => false;
  test('the owner when it is fine', () => assert.equal(chooseMember(ring, 't', none)?.id, 'a'));
  test('the next non-suspect member of the range', () => {
    assert.equal(chooseMember(ring, 't', (id) => id === 'a')?.id, 'b');
    assert.equal(chooseMember(ring, 't', (id) => id !== 'c')?.id, 'c');
  });
  test('never the excluded member', () => assert.equal(chooseMember(ring, 't', (id) => id === 'b', 'a')?.id, 'c'));
  test('undefined on an empty ring or when all are suspect', () => {
    assert.equal(chooseMember(listRing([]), 't', none), undefined);
    assert.equal(chooseMember(ring, 't', () => true), undefined);
  });
});

describe('fallbackFor', () => {
  const ring = listRing([A, B, C]);
  test('names the owner when the target is another member and the owner is suspect', () => {
    assert.equal(fallbackFor(ring, 't', B, (id) => id === 'a'), 'a');
    assert.equal(fallbackFor(ring, 't', C, (id) => id !== 'c'), 'a');
  });
  test('nothing for the owner itself, suspect or not', () => {
    assert.equal(fallbackFor(ring, 't', A, () => false), undefined);
    assert.equal(fallbackFor(ring, 't', A, () => true), undefined);
  });
  test('nothing when the owner is not suspect (only excluded after a 421), or the ring is empty', () => {
    assert.equal(fallbackFor(ring, 't', B, () => false), undefined);
    assert.equal(fallbackFor(listRing([]), 't', B, () => true), undefined);
  });
});

describe('endToEndHeaders', () => {
  test('drops hop-by-hop headers, those named in Connection, and the drop list', () => {
    const out = endToEndHeaders(
      {
        connection: 'keep-alive, X-Hop',
        'keep-alive': 'timeout=5',
        'transfer-encoding': 'chunked',
        'x-hop': '1',
        host: 'router',
        'set-cookie': ['a=1', 'b=2'],
        'content-type': 'text/event-stream',
        'x-empty': undefined,
      },
      new Set(['host']),
    );
    assert.deepEqual(out, { 'set-cookie': ['a=1', 'b=2'], 'content-type': 'text/event-stream' });
  });
});

describe('isConnectFailure', () => {
  test('refused, reset and closed-before-headers are; timeouts, aborts and others are not', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT']) assert.equal(isConnectFailure(Object.assign(new Error(code), { code })), true, code);
    assert.equal(isConnectFailure(new Error('wrapped', { cause: Object.assign(new Error(), { code: 'ECONNREFUSED' }) })), true);
    for (const code of ['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_ABORTED', undefined]) assert.equal(isConnectFailure(Object.assign(new Error('x'), { code })), false, String(code));
    assert.equal(isConnectFailure('ECONNREFUSED'), false);
  });
});

describe('requestBodyOf', () => {
  const incoming = (method: string, headers: Record<string, string>, chunks: Buffer[]): IncomingMessage =>
    Object.assign(Readable.from(chunks), { method, headers }) as unknown as IncomingMessage;
  test('GET and bodiless POST have no body', async () => {
    assert.deepEqual(await requestBodyOf(incoming('GET', {}, [])), { kind: 'none' });
    assert.deepEqual(await requestBodyOf(incoming('POST', { 'content-length': '0' }, [])), { kind: 'none' });
  });
  test('a body up to the limit is buffered whole (replayable)', async () => {
    const body = await requestBodyOf(incoming('POST', { 'content-length': '6' }, [Buffer.from('abc'), Buffer.from('def')]), 6);
    assert.equal(body.kind, 'buffer');
    assert.equal(body.kind === 'buffer' && body.bytes.toString(), 'abcdef');
    assert.equal(isReplayable(body), true);
  });
  test('a body over the limit or of unknown length is streamed (not replayable)', async () => {
    const big = await requestBodyOf(incoming('POST', { 'content-length': '7' }, [Buffer.from('abcdefg')]), 6);
    assert.equal(big.kind, 'stream');
    assert.equal(isReplayable(big), false);
    const chunked = await requestBodyOf(incoming('POST', { 'transfer-encoding': 'chunked' }, [Buffer.from('x')]), 6);
    assert.equal(chunked.kind === 'stream' && chunked.length, undefined);
  });
});

describe('routes answered without a node (inject)', () => {
  const config = buildConfig(
    {
      server: { log_level: 'silent' },
      tenants: [{ id: 'acme', keys: ['key-acme-00000'], limits: [{ requests: 10, window: '1m' }] }],
      models: [{ name: 'm', encoding: 'none', deployments: ['d'] }],
      deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
    },
    'test.yaml',
    {},
  );
  const membership = (ring: Ring): Membership => ({ start: async () => {}, stop: async () => {}, ring: () => ring, onChange: () => () => {} });

  test('401 for a missing key; 503 no_healthy_node and readyz 503 on an empty ring; healthz 200', async () => {
    const app = buildRouter({ config, membership: membership(listRing([])), clusterSecret: TEST_SECRET, logger: false });
    try {
      const noKey = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: '{}', headers: { 'content-type': 'application/json' } });
      assert.equal(noKey.statusCode, 401);
      assert.deepEqual(noKey.json(), { error: { message: 'Missing or unknown API key. Send the tenant key as "Authorization: Bearer <key>" or "x-api-key: <key>".', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } });
      const empty = await app.inject({ method: 'POST', url: '/v1/messages', payload: '{}', headers: { 'x-api-key': 'key-acme-00000', 'content-type': 'application/json' } });
      assert.equal(empty.statusCode, 503);
      assert.equal(empty.headers['x-quotaring-error'], 'no_healthy_node');
      assert.equal((empty.json() as { error: { type: string } }).error.type, 'overloaded_error');
      assert.equal((await app.inject({ url: '/readyz' })).statusCode, 503);
      assert.equal((await app.inject({ url: '/healthz' })).statusCode, 200);
    } finally {
      await app.close();
    }
  });
  test('readyz names the ring version and size when it has members', async () => {
    const app = buildRouter({ config, membership: membership(listRing([A, B])), clusterSecret: TEST_SECRET, logger: false });
    try {
      const res = await app.inject({ url: '/readyz' });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(res.json(), { status: 'ready', ring: 'ab', members: 2 });
    } finally {
      await app.close();
    }
  });
});
