/**
 * The node's connections to a deployment (in-process gateway, real clock, a real node:http upstream
 * that holds every request open, as a provider holds a stream): by default every request in flight
 * gets its own connection, so 200 concurrent requests are all at the provider at once (the former
 * default of 128 connections queued the rest inside the node); a deployment's `connections` still
 * bounds them.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { ServerResponse, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';

const KEY = 'key-acme-00000';
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const chat = { model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'hello' }] };
const completion = JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 8, completion_tokens: 2, total_tokens: 10 } });

describe('upstream connections: one per request in flight unless the deployment bounds them', () => {
  let upstream: Server;
  let app: FastifyInstance;
  /** Requests the upstream holds, answered together once `releaseAt` are in (or each after `holdMs`). */
  let held: ServerResponse[] = [];
  let open = 0;
  let peak = 0;
  let releaseAt = Infinity;
  let holdMs = 10_000;
  let unboundedConnections: number | undefined;
  const answer = (res: ServerResponse): void => {
    if (res.writableEnded) return;
    open--;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(completion);
  };

  before(async () => {
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        open++;
        peak = Math.max(peak, open);
        held.push(res);
        const timer = setTimeout(() => answer(res), holdMs);
        res.once('finish', () => clearTimeout(timer));
        if (held.length >= releaseAt) for (const r of held.splice(0)) answer(r);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [{ id: 'acme', keys: [KEY], limits: [{ concurrent: 1_000 }] }],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['unbounded'] },
          { name: 'gpt-bounded', encoding: 'o200k_base', estimator: 'exact', deployments: ['bounded'] },
        ],
        deployments: [
          { name: 'unbounded', provider: 'openai', base_url: url, api_key_env: 'UP_KEY' },
          { name: 'bounded', provider: 'openai', base_url: url, api_key_env: 'UP_KEY', connections: 2 },
        ],
      },
      'test.yaml',
      { UP_KEY: 'up-key' },
    );
    unboundedConnections = config.deployments.get('unbounded')?.connections;
    app = buildGateway({ config, logger: false });
    await app.ready();
  });
  after(async () => {
    for (const r of held.splice(0)) answer(r);
    await app.close();
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  });

  const send = (n: number, model: string) => Promise.all(Array.from({ length: n }, () => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: { ...chat, model } })));

  test('200 concurrent requests to a deployment without `connections` are all at the upstream at once', async () => {
    assert.equal(unboundedConnections, undefined, 'no bound by default');
    held = [];
    peak = 0;
    releaseAt = 200;
    holdMs = 10_000;
    const replies = await send(200, 'gpt-4o-mini');
    assert.deepEqual([...new Set(replies.map((r) => r.statusCode))], [200]);
    assert.equal(peak, 200, 'every request had its own upstream connection');
  });

  test('`connections: 2` bounds a deployment to 2 requests at the upstream at once; the others wait their turn', async () => {
    held = [];
    peak = 0;
    releaseAt = Infinity;
    holdMs = 200;
    const replies = await send(6, 'gpt-bounded');
    assert.deepEqual([...new Set(replies.map((r) => r.statusCode))], [200]);
    assert.equal(peak, 2);
  });
});
