/**
 * The router over real HTTP: fastify stand-ins for gateway nodes on port 0 (echo, slow SSE, reset
 * before or after headers, 421 with an owner, failing health checks) and closed ports that refuse
 * connections. The ring and membership are tiny fakes whose owner order the test sets.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { request } from 'undici';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import type { Member, Ring } from '../../src/coord/types.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import { FALLBACK_HEADER, OWNER_URL_HEADER, REDIRECTED_HEADER } from '../../src/router/forward.ts';
import { buildRouter, routerControl, startRouter } from '../../src/router/server.ts';
import { TestMembership } from '../helpers/membership.ts';
import { TEST_SECRET, testSigner } from '../helpers/cluster-secret.ts';
import { ClusterSecret } from '../../src/security/cluster-secret.ts';
import { RequestSigner, SIGNATURE_HEADER } from '../../src/security/request-signature.ts';
import { freePort } from '../helpers/processes.ts';

const KEY = 'key-acme-00000';
const HEALTH_MS = 60_000;

const config = buildConfig(
  {
    server: { log_level: 'silent' },
    tenants: [{ id: 'acme', keys: [KEY], limits: [{ requests: 10, window: '1m' }] }],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
  },
  'test.yaml',
  {},
);

/** A ring whose owner order is the list order, for every tenant. */
function listRing(order: readonly Member[]): Ring {
  return {
    version: order.length === 0 ? '' : `v-${order.map((m) => m.id).join('-')}`,
    members: [...order].sort((a, b) => a.id.localeCompare(b.id)),
    owner: () => order[0],
    range: (_tenant, k) => order.slice(0, k),
  };
}

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly length: number;
  readonly sha: string;
}

type Behaviour = 'echo' | 'reset-before-headers' | 'reset-after-headers' | 'misdirect' | 'sse' | 'starting';

/** A stand-in gateway node. */
class StandIn {
  readonly seen: Seen[] = [];
  behaviour: Behaviour = 'echo';
  healthy = true;
  /** For 'misdirect': the owner to name, and a hook run before answering. */
  owner = '';
  /** For 'misdirect': the owner's URL to send (x-quotaring-owner-url), if any. */
  ownerUrl = '';
  onMisdirect: () => void = () => {};
  /** For 'sse': the second event is written when this resolves. */
  release: Promise<void> = Promise.resolve();
  /** Resolves on the first body bytes of a request (reset per request by the test). */
  firstBytes = deferred();
  /** Resolves when an SSE response's connection closes. */
  streamClosed = deferred();
  readonly app: FastifyInstance = Fastify();
  member!: Member;

  constructor(readonly id: string) {
    this.app.removeAllContentTypeParsers();
    this.app.addContentTypeParser('*', (_req, payload, done) => {
      const hash = createHash('sha256');
      let length = 0;
      payload.on('data', (chunk: Buffer) => {
        if (length === 0) this.firstBytes.resolve();
        length += chunk.length;
        hash.update(chunk);
      });
      payload.on('end', () => done(null, { length, sha: hash.digest('hex') }));
      payload.on('error', (err: Error) => done(err));
    });
    this.app.get('/healthz', async (_req, reply) => (this.healthy ? { status: 'ok' } : reply.code(503).send({ status: 'down' })));
    this.app.route({ method: ['GET', 'POST'], url: '/v1/*', handler: (req, reply) => this.#handle(req, reply) });
  }

  async start(): Promise<this> {
    const url = await this.app.listen({ host: '127.0.0.1', port: 0 });
    this.member = { id: this.id, url };
    return this;
  }

  async #handle(req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const body = (req.body ?? { length: 0, sha: createHash('sha256').digest('hex') }) as { length: number; sha: string };
    this.seen.push({ method: req.method, url: req.url, headers: { ...req.headers }, ...body });
    switch (this.behaviour) {
      case 'echo':
        return reply.header('x-node', this.id).header('x-request-count', String(this.seen.length)).code(201).send({ node: this.id, ...body });
      case 'misdirect':
        this.onMisdirect();
        if (this.ownerUrl !== '') reply.header(OWNER_URL_HEADER, this.ownerUrl);
        return reply.code(421).header('x-quotaring-owner', this.owner).header('x-quotaring-ring', 'node-ring').send({ error: { code: 'misdirected' } });
      case 'starting':
        // A node with Redis membership that has not joined its cluster yet (src/gateway/ownership.ts).
        return reply.code(503).header('x-quotaring-error', 'node_starting').send({ error: { code: 'node_starting', node: this.id } });
      case 'reset-before-headers':
        req.raw.socket.destroy();
        return reply.hijack();
      case 'reset-after-headers':
        reply.hijack();
        reply.raw.writeHead(200, { 'content-type': 'text/event-stream' });
        reply.raw.write('data: 1\n\n', () => setImmediate(() => reply.raw.socket?.destroy()));
        return reply;
      case 'sse':
        reply.hijack();
        reply.raw.once('close', () => this.streamClosed.resolve());
        reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'x-node': this.id });
        reply.raw.write('data: 1\n\n');
        await this.release;
        reply.raw.end('data: 2\n\ndata: [DONE]\n\n');
        return reply;
    }
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** A member on a closed port: connections are refused. */
async function refusing(id: string): Promise<Member> {
  return { id, url: `http://127.0.0.1:${await freePort()}` };
}

const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const chatBody = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] });
const sha = (b: string | Buffer): string => createHash('sha256').update(b).digest('hex');

describe('router', () => {
  let a: StandIn;
  let b: StandIn;
  let c: StandIn;
  let membership: TestMembership;
  let clock: ManualClock;
  let router: FastifyInstance;
  let url: string;

  before(async () => {
    [a, b, c] = await Promise.all([new StandIn('a').start(), new StandIn('b').start(), new StandIn('c').start()]);
  });
  after(async () => {
    await Promise.all([a.app.close(), b.app.close(), c.app.close()]);
  });
  beforeEach(async () => {
    for (const n of [a, b, c]) {
      n.seen.length = 0;
      n.behaviour = 'echo';
      n.healthy = true;
      n.owner = '';
      n.ownerUrl = '';
      n.onMisdirect = () => {};
      n.firstBytes = deferred();
      n.streamClosed = deferred();
    }
    if (router !== undefined) await router.close();
    membership = new TestMembership(listRing([a.member, b.member, c.member]));
    clock = new ManualClock();
    router = buildRouter({ config, membership, clusterSecret: TEST_SECRET, logger: false, healthCheckMs: HEALTH_MS, clock });
    url = await router.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await router.close();
  });

  /** Health-check rounds enough to mark a member that answers 503 (two in a row). */
  const failHealthChecks = async (): Promise<void> => {
    await routerControl(router).checkHealth();
    await routerControl(router).checkHealth();
  };

  const post = (path = '/v1/chat/completions', headers: Record<string, string> = auth, body: string | Buffer = chatBody) =>
    request(url + path, { method: 'POST', headers, body });

  describe('proxying', () => {
    test('forwards method, path, body and headers with the ring version and tenant; relays status and headers', async () => {
      const res = await post('/v1/chat/completions?x=1', { ...auth, 'x-quotaring-tenant': 'forged', [FALLBACK_HEADER]: 'forged', [REDIRECTED_HEADER]: 'forged', 'x-custom': 'kept' });
      assert.equal(res.statusCode, 201);
      assert.equal(res.headers['x-node'], 'a');
      assert.deepEqual(await res.body.json(), { node: 'a', length: Buffer.byteLength(chatBody), sha: sha(chatBody) });
      assert.equal(a.seen.length, 1);
      const seen = a.seen[0]!;
      assert.equal(seen.method, 'POST');
      assert.equal(seen.url, '/v1/chat/completions?x=1');
      assert.equal(seen.headers['x-quotaring-ring'], 'v-a-b-c');
      assert.equal(seen.headers['x-quotaring-tenant'], 'acme');
      assert.equal(seen.headers.authorization, `Bearer ${KEY}`);
      assert.equal(seen.headers['x-custom'], 'kept');
      assert.equal(seen.headers[FALLBACK_HEADER], undefined);
      assert.equal(seen.headers[REDIRECTED_HEADER], undefined);
      assert.equal(seen.headers['content-type'], 'application/json');
      assert.equal(seen.headers['content-length'], String(Buffer.byteLength(chatBody)));
      assert.equal(b.seen.length + c.seen.length, 0);
    });

    test('every attempt is signed with the cluster secret over what the router asserts; a client\'s own internal headers and signature are dropped', async () => {
      const forged = { 'x-quotaring-from': 'node-x', 'x-quotaring-hops': '1', [SIGNATURE_HEADER]: 't=1,n=,s=' + 'A'.repeat(43), 'x-quotaring-content-sha256': 'B'.repeat(43) };
      const res = await post('/v1/chat/completions?x=1', { ...auth, ...forged });
      assert.equal(res.statusCode, 201);
      await res.body.dump();
      const seen = a.seen[0]!;
      for (const name of Object.keys(forged).filter((n) => n !== SIGNATURE_HEADER)) assert.equal(seen.headers[name], undefined, name);
      const signed = { method: seen.method, path: seen.url, headers: seen.headers };
      const verdict = testSigner.verify(signed);
      assert.equal(verdict.ok, true, JSON.stringify(verdict));
      // The signature covers the headers the router set: changing one breaks it.
      assert.deepEqual(testSigner.verify({ ...signed, headers: { ...seen.headers, 'x-quotaring-ring': 'other' } }), { ok: false, reason: 'bad_signature' });
      assert.deepEqual(testSigner.verify({ ...signed, headers: { ...seen.headers, [FALLBACK_HEADER]: 'a' } }), { ok: false, reason: 'bad_signature' });
      assert.deepEqual(new RequestSigner(new ClusterSecret('another-secret-of-at-least-32-characters')).verify(signed), { ok: false, reason: 'bad_signature' });
    });

    test('a stand-in attempt signs its x-quotaring-fallback-for', async () => {
      a.healthy = false;
      await failHealthChecks();
      const res = await post();
      assert.equal(res.statusCode, 201);
      await res.body.dump();
      const seen = b.seen[0]!;
      assert.equal(seen.headers[FALLBACK_HEADER], 'a');
      assert.equal(testSigner.verify({ method: seen.method, path: seen.url, headers: seen.headers }).ok, true);
    });

    test('GET /v1/models is proxied too', async () => {
      const res = await request(`${url}/v1/models`, { headers: { 'x-api-key': KEY } });
      assert.equal(res.statusCode, 201);
      await res.body.dump();
      assert.equal(a.seen[0]?.method, 'GET');
      assert.equal(a.seen[0]?.url, '/v1/models');
      assert.equal(a.seen[0]?.length, 0);
    });

    test('an SSE stream passes through chunk by chunk: the first event arrives before the node finishes', { timeout: 5_000 }, async () => {
      a.behaviour = 'sse';
      const release = deferred();
      a.release = release.promise;
      const res = await post();
      assert.equal(res.statusCode, 200);
      assert.equal(res.headers['content-type'], 'text/event-stream');
      assert.equal(res.headers['x-node'], 'a');
      const it = res.body[Symbol.asyncIterator]();
      const first = await it.next();
      assert.equal(Buffer.from(first.value as Buffer).toString(), 'data: 1\n\n');
      release.resolve();
      let rest = '';
      for (let r = await it.next(); r.done !== true; r = await it.next()) rest += Buffer.from(r.value as Buffer).toString();
      assert.equal(rest, 'data: 2\n\ndata: [DONE]\n\n');
    });

    test('a 1 MB body is forwarded intact while the client is still sending it', { timeout: 5_000 }, async () => {
      const chunk = Buffer.alloc(256 * 1024);
      const parts = [0, 1, 2, 3].map((i) => chunk.fill(65 + i) && Buffer.from(chunk));
      const whole = Buffer.concat(parts);
      const node = a;
      async function* body(): AsyncGenerator<Buffer> {
        yield parts[0]!;
        // The rest is sent only once the node has bytes: a router that buffered the body would deadlock here.
        const stalled = sleep(2_000, undefined, { ref: false }).then(() => Promise.reject(new Error('the node got no byte while the client was sending: the router buffers')));
        await Promise.race([node.firstBytes.promise, stalled]);
        for (const p of parts.slice(1)) yield p;
      }
      const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-length': String(whole.length) }, body: Readable.from(body()) });
      assert.equal(res.statusCode, 201);
      assert.deepEqual(await res.body.json(), { node: 'a', length: 1_048_576, sha: sha(whole) });
    });

    test('a missing or unknown key is answered 401 in the provider shape and never reaches a node', async () => {
      const missing = await post('/v1/chat/completions', { 'content-type': 'application/json' });
      assert.equal(missing.statusCode, 401);
      assert.equal(missing.headers['x-quotaring-error'], 'invalid_api_key');
      assert.deepEqual(((await missing.body.json()) as { error: { type: string; code: string } }).error.code, 'invalid_api_key');
      const unknown = await post('/v1/messages', { 'x-api-key': 'nope-nope-nope', 'content-type': 'application/json' });
      assert.equal(unknown.statusCode, 401);
      assert.deepEqual(await unknown.body.json(), {
        type: 'error',
        error: { type: 'authentication_error', message: 'Incorrect API key provided. Use a key configured for a tenant of this gateway.' },
      });
      assert.equal(a.seen.length + b.seen.length + c.seen.length, 0);
    });

    test('other paths are 404 in OpenAI shape', async () => {
      const res = await request(`${url}/v2/x`);
      assert.equal(res.statusCode, 404);
      assert.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'not_found');
    });

    test('an empty ring: readyz 503 and /v1 503 no_healthy_node in each shape', async () => {
      assert.equal((await request(`${url}/readyz`)).statusCode, 200);
      membership.set(listRing([]));
      const ready = await request(`${url}/readyz`);
      assert.equal(ready.statusCode, 503);
      await ready.body.dump();
      const openai = await post();
      assert.equal(openai.statusCode, 503);
      assert.deepEqual(((await openai.body.json()) as { error: { type: string; code: string } }).error, {
        message: 'No gateway node is available for this tenant right now (none in the ring, or all failing health checks); retry shortly.',
        type: 'server_error',
        param: null,
        code: 'no_healthy_node',
      });
      const anthropic = await post('/v1/messages');
      assert.equal(anthropic.statusCode, 503);
      assert.equal(((await anthropic.body.json()) as { error: { type: string } }).error.type, 'overloaded_error');
    });
  });

  describe('failures before any response byte', () => {
    test('a refused owner: retried once on the next member, marked suspect for healthCheckMs', async () => {
      const dead = await refusing('dead');
      membership.set(listRing([dead, a.member, b.member]));
      const res = await post();
      assert.equal(res.statusCode, 201);
      assert.equal(((await res.body.json()) as { node: string }).node, 'a');
      assert.equal(a.seen.length, 1);
      assert.equal(a.seen[0]?.sha, sha(chatBody));
      assert.deepEqual(routerControl(router).suspects(), ['dead']);
      clock.advance(HEALTH_MS - 1);
      assert.deepEqual(routerControl(router).suspects(), ['dead']);
      // While suspect the owner is routed around without an attempt.
      const second = await post();
      assert.equal(((await second.body.json()) as { node: string }).node, 'a');
      clock.advance(1);
      assert.deepEqual(routerControl(router).suspects(), []);
    });

    test('never more than one retry: owner and next both refuse → 502, the third member is not tried', async () => {
      membership.set(listRing([await refusing('dead1'), await refusing('dead2'), a.member]));
      const res = await post('/v1/messages');
      assert.equal(res.statusCode, 502);
      assert.equal(res.headers['x-quotaring-error'], 'upstream_unavailable');
      assert.deepEqual(await res.body.json(), { type: 'error', error: { type: 'api_error', message: 'Gateway node "dead2" could not be reached; retry the request.' } });
      assert.equal(a.seen.length, 0);
      assert.deepEqual(routerControl(router).suspects(), ['dead1', 'dead2']);
    });

    test('an owner not in its cluster yet (503 node_starting): retried once on the next member, which stands in for it; suspect for healthCheckMs', async () => {
      a.behaviour = 'starting';
      const res = await post();
      assert.equal(res.statusCode, 201);
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.equal(b.seen[0]?.sha, sha(chatBody));
      assert.equal(b.seen[0]?.headers[FALLBACK_HEADER], 'a');
      assert.deepEqual(routerControl(router).suspects(), ['a']);
      // Routed around without an attempt while suspect.
      await (await post()).body.dump();
      assert.equal(a.seen.length, 1);
      assert.deepEqual(b.seen.map((x) => x.headers[FALLBACK_HEADER]), ['a', 'a']);
      clock.advance(HEALTH_MS);
      assert.deepEqual(routerControl(router).suspects(), []);
    });

    test('owner and next both not in their cluster yet: the second node_starting is relayed, the third member is not tried', async () => {
      a.behaviour = 'starting';
      b.behaviour = 'starting';
      const res = await post();
      assert.equal(res.statusCode, 503);
      assert.equal(res.headers['x-quotaring-error'], 'node_starting');
      assert.deepEqual(await res.body.json(), { error: { code: 'node_starting', node: 'b' } });
      assert.equal(c.seen.length, 0);
    });

    test('a large body is not replayable: an owner\'s node_starting is relayed without a retry', async () => {
      a.behaviour = 'starting';
      const res = await post('/v1/chat/completions', auth, Buffer.alloc(100 * 1024, 'x'));
      assert.equal(res.statusCode, 503);
      assert.deepEqual(await res.body.json(), { error: { code: 'node_starting', node: 'a' } });
      assert.equal(b.seen.length, 0);
    });

    test('a socket closed before headers is retried on the next member', async () => {
      a.behaviour = 'reset-before-headers';
      const res = await post();
      assert.equal(res.statusCode, 201);
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.equal(a.seen.length, 1);
      assert.equal(b.seen.length, 1);
      assert.equal(b.seen[0]?.sha, sha(chatBody));
      assert.deepEqual(routerControl(router).suspects(), ['a']);
    });

    test('a large body (> 64 KiB) is not replayable: a refused owner gives 502 without a retry', async () => {
      membership.set(listRing([await refusing('dead'), a.member]));
      const big = Buffer.alloc(100 * 1024, 'x');
      const res = await post('/v1/chat/completions', auth, big);
      assert.equal(res.statusCode, 502);
      assert.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'upstream_unavailable');
      assert.equal(a.seen.length, 0);
      assert.deepEqual(routerControl(router).suspects(), ['dead']);
    });

    test('all members suspect → 503 no_healthy_node', async () => {
      membership.set(listRing([await refusing('dead1'), await refusing('dead2')]));
      assert.equal((await post()).statusCode, 502);
      const res = await post();
      assert.equal(res.statusCode, 503);
      assert.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'no_healthy_node');
    });
  });

  test('a reset after headers is not retried: the client sees the stream break', async () => {
    a.behaviour = 'reset-after-headers';
    const res = await post();
    assert.equal(res.statusCode, 200);
    await assert.rejects(res.body.text());
    assert.equal(a.seen.length, 1);
    assert.equal(b.seen.length + c.seen.length, 0);
    assert.deepEqual(routerControl(router).suspects(), []);
  });

  describe('misdirected (421)', () => {
    test('retried exactly once on the named owner, with the body intact', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'c';
      const res = await post();
      assert.equal(res.statusCode, 201);
      assert.equal(((await res.body.json()) as { node: string }).node, 'c');
      assert.deepEqual([a.seen.length, b.seen.length, c.seen.length], [1, 0, 1]);
      assert.equal(c.seen[0]?.sha, sha(chatBody));
      assert.equal(c.seen[0]?.headers['x-quotaring-ring'], 'v-a-b-c');
    });

    test('an owner not in the router ring: the ring is re-read and its owner gets the retry', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'node-9';
      a.onMisdirect = () => membership.set(listRing([b.member, a.member]), false);
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.deepEqual([a.seen.length, b.seen.length, c.seen.length], [1, 1, 0]);
      assert.equal(b.seen[0]?.headers['x-quotaring-ring'], 'v-b-a');
    });

    test('a second 421 is relayed as the node sent it: never more than one retry', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'b';
      b.behaviour = 'misdirect';
      b.owner = 'c';
      const res = await post();
      assert.equal(res.statusCode, 421);
      assert.equal(res.headers['x-quotaring-owner'], 'c');
      assert.deepEqual(await res.body.json(), { error: { code: 'misdirected' } });
      assert.deepEqual([a.seen.length, b.seen.length, c.seen.length], [1, 1, 0]);
    });

    test('a large body cannot be replayed: the 421 is relayed', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'b';
      const res = await post('/v1/chat/completions', auth, Buffer.alloc(100 * 1024, 'y'));
      assert.equal(res.statusCode, 421);
      await res.body.dump();
      assert.deepEqual([a.seen.length, b.seen.length], [1, 0]);
    });
  });

  describe(`fallback header (${FALLBACK_HEADER})`, () => {
    test('a member standing in for an owner that fails health checks is told which owner', async () => {
      a.healthy = false;
      await failHealthChecks();
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.equal(b.seen[0]?.headers[FALLBACK_HEADER], 'a');
      assert.equal(b.seen[0]?.headers['x-quotaring-ring'], 'v-a-b-c');
    });

    test('the retry after a refused owner names it; later requests routed around it too', async () => {
      const dead = await refusing('dead');
      membership.set(listRing([dead, a.member, b.member]));
      await (await post()).body.dump();
      await (await post()).body.dump();
      assert.deepEqual(
        a.seen.map((s) => s.headers[FALLBACK_HEADER]),
        ['dead', 'dead'],
      );
    });

    test('the retry after an owner reset the connection before headers names it', async () => {
      a.behaviour = 'reset-before-headers';
      await (await post()).body.dump();
      assert.equal(a.seen[0]?.headers[FALLBACK_HEADER], undefined);
      assert.equal(b.seen[0]?.headers[FALLBACK_HEADER], 'a');
    });

    test('never on a request to the owner, and gone once the owner is healthy again', async () => {
      a.healthy = false;
      await failHealthChecks();
      await (await post()).body.dump();
      a.healthy = true;
      await routerControl(router).checkHealth();
      await (await post()).body.dump();
      assert.deepEqual(a.seen.map((s) => s.headers[FALLBACK_HEADER]), [undefined]);
      assert.deepEqual(b.seen.map((s) => s.headers[FALLBACK_HEADER]), ['a']);
    });

    test('after a 421 naming a live member the retry goes there, naming (x-quotaring-redirected-for) the node that redirected', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'c';
      await (await post()).body.dump();
      assert.equal(a.seen[0]?.headers[FALLBACK_HEADER], undefined);
      assert.deepEqual([c.seen[0]?.headers[FALLBACK_HEADER], c.seen[0]?.headers[REDIRECTED_HEADER]], [undefined, 'a']);
    });
    test('a 421 naming a member the router never saw, without its URL, is relayed', async () => {
      a.behaviour = 'misdirect';
      a.owner = 'node-9';
      const res = await post();
      assert.equal(res.statusCode, 421);
      await res.body.dump();
      assert.deepEqual([a.seen.length, b.seen.length, c.seen.length], [1, 0, 0]);
    });
    test('a 421 naming a member that left the router ring: the node is stale, the retry asks it to stand in for that member', async () => {
      membership.set(listRing([a.member, b.member]));
      a.behaviour = 'misdirect';
      a.owner = 'c';
      await (await post()).body.dump();
      assert.deepEqual([a.seen.length, b.seen.length, c.seen.length], [2, 0, 0]);
      assert.equal(a.seen[0]?.headers[REDIRECTED_HEADER], undefined);
      assert.deepEqual([a.seen[1]?.headers[FALLBACK_HEADER], a.seen[1]?.headers[REDIRECTED_HEADER]], [undefined, 'c']);
    });
    test('a 421 naming a member that joined after the router ring, with its URL: the retry goes to that URL, naming the node that redirected', async () => {
      membership.set(listRing([a.member, b.member]), false);
      a.behaviour = 'misdirect';
      a.owner = 'c';
      a.ownerUrl = c.member.url;
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'c');
      assert.equal(c.seen[0]?.headers[REDIRECTED_HEADER], 'a');
    });
    test('a stand-in that answers 421 naming another owner: the retry goes to that owner, naming the stand-in', async () => {
      a.healthy = false;
      await failHealthChecks();
      b.behaviour = 'misdirect';
      b.owner = 'c';
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'c');
      assert.equal(b.seen[0]?.headers[FALLBACK_HEADER], 'a');
      assert.deepEqual([c.seen[0]?.headers[FALLBACK_HEADER], c.seen[0]?.headers[REDIRECTED_HEADER]], [undefined, 'b']);
    });

    test('after a 421, a member chosen on the re-read ring in place of its suspect owner names that owner', async () => {
      c.healthy = false;
      await failHealthChecks();
      a.behaviour = 'misdirect';
      a.owner = 'node-9';
      a.onMisdirect = () => membership.set(listRing([c.member, b.member, a.member]), false);
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.equal(a.seen[0]?.headers[FALLBACK_HEADER], undefined);
      assert.equal(b.seen[0]?.headers[FALLBACK_HEADER], 'c');
      assert.equal(b.seen[0]?.headers['x-quotaring-ring'], 'v-c-b-a');
    });
  });

  describe('health checks', () => {
    test('a failing owner is routed around from its second failed check in a row until it answers again', async () => {
      a.healthy = false;
      // One failed round is not enough (a node whose event loop stalled through one probe is alive).
      await routerControl(router).checkHealth();
      assert.deepEqual(routerControl(router).suspects(), []);
      a.healthy = true;
      await routerControl(router).checkHealth();
      a.healthy = false;
      await routerControl(router).checkHealth();
      assert.deepEqual(routerControl(router).suspects(), [], 'a pass in between starts the count again');
      await routerControl(router).checkHealth();
      assert.deepEqual(routerControl(router).suspects(), ['a']);
      clock.advance(10 * HEALTH_MS); // a failed health check does not expire with time
      const res = await post();
      assert.equal(((await res.body.json()) as { node: string }).node, 'b');
      assert.equal(a.seen.length, 0);
      a.healthy = true;
      await routerControl(router).checkHealth();
      assert.deepEqual(routerControl(router).suspects(), []);
      const back = await post();
      assert.equal(((await back.body.json()) as { node: string }).node, 'a');
    });

    test('a member that stopped is marked by the periodic check', { timeout: 5_000 }, async () => {
      const dead = await refusing('dead');
      const m = new TestMembership(listRing([dead, a.member]));
      const r = buildRouter({ config, membership: m, clusterSecret: TEST_SECRET, logger: false, healthCheckMs: 20 });
      await r.ready();
      try {
        while (!routerControl(r).suspects().includes('dead')) await sleep(10);
        assert.deepEqual(routerControl(r).suspects(), ['dead']);
      } finally {
        await r.close();
      }
    });
  });

  test('a member that refuses the connection is suspect after one round', async () => {
    const dead = await refusing('dead');
    membership.set(listRing([dead, a.member]));
    await routerControl(router).checkHealth();
    assert.deepEqual(routerControl(router).suspects(), ['dead']);
  });

  test('the pool of a member that left the ring is closed', async () => {
    await (await post()).body.dump();
    assert.deepEqual(routerControl(router).pooledUrls(), [a.member.url]);
    membership.set(listRing([b.member, c.member]));
    assert.deepEqual(routerControl(router).pooledUrls(), []);
    const res = await post();
    assert.equal(((await res.body.json()) as { node: string }).node, 'b');
    assert.deepEqual(routerControl(router).pooledUrls(), [b.member.url]);
  });

  test('a client that leaves mid-stream aborts the request to the node', { timeout: 5_000 }, async () => {
    a.behaviour = 'sse';
    const release = deferred();
    a.release = release.promise;
    const res = await post();
    const it = res.body[Symbol.asyncIterator]();
    await it.next();
    res.body.destroy();
    // Resolves only when the router closes its connection to the node: the node never ends this stream itself.
    await a.streamClosed.promise;
    release.resolve();
    assert.equal(a.seen.length, 1);
  });

  test('with the real StaticMembership ring: startRouter routes to ring.owner() and sends its version', async () => {
    const real = new StaticMembership([a.member, b.member, c.member]);
    const started = await startRouter({ config, membership: real, clusterSecret: TEST_SECRET, logger: false, host: '127.0.0.1', port: 0 });
    try {
      const owner = real.ring().owner('acme');
      const res = await request(`${started.url}/v1/chat/completions`, { method: 'POST', headers: auth, body: chatBody });
      assert.equal(((await res.body.json()) as { node: string }).node, owner?.id);
      const node = [a, b, c].find((n) => n.id === owner?.id);
      assert.equal(node?.seen[0]?.headers['x-quotaring-ring'], real.ring().version);
      assert.match(real.ring().version, /^[0-9a-f]{12}$/);
    } finally {
      await started.close();
    }
  });
});
