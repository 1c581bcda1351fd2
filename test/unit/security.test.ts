/**
 * The cluster secret and what it signs (src/security/): request signatures (wrong secret, tampered
 * header / path / body digest, expired timestamp, rotation), the replay guard, member entries,
 * random ids, and reading the secret from the environment. No I/O; time is a manual clock.
 */
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { ClusterSecret, MIN_SECRET_LENGTH, clusterSecretFor, clusterSecretFromEnv } from '../../src/security/cluster-secret.ts';
import { readMemberEntry, signedMemberEntry } from '../../src/security/member-entry.ts';
import { randomId } from '../../src/security/random-id.ts';
import { ReplayGuard } from '../../src/security/replay-guard.ts';
import { CONTENT_DIGEST_HEADER, REPLAY_WINDOW_MS, RequestSigner, SIGNATURE_HEADER, SIGNED_HEADERS, bodyDigest } from '../../src/security/request-signature.ts';
import type { SignedRequest } from '../../src/security/request-signature.ts';
import { requestIdGenerator } from '../../src/gateway/context.ts';

const SECRET = 'a-cluster-secret-of-at-least-32-chars!!';
const OTHER = 'another-cluster-secret-of-32-chars-long';

function signed(signer: RequestSigner, req: SignedRequest): SignedRequest {
  return { ...req, headers: { ...req.headers, [SIGNATURE_HEADER]: signer.signature(req) } };
}

describe('request signatures', () => {
  const clock = new ManualClock(1_800_000_000_000);
  const signer = new RequestSigner(new ClusterSecret(SECRET), { clock });
  const base: SignedRequest = {
    method: 'POST',
    path: '/v1/chat/completions?x=1',
    headers: { 'x-quotaring-ring': 'abc123', 'x-quotaring-tenant': 'acme', 'x-quotaring-fallback-for': 'node-1', authorization: 'Bearer k' },
  };

  test('a signature verifies; other headers (the body, the client key) are not covered', () => {
    const req = signed(signer, base);
    const verdict = signer.verify(req);
    assert.equal(verdict.ok, true);
    assert.equal(signer.verify({ ...req, headers: { ...req.headers, authorization: 'Bearer other', 'x-custom': '1' } }).ok, true);
  });

  test('wrong secret, tampered method, path, query or signed header, added or removed header: bad_signature', () => {
    const req = signed(signer, base);
    const bad = { ok: false, reason: 'bad_signature' };
    assert.deepEqual(new RequestSigner(new ClusterSecret(OTHER), { clock }).verify(req), bad);
    assert.deepEqual(signer.verify({ ...req, method: 'GET' }), bad);
    assert.deepEqual(signer.verify({ ...req, path: '/v1/chat/completions?x=2' }), bad);
    assert.deepEqual(signer.verify({ ...req, path: '/v1/messages?x=1' }), bad);
    for (const name of SIGNED_HEADERS) {
      assert.deepEqual(signer.verify({ ...req, headers: { ...req.headers, [name]: 'node-9' } }), bad, `${name} changed or added`);
    }
    const { 'x-quotaring-fallback-for': _removed, ...without } = req.headers;
    assert.deepEqual(signer.verify({ ...req, headers: without }), bad, 'a signed header removed');
    // An empty value is not an absent header.
    assert.deepEqual(signer.verify({ ...req, headers: { ...req.headers, 'x-quotaring-redirected-for': '' } }), bad);
  });

  test('a tampered body digest (internal calls): bad_signature; the digest is the body\'s SHA-256', () => {
    const headers = { 'content-type': 'application/json' };
    const body = JSON.stringify({ op: 'finish', tenant: 'acme', id: 'r1', tokens: 5 });
    const out = signer.signInternal('POST', 'http://10.0.0.1:8101/_quotaring/v1/settlements', headers, body);
    assert.equal(out[CONTENT_DIGEST_HEADER], bodyDigest(body));
    const req: SignedRequest = { method: 'POST', path: '/_quotaring/v1/settlements', headers: { ...headers, ...out } };
    assert.equal(signer.verify(req).ok, true);
    const other = bodyDigest(JSON.stringify({ op: 'finish', tenant: 'acme', id: 'r1', tokens: 0 }));
    assert.deepEqual(signer.verify({ ...req, headers: { ...req.headers, [CONTENT_DIGEST_HEADER]: other } }), { ok: false, reason: 'bad_signature' });
    // Two identical calls get different signatures (a random nonce), so the replay guard never mistakes one for the other.
    assert.notEqual(signer.signInternal('POST', 'http://h/_quotaring/v1/settlements', headers, body)[SIGNATURE_HEADER], out[SIGNATURE_HEADER]);
  });

  test(`timestamps within ±${REPLAY_WINDOW_MS / 1000} s of the receiver's clock pass; beyond: expired`, () => {
    const req = signed(signer, base);
    const at = (offsetMs: number): RequestSigner => new RequestSigner(new ClusterSecret(SECRET), { clock: { now: () => clock.now() + offsetMs } });
    assert.equal(at(REPLAY_WINDOW_MS).verify(req).ok, true);
    assert.equal(at(-REPLAY_WINDOW_MS).verify(req).ok, true);
    assert.deepEqual(at(REPLAY_WINDOW_MS + 1).verify(req), { ok: false, reason: 'expired' });
    assert.deepEqual(at(-REPLAY_WINDOW_MS - 1).verify(req), { ok: false, reason: 'expired' });
  });

  test('missing or malformed signature headers', () => {
    assert.deepEqual(signer.verify(base), { ok: false, reason: 'missing' });
    for (const value of ['', 'garbage', 't=1,s=abc', `t=x,n=,s=${'A'.repeat(43)}`, `t=1,n=,s=${'A'.repeat(42)}`, `t=1,n=,s=${'A'.repeat(43)},x=1`]) {
      assert.deepEqual(signer.verify({ ...base, headers: { ...base.headers, [SIGNATURE_HEADER]: value } }), { ok: false, reason: 'malformed' }, value);
    }
    const req = signed(signer, base);
    assert.deepEqual(signer.verify({ ...req, headers: { ...req.headers, [CONTENT_DIGEST_HEADER]: 'not a digest' } }), { ok: false, reason: 'malformed' });
  });

  test('rotation: signed with the current secret; verified with the current or the previous one', () => {
    const oldSigner = new RequestSigner(new ClusterSecret(OTHER), { clock });
    const rotating = new RequestSigner(new ClusterSecret(SECRET, OTHER), { clock });
    const newOnly = new RequestSigner(new ClusterSecret(SECRET), { clock });
    const fromOld = signed(oldSigner, base);
    const fromRotating = signed(rotating, base);
    assert.equal(rotating.verify(fromOld).ok, true, 'the old secret is still accepted during the rotation');
    assert.equal(oldSigner.verify(fromRotating).ok, false, 'a rotating process signs with the new secret');
    assert.equal(newOnly.verify(fromRotating).ok, true);
    assert.deepEqual(newOnly.verify(fromOld), { ok: false, reason: 'bad_signature' }, 'PREVIOUS dropped: the old secret is refused');
  });
});

describe('replay guard', () => {
  test('a MAC is accepted once inside the window', () => {
    const guard = new ReplayGuard(30_000);
    assert.equal(guard.accept('mac-1', 1_000, 1_000), true);
    assert.equal(guard.accept('mac-1', 1_000, 2_000), false);
    assert.equal(guard.accept('mac-2', 1_000, 2_000), true);
    guard.prune(31_001);
    assert.equal(guard.size, 0);
  });

  test('bounded: when full, the oldest is forgotten and its timestamp becomes a floor, so it can never be replayed', () => {
    const guard = new ReplayGuard(30_000, 3);
    for (const [i, mac] of ['a', 'b', 'c'].entries()) assert.equal(guard.accept(mac, 1_000 + i, 1_010), true);
    assert.equal(guard.accept('d', 1_003, 1_010), true);
    assert.equal(guard.size, 3);
    assert.equal(guard.accept('a', 1_000, 1_010), false, 'forgotten, and refused by the floor');
    assert.equal(guard.accept('e', 1_000, 1_010), false, 'at or below the floor');
    assert.equal(guard.accept('f', 1_004, 1_010), true);
  });

  test('when full, entries past the window are dropped first (no floor raised)', () => {
    const guard = new ReplayGuard(100, 2);
    guard.accept('a', 0, 0);
    guard.accept('b', 500, 500);
    assert.equal(guard.accept('c', 10, 550), true, 'a, past the window, was dropped without raising a floor');
  });
});

describe('member entries', () => {
  const secret = new ClusterSecret(SECRET);
  const m = { id: 'node-1', url: 'http://10.0.0.1:8101' };

  test('a signed entry reads back; weight is covered', () => {
    assert.deepEqual(readMemberEntry(signedMemberEntry(m, secret), secret), { member: m });
    const weighted = { ...m, weight: 2 };
    assert.deepEqual(readMemberEntry(signedMemberEntry(weighted, secret), secret), { member: weighted });
    const raised = JSON.parse(signedMemberEntry(weighted, secret)) as Record<string, unknown>;
    raised.weight = 50;
    assert.deepEqual(readMemberEntry(JSON.stringify(raised), secret), { problem: 'bad_signature', id: 'node-1' });
  });

  test('unsigned, another secret, a changed URL or id, garbage: ignored with the reason', () => {
    assert.deepEqual(readMemberEntry(JSON.stringify(m), secret), { problem: 'unsigned', id: 'node-1' });
    assert.deepEqual(readMemberEntry(signedMemberEntry(m, new ClusterSecret(OTHER)), secret), { problem: 'bad_signature', id: 'node-1' });
    const moved = JSON.parse(signedMemberEntry(m, secret)) as Record<string, unknown>;
    moved.url = 'http://evil:80';
    assert.deepEqual(readMemberEntry(JSON.stringify(moved), secret), { problem: 'bad_signature', id: 'node-1' });
    for (const raw of ['', 'null', '[]', '{"id":"x"}', '{"id":"","url":"http://a"}', '{"id":"x","url":"ftp://a"}']) {
      assert.equal('problem' in readMemberEntry(raw, secret), true, raw);
    }
  });

  test('rotation: an entry signed with the previous secret is accepted while it is configured', () => {
    assert.deepEqual(readMemberEntry(signedMemberEntry(m, new ClusterSecret(OTHER)), new ClusterSecret(SECRET, OTHER)), { member: m });
  });

  test('request and member signatures are separate domains', () => {
    const entry = JSON.parse(signedMemberEntry(m, secret)) as { sig: string };
    const signer = new RequestSigner(secret);
    const sig = signer.signature({ method: 'GET', path: '/', headers: {} });
    assert.notEqual(sig.split('s=')[1], entry.sig);
  });
});

describe('the cluster secret from the environment', () => {
  test('read from the variable, with _PREVIOUS; unset is undefined; too short is a clear error', () => {
    assert.equal(clusterSecretFromEnv({}), undefined);
    assert.equal(clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: '' }), undefined);
    const s = clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: SECRET, QUOTARING_CLUSTER_SECRET_PREVIOUS: OTHER });
    assert.equal(s?.rotating, true);
    assert.equal(clusterSecretFromEnv({ MY_SECRET: SECRET }, 'MY_SECRET')?.variable, 'MY_SECRET');
    assert.throws(() => clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: 'short' }), new RegExp(`QUOTARING_CLUSTER_SECRET is 5 characters long: the cluster secret needs at least ${MIN_SECRET_LENGTH}`));
    assert.throws(() => clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: SECRET, QUOTARING_CLUSTER_SECRET_PREVIOUS: 'x' }), /QUOTARING_CLUSTER_SECRET_PREVIOUS is 1 characters long/);
  });

  test('an unexpanded variable reference is refused as a secret (podman-compose 1.0.3 passes `${VAR:-}` through literally)', () => {
    assert.throws(() => clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: SECRET, QUOTARING_CLUSTER_SECRET_PREVIOUS: '${QUOTARING_CLUSTER_SECRET_PREVIOUS:-}' }), /^RangeError: QUOTARING_CLUSTER_SECRET_PREVIOUS holds an unexpanded variable reference/);
    assert.throws(() => clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: '${QUOTARING_CLUSTER_SECRET_FROM_SOMEWHERE_ELSE}' }), /^RangeError: QUOTARING_CLUSTER_SECRET holds an unexpanded/);
    // A secret with a dollar sign that is not a reference is a secret.
    assert.equal(clusterSecretFromEnv({ QUOTARING_CLUSTER_SECRET: `${SECRET}$x{` })?.variable, 'QUOTARING_CLUSTER_SECRET');
  });

  test('a cluster (static members or Redis) needs one, naming the variable; a single node does not', () => {
    const members = [{ id: 'n1', url: 'http://127.0.0.1:1' }];
    assert.equal(clusterSecretFor({ members: [], secret_env: 'QUOTARING_CLUSTER_SECRET' }, {}, 'a node'), undefined);
    assert.throws(() => clusterSecretFor({ members, secret_env: 'QUOTARING_CLUSTER_SECRET' }, {}, 'a node'), /^Error: QUOTARING_CLUSTER_SECRET is not set: a node in a cluster/);
    assert.throws(() => clusterSecretFor({ members: [], redis: { url: 'redis://127.0.0.1', connection: { kind: 'url', url: 'redis://127.0.0.1' }, probe_interval: 1_000 }, secret_env: 'OTHER_VAR' }, {}, 'a router'), /OTHER_VAR is not set: a router in a cluster/);
    assert.equal(clusterSecretFor({ members, secret_env: 'QUOTARING_CLUSTER_SECRET' }, { QUOTARING_CLUSTER_SECRET: SECRET }, 'a node')?.variable, 'QUOTARING_CLUSTER_SECRET');
  });

  test('the secret never prints', () => {
    const s = new ClusterSecret(SECRET);
    for (const text of [String(s), JSON.stringify({ s }), inspect(s), inspect({ s })]) assert.equal(text.includes(SECRET), false, text);
  });
});

describe('random ids', () => {
  test('128 random bits, base64url; request ids keep a per-process prefix', () => {
    const ids = new Set(Array.from({ length: 2_000 }, () => randomId()));
    assert.equal(ids.size, 2_000);
    for (const id of ids) assert.match(id, /^[A-Za-z0-9_-]{22}$/);
    const next = requestIdGenerator();
    const [a, b] = [next(), next()];
    assert.match(a, /^[0-9a-f]{8}-[A-Za-z0-9_-]{22}$/);
    assert.equal(a.slice(0, 9), b.slice(0, 9));
    assert.notEqual(a, b);
  });
});
