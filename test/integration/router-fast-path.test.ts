/**
 * The router's fast path (src/router/fast-path.ts: POSTs under /v1/ and /openai/ served below
 * fastify) against fastify's own path for the same routes (`inject()`, and the requests the fast
 * path leaves to fastify): the same answers byte for byte (status, headers, body), the same log
 * lines and metrics; fastify's 503 while the router closes; GET, HEAD and DELETE, URLs with
 * percent-encoding, `accept-version` and odd content types still served by fastify. The stand-in
 * node is a plain `node:http` server.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import type { Member, Ring } from '../../src/coord/types.ts';
import { buildRouter, routerControl } from '../../src/router/server.ts';
import { TestMembership } from '../helpers/membership.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import { LogLines, StandInNode } from '../helpers/stand-in-node.ts';

const KEY = 'key-fast-000000';
const OTHER_KEY = 'key-fast-111111';
const BODY_LIMIT = 4_096;
const config = buildConfig(
  {
    server: { log_level: 'debug', body_limit: BODY_LIMIT },
    tenants: [
      { id: 'acme', keys: [KEY], limits: [{ requests: 10, window: '1m' }] },
      { id: 'other', keys: [OTHER_KEY], limits: [{ requests: 10, window: '1m' }] },
    ],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
  },
  'test.yaml',
  {},
);
const ringOf = (members: Member[]): Ring => ({ version: members.length === 0 ? 'empty' : 'v1', members, owner: () => members[0], range: () => members });
const chat = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] });

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** The headers a response carries, without those only a real socket has (date, connection). */
function comparable(headers: IncomingHttpHeaders | Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (!['date', 'connection', 'keep-alive'].includes(name)) out[name] = String(value);
  return out;
}

/** One request over a fresh connection (node:http, so the headers are sent as given, `content-length` included). */
function send(url: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode as number, headers: comparable(res.headers), body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function metric(router: FastifyInstance, status: number): Promise<number> {
  const text = (await router.inject({ method: 'GET', url: '/metrics' })).body;
  const line = text.split('\n').find((l) => l.startsWith(`quotaring_router_requests_total{status="${status}"}`));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

describe('router fast path', () => {
  let node: StandInNode;
  let membership: TestMembership;
  let lines: LogLines;
  let router: FastifyInstance;
  let url: string;

  before(async () => {
    node = await new StandInNode().start();
    membership = new TestMembership(ringOf([node.member]));
    lines = new LogLines();
    router = buildRouter({ config, membership, clusterSecret: TEST_SECRET, logStream: lines.stream, healthCheckMs: 60_000 });
    url = await router.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await router.close();
    await node.stop();
  });

  /**
   * Sends the request on the fast path (over HTTP) and through fastify (inject): asserts the same
   * answer, the same log lines and the same metric count, and returns the fast path's answer.
   */
  async function both(path: string, headers: Record<string, string>, body: string | undefined, expectStatus: number): Promise<Answer> {
    const before = await metric(router, expectStatus);
    const fromLine = lines.all.length;
    const served = routerControl(router).fastPathServed();
    const fast = await send(url, 'POST', path, headers, body);
    assert.equal(routerControl(router).fastPathServed(), served + 1, 'served on the fast path');
    await sleep(20);
    const fastLines = lines.since(fromLine);
    const middle = await metric(router, expectStatus);
    const fromSlowLine = lines.all.length;
    const slow = await router.inject({ method: 'POST', url: path, headers, ...(body === undefined ? {} : { payload: body }) });
    await sleep(20);
    const slowLines = lines.since(fromSlowLine);
    assert.equal(fast.status, expectStatus, fast.body);
    assert.deepEqual({ status: fast.status, headers: fast.headers, body: fast.body }, { status: slow.statusCode, headers: comparable(slow.headers), body: slow.body });
    assert.deepEqual(fastLines, slowLines);
    assert.equal(middle - before, 1, 'the fast path counts the request once');
    assert.equal((await metric(router, expectStatus)) - middle, 1, 'fastify counts it once');
    return fast;
  }

  test('errors the router answers itself are fastify\'s, byte for byte, in both dialects, with the same log lines and metrics', async () => {
    const json = { 'content-type': 'application/json' };
    for (const path of ['/v1/chat/completions', '/v1/messages', '/openai/deployments/d/chat/completions?api-version=2024-10-21']) {
      const noKey = await both(path, json, chat, 401);
      assert.equal(noKey.headers['x-quotaring-error'], 'invalid_api_key');
      assert.equal(noKey.headers['content-type'], 'application/json; charset=utf-8');
      await both(path, { ...json, authorization: 'Bearer key-unknown-0000' }, chat, 401);
      const conflict = await both(path, { ...json, authorization: `Bearer ${KEY}`, 'x-api-key': OTHER_KEY }, chat, 401);
      assert.match(conflict.body, /different API keys/);
      const large = await both(path, { ...json, authorization: `Bearer ${KEY}`, 'content-length': String(BODY_LIMIT + 1) }, 'x'.repeat(BODY_LIMIT + 1), 413);
      assert.equal(large.headers['x-quotaring-error'], 'body_too_large');
    }
    const anthropic = await both('/v1/messages', json, chat, 401);
    assert.equal((JSON.parse(anthropic.body) as { type: string }).type, 'error');
    // One request log line per request, with the tenant once resolved, never the key.
    const fromLine = lines.all.length;
    await send(url, 'POST', '/v1/chat/completions', { ...json, authorization: `Bearer ${KEY}`, 'content-length': String(BODY_LIMIT + 1) }, 'x'.repeat(BODY_LIMIT + 1));
    await sleep(20);
    const logged = lines.all.slice(fromLine).map((l) => JSON.parse(l) as Record<string, unknown>);
    const request = logged.find((l) => l['msg'] === 'request');
    assert.equal(request?.['tenant'], 'acme');
    assert.equal(request?.['status'], 413);
    assert.match(String(request?.['reqId']), /^req-[0-9a-z]+$/);
    assert.equal(logged.find((l) => l['msg'] === 'request body over the limit')?.['reqId'], request?.['reqId']);
    assert.ok(!lines.all.slice(fromLine).join('\n').includes(KEY));
  });

  test('an empty ring, and a lone member that refuses: the same answers on both paths', async () => {
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
    membership.set(ringOf([]));
    try {
      const empty = await both('/v1/chat/completions', headers, chat, 503);
      assert.equal(empty.headers['x-quotaring-error'], 'no_healthy_node');
      const refusing: Member = { id: 'gone', url: 'http://127.0.0.1:9' };
      membership.set(ringOf([refusing]));
      // Refused, then suspect with no other member: 503 both times.
      const failed = await both('/v1/chat/completions', headers, chat, 503);
      assert.equal(failed.headers['x-quotaring-error'], 'no_healthy_node');
    } finally {
      membership.set(ringOf([node.member]));
    }
  });

  test('an exception in the handler: 500 internal_error logged, on both paths alike', async () => {
    // A member whose URL does not parse: opening its pool throws.
    membership.set(ringOf([{ id: 'bad', url: 'not a url' }]));
    try {
      const fromLine = lines.all.length;
      const res = await both('/v1/chat/completions', { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, chat, 500);
      assert.equal(res.headers['x-quotaring-error'], 'internal_error');
      const errors = lines.all.slice(fromLine).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l['msg'] === 'unhandled error');
      assert.equal(errors.length, 2);
      assert.equal((errors[0]?.['err'] as { code?: string } | undefined)?.code, 'ERR_INVALID_URL');
    } finally {
      membership.set(ringOf([node.member]));
    }
  });

  test('proxied: the node\'s answer relayed; GET, HEAD and DELETE (fastify), percent-encoded URLs, accept-version and odd content types reach the node as sent', async () => {
    node.handle = (req, res) => {
      res.writeHead(201, { 'content-type': 'application/json', 'x-node': req.method as string });
      res.end(req.method === 'HEAD' ? undefined : JSON.stringify({ method: req.method, url: req.url }));
    };
    try {
      const headers = { authorization: `Bearer ${KEY}` };
      // [method, path, headers, served on the fast path]
      for (const [method, path, extra, fast] of [
        ['POST', '/v1/chat/completions', { 'content-type': 'application/json' }, true],
        ['POST', '/openai/deployments/d/chat/completions?api-version=1', { 'content-type': 'application/json' }, true],
        ['GET', '/v1/models', {}, false],
        ['HEAD', '/v1/models', {}, false],
        ['DELETE', '/v1/files/f-1', {}, false],
        ['GET', '/openai/deployments?api-version=1', {}, false],
        ['POST', '/v1/models/a%2Fb%20c?x=%41', { 'content-type': 'application/json' }, false],
        ['POST', '/v1/chat/completions', { 'content-type': 'application/json', 'accept-version': '1.0.0' }, false],
        ['POST', '/v1/chat/completions', { 'content-type': 'Application/JSON ; charset="utf-8"' }, true],
        ['POST', '/v1/chat/completions', {}, true],
      ] as const) {
        const seen = node.seen.length;
        const served = routerControl(router).fastPathServed();
        const res = await send(url, method, path, { ...headers, ...extra }, method === 'POST' ? chat : undefined);
        assert.equal(routerControl(router).fastPathServed() - served, fast ? 1 : 0, `${method} ${path} on the fast path: ${String(fast)}`);
        assert.equal(res.status, 201, `${method} ${path}: ${res.body}`);
        assert.equal(res.headers['x-node'], method);
        if (method !== 'HEAD') assert.deepEqual(JSON.parse(res.body), { method, url: path });
        assert.deepEqual(node.seen.slice(seen).map((r) => ({ method: r.method, url: r.url })), [{ method, url: path }]);
      }
    } finally {
      node.handle = (_req, res) => res.end('{}');
    }
  });

  test('POSTs fastify answers before the route: bad percent-encoding 400, a content type that is not a media type 415, POST /v1 404 — none reach the node', async () => {
    const seen = node.seen.length;
    const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
    for (const path of ['/v1/chat/%zz', '/v1/chat/completions%', '/openai/%E0%A4%A']) {
      const res = await send(url, 'POST', path, headers, chat);
      assert.equal(res.status, 400, path);
      assert.equal(res.headers['x-quotaring-error'], 'invalid_request');
      assert.match(res.body, /bad percent-encoding/);
    }
    for (const type of ['', 'json', 'application/json, text/plain', '/json', 'application/']) {
      const res = await send(url, 'POST', '/v1/chat/completions', { ...headers, 'content-type': type }, chat);
      assert.equal(res.status, 415, `content-type ${JSON.stringify(type)}`);
      assert.equal(res.headers['x-quotaring-error'], 'unsupported_media_type');
    }
    const noRoute = await send(url, 'POST', '/v1', headers, chat);
    assert.equal(noRoute.status, 404);
    assert.equal(noRoute.headers['x-quotaring-error'], 'not_found');
    assert.equal(node.seen.length, seen);
  });
});

describe('router fast path while closing', () => {
  test('a POST arriving on an open connection while the router closes gets fastify\'s 503 (connection: close); the request in flight finishes; close() waits for it', { timeout: 20_000 }, async () => {
    const node = await new StandInNode().start();
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    node.handle = (_req, res) => {
      void held.then(() => res.end('{"ok":true}'));
    };
    const router = buildRouter({ config, membership: new TestMembership(ringOf([node.member])), clusterSecret: TEST_SECRET, logger: false, healthCheckMs: 60_000 });
    const url = new URL(await router.listen({ host: '127.0.0.1', port: 0 }));
    try {
      const { connect } = await import('node:net');
      const socket = connect(Number(url.port), '127.0.0.1');
      let received = '';
      socket.on('data', (c: Buffer) => (received += c.toString('latin1')));
      const post = `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: ${chat.length}\r\n\r\n${chat}`;
      socket.write(post);
      while (node.seen.length === 0) await sleep(10);
      let closed = false;
      const closing = router.close().then(() => (closed = true));
      // server.close() is called once the preClose hooks ran: the router is closing from then on.
      while (router.server.listening) await sleep(5);
      socket.write(post);
      await sleep(200);
      assert.equal(node.seen.length, 1, 'the second POST never reaches the node');
      assert.equal(closed, false, 'close() waits for the request in flight');
      release();
      await closing;
      while (!received.includes('Service Unavailable')) await sleep(10);
      const answers = received.split(/(?=HTTP\/1\.1 )/);
      assert.match(answers[0] ?? '', /^HTTP\/1\.1 200 /);
      assert.match(answers[0] ?? '', /\{"ok":true\}$/);
      assert.match(answers[1] ?? '', /^HTTP\/1\.1 503 /);
      assert.match(answers[1] ?? '', /\r\nConnection: close\r\n/i);
      assert.match(answers[1] ?? '', /\r\n\r\n\{"error":"Service Unavailable","message":"Service Unavailable","statusCode":503\}$/);
      socket.destroy();
    } finally {
      release();
      await router.close().catch(() => {});
      await node.stop();
    }
  });
});
