/**
 * Cluster signatures on a real node (buildGateway in a static cluster of node-a, this node, and
 * node-b, a member that never answers) in front of the provider simulator (issue 14, findings 1
 * and 2):
 *
 * - internal routes (`/_quotaring/v1/*`) answer 401 `cluster_auth_failed` to unsigned calls, to
 *   calls signed with another secret, expired, replayed, or whose body is not the signed one: an
 *   unsigned `finish` with `tokens: 0` leaves the reservation and its slot as they were;
 * - a client request sent straight to a node with `x-quotaring-fallback-for` naming the owner is
 *   answered 421 like any misdirected request (the header is ignored unless a router signed it);
 *   signed, the node stands in;
 * - a node without a cluster secret (a single node) refuses every internal route; health, readiness
 *   and metrics stay open.
 */
import { randomId } from '../../src/security/random-id.ts';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import type { LoadedConfig } from '../../src/config/load.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import type { Member } from '../../src/coord/types.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { ClusterSecret } from '../../src/security/cluster-secret.ts';
import { RequestSigner, SIGNATURE_HEADER } from '../../src/security/request-signature.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { TEST_SECRET, TEST_SECRET_VALUE, signedRequest, testSigner } from '../helpers/cluster-secret.ts';
import { freePort } from '../helpers/processes.ts';

const VNODES = 160;

/** The first of `candidates` that `owner` owns on the ring of `members`. */
function ownedBy(members: Member[], owner: string, candidates: readonly string[]): string {
  const ring = createRing(members, { vnodes: VNODES });
  const found = candidates.find((t) => ring.owner(t)?.id === owner);
  assert.ok(found !== undefined, `a tenant owned by ${owner}`);
  return found;
}

function config(simUrl: string, members: Member[] | undefined, own: string, theirs: string): LoadedConfig {
  return buildConfig(
    {
      server: { log_level: 'silent' },
      ...(members === undefined ? {} : { cluster: { members, vnodes: VNODES } }),
      tenants: [
        { id: own, keys: ['key-own-000001'], limits: [{ concurrent: 1 }, { tokens: 100_000, window: '1m' }] },
        { id: theirs, keys: ['key-theirs-0001'], limits: [{ concurrent: 4 }, { tokens: 100_000, window: '1m' }] },
      ],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'K', forward_headers: ['x-sim-output-tokens'] }],
    },
    'cluster-auth.yaml',
    { K: 'provider-key-0' },
  );
}

const chat = (extra: Record<string, unknown> = {}): string => JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 300, messages: [{ role: 'user', content: 'Hi' }], ...extra });

interface TenantView {
  readonly here: boolean;
  readonly standIn?: true;
  readonly limits: readonly { readonly name: string; readonly remaining: number; readonly used: number }[];
}

describe('cluster signatures on a node (static cluster, real HTTP)', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url: string;
  let own: string;
  let theirs: string;

  before(async () => {
    // 20 tokens/s: a 300-token stream stays open for 15 s, long enough for every check below.
    sim = await startSimulator({ port: 0, tokensPerSecond: 20 });
    const portA = await freePort();
    url = `http://127.0.0.1:${portA}`;
    const a: Member = { id: 'node-a', url };
    const b: Member = { id: 'node-b', url: `http://127.0.0.1:${await freePort()}` };
    const candidates = Array.from({ length: 200 }, (_, i) => `tenant-${i}`);
    own = ownedBy([a, b], 'node-a', candidates);
    theirs = ownedBy([a, b], 'node-b', candidates);
    const membership = new StaticMembership([a, b], { vnodes: VNODES });
    app = buildGateway({ config: config(sim.url, [a, b], own, theirs), logger: false, clusterSecret: TEST_SECRET, cluster: { self: a, membership, ringOptions: { vnodes: VNODES } } });
    await app.listen({ host: '127.0.0.1', port: portA });
    const handoff = nodeHandoff(app);
    await handoff?.start();
    await membership.start();
    handoff?.joined();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  const tenantView = async (tenant: string): Promise<TenantView> => {
    const res = await signedRequest(`${url}/_quotaring/v1/tenants/${tenant}`);
    assert.equal(res.statusCode, 200);
    return (await res.body.json()) as TenantView;
  };
  const concurrentUsed = async (tenant: string): Promise<number> => (await tenantView(tenant)).limits.find((l) => l.name === 'concurrent')?.used ?? -1;
  const expect401 = async (res: Awaited<ReturnType<typeof request>>, what: string): Promise<string> => {
    const body = (await res.body.json()) as { error: { code: string; message: string } };
    assert.equal(res.statusCode, 401, what);
    assert.equal(res.headers['x-quotaring-error'], 'cluster_auth_failed', what);
    assert.equal(body.error.code, 'cluster_auth_failed', what);
    return body.error.message;
  };
  const metric = async (kind: string): Promise<number> => {
    const text = (await app.inject({ url: '/metrics' })).body;
    const line = text.split('\n').find((l) => l.startsWith(`quotaring_cluster_auth_refused_total{kind="${kind}"}`));
    return line === undefined ? 0 : Number(line.split(' ').pop());
  };

  test('an unsigned finish with tokens: 0 gets 401 and leaves the reservation and its slot; the signed one settles it', async () => {
    const stream = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer key-own-000001', 'content-type': 'application/json', 'x-sim-output-tokens': '300' },
      body: chat({ stream: true }),
    });
    assert.equal(stream.statusCode, 200);
    const id = String(stream.headers['x-quotaring-request-id']);
    assert.match(id, /^[0-9a-f]{8}-[A-Za-z0-9_-]{22}$/, 'a random 128-bit request id');
    try {
      assert.equal(await concurrentUsed(own), 1);
      const refusedBefore = await metric('internal_call');
      const finish = { op: 'finish', tenant: own, id, tokens: 0 };

      const unsigned = await request(`${url}/_quotaring/v1/settlements`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(finish) });
      assert.match(await expect401(unsigned, 'unsigned'), /cluster secret \(QUOTARING_CLUSTER_SECRET\).*missing/);
      const otherSecret = new RequestSigner(new ClusterSecret('an-attacker-guess-at-the-secret-0000000'));
      assert.match(await expect401(await signedRequest(`${url}/_quotaring/v1/settlements`, { body: finish, signer: otherSecret }), 'another secret'), /bad_signature/);
      const stale = new RequestSigner(TEST_SECRET, { clock: { now: () => Date.now() - 31_000 } });
      assert.match(await expect401(await signedRequest(`${url}/_quotaring/v1/settlements`, { body: finish, signer: stale }), 'expired'), /expired/);
      // Signed for one body, sent with another (tokens: 0 in place of 5).
      const headers = { 'content-type': 'application/json' };
      const target = new URL(`${url}/_quotaring/v1/settlements`);
      const signedFor5 = testSigner.signInternal('POST', target, headers, JSON.stringify({ ...finish, tokens: 5 }));
      await expect401(await request(target, { method: 'POST', headers: { ...headers, ...signedFor5 }, body: JSON.stringify(finish) }), 'tampered body');

      // Nothing changed: the slot is still held (a second request of this tenant is refused:
      // concurrency 1), and the reservation is still open (the signed finish below settles it).
      assert.equal(await concurrentUsed(own), 1);
      const second = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: 'Bearer key-own-000001', 'content-type': 'application/json' }, body: chat() });
      assert.equal(second.statusCode, 429);
      await second.body.dump();
      assert.equal(await metric('internal_call'), refusedBefore + 4);

      // The same call signed with the cluster secret is applied (what a member's settlement does) — once.
      const body = JSON.stringify(finish);
      const signed = { ...headers, ...testSigner.signInternal('POST', target, headers, body) };
      const ok = await request(target, { method: 'POST', headers: signed, body });
      assert.equal(ok.statusCode, 200);
      assert.deepEqual(await ok.body.json(), { settled: true, released: true });
      assert.equal(await concurrentUsed(own), 0);
      assert.match(await expect401(await request(target, { method: 'POST', headers: signed, body }), 'replayed'), /replayed/);
    } finally {
      stream.body.destroy();
    }
  });

  test('unsigned GET of tenants/:id, levels and handoff: 401; signed: 200', async () => {
    for (const path of [`/_quotaring/v1/tenants/${own}`, '/_quotaring/v1/levels', '/_quotaring/v1/handoff']) {
      await expect401(await request(`${url}${path}`), path);
      // A signature copied from another path does not open this one.
      const elsewhere = testSigner.signInternal('GET', `${url}/_quotaring/v1/tenants/${theirs}`, {});
      await expect401(await request(`${url}${path}`, { headers: elsewhere }), `${path} with another path's signature`);
      const res = await signedRequest(`${url}${path}`);
      assert.equal(res.statusCode, 200, path);
      await res.body.dump();
    }
  });

  test('handoff nudge and pushes: unsigned 401; a malformed body, or a push naming its ring without the sender, 400 and nothing stored; signed: 200', async () => {
    const nudge = `${url}/_quotaring/v1/handoff/nudge`;
    const push = `${url}/_quotaring/v1/handoff/tenants`;
    await expect401(await request(nudge, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ring: 'abc' }) }), 'unsigned nudge');
    for (const body of [{}, { ring: 'not hex' }, { ring: 'a'.repeat(65) }, { ring: 'abc', extra: 1 }]) {
      const res = await signedRequest(nudge, { body });
      assert.equal(res.statusCode, 400, JSON.stringify(body));
      assert.equal(res.headers['x-quotaring-error'], 'invalid_request');
      await res.body.dump();
    }
    const ok = await signedRequest(nudge, { body: { ring: 'abc123' } });
    assert.equal(ok.statusCode, 200);
    assert.deepEqual(await ok.body.json(), { ring: nodeHandoff(app)?.ring().version });
    // The sender's id comes from the signed x-quotaring-from header: without it a push cannot announce.
    const state = { tenant: theirs, json: '{}', at: Date.now() };
    const anonymous = await signedRequest(push, { body: { kind: 'handoff', states: [state], ring: 'abc123' } });
    assert.equal(anonymous.statusCode, 400);
    assert.match(await anonymous.body.text(), /x-quotaring-from/);
    const bad = await signedRequest(push, { body: { kind: 'handoff', states: [state], ring: 'zz' }, headers: { 'x-quotaring-from': 'node-b' } });
    assert.equal(bad.statusCode, 400);
    await bad.body.dump();
    assert.equal(nodeHandoff(app)?.peers?.replicas.take(theirs), undefined, 'a refused push stores nothing');
  });

  test('reclaim (an owner woken from a stall takes its tenants back): unsigned 401; a malformed body, or a sender other than the owner named, 400 and no stand-in ended; signed by the owner: 200', async () => {
    const reclaim = `${url}/_quotaring/v1/handoff/reclaim`;
    const handoff = nodeHandoff(app);
    // node-z: any signed member id (node-b is the owner the tests below stand in for).
    await expect401(await request(reclaim, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ owner: 'node-z' }) }), 'unsigned reclaim');
    for (const [body, from] of [[{}, 'node-z'], [{ owner: '' }, 'node-z'], [{ owner: 'node-z', extra: 1 }, 'node-z'], [{ owner: 'node-z' }, undefined], [{ owner: 'node-z' }, 'node-y']] as const) {
      const res = await signedRequest(reclaim, { body, ...(from === undefined ? {} : { headers: { 'x-quotaring-from': from } }) });
      assert.equal(res.statusCode, 400, JSON.stringify({ body, from }));
      assert.equal(res.headers['x-quotaring-error'], 'invalid_request');
      await res.body.dump();
      assert.equal(handoff?.ownerBack('node-z'), false, 'a refused reclaim changes nothing');
    }
    const ok = await signedRequest(reclaim, { body: { owner: 'node-z' }, headers: { 'x-quotaring-from': 'node-z' } });
    assert.equal(ok.statusCode, 200);
    assert.deepEqual(await ok.body.json(), { reclaimed: [] });
    assert.equal(handoff?.ownerBack('node-z'), true);
  });

  test('percent-encoded paths that route to an internal route are refused too', async () => {
    for (const path of [`/%5Fquotaring/v1/tenants/${own}`, '/%5fquotaring/v1/levels', '/_quotaring/v1/level%73', '/_quotaring/v1/handof%66']) {
      await expect401(await request(`${url}${path}`), path);
    }
  });

  test('healthz, readyz and metrics stay open', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const res = await request(`${url}${path}`);
      assert.equal(res.statusCode, 200, path);
      await res.body.dump();
    }
  });

  test('a client sending x-quotaring-fallback-for (or -redirected-for) naming the owner straight to a node gets 421; the node does not stand in', async () => {
    const dropped = await metric('stand_in_headers');
    for (const header of ['x-quotaring-fallback-for', 'x-quotaring-redirected-for']) {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer key-theirs-0001', 'content-type': 'application/json', [header]: 'node-b', [SIGNATURE_HEADER]: 't=1,n=,s=' + 'A'.repeat(43) },
        body: chat(),
      });
      assert.equal(res.statusCode, 421, header);
      assert.equal(res.headers['x-quotaring-owner'], 'node-b');
      assert.equal(res.headers['x-quotaring-error'], 'misdirected');
      await res.body.dump();
    }
    // Not held here as a stand-in: no fresh limits were opened for the tenant on this node.
    const view = await tenantView(theirs);
    assert.deepEqual([view.here, view.standIn, view.limits], [false, undefined, []]);
    assert.equal(await metric('stand_in_headers'), dropped + 2);
  });

  test('the same fallback request signed by a router (with a nonce) is accepted once: the node stands in for the suspect owner; its replay, with another body, gets 421', async () => {
    const path = '/v1/chat/completions';
    const headers: Record<string, string> = { authorization: 'Bearer key-theirs-0001', 'content-type': 'application/json', 'x-quotaring-fallback-for': 'node-b', 'x-quotaring-tenant': theirs };
    headers[SIGNATURE_HEADER] = testSigner.signature({ method: 'POST', path, headers }, randomId());
    const res = await request(`${url}${path}`, { method: 'POST', headers, body: chat() });
    assert.equal(res.statusCode, 200, await res.body.text());
    const dropped = await metric('stand_in_headers');
    const replay = await request(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'replayed' }] }) });
    assert.equal(replay.statusCode, 421, await replay.body.text());
    assert.equal(await metric('stand_in_headers'), dropped + 1);
  });

  test('a router signature without a nonce, or for another tenant than the key\'s, does not make the node stand in: 421', async () => {
    const path = '/v1/chat/completions';
    const base = { authorization: 'Bearer key-theirs-0001', 'content-type': 'application/json', 'x-quotaring-fallback-for': 'node-b' };
    const noNonce: Record<string, string> = { ...base, 'x-quotaring-tenant': theirs };
    noNonce[SIGNATURE_HEADER] = testSigner.signature({ method: 'POST', path, headers: noNonce });
    const otherTenant: Record<string, string> = { ...base, 'x-quotaring-tenant': own };
    otherTenant[SIGNATURE_HEADER] = testSigner.signature({ method: 'POST', path, headers: otherTenant }, randomId());
    for (const [what, headers] of [['no nonce', noNonce], ['signed for another tenant', otherTenant]] as const) {
      const res = await request(`${url}${path}`, { method: 'POST', headers, body: chat() });
      assert.equal(res.statusCode, 421, what);
      assert.equal(res.headers['x-quotaring-error'], 'misdirected', what);
      await res.body.dump();
    }
  });

  test('a signature whose MAC is spelled another way (the last base64url character\'s spare bits) is refused, so a replay cannot dodge the guard', async () => {
    const body = { op: 'renew', tenant: own, id: 'no-such-reservation' };
    // Sign one settlement, then send it with each sibling spelling of the MAC's last character.
    const target = new URL('/_quotaring/v1/settlements', url);
    const text = JSON.stringify(body);
    const headers: Record<string, string> = { 'content-type': 'application/json', ...testSigner.signInternal('POST', target, {}, text) };
    const sig = headers[SIGNATURE_HEADER] as string;
    const last = sig.at(-1) as string;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const index = alphabet.indexOf(last);
    const siblings = [0, 1, 2, 3].map((i) => alphabet[(index & ~3) + i] as string).filter((c) => c !== last);
    for (const c of siblings) {
      const forged = await request(target, { method: 'POST', headers: { ...headers, [SIGNATURE_HEADER]: sig.slice(0, -1) + c }, body: text });
      assert.match(await expect401(forged, `spelling ${c}`), /malformed/);
    }
  });

  test('rotation: a node whose secret is new and whose previous is the old one accepts calls signed with either', async () => {
    const rotating = buildGateway({ config: config(sim.url, undefined, own, theirs), logger: false, clusterSecret: new ClusterSecret('the-new-cluster-secret-of-32-characters!', TEST_SECRET_VALUE) });
    try {
      const base = await rotating.listen({ host: '127.0.0.1', port: 0 });
      const newSigner = new RequestSigner(new ClusterSecret('the-new-cluster-secret-of-32-characters!'));
      for (const signer of [testSigner, newSigner]) {
        const res = await signedRequest(`${base}/_quotaring/v1/levels`, { signer });
        assert.equal(res.statusCode, 200);
        await res.body.dump();
      }
    } finally {
      await rotating.close();
    }
  });
});

describe('a single node without a cluster secret', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    app = buildGateway({ config: config(sim.url, undefined, 'solo', 'other'), logger: false });
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('refuses every internal route, signed or not (it has no secret to check with); serves clients, health and metrics', async () => {
    for (const url of ['/_quotaring/v1/tenants/solo', '/_quotaring/v1/levels', '/_quotaring/v1/handoff']) {
      const unsigned = await app.inject({ url });
      assert.equal(unsigned.statusCode, 401, url);
      assert.equal(unsigned.headers['x-quotaring-error'], 'cluster_auth_failed');
      const signed = await app.inject({ url, headers: testSigner.signInternal('GET', `http://node${url}`, {}) });
      assert.equal(signed.statusCode, 401, url);
    }
    for (const url of ['/healthz', '/readyz', '/metrics']) assert.equal((await app.inject({ url })).statusCode, 200, url);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer key-own-000001', 'content-type': 'application/json' }, payload: chat() });
    assert.equal(res.statusCode, 200);
  });

  test('a node in a cluster will not build without a secret', () => {
    const a: Member = { id: 'node-a', url: 'http://127.0.0.1:1' };
    assert.throws(
      () => buildGateway({ config: config(sim.url, [a], 'solo', 'other'), logger: false, cluster: { self: a, membership: new StaticMembership([a]) } }),
      /QUOTARING_CLUSTER_SECRET is not set: a node in a cluster/,
    );
  });
});
