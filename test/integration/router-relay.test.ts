/**
 * The router's byte relay (src/router/relay.ts) over real HTTP: backpressure from a slow client to
 * the node, repeated and hop-by-hop response headers, keep-alive on both hops, and a client that
 * leaves a 421 that was held for the retry decision, then relayed. Stand-in nodes are plain `node:http` servers.
 */
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { Agent, request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import type { Member, Ring } from '../../src/coord/types.ts';
import { buildRouter } from '../../src/router/server.ts';
import { TestMembership } from '../helpers/membership.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import { StandInNode } from '../helpers/stand-in-node.ts';

const KEY = 'key-relay-00000';
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
const ring = (member: Member): Ring => ({ version: 'v1', members: [member], owner: () => member, range: () => [member] });
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

describe('router relay', () => {
  let node: StandInNode;
  let router: FastifyInstance;
  let url: string;

  before(async () => {
    node = await new StandInNode().start();
    router = buildRouter({ config, membership: new TestMembership(ring(node.member)), clusterSecret: TEST_SECRET, logger: false, healthCheckMs: 60_000 });
    url = await router.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await router.close();
    await node.stop();
  });

  test('a client that does not read holds the node back: the router buffers no more than socket buffers', { timeout: 30_000 }, async () => {
    // The node writes 256 MiB as fast as its socket takes it; the client reads nothing for a while.
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const total = 4_096;
    let written = 0;
    let ended: () => void = () => {};
    const done = new Promise<void>((resolve) => (ended = resolve));
    node.handle = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total * chunk.length) });
      const pump = (): void => {
        while (written < total) {
          written++;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end(ended);
      };
      pump();
    };
    const socket: Socket = connect(Number(new URL(url).port), '127.0.0.1');
    socket.pause();
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}`);
    // Wait until the node is blocked (nothing more written for a while).
    let last = -1;
    while (written !== last || written === 0) {
      last = written;
      await sleep(300);
    }
    const buffered = written * chunk.length;
    assert.ok(buffered < 64 * 1_048_576, `the node wrote ${buffered} bytes to a client that read none: the router buffers them`);
    // Reading resumes: everything arrives.
    let received = 0;
    socket.on('data', (d: Buffer) => (received += d.length));
    socket.resume();
    await done;
    while (received < total * chunk.length) await sleep(20);
    socket.destroy();
  });

  test('repeated headers are relayed in order; hop-by-hop ones and those named in Connection are not', async () => {
    node.handle = (_req, res) => {
      res.writeHead(200, [
        'Content-Type', 'application/json',
        'Set-Cookie', 'a=1',
        'Set-Cookie', 'b=2',
        'X-Private', 'secret',
        'Connection', 'x-private',
        'Keep-Alive', 'timeout=5',
        'X-Node', 'n',
      ]);
      res.end('{"ok":true}');
    };
    const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: auth, body: '{}' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.headers['set-cookie'], ['a=1', 'b=2']);
    assert.equal(res.headers['x-node'], 'n');
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.headers['x-private'], undefined);
    assert.notEqual(res.headers['keep-alive'], 'timeout=5');
    assert.deepEqual(await res.body.json(), { ok: true });
  });

  test('keep-alive on both hops: sequential requests reuse one client connection and one node connection', async () => {
    node.handle = (_req, res) => res.end('{"ok":true}');
    const agent = new Agent({ connections: 1 });
    try {
      const before = node.connections;
      let clientSockets = 0;
      router.server.on('connection', () => clientSockets++);
      for (let i = 0; i < 20; i++) {
        const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: auth, body: '{}', dispatcher: agent });
        assert.equal(res.statusCode, 200);
        await res.body.json();
      }
      assert.ok(clientSockets <= 1, `${clientSockets} client connections for 20 sequential requests`);
      assert.ok(node.connections - before <= 1, `${node.connections - before} node connections for 20 sequential requests`);
    } finally {
      await agent.close();
    }
  });

  test('a 421 held for the retry decision and then relayed (no other owner): a client that leaves mid-body closes the node connection, no retry goes out', { timeout: 10_000 }, async () => {
    let calls = 0;
    let closed: () => void = () => {};
    const nodeClosed = new Promise<void>((resolve) => (closed = resolve));
    node.handle = (_req, res) => {
      calls++;
      res.once('close', closed);
      // Headers of a 421 naming nobody (relayed as sent), then a body that never ends.
      res.writeHead(421, { 'content-type': 'application/json', 'x-quotaring-owner': 'n' });
      res.write('{');
    };
    const ac = new AbortController();
    let status = 0;
    const pending = (async () => {
      try {
        const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: auth, body: '{}', signal: ac.signal });
        status = res.statusCode;
        for await (const _ of res.body) ac.abort();
      } catch {
        // aborted
      }
    })();
    await pending;
    assert.equal(status, 421);
    await nodeClosed;
    assert.equal(calls, 1);
  });
});
