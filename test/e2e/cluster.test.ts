/**
 * End to end: the simulator, gateway nodes and routers as real processes, with static members and
 * with Redis membership, driven by the official OpenAI SDK.
 *
 * Across hosts (issue 18): Redis, the simulator, each node and each router run in a network
 * namespace of their own (test/helpers/netns.ts) — every process binds its namespace's address and
 * nodes advertise `http://<that address>:<port>`, so a URL or a bind address that only works on
 * loopback fails here. Where namespaces cannot be made (not root, no `ip netns`), the same tests run
 * with every host on 127.0.0.1, and the reason is printed.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { request } from 'undici';
import { parse } from 'yaml';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { createRing, ringVersion } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { writeConfig } from '../helpers/processes.ts';
import { routerSigned, signedRequest } from '../helpers/cluster-secret.ts';
import { createTestHosts } from '../helpers/netns.ts';
import type { HostRedis } from '../helpers/netns.ts';
import { ringOf, startHostNode, startHostRouters, startHostSimulator } from '../helpers/cluster.ts';
import type { Running } from '../helpers/processes.ts';

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
/** A chat body of about `tokens` prompt tokens asking for `maxTokens` of output. */
const chat = (tokens: number, maxTokens: number): OpenAI.ChatCompletionCreateParamsNonStreaming => ({ ...prompts.body(tokens), messages: [...prompts.body(tokens).messages], max_tokens: maxTokens });
const tenant = (id: string, limits: unknown[]) => ({ id, keys: [`key-${id}-0000`], limits });

const NODES = ['node-1', 'node-2', 'node-3'] as const;
const hosts = createTestHosts(['redis', 'sim', ...NODES, 'router-1', 'router-2']);
process.stderr.write(
  hosts.loopbackBecause === undefined
    ? `cluster e2e across network namespaces: ${['redis', 'sim', ...NODES, 'router-1', 'router-2'].map((h) => `${h} ${hosts.address(h)}`).join(', ')}\n`
    : `cluster e2e on loopback (every host on 127.0.0.1), not in network namespaces: ${hosts.loopbackBecause}\n`,
);
after(() => hosts.destroy());
const env = { QUOTARING_SIM_KEY: 'sim-demo-key' };

/** A config of the test tenants against the simulator at `simUrl`, with `cluster` merged over the test's timings. */
function clusterTestConfig(simUrl: string, cluster: Record<string, unknown> = {}, server: Record<string, unknown> = {}): string {
  return writeConfig({
    server: { log_level: 'warn', ...server },
    cluster: { heartbeat: '200ms', dead_after: '1s', health_check: '200ms', ...cluster },
    tenants: [
      tenant('tpm', [{ requests: 100, window: '1m', algorithm: 'sliding_window' }, { tokens: 10_000, window: '1m', algorithm: 'sliding_window' }]),
      tenant('rpm', [{ requests: 24, window: '1m' }]),
      ...Array.from({ length: 12 }, (_, i) => tenant(`t${i}`, [{ requests: 1_000, window: '1m' }])),
    ],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY' }],
  });
}

/** A copy of a config file with Redis membership. */
function redisConfig(file: string, url: string): string {
  const raw = parse(readFileSync(file, 'utf8')) as { cluster: Record<string, unknown> };
  return writeConfig({ ...raw, cluster: { ...raw.cluster, name: `order-${process.pid}`, redis: { url } } });
}

describe('cluster with static members: 3 nodes, 2 routers', () => {
  let routers: string[];
  let nodes: string[];
  before(async () => {
    const simUrl = await startHostSimulator(hosts, env);
    const ports = await Promise.all(NODES.map((id) => hosts.port(id)));
    const members = NODES.map((id, i) => ({ id, url: hosts.url(id, ports[i] as number) }));
    const config = clusterTestConfig(simUrl, { members });
    // Each node derives the URL it is reached at from --host and --port.
    for (const [i, id] of NODES.entries()) await startHostNode(hosts, id, config, env, { port: ports[i] as number });
    nodes = members.map((m) => m.url);
    routers = await startHostRouters(hosts, ['router-1', 'router-2'], config, env);
  });
  after(() => hosts.stopAll());

  test('every node builds the same ring', async () => {
    const versions = await Promise.all(nodes.map(ringOf));
    assert.equal(new Set(versions).size, 1);
    assert.match(versions[0] ?? '', /^[0-9a-f]{12}$/);
  });

  test('{tpm 10,000, rpm 100} (sliding windows): 4 requests of 3,000 + 1,000 through two routers: exactly 2 admitted', async () => {
    const clients = routers.map((url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'key-tpm-0000', maxRetries: 0 }));
    const body = chat(3_000, 1_000);
    const outcomes: (string | number)[] = [];
    for (let i = 0; i < 4; i++) {
      try {
        const res = await clients[i % 2]!.chat.completions.create(body).withResponse();
        assert.deepEqual([res.data.usage?.prompt_tokens, res.data.usage?.completion_tokens], [3_000, 1_000]);
        outcomes.push(Number(res.response.headers.get('x-ratelimit-remaining-tokens')));
      } catch (err) {
        assert.ok(err instanceof OpenAI.RateLimitError, String(err));
        const ms = Number(err.headers.get('retry-after-ms'));
        // 4,000 tokens needed, 2,000 left: the first request's 4,000 leave the window 60 s after it.
        assert.ok(ms > 55_000 && ms <= 60_000, `retry-after-ms ${ms}`);
        assert.equal(err.headers.get('retry-after'), String(Math.ceil(ms / 1_000)));
        outcomes.push('429');
      }
    }
    assert.deepEqual(outcomes, [6_000, 2_000, '429', '429']);
  });

  test('30 requests of a tenant {rpm 24} at once through two routers: exactly 24 admitted', async () => {
    const clients = routers.map((url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'key-rpm-0000', maxRetries: 0 }));
    const body = chat(20, 5);
    const results = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => clients[i % 2]!.chat.completions.create(body)));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 24);
    assert.ok(results.every((r) => r.status === 'fulfilled' || r.reason instanceof OpenAI.RateLimitError));
  });

  test('a node asked for a tenant it does not own answers 421 naming the owner, and counts nothing', async () => {
    const replies = await Promise.all(
      nodes.map(async (url) => {
        const res = await request(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: 'Bearer key-t0-0000', 'content-type': 'application/json' },
          body: JSON.stringify(chat(20, 5)),
        });
        return { status: res.statusCode, owner: res.headers['x-quotaring-owner'], body: await res.body.text() };
      }),
    );
    assert.equal(replies.filter((r) => r.status === 200).length, 1, JSON.stringify(replies));
    const misdirected = replies.filter((r) => r.status === 421);
    assert.equal(misdirected.length, 2);
    const ownerIndex = replies.findIndex((r) => r.status === 200);
    assert.ok(misdirected.every((r) => r.owner === `node-${ownerIndex + 1}`));
  });
});

describe('cluster with Redis membership: processes started in any order', () => {
  let redis: HostRedis;
  before(async () => {
    redis = await hosts.startRedis('redis');
  });
  after(() => hosts.stopAll());

  test('router, node, node, router, node: all agree on the ring of the three nodes within 2 s of the last start, and requests flow', async () => {
    const simUrl = await startHostSimulator(hosts, env);
    const config = redisConfig(clusterTestConfig(simUrl), redis.url);
    const urls: string[] = [];
    const members: Member[] = [];
    const startRouter = async (host: string): Promise<void> => {
      urls.push(...(await startHostRouters(hosts, [host], config, env, { health: 'healthz' })));
    };
    const startNode = async (id: string, advertise: 'derived' | 'url-flag'): Promise<void> => {
      const { member } = await startHostNode(hosts, id, config, env, { advertise });
      urls.push(member.url);
      members.push(member);
    };
    await startRouter('router-1');
    await startNode('node-1', 'derived');
    await startNode('node-2', 'url-flag');
    await startRouter('router-2');
    // node-3 takes its listen address and port from its config file (server.host, server.port), not from flags.
    const port3 = await hosts.port('node-3');
    const url3 = hosts.url('node-3', port3);
    const config3 = redisConfig(clusterTestConfig(simUrl, {}, { host: hosts.address('node-3'), port: port3 }), redis.url);
    await hosts.runCli('node-3', ['node', '--config', config3, '--id', 'node-3'], `${url3}/healthz`, env);
    urls.push(url3);
    members.push({ id: 'node-3', url: url3 });
    const expected = ringVersion(members);
    const started = Date.now();
    let versions: string[] = [];
    while (Date.now() - started < 2_000) {
      versions = await Promise.all(urls.map(ringOf));
      if (versions.every((v) => v === expected)) break;
      await sleep(50);
    }
    assert.deepEqual(versions, urls.map(() => expected));
    const router = urls[0] as string;
    const client = new OpenAI({ baseURL: `${router}/v1`, apiKey: 'key-t1-0000', maxRetries: 0 });
    for (let i = 0; i < 5; i++) await client.chat.completions.create(chat(20, 5));
  });
});

describe('static members (--members): a SIGKILLed owner is routed around', () => {
  after(() => hosts.stopAll());

  test("the next member of the tenant's range serves it (x-quotaring-fallback-for), from the owner's replicated checkpoint", async () => {
    const simUrl = await startHostSimulator(hosts, env);
    const ports = await Promise.all(NODES.map((id) => hosts.port(id)));
    const members = NODES.map((id, i) => ({ id, url: hosts.url(id, ports[i] as number) }));
    // Members from the command line (--members), not the config.
    const config = clusterTestConfig(simUrl);
    const list = members.map((m) => `${m.id}=${m.url}`).join(',');
    const nodes = new Map<string, Running>();
    for (const [i, m] of members.entries()) {
      const { proc } = await startHostNode(hosts, m.id, config, env, { port: ports[i] as number, args: ['--members', list] });
      nodes.set(m.id, proc);
    }
    const [routerUrl] = await startHostRouters(hosts, ['router-1'], config, env, { args: ['--members', list] });
    const ring = createRing(members);
    // Tenant tpm: sliding windows, so remaining counts are exact whatever the timing.
    const [owner, next] = ring.range('tpm', 2) as [Member, Member];
    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'key-tpm-0000', maxRetries: 0 });
    const before = await client.chat.completions.create(chat(20, 5)).withResponse();
    assert.equal(before.response.headers.get('x-ratelimit-remaining-requests'), '99');
    // Past one checkpoint period (1 s): the owner's checkpoint reached the tenant's replica, the next member.
    await sleep(1_500);
    nodes.get(owner.id)?.proc.kill('SIGKILL');
    await sleep(100);
    for (let i = 0; i < 3; i++) {
      const res = await client.chat.completions.create(chat(20, 5)).withResponse();
      // The next member decides from the owner's last checkpoint (its first request counted): 100 − 1 − 1 − i.
      assert.equal(res.response.headers.get('x-ratelimit-remaining-requests'), String(98 - i));
    }
    // The next member still sees the dead node as the owner (static ring): it served as a stand-in.
    const state = await signedRequest(`${next.url}/_quotaring/v1/tenants/tpm`);
    const body = (await state.body.json()) as { here: boolean; owner: string };
    assert.deepEqual([body.here, body.owner], [false, owner.id]);
  });
});

describe('cluster with Redis membership', () => {
  let redis: HostRedis;
  let nodes: string[] = [];
  before(async () => {
    redis = await hosts.startRedis('redis');
  });
  after(() => hosts.stopAll());

  test('nodes and routers agree on one ring version within 2 s, and requests flow', async () => {
    const simUrl = await startHostSimulator(hosts, env);
    const config = clusterTestConfig(simUrl, { members: [], redis: { url: redis.url } });
    const members: Member[] = [];
    // In namespaces, node-1 listens on 0.0.0.0 without --url: it must advertise its namespace's address.
    // (On loopback this machine has several addresses, so it binds 127.0.0.1 like the others.)
    for (const id of NODES) members.push((await startHostNode(hosts, id, config, env, { advertise: id === 'node-1' && hosts.net !== undefined ? 'wildcard' : 'derived' })).member);
    const started = { nodes: members.map((m) => m.url), routers: await startHostRouters(hosts, ['router-1', 'router-2'], config, env, { health: 'healthz' }) };
    const deadline = Date.now() + 2_000;
    let versions: string[] = [];
    while (Date.now() < deadline) {
      versions = await Promise.all([...started.nodes, ...started.routers].map(ringOf));
      if (new Set(versions).size === 1 && versions[0] !== '') break;
      await sleep(50);
    }
    assert.equal(new Set(versions).size, 1, versions.join(','));
    // The ring of the URLs the nodes advertise: each its own address (its namespace's) and port.
    assert.equal(versions[0], ringVersion(members));
    const client = new OpenAI({ baseURL: `${started.routers[0]}/v1`, apiKey: 'key-t1-0000', maxRetries: 0 });
    for (let i = 0; i < 5; i++) await client.chat.completions.create(chat(20, 5));
    nodes = started.nodes;
  });

  test('a node that stood in for a live owner gives the tenant back with its usage: the owner counts both', async () => {
    assert.equal(nodes.length, 3, 'needs the cluster of the test before');
    type State = { here: boolean; owner: string; standIn?: boolean; limits: { name: string; used: number }[] };
    const state = async (node: string): Promise<State> => (await (await signedRequest(`${node}/_quotaring/v1/tenants/tpm`)).body.json()) as State;
    const owner = (await state(nodes[0] as string)).owner;
    const ownerUrl = (await Promise.all(nodes.map(async (n) => ((await state(n)).here ? n : undefined)))).find((n) => n !== undefined) as string;
    const standIn = nodes.find((n) => n !== ownerUrl) as string;
    const used = (s: State): number[] => ['requests/1m', 'tokens/1m'].map((name) => s.limits.find((l) => l.name === name)?.used ?? -1);
    const before = used(await state(ownerUrl));
    // A router that found the owner suspect sends the tenant's requests to another node, naming the owner (signed, as a router does).
    const send = async (node: string, headers: Record<string, string>): Promise<number> => {
      const res = await request(`${node}/v1/chat/completions`, {
        method: 'POST',
        headers: routerSigned('POST', '/v1/chat/completions', { authorization: 'Bearer key-tpm-0000', 'content-type': 'application/json', 'x-quotaring-tenant': 'tpm', ...headers }),
        body: JSON.stringify(chat(300, 20)),
      });
      assert.equal(res.statusCode, 200);
      const { usage } = (await res.body.json()) as { usage: { total_tokens: number } };
      return usage.total_tokens;
    };
    const stoodIn = (await send(standIn, { 'x-quotaring-fallback-for': owner })) + (await send(standIn, { 'x-quotaring-fallback-for': owner }));
    const held = await state(standIn);
    assert.deepEqual([held.here, held.standIn, used(held)[0]], [false, true, before[0]! + 2]);
    // The owner is alive: another router's request still reaches it.
    const direct = await send(ownerUrl, {});
    // Within two checkpoint periods (1 s) of its last request the stand-in gives the tenant back.
    const deadline = Date.now() + 5_000;
    while ((await state(standIn)).standIn === true && Date.now() < deadline) await sleep(100);
    assert.equal((await state(standIn)).standIn, undefined);
    assert.deepEqual(used(await state(ownerUrl)), [before[0]! + 3, before[1]! + stoodIn + direct]);

    // The node-to-node route: usage that is not usage is 400, usage sent to a node that does not own the tenant 409; neither changes anything.
    const absorb = async (node: string, usage: unknown): Promise<[number, string | undefined]> => {
      const res = await signedRequest(`${node}/_quotaring/v1/settlements`, { body: { op: 'absorb', tenant: 'tpm', usage } });
      await res.body.dump();
      return [res.statusCode, res.headers['x-quotaring-error'] as string | undefined];
    };
    const usage = { windows: [{ name: 'tokens/1m', kind: 'tokens', entries: [[Date.now(), 500, 'x1']] }], buckets: [] };
    assert.deepEqual(await absorb(ownerUrl, { windows: [{ name: 'tokens/1m', entries: [[Date.now(), -5, 'x1']] }], buckets: [] }), [400, 'invalid_request']);
    assert.deepEqual(await absorb(standIn, usage), [409, 'not_owner']);
    assert.deepEqual(used(await state(ownerUrl)), [before[0]! + 3, before[1]! + stoodIn + direct]);
  });
});
