/**
 * The handoff transport over signed HTTP (src/peer/transfer.ts) against a peer that misbehaves:
 * a pull reply is read only up to MAX_PULL_REPLY_BYTES, then the connection is dropped and the pull
 * fails, so a broken or hostile peer cannot make a restarting member buffer without bound.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { MAX_PULL_REPLY_BYTES, httpPeerTransport } from '../../src/peer/transfer.ts';
import { testSigner } from '../helpers/cluster-secret.ts';

describe('httpPeerTransport against a peer that answers without end', () => {
  test('a pull reply over MAX_PULL_REPLY_BYTES is cut off: the pull rejects and the peer sees the connection closed', async () => {
    let sent = 0;
    let closed = false;
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"states":[');
      const pump = (): void => {
        while (!closed && sent <= 4 * MAX_PULL_REPLY_BYTES) {
          sent += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      res.on('close', () => (closed = true));
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const transport = httpPeerTransport(testSigner);
      await assert.rejects(transport.pull({ id: 'node-1', url: 'http://127.0.0.1:1' }, { id: 'node-2', url }), /over 134217728 bytes, cut off/);
      // Wait for the peer to see the close, then check it stopped well before sending four times the cap.
      for (let i = 0; i < 100 && !closed; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(closed, true, 'the connection was dropped');
      assert.ok(sent < 2 * MAX_PULL_REPLY_BYTES, `the peer sent ${sent} bytes before the close`);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
