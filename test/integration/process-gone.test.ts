/**
 * Proof that a writer's process is gone (`src/coord/handoff/process-gone.ts`), against real sockets on
 * 127.0.0.1: a refused port, a `/healthz` naming another node or incarnation, a stalled process
 * (connection accepted, no answer) and the same process answering.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import type { Socket } from 'node:net';
import { after, describe, test } from 'node:test';
import { listenerGone, processGone } from '../../src/coord/handoff/process-gone.ts';
import { freePort } from '../helpers/processes.ts';

describe('process-gone', () => {
  const closers: (() => void)[] = [];
  after(() => {
    for (const close of closers) close();
  });

  async function healthz(body: unknown): Promise<string> {
    const server: Server = createServer((req, res) => {
      res.writeHead(req.url === '/healthz' ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => server.close());
    const address = server.address();
    assert.ok(address !== null && typeof address === 'object');
    return `http://127.0.0.1:${address.port}`;
  }

  test('a port nothing listens on refuses: gone', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    assert.equal(await listenerGone(url), true);
    assert.equal(await processGone({ id: 'node-1', url, inc: 'a' }), true);
  });

  test('the same process answers: not gone; another incarnation or another node answers there: gone', async () => {
    const url = await healthz({ status: 'ok', node: 'node-1', incarnation: 'inc-a' });
    assert.equal(await processGone({ id: 'node-1', url, inc: 'inc-a' }), false);
    assert.equal(await processGone({ id: 'node-1', url, inc: 'inc-b' }), true);
    assert.equal(await processGone({ id: 'node-2', url, inc: 'inc-a' }), true);
    // A state of an older version names no incarnation: only another node id proves it.
    assert.equal(await processGone({ id: 'node-1', url }), false);
  });

  test('a stalled process (the kernel accepts, nothing answers) is not proven gone, within the timeout', async () => {
    const sockets: Socket[] = [];
    const server = createTcpServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => {
      for (const s of sockets) s.destroy();
      server.close();
    });
    const address = server.address();
    assert.ok(address !== null && typeof address === 'object');
    const started = Date.now();
    assert.equal(await processGone({ id: 'node-1', url: `http://127.0.0.1:${address.port}`, inc: 'inc-a' }, 300), false);
    assert.ok(Date.now() - started < 2_000);
  });

  test('a URL that does not parse is not proof', async () => {
    assert.equal(await processGone({ id: 'node-1', url: 'not a url', inc: 'a' }), false);
  });
});
