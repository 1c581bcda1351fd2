/**
 * Operations on a real gateway and simulator: Prometheus counters with exact values after known
 * traffic, one JSON log line per request that never holds a key or a prompt, the admin API (401
 * without the token, tenant usage, ring, hot tenants, config reload that keeps the last good config,
 * drain through a real Redis membership), and the router's metrics and admin API.
 *
 * The tenant `acme` has {requests 2 / 1m token bucket, tokens 1,000 / 1m sliding window (no refill
 * within the test, so its remaining is exact)} and `metrics: true`; each request's prompt is counted
 * exactly (o200k, `countOpenAIChat`) as `prompt` tokens, it reserves prompt + 5 (max_tokens), and the
 * simulator answers with exactly 3 completion tokens (`x-sim-output-tokens`), so it settles on
 * prompt + 3.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { stringify } from 'yaml';
import { buildConfig } from '../../src/config/load.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startGateway } from '../../src/gateway/start.ts';
import { startRouter } from '../../src/router/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startRedis } from '../helpers/redis.ts';
import { TEST_SECRET, TEST_SECRET_ENV } from '../helpers/cluster-secret.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const KEY = 'key-acme-secret-0001';
const PROMPT = 'hello from the ops test';
const TOKEN = 'admin-token-for-tests';

function rawConfig(simUrl: string, extra: Record<string, unknown> = {}, requests = 2): Record<string, unknown> {
  return {
    server: { log_level: 'info' },
    admin: { port: 0, router_port: 0 },
    tenants: [
      { id: 'acme', keys: [KEY], metrics: true, limits: [{ requests, window: '1m' }, { tokens: 1_000, window: '1m', algorithm: 'sliding_window' }] },
      { id: 'other', keys: ['key-other-0000001'], spread: 2, limits: [{ requests: 100, window: '1m' }, { concurrent: 4 }] },
    ],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] }],
    ...extra,
  };
}

function writeYaml(raw: unknown): string {
  const file = join(mkdtempSync(join(tmpdir(), 'quotaring-ops-')), 'quotaring.yaml');
  writeFileSync(file, stringify(raw));
  return file;
}

const chat = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: PROMPT }] });
const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sim-output-tokens': '3' };

/** The value of one series in Prometheus text, or undefined. */
function series(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-z_]+)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[3] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) return Number(m[4]);
  }
  return undefined;
}

describe('a node: metrics and request log lines', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  const lines: Record<string, unknown>[] = [];
  let logText = '';
  const statuses: number[] = [];
  const prompt = countOpenAIChat({ messages: [{ role: 'user', content: PROMPT }] }, exactCounter('o200k_base'));
  const reserved = prompt + 5;
  before(async () => {
    sim = await startSimulator({ port: 0 });
    const stream = new PassThrough();
    stream.on('data', (chunk: Buffer) => {
      logText += chunk.toString();
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
    });
    app = buildGateway({ config: buildConfig(rawConfig(sim.url), 'ops.yaml', { SIM_KEY: 'sim-key' }), logStream: stream });
    await app.listen({ host: '127.0.0.1', port: 0 });
    for (let i = 0; i < 3; i++) {
      const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers, payload: chat });
      statuses.push(res.statusCode);
    }
    // A bad key: 401, logged without the key.
    await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { ...headers, authorization: 'Bearer key-nobody-000001' }, payload: chat });
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('{requests 2/1m}: 2 admitted then 1 limited by requests, counted by result and limit kind', async () => {
    assert.deepEqual(statuses, [200, 200, 429]);
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.equal(series(text, 'quotaring_decisions_total', { result: 'admitted', limit_kind: 'none', priority: 'interactive' }), 2);
    assert.equal(series(text, 'quotaring_decisions_total', { result: 'limited', limit_kind: 'requests', priority: 'interactive' }), 1);
    assert.equal(series(text, 'quotaring_acquire_wait_seconds_count', { priority: 'interactive' }), 3);
    assert.equal(series(text, 'quotaring_upstream_requests_total', { deployment: 'sim', status: '200' }), 2);
    assert.equal(series(text, 'quotaring_queue_depth'), 0);
    assert.equal(series(text, 'quotaring_requests_in_flight'), 0);
    assert.equal(series(text, 'quotaring_fallback_active'), 0);
  });

  test('tokens reserved and used: each request reserved prompt + 5 and used prompt + 3', async () => {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.equal(series(text, 'quotaring_tokens_reserved_total', { model: 'gpt-4o-mini' }), 2 * reserved);
    assert.equal(series(text, 'quotaring_tokens_used_total', { model: 'gpt-4o-mini' }), 2 * (prompt + 3));
    assert.equal(series(text, 'quotaring_tokens_used_ratio_count', { model: 'gpt-4o-mini' }), 2);
    // The opted-in tenant's levels: no request left, 1,000 − 2 × used tokens.
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'acme', limit: 'requests/1m' }), 0);
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'acme', limit: 'tokens/1m' }), 1_000 - 2 * (prompt + 3));
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'other', limit: 'requests/1m' }), undefined);
  });

  test('one info line per request with its account; never the key or the prompt', () => {
    const requests = lines.filter((l) => l.msg === 'request');
    assert.equal(requests.length, 4);
    const [a, b, c, d] = requests as [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>, Record<string, unknown>];
    for (const l of [a, b]) {
      assert.deepEqual(
        { tenant: l.tenant, priority: l.priority, result: l.result, waitMs: l.waitMs, reserved: l.reserved, used: l.used, deployment: l.deployment, status: l.status, level: l.level },
        { tenant: 'acme', priority: 'interactive', result: 'admitted', waitMs: 0, reserved, used: prompt + 3, deployment: 'sim', status: 200, level: 30 },
      );
    }
    assert.deepEqual({ result: c.result, limit: c.limit, status: c.status, used: c.used, deployment: c.deployment }, { result: 'limited', limit: 'requests/1m', status: 429, used: 0, deployment: null });
    assert.deepEqual({ tenant: d.tenant, status: d.status, error: d.error }, { tenant: null, status: 401, error: 'invalid_api_key' });
    assert.equal(logText.includes('key-acme'), false, 'an API key was logged');
    assert.equal(logText.includes('key-nobody'), false, 'a refused API key was logged');
    assert.equal(logText.includes(PROMPT), false, 'the prompt was logged');
  });

  test('docs/metrics.md lists exactly the quotaring_ metrics a node exports', async () => {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const exported = new Set([...text.matchAll(/^# TYPE (quotaring_[a-z_]+) /gm)].map((m) => m[1]));
    const nodeSection = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8').split('## Router')[0] ?? '';
    const documented = new Set([...nodeSection.matchAll(/^\| `(quotaring_[a-z_]+)`/gm)].map((m) => m[1]));
    assert.deepEqual([...exported].sort(), [...documented].sort());
  });

  test('metrics hold no API key', async () => {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.equal(text.includes('key-'), false);
  });
});

describe('a node: admin API', () => {
  let sim: { url: string; close(): Promise<void> };
  let node: Awaited<ReturnType<typeof startGateway>>;
  let file: string;
  let raw: Record<string, unknown>;
  const admin = (path: string, init: { method?: 'GET' | 'POST'; token?: string | null } = {}) =>
    request(`${node.adminUrl}${path}`, { method: init.method ?? 'GET', headers: init.token === null ? {} : { authorization: `Bearer ${init.token ?? TOKEN}` } });
  before(async () => {
    sim = await startSimulator({ port: 0 });
    raw = rawConfig(sim.url, { server: { log_level: 'silent' } });
    file = writeYaml(raw);
    process.env.SIM_KEY = 'sim-key';
    node = await startGateway({ configFile: file, host: '127.0.0.1', port: 0, env: { QUOTARING_ADMIN_TOKEN: TOKEN } });
    await request(`${node.url}/v1/chat/completions`, { method: 'POST', headers, body: chat }).then((r) => r.body.dump());
  });
  after(async () => {
    await node.close();
    await sim.close();
  });

  for (const [what, token] of [['no token', null], ['a wrong token', 'admin-token-for-testz'], ['the client key', KEY]] as const) {
    test(`${what}: every admin route answers 401 in OpenAI's shape and changes nothing`, async () => {
      for (const [method, path] of [['GET', '/admin/v1/tenants/acme'], ['GET', '/admin/v1/ring'], ['GET', '/admin/v1/hot'], ['POST', '/admin/v1/drain'], ['POST', '/admin/v1/config/reload'], ['GET', '/admin/v1/nope']] as const) {
        const res = await admin(path, { method, token });
        assert.equal(res.statusCode, 401, `${method} ${path}`);
        assert.equal(res.headers['www-authenticate'], 'Bearer realm="quotaring-admin"');
        assert.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'unauthorized');
      }
      const ring = await admin('/admin/v1/ring');
      assert.equal(ring.statusCode, 200, 'the node was drained by an unauthorized call');
      await ring.body.dump();
    });
  }

  test('tenant usage: 1 of 2 requests used, used + remaining = limit per limit', async () => {
    const res = await admin('/admin/v1/tenants/acme');
    assert.equal(res.statusCode, 200);
    const body = (await res.body.json()) as { here: boolean; owner: string; limits: { name: string; used: number; remaining: number; limit: number }[] };
    assert.equal(body.here, true);
    const requests = body.limits.find((l) => l.name === 'requests/1m');
    assert.deepEqual({ used: requests?.used, remaining: requests?.remaining, limit: requests?.limit }, { used: 1, remaining: 1, limit: 2 });
    for (const l of body.limits) assert.equal(l.used + l.remaining, l.limit);
    const missing = await admin('/admin/v1/tenants/nobody');
    assert.equal(missing.statusCode, 404);
    assert.equal(((await missing.body.json()) as { error: { code: string } }).error.code, 'not_found');
  });

  test('ring of a single node, and hot tenants from the config', async () => {
    const ring = (await (await admin('/admin/v1/ring?tenant=acme')).body.json()) as { version: unknown; owner: string; self: string };
    // A single node started without --id is `node-<port>`.
    assert.deepEqual({ version: ring.version, owner: ring.owner, self: ring.self }, { version: null, owner: `node-${new URL(node.url).port}`, self: `node-${new URL(node.url).port}` });
    const hot = (await (await admin('/admin/v1/hot')).body.json()) as { hot: unknown[] };
    assert.deepEqual(hot.hot, [{ tenant: 'other', k: 2, source: 'config' }]);
  });

  test('reload: a bad file or a fixed section is refused (422) and the last good config stays; a good one applies', async () => {
    writeFileSync(file, 'tenants: [ {id: ');
    let res = await admin('/admin/v1/config/reload', { method: 'POST' });
    assert.equal(res.statusCode, 422);
    let body = (await res.body.json()) as { error: { code: string; message: string }; problems: string[] };
    assert.equal(body.error.code, 'invalid_config');
    assert.match(body.problems[0] ?? '', /quotaring\.yaml: line \d+/);

    writeFileSync(file, stringify({ ...raw, server: { log_level: 'silent', port: 1234 } }));
    res = await admin('/admin/v1/config/reload', { method: 'POST' });
    assert.equal(res.statusCode, 422);
    body = (await res.body.json()) as { error: { code: string; message: string }; problems: string[] };
    assert.match(body.problems.join('\n'), /server: changed, and server is read once at start: restart the process/);

    // Still the last good config: the second request of acme passes, the third is refused.
    const second = await request(`${node.url}/v1/chat/completions`, { method: 'POST', headers, body: chat });
    await second.body.dump();
    assert.equal(second.statusCode, 200);
    const third = await request(`${node.url}/v1/chat/completions`, { method: 'POST', headers, body: chat });
    await third.body.dump();
    assert.equal(third.statusCode, 429);

    // Raise acme to 5 requests a minute: the two it used stay used, so 3 more pass and the 4th is refused.
    writeFileSync(file, stringify(rawConfig(sim.url, { server: { log_level: 'silent' } }, 5)));
    res = await admin('/admin/v1/config/reload', { method: 'POST' });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(((await res.body.json()) as { tenantsChanged: string[] }).tenantsChanged, ['acme']);
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await request(`${node.url}/v1/chat/completions`, { method: 'POST', headers, body: chat });
      await r.body.dump();
      codes.push(r.statusCode);
    }
    assert.deepEqual(codes, [200, 200, 200, 429]);
  });

  test('drain of a node without Redis membership: 409 cannot_drain, the node keeps serving', async () => {
    const res = await admin('/admin/v1/drain', { method: 'POST' });
    assert.equal(res.statusCode, 409);
    assert.equal(((await res.body.json()) as { error: { code: string } }).error.code, 'cannot_drain');
    const health = await request(`${node.url}/healthz`);
    assert.equal(health.statusCode, 200);
    await health.body.dump();
  });
});

describe('drain through a real Redis membership', () => {
  let redis: RunningRedis;
  let sim: { url: string; close(): Promise<void> };
  let a: Awaited<ReturnType<typeof startGateway>>;
  let b: Awaited<ReturnType<typeof startGateway>>;
  before(async () => {
    redis = await startRedis();
    sim = await startSimulator({ port: 0 });
    process.env.SIM_KEY = 'sim-key';
    const file = writeYaml(rawConfig(sim.url, { server: { log_level: 'silent' }, cluster: { name: `drain-${process.pid}`, redis: { url: redis.url }, handoff: { drain: 200 } } }));
    a = await startGateway({ configFile: file, host: '127.0.0.1', port: 0, id: 'node-a', env: { QUOTARING_ADMIN_TOKEN: TOKEN, ...TEST_SECRET_ENV } });
    b = await startGateway({ configFile: file, host: '127.0.0.1', port: 0, id: 'node-b', env: { QUOTARING_ADMIN_TOKEN: TOKEN, ...TEST_SECRET_ENV } });
  });
  after(async () => {
    await Promise.all([a.close(), b.close()]);
    await sim.close();
    await redis.stop();
  });

  test('node-a drained: out of both rings, its tenants answered 421 naming node-b, and drain is idempotent', async () => {
    const ringOf = async (adminUrl: string | undefined) => (await (await request(`${adminUrl}/admin/v1/ring?tenant=acme`, { headers: { authorization: `Bearer ${TOKEN}` } })).body.json()) as { members: { id: string }[]; owner: string };
    for (let i = 0; i < 50 && (await ringOf(b.adminUrl)).members.length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual((await ringOf(b.adminUrl)).members.map((m) => m.id), ['node-a', 'node-b']);
    const res = await request(`${a.adminUrl}/admin/v1/drain`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.statusCode, 200);
    const body = (await res.body.json()) as { drained: boolean; alreadyDrained: boolean };
    assert.deepEqual({ drained: body.drained, alreadyDrained: body.alreadyDrained }, { drained: true, alreadyDrained: false });
    for (let i = 0; i < 50 && (await ringOf(b.adminUrl)).members.length > 1; i++) await new Promise((r) => setTimeout(r, 100));
    const ringB = await ringOf(b.adminUrl);
    assert.deepEqual(ringB.members.map((m) => m.id), ['node-b']);
    assert.equal(ringB.owner, 'node-b');
    const misdirected = await request(`${a.url}/v1/chat/completions`, { method: 'POST', headers, body: chat });
    await misdirected.body.dump();
    assert.equal(misdirected.statusCode, 421);
    assert.equal(misdirected.headers['x-quotaring-owner'], 'node-b');
    const ready = await request(`${a.url}/readyz`);
    assert.deepEqual({ status: ready.statusCode, body: await ready.body.json() }, { status: 503, body: { status: 'drained' } });
    const again = await request(`${a.adminUrl}/admin/v1/drain`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(((await again.body.json()) as { alreadyDrained: boolean }).alreadyDrained, true);
  });
});

describe('a router: metrics and admin API', () => {
  let sim: { url: string; close(): Promise<void> };
  let node: FastifyInstance;
  let router: Awaited<ReturnType<typeof startRouter>>;
  before(async () => {
    sim = await startSimulator({ port: 0 });
    const config = buildConfig(rawConfig(sim.url, { server: { log_level: 'silent' } }), 'ops.yaml', { SIM_KEY: 'sim-key' });
    node = buildGateway({ config, clusterSecret: TEST_SECRET, logger: false });
    const nodeUrl = await node.listen({ host: '127.0.0.1', port: 0 });
    router = await startRouter({ config, membership: new StaticMembership([{ id: 'node-1', url: nodeUrl }]), logger: false, host: '127.0.0.1', port: 0, env: { QUOTARING_ADMIN_TOKEN: TOKEN, ...TEST_SECRET_ENV } });
    for (let i = 0; i < 3; i++) await (await request(`${router.url}/v1/chat/completions`, { method: 'POST', headers, body: chat })).body.dump();
    await (await request(`${router.url}/v1/chat/completions`, { method: 'POST', headers: { ...headers, authorization: 'Bearer key-nobody-000001' }, body: chat })).body.dump();
  });
  after(async () => {
    await router.close();
    await node.close();
    await sim.close();
  });

  test('requests by status (200 ×2, 429, 401) and the ring', async () => {
    const text = await (await request(`${router.url}/metrics`)).body.text();
    assert.equal(series(text, 'quotaring_router_requests_total', { status: '200' }), 2);
    assert.equal(series(text, 'quotaring_router_requests_total', { status: '429' }), 1);
    assert.equal(series(text, 'quotaring_router_requests_total', { status: '401' }), 1);
    assert.equal(series(text, 'quotaring_router_request_duration_seconds_count'), 4);
    assert.equal(series(text, 'quotaring_ring_members'), 1);
    assert.equal(text.includes('key-'), false);
  });

  test('docs/metrics.md lists exactly the quotaring_ metrics a router exports', async () => {
    const text = await (await request(`${router.url}/metrics`)).body.text();
    const exported = new Set([...text.matchAll(/^# TYPE (quotaring_[a-z_]+) /gm)].map((m) => m[1]));
    const routerSection = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8').split('## Router')[1]?.split('## Process')[0] ?? '';
    const documented = new Set([...routerSection.matchAll(/`(quotaring_[a-z_]+)`/g)].map((m) => m[1]));
    assert.deepEqual([...exported].sort(), [...documented].sort());
  });

  test('admin: 401 without the token; the tenant usage read from its owner', async () => {
    const denied = await request(`${router.adminUrl}/admin/v1/tenants/acme`);
    assert.equal(denied.statusCode, 401);
    await denied.body.dump();
    const res = await request(`${router.adminUrl}/admin/v1/tenants/acme`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.statusCode, 200);
    const body = (await res.body.json()) as { askedNode: string; here: boolean; limits: { name: string; used: number; remaining: number }[] };
    assert.deepEqual({ askedNode: body.askedNode, here: body.here }, { askedNode: 'node-1', here: true });
    assert.deepEqual(body.limits.filter((l) => l.name === 'requests/1m').map((l) => [l.used, l.remaining]), [[2, 0]]);
  });
});
