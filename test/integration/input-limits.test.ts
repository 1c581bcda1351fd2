/**
 * Input limits (issue 14, findings 4, 6, 7 and 10), in-process: a router and two gateway nodes
 * (static members) in front of real simulators. Oversized bodies, deep JSON, odd tool schemas,
 * too many messages or tools, malformed HTTP, oversized or too many headers, slow headers and
 * bodies, and clients that leave: every one is a 4xx in the provider's shape (or a closed socket),
 * never a 5xx; no member becomes suspect; nothing is counted and nothing reaches the provider.
 */
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Readable, Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { Client, request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import type { LoadedConfig } from '../../src/config/load.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import type { Member } from '../../src/coord/types.ts';
import { NODE_HEADER_ALLOWANCE } from '../../src/http/listener.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { buildRouter, routerControl } from '../../src/router/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { freePort, simStats } from '../helpers/processes.ts';

const BODY_LIMIT = 256 * 1024;
const MAX_MESSAGES = 8;
const MAX_TOOLS = 4;
const JSON_DEPTH = 64;
const MAX_HEADERS = 20;
const MAX_HEADER_SIZE = 8 * 1024;
const HEADERS_TIMEOUT_MS = 1_000;
const REQUEST_TIMEOUT_MS = 2_000;
/** Generous bound for a socket the server must close (timeouts are checked every ≤ 1 s; a loaded machine is slow). */
const CLOSE_BOUND_MS = 10_000;
const TENANTS = 12;
const LIMIT = 1_000;

const keyOf = (tenant: string): string => `key-${tenant}-000000`;

/** JSON log lines, kept in memory. */
class LogLines extends Writable {
  readonly lines: { level: number; msg: string }[] = [];
  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    for (const line of chunk.toString('utf8').split('\n')) if (line !== '') this.lines.push(JSON.parse(line) as { level: number; msg: string });
    done();
  }
}

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Record<string, unknown>;
}

/** Sends a request; resolves with status, headers and the JSON body. */
async function send(url: string, opts: { path?: string; tenant?: string; headers?: Record<string, string>; body?: string | Buffer | Readable; method?: 'GET' | 'POST' }): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(opts.tenant === undefined ? {} : { authorization: `Bearer ${keyOf(opts.tenant)}` }), ...opts.headers };
  const res = await request(`${url}${opts.path ?? '/v1/chat/completions'}`, { method: opts.method ?? 'POST', headers, body: opts.body ?? null });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, body: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

/** Asserts a catalogue error in the route's dialect: OpenAI's `{error:{code,type,param}}` or Anthropic's `{type:'error',error:{type}}`. */
function assertError(a: Answer, status: number, code: string, shape: { anthropicType?: string; param?: string | null } = {}): void {
  assert.equal(a.status, status, JSON.stringify(a.body));
  assert.equal(a.headers['x-quotaring-error'], code);
  const error = a.body.error as Record<string, unknown>;
  if (shape.anthropicType !== undefined) {
    assert.equal(a.body.type, 'error');
    assert.equal(error.type, shape.anthropicType);
    assert.equal(typeof error.message, 'string');
  } else {
    assert.equal(error.code, code);
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.param, shape.param ?? null);
  }
}

/** What a raw connection got back: the status line's code (0: nothing), the error code header, the JSON body, whether the server closed it and when (ms after the first write). */
interface RawAnswer {
  readonly status: number;
  readonly code: string | undefined;
  readonly body: Record<string, unknown> | undefined;
  readonly closed: boolean;
  readonly ms: number;
}

/**
 * Opens a connection to `url`, runs `write` on it, and resolves when the server closes it (or
 * after `waitMs`, `closed: false`).
 */
function raw(url: string, write: (socket: net.Socket) => void | Promise<void>, waitMs = CLOSE_BOUND_MS): Promise<RawAnswer> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1');
    let data = '';
    const started = Date.now();
    const finish = (closed: boolean): void => {
      clearTimeout(timer);
      const [head = '', body = ''] = data.split('\r\n\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      const code = /\r\nx-quotaring-error: ([^\r]+)/i.exec(head)?.[1];
      resolve({ status, code, body: body === '' ? undefined : (JSON.parse(body) as Record<string, unknown>), closed, ms: Date.now() - started });
      socket.destroy();
    };
    const timer = setTimeout(() => finish(false), waitMs);
    socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => finish(true));
    socket.on('connect', () => void write(socket));
  });
}

/** A chat completion body of exactly `bytes` bytes (its one message padded with words). */
function chatOfSize(bytes: number): string {
  const base = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: '' }] });
  const pad = bytes - Buffer.byteLength(base);
  assert.ok(pad >= 0);
  const words = 'hi '.repeat(Math.ceil(pad / 3)).slice(0, pad);
  return base.replace('"content":""', `"content":"${words}"`);
}

const chat = (extra: Record<string, unknown> = {}): string => JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }], ...extra });
const messages = (extra: Record<string, unknown> = {}): string => JSON.stringify({ model: 'claude-test', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }], ...extra });
/** Arrays nested `depth` deep. */
const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);
/** `n` chunks of 64 KiB, as a stream (sent chunked: no content-length). */
const chunks = (bytes: number, last = ''): Readable =>
  Readable.from(
    (function* () {
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let left = bytes - last.length;
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        yield chunk.subarray(0, n);
        left -= n;
      }
      if (last !== '') yield Buffer.from(last);
    })(),
  );

describe('input limits: router and two nodes', () => {
  let sim: { url: string; close(): Promise<void> };
  let slowSim: { url: string; close(): Promise<void> };
  let members: Member[];
  let config: LoadedConfig;
  const nodes: FastifyInstance[] = [];
  let router: FastifyInstance;
  let routerUrl: string;
  const logs = { node: new LogLines(), router: new LogLines() };
  /** Tenants that only ever get refused requests (until the last test), one owned by each node. */
  let bad: [string, string];
  /** Tenants that get served. */
  let good: string[];
  const ownerUrl = (tenant: string): string => members.find((m) => m.id === new StaticMembership(members).ring().owner(tenant)?.id)!.url;
  /** A served tenant that `url` (the router or a node) serves. */
  const servedAt = (url: string): string => good.find((t) => url === routerUrl || ownerUrl(t) === url)!;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    slowSim = await startSimulator({ port: 0, tokensPerSecond: 20 });
    const ports = [await freePort(), await freePort()];
    members = ports.map((p, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${p}` }));
    const tenants = Array.from({ length: TENANTS }, (_, i) => ({ id: `t${i}`, keys: [keyOf(`t${i}`)], limits: [{ requests: LIMIT, window: '1m' }] }));
    const listener = { headers_timeout: HEADERS_TIMEOUT_MS, request_timeout: REQUEST_TIMEOUT_MS, max_header_size: MAX_HEADER_SIZE, max_headers: MAX_HEADERS };
    config = buildConfig(
      {
        server: { log_level: 'debug', body_limit: BODY_LIMIT, max_messages: MAX_MESSAGES, max_tools: MAX_TOOLS, json_depth: JSON_DEPTH, ...listener },
        router: listener,
        cluster: { members },
        tenants,
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] },
          { name: 'gpt-slow', encoding: 'o200k_base', deployments: ['slow'] },
          { name: 'claude-test', encoding: 'none', deployments: ['sim-anthropic'] },
        ],
        deployments: [
          { name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY' },
          { name: 'slow', provider: 'openai', base_url: slowSim.url, api_key_env: 'SIM_KEY' },
          { name: 'sim-anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'SIM_KEY' },
        ],
      },
      'input-limits.yaml',
      { SIM_KEY: 'sim-key' },
    );
    for (const [i, m] of members.entries()) {
      const app = buildGateway({ config, clusterSecret: TEST_SECRET, logStream: logs.node, cluster: { self: m, membership: new StaticMembership(members) } });
      await app.listen({ host: '127.0.0.1', port: ports[i] as number });
      await nodeHandoff(app)?.start();
      nodeHandoff(app)?.joined();
      nodes.push(app);
    }
    router = buildRouter({ config, clusterSecret: TEST_SECRET, membership: new StaticMembership(members), logStream: logs.router, healthCheckMs: 60_000 });
    routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
    const ring = new StaticMembership(members).ring();
    const ids = tenants.map((t) => t.id);
    const first = ids.find((t) => ring.owner(t)?.id === 'node-1');
    const second = ids.find((t) => ring.owner(t)?.id === 'node-2');
    assert.ok(first !== undefined && second !== undefined, 'each node owns a tenant');
    bad = [first, second];
    good = ids.filter((t) => !bad.includes(t));
  });
  after(async () => {
    await router?.close();
    for (const n of nodes) await n.close();
    await sim?.close();
    await slowSim?.close();
  });

  /** Runs `fn` and asserts that no request reached the provider meanwhile. */
  async function refused(fn: () => Promise<void>): Promise<void> {
    const before = (await simStats(sim.url)).requests;
    await fn();
    assert.equal((await simStats(sim.url)).requests, before, 'nothing reached the provider');
  }

  test('finding 4: two 50 MB bodies get 413 at the router, nothing forwarded; every tenant keeps being served; no member suspect', async () => {
    const big = Buffer.alloc(50 * 1024 * 1024, 0x20);
    await refused(async () => {
      assertError(await send(routerUrl, { tenant: bad[0], body: big }), 413, 'body_too_large');
      assertError(await send(routerUrl, { tenant: bad[1], path: '/v1/messages', body: big }), 413, 'body_too_large', { anthropicType: 'request_too_large' });
    });
    assert.deepEqual(routerControl(router).suspects(), []);
    for (const tenant of good) assert.equal((await send(routerUrl, { tenant, body: chat() })).status, 200, tenant);
  });

  test('finding 4: a chunked body is cut at the limit with 413; no member suspect', async () => {
    await refused(async () => {
      assertError(await send(routerUrl, { tenant: bad[0], body: chunks(50 * 1024 * 1024) }), 413, 'body_too_large');
      assertError(await send(routerUrl, { tenant: bad[1], path: '/v1/messages', body: chunks(BODY_LIMIT + 1) }), 413, 'body_too_large', { anthropicType: 'request_too_large' });
    });
    assert.deepEqual(routerControl(router).suspects(), []);
    for (const tenant of good) assert.equal((await send(routerUrl, { tenant, body: chat() })).status, 200, tenant);
  });

  test('finding 4: body_limit boundary through the router, declared and chunked: at the limit 200, one byte over 413', async () => {
    const atLimit = chatOfSize(BODY_LIMIT);
    const tenant = good[0]!;
    assert.equal((await send(routerUrl, { tenant, body: atLimit })).status, 200);
    assert.equal((await send(routerUrl, { tenant, body: Readable.from([Buffer.from(atLimit)]) })).status, 200);
    await refused(async () => {
      assertError(await send(routerUrl, { tenant: bad[0], body: chatOfSize(BODY_LIMIT + 1) }), 413, 'body_too_large');
      assertError(await send(routerUrl, { tenant: bad[1], body: Readable.from([Buffer.from(chatOfSize(BODY_LIMIT + 1))]) }), 413, 'body_too_large');
    });
    assert.deepEqual(routerControl(router).suspects(), []);
  });

  test('a body just over the limit, sent 40 times to the router and to its owner: every client reads its 413 (the rest is drained, not reset), and the connection serves the next request', async () => {
    const over = chatOfSize(BODY_LIMIT + 1);
    // The size a client may send that is drained rather than cut: twice the limit.
    const largest = chatOfSize(2 * BODY_LIMIT);
    await refused(async () => {
      for (let i = 0; i < 40; i++) {
        const url = i % 2 === 0 ? routerUrl : ownerUrl(bad[0]);
        assertError(await send(url, { tenant: bad[0], body: i % 4 === 1 ? largest : over }), 413, 'body_too_large');
      }
    });
    // One connection: a 413 and then a request served on it.
    for (const url of [routerUrl, ownerUrl(good[0]!)]) {
      const client = new Client(url);
      let connections = 0;
      client.on('connect', () => connections++);
      try {
        const headers = { 'content-type': 'application/json', authorization: `Bearer ${keyOf(good[0]!)}` };
        const refusedRes = await client.request({ path: '/v1/chat/completions', method: 'POST', headers, body: over });
        assert.equal(refusedRes.statusCode, 413);
        await refusedRes.body.dump();
        const served = await client.request({ path: '/v1/chat/completions', method: 'POST', headers, body: chat() });
        assert.equal(served.statusCode, 200);
        await served.body.dump();
        assert.equal(connections, 1, `${url}: the 413's connection was kept and served the next request`);
      } finally {
        await client.close();
      }
    }
  });

  test('finding 6: content types "", "json", "application/json, text/plain" get 415 from the router and the nodes', async () => {
    await refused(async () => {
      for (const url of [routerUrl, ownerUrl(bad[0])]) {
        for (const type of ['', 'json', 'application/json, text/plain']) {
          assertError(await send(url, { tenant: bad[0], headers: { 'content-type': type }, body: chat() }), 415, 'unsupported_media_type');
        }
        assertError(await send(url, { tenant: bad[0], path: '/v1/messages', headers: { 'content-type': 'json' }, body: messages() }), 415, 'unsupported_media_type', { anthropicType: 'invalid_request_error' });
      }
      // A large body the node refuses before reading it: the router relays the 415 and drops the rest.
      for (let i = 0; i < 3; i++) assertError(await send(routerUrl, { tenant: bad[i % 2]!, headers: { 'content-type': 'text/plain' }, body: chatOfSize(BODY_LIMIT) }), 415, 'unsupported_media_type');
    });
    assert.deepEqual(routerControl(router).suspects(), []);
  });

  test('findings 6, 7: JSON nested 10,000 deep gets 400; json_depth boundary: 64 levels served, 65 refused', async () => {
    await refused(async () => {
      const deep = chat({ x: 0 }).replace('"x":0', `"x":${nested(10_000)}`);
      assertError(await send(routerUrl, { tenant: bad[0], body: deep }), 400, 'invalid_request');
      const deepInput = messages({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: 0 }] }] }).replace('"input":0', `"input":${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`);
      assertError(await send(routerUrl, { tenant: bad[1], path: '/v1/messages', body: deepInput }), 400, 'invalid_request', { anthropicType: 'invalid_request_error' });
      // The body object is level 1: "x" adds 64 more.
      assertError(await send(routerUrl, { tenant: bad[0], body: chat({ x: 0 }).replace('"x":0', `"x":${nested(JSON_DEPTH)}`) }), 400, 'invalid_request');
    });
    assert.equal((await send(routerUrl, { tenant: good[0]!, body: chat({ x: 0 }).replace('"x":0', `"x":${nested(JSON_DEPTH - 1)}`) })).status, 200);
    // Brackets inside strings do not count.
    assert.equal((await send(routerUrl, { tenant: good[0]!, body: chat({ messages: [{ role: 'user', content: `${nested(1_000)} \\"[[[` }] }) })).status, 200);
  });

  test('finding 6: tool schemas whose type or enum items are objects are served (were 500)', async () => {
    const odd = { toString: 1, valueOf: 2 };
    const tools = [{ type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object', properties: { a: { type: odd, enum: [odd, [odd], 'x', 1, null] }, b: { type: ['string', 'null'] } } } } }];
    for (const tenant of good.slice(0, 2)) {
      assert.equal((await send(routerUrl, { tenant, body: chat({ tools }) })).status, 200);
      assert.equal((await send(routerUrl, { tenant, body: chat({ functions: tools.map((t) => t.function) }) })).status, 200);
      assert.equal((await send(routerUrl, { tenant, path: '/v1/messages', body: messages({ tools: [{ name: 'f', input_schema: { type: odd, enum: [odd] } }] }) })).status, 200);
    }
  });

  test('finding 7: max_messages and max_tools boundaries: at the limit served, one over 400 naming the field', async () => {
    const msgs = (n: number) => Array.from({ length: n }, () => ({ role: 'user', content: 'hi' }));
    const tools = (n: number) => Array.from({ length: n }, (_, i) => ({ type: 'function', function: { name: `f${i}` } }));
    const anthropicTools = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `f${i}`, input_schema: { type: 'object' } }));
    const tenant = good[0]!;
    assert.equal((await send(routerUrl, { tenant, body: chat({ messages: msgs(MAX_MESSAGES) }) })).status, 200);
    assert.equal((await send(routerUrl, { tenant, body: chat({ tools: tools(MAX_TOOLS) }) })).status, 200);
    assert.equal((await send(routerUrl, { tenant, path: '/v1/messages', body: messages({ messages: msgs(MAX_MESSAGES) }) })).status, 200);
    assert.equal((await send(routerUrl, { tenant, path: '/v1/messages', body: messages({ tools: anthropicTools(MAX_TOOLS) }) })).status, 200);
    await refused(async () => {
      assertError(await send(routerUrl, { tenant: bad[0], body: chat({ messages: msgs(MAX_MESSAGES + 1) }) }), 400, 'invalid_request', { param: 'messages' });
      assertError(await send(routerUrl, { tenant: bad[0], body: chat({ tools: tools(MAX_TOOLS + 1) }) }), 400, 'invalid_request', { param: 'tools' });
      assertError(await send(routerUrl, { tenant: bad[0], body: chat({ functions: tools(MAX_TOOLS + 1).map((t) => t.function) }) }), 400, 'invalid_request', { param: 'functions' });
      assertError(await send(routerUrl, { tenant: bad[1], path: '/v1/messages', body: messages({ messages: msgs(MAX_MESSAGES + 1) }) }), 400, 'invalid_request', { anthropicType: 'invalid_request_error' });
      assertError(await send(routerUrl, { tenant: bad[1], path: '/v1/messages', body: messages({ tools: anthropicTools(MAX_TOOLS + 1) }) }), 400, 'invalid_request', { anthropicType: 'invalid_request_error' });
    });
  });

  test('finding 6: HTTP parser errors and a bad URL get 400 / 431 in the provider\'s shape, from the router and the nodes', async () => {
    const key = keyOf(bad[0]);
    for (const url of [routerUrl, members[0]!.url]) {
      const garbage = await raw(url, (s) => void s.write('HELLO WORLD\r\n\r\n'));
      assert.equal(garbage.status, 400, url);
      assert.equal(garbage.code, 'invalid_request');
      assert.equal((garbage.body?.error as Record<string, unknown>).code, 'invalid_request');
      assert.ok(garbage.closed);

      // Just under the router's limit: the node accepts what the router adds on top.
      const under = await raw(url, (s) => void s.write(`GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${keyOf(servedAt(url))}\r\nconnection: close\r\nx-pad: ${'a'.repeat(MAX_HEADER_SIZE - 200)}\r\n\r\n`));
      assert.equal(under.status, 200, url);
      // Nodes allow room for what routers add.
      const pad = 'a'.repeat(MAX_HEADER_SIZE + (url === routerUrl ? 0 : NODE_HEADER_ALLOWANCE.bytes) + 1);
      const bigOpenAI = await raw(url, (s) => void s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\nx-pad: ${pad}\r\n\r\n`));
      assert.equal(bigOpenAI.status, 431, url);
      assert.equal(bigOpenAI.code, 'headers_too_large');
      assert.equal((bigOpenAI.body?.error as Record<string, unknown>).type, 'invalid_request_error');
      assert.equal((bigOpenAI.body?.error as Record<string, unknown>).code, 'headers_too_large');
      const bigAnthropic = await raw(url, (s) => void s.write(`POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\nx-pad: ${pad}\r\n\r\n`));
      assert.equal(bigAnthropic.status, 431);
      assert.equal(bigAnthropic.body?.type, 'error');
      assert.equal((bigAnthropic.body?.error as Record<string, unknown>).type, 'invalid_request_error');

      assertError(await send(url, { tenant: bad[0], path: '/v1/chat/completions%', body: chat() }), 400, 'invalid_request');
    }
  });

  test('finding 7: max_headers boundary on the router and the nodes: 20 header fields served, 21 get 431', async () => {
    for (const url of [routerUrl, members[0]!.url]) {
      const withFields = (n: number) => (s: net.Socket) => {
        // host, authorization and connection: close, then x-fill-* up to n fields.
        const fill = Array.from({ length: n - 3 }, (_, i) => `x-fill-${i}: 1\r\n`).join('');
        s.write(`GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${keyOf(servedAt(url))}\r\nconnection: close\r\n${fill}\r\n`);
      };
      assert.equal((await raw(url, withFields(MAX_HEADERS))).status, 200, url);
      const over = await raw(url, withFields(MAX_HEADERS + 1));
      assert.equal(over.status, 431, url);
      assert.equal(over.code, 'headers_too_large');
    }
  });

  test('finding 7: a header sent slowly, a silent socket and a slow body are closed within the bounds (408 in shape when a request started)', async () => {
    for (const url of [routerUrl, members[0]!.url]) {
      const slowHeader = await raw(url, async (s) => {
        s.write('POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-slow: ');
        for (let i = 0; i < 200 && !s.destroyed; i++) {
          s.write('a');
          await sleep(100);
        }
      });
      assert.ok(slowHeader.closed, `${url}: closed`);
      assert.ok(slowHeader.ms < CLOSE_BOUND_MS);
      assert.equal(slowHeader.status, 408);
      assert.equal(slowHeader.code, 'request_timeout');

      const silent = await raw(url, () => {});
      assert.ok(silent.closed, `${url}: a socket that sends nothing is closed`);
      assert.equal(silent.status, 0);

      const slowBody = await raw(url, async (s) => {
        s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${keyOf(bad[0])}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{`);
        for (let i = 0; i < 200 && !s.destroyed; i++) {
          s.write(' ');
          await sleep(100);
        }
      });
      assert.ok(slowBody.closed, `${url}: slow body closed`);
      assert.equal(slowBody.status, 408);
      assert.equal(slowBody.code, 'request_timeout');
      assert.equal((slowBody.body?.error as Record<string, unknown>).code, 'request_timeout');
    }
    assert.deepEqual(routerControl(router).suspects(), []);
  });

  test('finding 7: request_timeout bounds the request only: a stream longer than it is served whole', async () => {
    const started = Date.now();
    const res = await request(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyOf(good[1]!)}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-slow', max_tokens: 60, stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200);
    assert.ok(Date.now() - started > REQUEST_TIMEOUT_MS, 'the stream outlasted request_timeout');
    assert.match(text, /data: \[DONE\]\n\n$/);
  });

  test('finding 10: clients that leave (mid-body, mid-stream) are not errors: no error log, no 5xx', async () => {
    for (const url of [routerUrl, ownerUrl(bad[0])]) {
      // Half a small body, then gone; half a streamed body, then gone.
      for (const length of [1_000, 200_000]) {
        await raw(
          url,
          async (s) => {
            s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${keyOf(bad[0])}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n{"model":`);
            await sleep(100);
            s.destroy();
          },
          1_000,
        );
      }
    }
    // A stream through the router, left after its first bytes.
    const res = await request(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keyOf(good[1]!)}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-slow', max_tokens: 60, stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    });
    for await (const _ of res.body) break;
    await sleep(500);
    const errors = [...logs.node.lines, ...logs.router.lines].filter((l) => l.level >= 50);
    assert.deepEqual(errors, []);
    assert.ok(logs.node.lines.some((l) => l.msg === 'client closed the connection'), 'the node logs the abort at debug');
    const metrics = await router.inject({ method: 'GET', url: '/metrics' });
    assert.doesNotMatch(metrics.body, /quotaring_router_requests_total\{status="5\d\d"\}/);
  });

  test('after all of them: the refused tenants\' counters never moved, no member is suspect', async () => {
    for (const tenant of bad) {
      const res = await send(routerUrl, { tenant, body: chat() });
      assert.equal(res.status, 200);
      assert.equal(res.headers['x-ratelimit-remaining-requests'], String(LIMIT - 1), tenant);
    }
    assert.deepEqual(routerControl(router).suspects(), []);
  });
});
