/**
 * The router's fast path (src/router/fast-path.ts) against hostile or broken clients, over raw
 * sockets: framing a proxy must refuse (both `content-length` and `transfer-encoding`, duplicate
 * lengths, obs-fold), a chunked body over `server.body_limit`, pipelined requests after a 413 and a
 * 401, a stalled body (408), a client's `x-quotaring-*` headers, odd methods and URLs on `/v1/*` —
 * and clients that leave: each gets its request line and metric with status 499, on the fast path
 * and through fastify alike. The stand-in node is a plain `node:http` server.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import type { Ring } from '../../src/coord/types.ts';
import { buildRouter, routerControl } from '../../src/router/server.ts';
import { TestMembership } from '../helpers/membership.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import { LogLines, StandInNode } from '../helpers/stand-in-node.ts';

const KEY = 'key-hostile-0000';
const BODY_LIMIT = 4_096;
const MAX_HEADERS = 16;
const listener = { headers_timeout: 1_000, request_timeout: 1_500, max_headers: MAX_HEADERS };
const config = buildConfig(
  {
    server: { log_level: 'info', body_limit: BODY_LIMIT, ...listener },
    router: listener,
    tenants: [{ id: 'acme', keys: [KEY], limits: [{ requests: 10, window: '1m' }] }],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
  },
  'hostile.yaml',
  {},
);
const chat = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] });
const head = (extra = '', path = '/v1/chat/completions', method = 'POST'): string => `${method} ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\n${extra}`;
const post = (extra = '', path?: string): string => `${head(extra, path)}content-length: ${chat.length}\r\n\r\n${chat}`;

/** What a raw exchange got: every byte the router wrote, whether it closed the connection, the statuses in order. */
interface Raw {
  readonly text: string;
  readonly closed: boolean;
  readonly statuses: number[];
}

/**
 * Writes each step on a fresh connection (a string is written, a number waits that many ms,
 * `'leave'` destroys the socket), then reads until the router closes or `quietMs` pass.
 */
async function raw(url: string, steps: (string | number | 'leave')[], quietMs = 600): Promise<Raw> {
  const socket: Socket = connect(Number(new URL(url).port), '127.0.0.1');
  let text = '';
  let closed = false;
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  socket.on('error', () => {});
  socket.on('close', () => (closed = true));
  for (const step of steps) {
    if (typeof step === 'number') await sleep(step);
    else if (step === 'leave') socket.destroy();
    else if (!socket.destroyed) socket.write(step);
  }
  const started = Date.now();
  while (!closed && Date.now() - started < quietMs) await sleep(20);
  const wasClosed = closed;
  socket.destroy();
  return { text, closed: wasClosed, statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1])) };
}

async function counts(router: FastifyInstance): Promise<Record<string, number>> {
  const text = (await router.inject({ method: 'GET', url: '/metrics' })).body;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^quotaring_router_requests_total\{status="(\d+)"\} (\d+)$/gm)) out[m[1] as string] = Number(m[2]);
  return out;
}

/** Waits (bounded) until `check` holds. */
async function until(check: () => boolean, what: string, ms = 5_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > ms) assert.fail(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('router fast path: hostile clients', () => {
  let node: StandInNode;
  let lines: LogLines;
  let router: FastifyInstance;
  let url: string;

  before(async () => {
    node = await new StandInNode().start();
    const member = node.member;
    const ring: Ring = { version: 'v1', members: [member], owner: () => member, range: () => [member] };
    lines = new LogLines();
    router = buildRouter({ config, membership: new TestMembership(ring), clusterSecret: TEST_SECRET, logStream: lines.stream, healthCheckMs: 60_000 });
    url = await router.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await router.close();
    await node.stop();
  });

  test('framing a proxy must refuse: 400 and the connection closed; no node sees it, counted 400 if at all', async () => {
    const seen = node.seen.length;
    const before = await counts(router);
    for (const [what, payload] of [
      ['content-length and transfer-encoding', `${head('content-length: 10\r\ntransfer-encoding: chunked\r\n')}\r\n5\r\nhello\r\n0\r\n\r\n${post()}`],
      ['two equal content-lengths', `${head('content-length: 5\r\ncontent-length: 5\r\n')}\r\nhello${post()}`],
      ['two different content-lengths', `${head('content-length: 5\r\ncontent-length: 6\r\n')}\r\nhello!${post()}`],
      ['a content-length list', `${head('content-length: 5, 5\r\n')}\r\nhello${post()}`],
      ['transfer-encoding identity', `${head('transfer-encoding: identity\r\n')}\r\nhello${post()}`],
      ['content-length 0 and chunked', `${head('transfer-encoding: chunked\r\ncontent-length: 0\r\n')}\r\n0\r\n\r\n${post()}`],
      ['an obs-folded header', `${head('x-a: b\r\n c\r\n')}content-length: 2\r\n\r\n{}${post()}`],
      ['a lower-case method', `post /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}${post()}`],
      ['bare LF line ends', `POST /v1/chat/completions HTTP/1.1\nhost: x\nauthorization: Bearer ${KEY}\ncontent-length: 2\n\n{}`],
    ] as const) {
      const res = await raw(url, [payload]);
      assert.deepEqual(res.statuses, [400], `${what}: ${res.text}`);
      assert.match(res.text, /\r\nx-quotaring-error: invalid_request\r\n/, what);
      assert.ok(res.closed, `${what}: the connection is closed (the smuggled request after it is never read)`);
    }
    assert.equal(node.seen.length, seen, 'no node saw any of them');
    // A request whose headers parsed before the parser failed is counted with the 400 it got, never as a client that left (499).
    const after = await counts(router);
    for (const status of Object.keys(after)) if (after[status] !== before[status]) assert.equal(status, '400', `counted as ${status}`);
  });

  test('a chunked body over body_limit (no content-length): 413 once it passes the limit, nothing forwarded; the next request on the connection is served', async () => {
    const seen = node.seen.length;
    const served = routerControl(router).fastPathServed();
    const chunks = `1000\r\n${'x'.repeat(4_096)}\r\n`.repeat(3);
    const res = await raw(url, [`${head('transfer-encoding: chunked\r\n')}\r\n${chunks}0\r\n\r\n${post()}`]);
    assert.deepEqual(res.statuses, [413, 200], res.text);
    assert.match(res.text, /\r\nx-quotaring-error: body_too_large\r\n/);
    assert.equal(routerControl(router).fastPathServed() - served, 2, 'both on the fast path');
    assert.deepEqual(node.seen.slice(seen).map((s) => s.bytes), [chat.length], 'only the second request reached the node');
  });

  test('pipelined: after a 413 (declared), a 401 with an unread body and a 200, the next request on the connection is served', async () => {
    const seen = node.seen.length;
    const res = await raw(url, [`${head()}content-length: 5000\r\n\r\n${'x'.repeat(5_000)}${post()}`, `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhello`, 100, `world${post()}${post()}`]);
    assert.deepEqual(res.statuses, [413, 200, 401, 200, 200], res.text);
    assert.equal(res.closed, false, 'the connection stays open');
    assert.equal(node.seen.length - seen, 3);
  });

  test('a body that stalls gets 408 and the connection closed (request_timeout holds on the fast path); nothing forwarded', async () => {
    const seen = node.seen.length;
    const res = await raw(url, [`${head()}content-length: 100\r\n\r\n{"model":`], 5_000);
    assert.deepEqual(res.statuses, [408], res.text);
    assert.match(res.text, /\r\nx-quotaring-error: request_timeout\r\n/);
    assert.ok(res.closed);
    assert.equal(node.seen.length, seen);
  });

  test('a client\'s x-quotaring-* headers never reach a node (only the router\'s own, signed); headers the client\'s Connection names dropped', async () => {
    const seen = node.seen.length;
    const res = await raw(url, [post(['x-quotaring-tenant: evil', 'x-quotaring-ring: r9', 'x-quotaring-fallback-for: n', 'x-quotaring-redirected-for: n', 'X-QuotaRing-From: z', 'x-quotaring-hops: 1', `x-quotaring-signature: t=1,n=,s=${'a'.repeat(43)}`, 'connection: keep-alive, x-secret', 'x-secret: s'].join('\r\n') + '\r\n')]);
    assert.deepEqual(res.statuses, [200], res.text);
    const got = node.seen[seen]?.headers ?? {};
    assert.equal(got['x-quotaring-tenant'], 'acme');
    assert.equal(got['x-quotaring-ring'], 'v1');
    for (const name of ['x-quotaring-fallback-for', 'x-quotaring-redirected-for', 'x-quotaring-from', 'x-quotaring-hops', 'x-secret']) assert.equal(got[name], undefined, name);
    assert.doesNotMatch(String(got['x-quotaring-signature']), /aaaa/);
  });

  test('odd methods and URLs under /v1/ answer as fastify did: PUT, OPTIONS, PATCH 404; HEAD and POST proxied as sent', async () => {
    const seen = node.seen.length;
    const served = routerControl(router).fastPathServed();
    for (const method of ['PUT', 'OPTIONS', 'PATCH']) {
      const res = await raw(url, [`${method} /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-length: 2\r\n\r\n{}`]);
      assert.deepEqual(res.statuses, [404], `${method}: ${res.text}`);
      assert.match(res.text, /\r\nx-quotaring-error: not_found\r\n/);
    }
    assert.equal(node.seen.length, seen, 'none reached a node');
    assert.deepEqual((await raw(url, [`HEAD /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\n\r\n`])).statuses, [200]);
    for (const path of ['/v1/../admin', '/v1//x', '/v1/x?y=%zz', '/v1/x#frag']) assert.deepEqual((await raw(url, [post('', path)])).statuses, [200], path);
    assert.deepEqual(
      node.seen.slice(seen).map((s) => `${s.method} ${s.url}`),
      ['HEAD /v1/models', 'POST /v1/../admin', 'POST /v1//x', 'POST /v1/x?y=%zz', 'POST /v1/x#frag'],
    );
    // `%` goes to fastify; the others are the fast path's.
    assert.equal(routerControl(router).fastPathServed() - served, 3);
  });

  test('header fields: max_headers is served on the fast path, one more is 431 (fastify), nothing forwarded', async () => {
    const fields = (n: number): string => Array.from({ length: n - 4 }, (_, i) => `x-h${i}: v\r\n`).join('');
    const seen = node.seen.length;
    assert.deepEqual((await raw(url, [`${head(fields(MAX_HEADERS))}content-length: 2\r\n\r\n{}`])).statuses, [200]);
    assert.equal(node.seen.length - seen, 1);
    const over = await raw(url, [`${head(fields(MAX_HEADERS + 1))}content-length: 2\r\n\r\n{}`]);
    assert.deepEqual(over.statuses, [431], over.text);
    assert.match(over.text, /\r\nx-quotaring-error: headers_too_large\r\n/);
    assert.equal(node.seen.length - seen, 1);
  });

  /** Sends `steps`, waits for one more request line, and returns it with the metric's change. */
  async function leaving(steps: (string | number | 'leave')[]): Promise<{ line: Record<string, unknown>; counted: number }> {
    const from = lines.requests.length;
    const before = (await counts(router))['499'] ?? 0;
    await raw(url, steps, 50);
    await until(() => lines.requests.length > from, 'the request line');
    await sleep(50);
    assert.equal(lines.requests.length - from, 1, 'one request line');
    return { line: lines.requests[from] as Record<string, unknown>, counted: ((await counts(router))['499'] ?? 0) - before };
  }

  test('a client that leaves (mid-body, while the node thinks, mid-stream) is logged and counted 499, on the fast path and through fastify', { timeout: 30_000 }, async () => {
    let release: () => void = () => {};
    try {
      // Mid-body: the tenant is known, the body never completes.
      const midBody = await leaving([`${head()}content-length: 1000\r\n\r\n{"model":`, 150, 'leave']);
      assert.equal(midBody.line['status'], 499);
      assert.equal(midBody.line['tenant'], 'acme');
      assert.equal(midBody.counted, 1);

      // While the node thinks: fast path (POST) and fastify (GET).
      node.handle = (_req, res) => {
        release = () => res.end('{"late":true}');
      };
      for (const request of [post(), `GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\n\r\n`]) {
        const seen = node.seen.length;
        const thinking = leaving([request, 150, 'leave']);
        await until(() => node.seen.length > seen, 'the node to get the request');
        const { line, counted } = await thinking;
        release();
        assert.equal(line['status'], 499, request.slice(0, 4));
        assert.equal(line['tenant'], 'acme');
        assert.equal(counted, 1);
      }

      // Mid-stream: the node's events are being relayed when the client leaves.
      node.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const timer = setInterval(() => res.write('data: x\n\n'), 20);
        res.on('close', () => clearInterval(timer));
      };
      const midStream = await leaving([post(), 200, 'leave']);
      assert.equal(midStream.line['status'], 499);
      assert.equal(midStream.counted, 1);
    } finally {
      release();
      node.handle = (_req, res) => res.end('{"ok":true}');
    }
  });

  test('a client that leaves right after the last event of a stream (or the last byte of a body) is counted with the node\'s status, not 499', { timeout: 30_000 }, async () => {
    // The node writes the whole answer, then holds its end back (the Python SDKs close at [DONE],
    // often before the end of the chunked answer reaches the router).
    const ends: (() => void)[] = [];
    try {
      for (const [what, body] of [
        ['[DONE]', 'data: {"x":1}\n\ndata: [DONE]\n\n'],
        ['message_stop', 'event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'],
        ['response.completed', `event: response.completed\ndata: {"response":"${'x'.repeat(100_000)}"}\n\n`],
      ] as const) {
        node.handle = (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          // Byte by byte for the first, so a blank line falls across chunks.
          if (what === '[DONE]') for (const c of body) res.write(c);
          else res.write(body);
          ends.push(() => res.end());
        };
        for (const request of [post(), `GET /v1/responses/r1/input_items HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\n\r\n`]) {
          const { line, counted } = await leaving([request, 300, 'leave']);
          assert.equal(line['status'], 200, `${what}, ${request.slice(0, 4)}`);
          assert.equal(counted, 0, `${what}, ${request.slice(0, 4)}`);
        }
      }
      // Not the end yet: an event that is not a terminal one stays a 499.
      node.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: [DONE]\n\ndata: {"late":1}\n\n');
        ends.push(() => res.end());
      };
      const after = await leaving([post(), 300, 'leave']);
      assert.equal(after.line['status'], 499);
      assert.equal(after.counted, 1);
    } finally {
      for (const end of ends) end();
      node.handle = (_req, res) => res.end('{"ok":true}');
    }
  });
});
