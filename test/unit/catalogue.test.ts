/**
 * The in-RAM catalogue: rows applied in version order, keys found by id and hash (never held in the
 * clear), plans shared by their tenants, overrides by limit name, tombstones, YAML tenants first.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildConfig } from '../../src/config/load.ts';
import { issueKey, issuedKeyId, keyHash, keyMatches } from '../../src/catalogue/keys.ts';
import type { CatalogueRow } from '../../src/catalogue/store.ts';

const raw = {
  catalogue: { store: 'file', path: '/tmp/unused.ndjson' },
  plans: [{ name: 'free', limits: [{ requests: 10, window: '1m' }, { tokens: 1000, window: '1m' }] }],
  tenants: [{ id: 'yaml-t', keys: ['yaml-key-123'], plan: 'free', limits: [{ requests: 20, window: '1m' }] }],
  models: [{ name: 'm', encoding: 'none', deployments: ['d'] }],
  deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:1' }],
};

let v = 0;
const row = (r: Partial<CatalogueRow> & Pick<CatalogueRow, 'kind' | 'id'>): CatalogueRow => ({ deleted: false, doc: {}, at: 1000 + v, actor: 't', version: ++v, ...r });

test('issued keys: qr_<id>_<secret>, the id is readable without the secret, the hash matches only the key', () => {
  const k = issueKey();
  assert.match(k.key, /^qr_[a-z0-9]{16}_[A-Za-z0-9_-]{43}$/);
  assert.equal(issuedKeyId(k.key), k.id);
  assert.equal(k.hash, keyHash(k.key));
  assert.equal(keyMatches(k.key, k.hash), true);
  assert.equal(keyMatches(`${k.key.slice(0, -1)}${k.key.endsWith('A') ? 'B' : 'A'}`, k.hash), false);
  assert.equal(keyMatches(k.key, 'short'), false);
  assert.equal(issuedKeyId('sk-not-ours'), undefined);
});

test('YAML tenants: found by the hash of their key, plan limits overridden by name', () => {
  const loaded = buildConfig(raw, 'c.yaml', {});
  const access = loaded.accessByKey.get('yaml-key-123');
  assert.equal(access?.tenant.id, 'yaml-t');
  assert.deepEqual(loaded.policies.get('yaml-t')?.limits.map((l) => [l.name, l.limit]), [['requests/1m', 20], ['tokens/1m', 1000]]);
  assert.equal(loaded.accessByKey.get('yaml-key-12'), undefined);
});

test('catalogue rows: a tenant on a plan shares its policy; a key is refused once revoked; a deleted tenant is gone', () => {
  const { catalogue } = buildConfig(raw, 'c.yaml', {});
  const k1 = issueKey();
  const k2 = issueKey();
  catalogue.apply([
    row({ kind: 'plan', id: 'pro', doc: { limits: [{ requests: 100, window: '1m' }] } }),
    row({ kind: 'tenant', id: 'a', doc: { plan: 'pro' } }),
    row({ kind: 'tenant', id: 'b', doc: { plan: 'pro' } }),
    row({ kind: 'tenant', id: 'c', doc: { plan: 'pro', limits: [{ requests: 5, window: '1m' }, { concurrent: 2 }] } }),
    row({ kind: 'key', id: k1.id, tenant: 'a', hash: k1.hash }),
    row({ kind: 'key', id: k2.id, tenant: 'c', hash: k2.hash, doc: { name: 'ci', limits: [{ tokens: 50, window: '1m' }] } }),
  ]);
  assert.equal(catalogue.access(k1.key)?.tenant.id, 'a');
  assert.equal(catalogue.access(k1.key)?.keyId, k1.id);
  assert.equal(catalogue.policy('a'), catalogue.policy('b'), 'one policy object for the plan');
  assert.deepEqual(catalogue.policy('c')?.limits.map((l) => [l.name, l.limit]), [['requests/1m', 5], ['concurrent', 2], [`tokens/1m#${k2.id}`, 50]]);
  // A forged secret under a real id is refused.
  assert.equal(catalogue.access(`qr_${k1.id}_${'A'.repeat(43)}`), undefined);
  const before = catalogue.policy('a');
  catalogue.apply([row({ kind: 'key', id: k1.id, tenant: 'a', deleted: true })]);
  assert.equal(catalogue.access(k1.key), undefined);
  assert.equal(catalogue.policy('a'), before, 'revoking a key without limits keeps the policy object (usage untouched)');
  // An older row for the revoked key (a replay) does not bring it back.
  catalogue.apply([{ kind: 'key', id: k1.id, tenant: 'a', hash: k1.hash, deleted: false, doc: {}, at: 0, actor: 't', version: 5 }]);
  assert.equal(catalogue.access(k1.key), undefined);
  catalogue.apply([row({ kind: 'tenant', id: 'c', deleted: true })]);
  assert.equal(catalogue.access(k2.key), undefined);
  assert.equal(catalogue.has('c'), false);
  assert.equal(catalogue.policy('c'), undefined);
});

test('a plan changed: its tenants take the new limits; a YAML tenant id wins over a catalogue row', () => {
  const { catalogue } = buildConfig(raw, 'c.yaml', {});
  catalogue.apply([row({ kind: 'plan', id: 'p', doc: { limits: [{ requests: 1, window: '1s' }] } }), row({ kind: 'tenant', id: 't', doc: { plan: 'p' } })]);
  assert.equal(catalogue.policy('t')?.limits[0]?.limit, 1);
  const applied = catalogue.apply([row({ kind: 'plan', id: 'p', doc: { limits: [{ requests: 7, window: '1s' }] } })]);
  assert.deepEqual([...applied.tenants], ['t']);
  assert.equal(catalogue.policy('t')?.limits[0]?.limit, 7);
  catalogue.apply([row({ kind: 'tenant', id: 'yaml-t', doc: {} })]);
  assert.deepEqual(catalogue.policy('yaml-t')?.limits.map((l) => l.limit), [20, 1000]);
});

test('bad rows are skipped and reported, never thrown', () => {
  const { catalogue } = buildConfig(raw, 'c.yaml', {});
  const applied = catalogue.apply([row({ kind: 'tenant', id: 'x', doc: { limits: [{ requests: -1, window: '1m' }] } }), row({ kind: 'key', id: 'k', tenant: 'x', hash: 'nope' })]);
  assert.equal(applied.problems.length, 2);
  assert.equal(catalogue.has('x'), false);
});

test('rows() gives back what was applied, tombstones included', () => {
  const { catalogue } = buildConfig(raw, 'c.yaml', {});
  const k = issueKey();
  catalogue.apply([row({ kind: 'tenant', id: 'r', doc: { plan: 'free' } }), row({ kind: 'key', id: k.id, tenant: 'r', hash: k.hash }), row({ kind: 'tenant', id: 'gone' }), row({ kind: 'tenant', id: 'gone', deleted: true })]);
  const rows = [...catalogue.rows()].map((r) => `${r.kind}/${r.id}/${r.deleted}`);
  assert.deepEqual(rows.sort(), ['key/' + k.id + '/false', 'tenant/gone/true', 'tenant/r/false'].sort());
});
