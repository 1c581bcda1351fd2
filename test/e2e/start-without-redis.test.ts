/**
 * End to end, issue 13 (item 1: "a node started while Redis is down exits 1"; item 5: `/readyz`
 * names what a node waits for): two nodes and a router configured with Redis membership
 * (`cluster.redis`) start while nothing listens on Redis' port.
 *
 * While Redis is down, asserted: every process stays up; each node's `/readyz` is 503
 * `{status: 'starting', waiting: ['redis', 'ring', 'handoff', 'scripts']}` and a request sent to a
 * node directly is 503 `node_starting` (it has no ring, so it decides for no tenant: a fresh limit
 * here could add to a live owner's); the router's `/readyz` is 503 `{status: 'no members', waiting:
 * ['redis']}` and a client request through it is 503 `no_healthy_node` in the route's provider shape
 * (OpenAI's on chat completions, Anthropic's on messages). Then `redis-server` starts on that port:
 * without a restart, both nodes join, load their scripts and answer `/readyz` 200, the router
 * routes to the ring of both, and every tenant (`requests: 3` per minute) gets exactly 3 of 5
 * requests (200, remaining 2, 1, 0) and then 429s.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { ringVersion } from '../../src/coord/ring/ring.ts';
import { ringOf } from '../helpers/cluster.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const TENANTS = 6;
const LIMIT = 3;
const key = (i: number): string => `key-noredis-${i}-0000`;
const chat = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] });
const messages = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] });

async function get(url: string): Promise<{ status: number; body: unknown }> {
  const res = await request(url);
  return { status: res.statusCode, body: await res.body.json() };
}

async function post(url: string, path: string, tenant: number, body = chat): Promise<{ status: number; headers: Record<string, unknown>; body: unknown }> {
  const res = await request(`${url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key(tenant)}`, 'content-type': 'application/json' }, body });
  return { status: res.statusCode, headers: res.headers, body: await res.body.json() };
}

/** Polls `check` every 100 ms until it holds or `ms` passed; returns whether it held. */
async function eventually(ms: number, check: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return true;
    await sleep(100);
  }
  return false;
}

describe('nodes and a router started while Redis is down', () => {
  let redisPort = 0;
  let redis: RunningRedis | undefined;
  const procs: Running[] = [];
  const nodes: { id: string; url: string; proc: Running }[] = [];
  let router = '';

  before(async () => {
    redisPort = await freePort();
    const simPort = await freePort();
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: { name: 'noredis', redis: { url: `redis://127.0.0.1:${redisPort}` }, heartbeat: '200ms', dead_after: '1s' },
      tenants: Array.from({ length: TENANTS }, (_, i) => ({ id: `t${i}`, keys: [key(i)], limits: [{ requests: LIMIT, window: '1m' }] })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY', quota: { tpm: 10_000_000, rpm: 100_000 } }],
    });
    const env = { QUOTARING_SIM_KEY: 'sim-noredis-key' };
    procs.push(await runCli(['simulate', '--port', String(simPort)], `http://127.0.0.1:${simPort}/sim/stats`, env));
    for (let i = 1; i <= 2; i++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      // /healthz: the process is up (its /readyz stays 503 until Redis answers).
      const proc = await runCli(['node', '--config', config, '--id', `node-${i}`, '--port', String(port)], `${url}/healthz`, env);
      procs.push(proc);
      nodes.push({ id: `node-${i}`, url, proc });
    }
    const port = await freePort();
    router = `http://127.0.0.1:${port}`;
    procs.push(await runCli(['router', '--config', config, '--port', String(port)], `${router}/healthz`, env));
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('stay up and not ready, refuse in the provider shape, then join and limit exactly once Redis starts', { timeout: 90_000 }, async () => {
    // Several retry periods (heartbeat 200 ms) and subscriber reconnects (about every 2 s) with Redis down.
    await sleep(5_000);
    for (const p of procs) assert.equal(p.proc.exitCode, null, `still running:\n${p.output()}`);
    for (const n of nodes) {
      assert.deepEqual(await get(`${n.url}/readyz`), { status: 503, body: { status: 'starting', waiting: ['redis', 'ring', 'handoff', 'scripts'] } }, n.id);
      const direct = await post(n.url, '/v1/chat/completions', 0);
      assert.equal(direct.status, 503, n.id);
      assert.equal(direct.headers['x-quotaring-error'], 'node_starting');
      assert.deepEqual((direct.body as { error: { code: string; type: string } }).error.code, 'node_starting');
      assert.equal((direct.body as { error: { type: string } }).error.type, 'server_error');
      assert.match(n.proc.output(), /Redis unreachable: node node-\d is up but not in the cluster/);
      // The handoff subscriber fails at each reconnect while Redis is down: one warning per distinct
      // error, repeated at most every 30 s, not a line every 2 s.
      const subscriberErrors = n.proc.output().split('\n').filter((l) => l.includes('handoff subscriber error'));
      const distinct = new Set(subscriberErrors.map((l) => /"err":"([^"]*)"/.exec(l)?.[1] ?? l));
      assert.ok(subscriberErrors.length <= distinct.size, `${n.id}: ${subscriberErrors.length} subscriber warnings for ${distinct.size} distinct errors`);
    }
    assert.deepEqual(await get(`${router}/readyz`), { status: 503, body: { status: 'no members', waiting: ['redis'] } });
    const viaRouter = await post(router, '/v1/chat/completions', 0);
    assert.equal(viaRouter.status, 503);
    assert.equal(viaRouter.headers['x-quotaring-error'], 'no_healthy_node');
    const openaiError = (viaRouter.body as { error: { code: string; type: string; message: string } }).error;
    assert.equal(openaiError.code, 'no_healthy_node');
    assert.equal(openaiError.type, 'server_error');
    assert.match(openaiError.message, /not reached Redis/);
    const anthropic = await post(router, '/v1/messages', 0, messages);
    assert.equal(anthropic.status, 503);
    assert.deepEqual((anthropic.body as { type: string; error: { type: string } }).type, 'error');
    assert.equal((anthropic.body as { error: { type: string } }).error.type, 'overloaded_error');

    // Redis comes up on the configured port: no process is restarted.
    redis = await startRedis(redisPort);
    const expected = ringVersion(nodes.map((n) => ({ id: n.id, url: n.url })));
    const joined = await eventually(20_000, async () => {
      for (const n of nodes) if ((await get(`${n.url}/readyz`)).status !== 200) return false;
      const r = await get(`${router}/readyz`);
      return r.status === 200 && (r.body as { ring: string }).ring === expected;
    });
    assert.ok(joined, `every node ready and the router on the ring of both within 20 s: ${JSON.stringify(await Promise.all([...nodes.map((n) => get(`${n.url}/readyz`)), get(`${router}/readyz`)]))}`);
    for (const n of nodes) {
      assert.equal(await ringOf(n.url), expected, `${n.id} on the ring of both`);
      assert.match(n.proc.output(), /Redis answers: node node-\d joined the cluster/);
    }

    // Routed and limited exactly: 3 of 5 admitted per tenant, whatever node owns it.
    for (let t = 0; t < TENANTS; t++) {
      const got: [number, unknown][] = [];
      for (let i = 0; i < LIMIT + 2; i++) {
        const res = await post(router, '/v1/chat/completions', t);
        got.push([res.status, res.status === 200 ? res.headers['x-ratelimit-remaining-requests'] : (res.body as { error: { code: string } }).error.code]);
      }
      assert.deepEqual(
        got,
        [
          [200, '2'],
          [200, '1'],
          [200, '0'],
          [429, 'rate_limit_exceeded'],
          [429, 'rate_limit_exceeded'],
        ],
        `tenant t${t}`,
      );
    }
    for (const p of procs) assert.equal(p.proc.exitCode, null);
  });
});
