/**
 * The replica store (replicated checkpoints in RAM) and the local state file, with real files and
 * a real gateway: latest per tenant, expiry, bounds; atomic writes; a corrupt file starts tenants
 * in the conservative state, like a corrupt value in Redis; a file of another cluster or node, or
 * one naming no cluster (v1), is refused and the node starts fresh (issue 25).
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { buildConfig } from '../../src/config/load.ts';
import { loadLocalState, saveLocalState, stateFilePath, v1StateFilePath } from '../../src/coord/handoff/local-state.ts';
import { clusterIdentity } from '../../src/gateway/state-file.ts';
import { ReplicaStore } from '../../src/coord/handoff/replicas.ts';
import { MAX_STATE_BYTES } from '../../src/limiter/snapshot-bounds.ts';
import { buildGateway, nodeLocalState } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';

describe('replica store', () => {
  test('keeps the latest state per tenant (by time taken), never an older one', () => {
    const r = new ReplicaStore({ now: () => 1_000 });
    assert.equal(r.put({ tenant: 'a', json: '{"n":2}', at: 20, expiresAtMs: 5_000 }), true);
    assert.equal(r.put({ tenant: 'a', json: '{"n":1}', at: 10, expiresAtMs: 5_000 }), false);
    assert.equal(r.get('a')?.json, '{"n":2}');
    assert.equal(r.put({ tenant: 'a', json: '{"n":3}', at: 30, expiresAtMs: 5_000 }), true);
    assert.deepEqual([r.get('a')?.json, r.stats.stored, r.stats.stale], ['{"n":3}', 2, 1]);
  });

  test('an entry expires like a Redis checkpoint (gone after expiresAtMs)', () => {
    let now = 1_000;
    const r = new ReplicaStore({ now: () => now });
    r.put({ tenant: 'a', json: '{}', at: 1, expiresAtMs: 2_000 });
    assert.equal(r.get('a')?.json, '{}');
    now = 2_000;
    assert.equal(r.get('a'), undefined);
    assert.equal(r.put({ tenant: 'b', json: '{}', at: 1, expiresAtMs: 1_500 }), false, 'already expired: not stored');
  });

  test('bounded: the oldest written is evicted past maxTenants or maxBytes; take() forgets', () => {
    const r = new ReplicaStore({ maxTenants: 2, maxBytes: 10, now: () => 0 });
    r.put({ tenant: 'a', json: '1234', at: 1, expiresAtMs: 9 });
    r.put({ tenant: 'b', json: '1234', at: 1, expiresAtMs: 9 });
    r.put({ tenant: 'c', json: '1234', at: 1, expiresAtMs: 9 });
    assert.deepEqual(r.entries().map((e) => e.tenant), ['b', 'c']);
    r.put({ tenant: 'd', json: '12345678', at: 1, expiresAtMs: 9 });
    assert.deepEqual(r.entries().map((e) => e.tenant), ['d']);
    assert.equal(r.stats.evicted, 3);
    assert.equal(r.take('d')?.json, '12345678');
    assert.equal(r.get('d'), undefined);
  });

  test('a value over the byte cap is kept as its length only (loaded as corrupt)', () => {
    const r = new ReplicaStore({ now: () => 0 });
    r.put({ tenant: 'big', json: 'x'.repeat(MAX_STATE_BYTES + 1), at: 1, expiresAtMs: 9 });
    assert.deepEqual(r.get('big')?.json, { bytes: MAX_STATE_BYTES + 1 });
  });
});

describe('local state file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
  const alpha1 = { cluster: 'alpha', node: 'node-1' };

  test('saved atomically (no temp file left) and loaded back; expired states skipped', async () => {
    const file = await saveLocalState(dir, alpha1, [
      { tenant: 'a', json: '{"v":1}', at: 5, expiresAtMs: 2_000 },
      { tenant: 'b', json: '{"v":1}', at: 5, expiresAtMs: 500 },
    ], 100);
    assert.equal(file, stateFilePath(dir, alpha1));
    assert.deepEqual(readdirSync(dir), ['node-1@alpha.json']);
    const loaded = await loadLocalState(dir, alpha1, 1_000);
    assert.deepEqual(loaded, { kind: 'loaded', states: [{ tenant: 'a', json: '{"v":1}', at: 5, expiresAtMs: 2_000 }], expired: 1 });
    assert.deepEqual(await loadLocalState(dir, { cluster: 'alpha', node: 'node-9' }), { kind: 'none' });
  });

  test('two clusters in one directory: two files, each loads its own', async () => {
    const d = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    await saveLocalState(d, alpha1, [{ tenant: 'a', json: '"alpha"', at: 5, expiresAtMs: 2_000 }], 100);
    await saveLocalState(d, { cluster: 'beta', node: 'node-1' }, [{ tenant: 'a', json: '"beta"', at: 5, expiresAtMs: 2_000 }], 100);
    assert.deepEqual(readdirSync(d).sort(), ['node-1@alpha.json', 'node-1@beta.json']);
    const json = async (cluster: string) => {
      const loaded = await loadLocalState(d, { cluster, node: 'node-1' }, 1_000);
      return loaded.kind === 'loaded' ? loaded.states.map((s) => s.json) : loaded.kind;
    };
    assert.deepEqual([await json('alpha'), await json('beta'), await json('gamma')], [['"alpha"'], ['"beta"'], 'none']);
  });

  test('a file that does not parse, or is not a state file, is corrupt', async () => {
    const bad = { cluster: 'alpha', node: 'bad' };
    writeFileSync(stateFilePath(dir, bad), '{"v":2,"cluster":"alpha","node":"bad","sav');
    assert.equal((await loadLocalState(dir, bad)).kind, 'corrupt');
    writeFileSync(stateFilePath(dir, bad), JSON.stringify({ v: 3, cluster: 'alpha', node: 'bad', savedAt: 0, states: [] }));
    assert.equal((await loadLocalState(dir, bad)).kind, 'corrupt');
    writeFileSync(stateFilePath(dir, bad), JSON.stringify({ v: 2, node: 'bad', savedAt: 0, states: [] }));
    assert.equal((await loadLocalState(dir, bad)).kind, 'corrupt', 'v2 without its cluster');
  });

  test('a file of another cluster or node at this node\'s path is refused, naming both', async () => {
    const d = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    const beta1 = { cluster: 'beta', node: 'node-1' };
    const file = stateFilePath(d, beta1);
    copyFileSync(await saveLocalState(d, alpha1, [{ tenant: 'a', json: '{}', at: 5, expiresAtMs: 2_000 }], 100), file);
    assert.deepEqual(await loadLocalState(d, beta1, 1_000), { kind: 'refused', file, reason: 'it is the file of cluster "alpha" node "node-1", this node is cluster "beta" node "node-1"' });
    // Node ids that differ only in a replaced character share a name; the content tells them apart.
    const slash = { cluster: 'alpha', node: 'node/1' };
    await saveLocalState(d, { cluster: 'alpha', node: 'node_1' }, [], 100);
    assert.deepEqual(await loadLocalState(d, slash, 1_000), { kind: 'refused', file: stateFilePath(d, slash), reason: 'it is the file of cluster "alpha" node "node_1", this node is cluster "alpha" node "node/1"' });
  });

  test('a v1 file (named by the node only, no cluster in it) is refused, wherever it is', async () => {
    const d = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    const v1 = JSON.stringify({ v: 1, node: 'node-1', savedAt: 0, states: [{ tenant: 'a', json: '{}', at: 5, expiresAtMs: 2_000 }] });
    writeFileSync(v1StateFilePath(d, 'node-1'), v1);
    assert.deepEqual(readdirSync(d), ['node-1.json']);
    assert.deepEqual(await loadLocalState(d, alpha1, 1_000), {
      kind: 'refused',
      file: join(d, 'node-1.json'),
      reason: 'it names no cluster (format v1, from before state files carried their cluster), this node is cluster "alpha" node "node-1"',
    });
    assert.deepEqual(await loadLocalState(d, { cluster: 'alpha', node: 'node-2' }, 1_000), { kind: 'none' });
    writeFileSync(stateFilePath(d, alpha1), v1);
    assert.deepEqual(await loadLocalState(d, alpha1, 1_000), { kind: 'refused', file: stateFilePath(d, alpha1), reason: 'it names no cluster (format v1), this node is cluster "alpha" node "node-1"' });
  });
});

describe('cluster identity of a state file', () => {
  const identity = (cluster: Record<string, unknown>, env: Record<string, string> = {}) =>
    clusterIdentity(
      buildConfig(
        {
          cluster,
          tenants: [{ id: 'acme', keys: ['key-acme-00000'], limits: [{ requests: 3, window: '1m' }] }],
          models: [{ name: 'm', encoding: 'o200k_base', estimator: 'estimate', deployments: ['d'] }],
          deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:1', api_key_env: 'K' }],
        },
        'test.yaml',
        { K: 'k', ...env },
      ).config.cluster,
    );
  const members = [
    { id: 'node-1', url: 'http://127.0.0.1:8101' },
    { id: 'node-2', url: 'http://127.0.0.1:8102' },
  ];

  test('a named cluster is its name, whatever its members', () => {
    assert.equal(identity({ name: 'prod', members }), 'prod');
    assert.equal(identity({ name: 'prod', members: members.slice(0, 1) }), 'prod');
  });

  test('a single node is `default`; an unnamed cluster is a hash of its members (ids and URLs, any order) or of where its Redis is', () => {
    assert.equal(identity({}), 'default');
    const unnamed = identity({ members });
    assert.match(unnamed, /^default-[0-9a-f]{12}$/);
    assert.equal(identity({ name: 'default', members: [...members].reverse() }), unnamed, 'the default name counts as none; order does not matter');
    assert.notEqual(identity({ members: [members[0], { id: 'node-2', url: 'http://127.0.0.1:9102' }] }), unnamed, 'another URL');
    assert.notEqual(identity({ members: [members[0], { id: 'node-3', url: 'http://127.0.0.1:8102' }] }), unnamed, 'another id');
    const redis = identity({ redis: { url: 'redis://127.0.0.1:6379/0' } });
    assert.match(redis, /^default-[0-9a-f]{12}$/);
    assert.equal(identity({ redis: { url_env: 'R' } }, { R: 'redis://u:secret@127.0.0.1:6379/0' }), redis, 'never the credentials');
    assert.notEqual(identity({ redis: { url: 'redis://127.0.0.1:6379/1' } }), redis, 'another database');
    assert.notEqual(identity({ redis: { url: 'redis://127.0.0.1:6380/0' } }), redis, 'another server');
  });
});

describe('single node with a state dir (real gateway)', () => {
  let sim: { url: string; close(): Promise<void> };
  before(async () => {
    sim = await startSimulator({ port: 0 });
  });
  after(async () => {
    await sim.close();
  });
  const config = (cluster?: string, logLevel = 'silent') =>
    buildConfig(
      {
        server: { log_level: logLevel },
        ...(cluster === undefined ? {} : { cluster: { name: cluster } }),
        tenants: [
          { id: 'acme', keys: ['key-acme-00000'], limits: [{ requests: 3, window: '1m', algorithm: 'sliding_window' }] },
          { id: 'beta', keys: ['key-beta-00000'], limits: [{ requests: 3, window: '1m' }] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY' }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key' },
    );
  const send = async (app: ReturnType<typeof buildGateway>, key: string): Promise<number> =>
    (
      await app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        payload: { model: 'gpt-4o-mini', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] },
      })
    ).statusCode;
  const gateway = (dir: string) => buildGateway({ config: config(), logger: false, stateDir: dir, nodeId: () => 'n1' });
  /** A gateway of cluster `cluster` (node n1) whose warn lines are collected. */
  const clusterGateway = (dir: string, cluster: string) => {
    const stream = new PassThrough();
    const lines: { level: number; msg: string; file?: string }[] = [];
    stream.on('data', (chunk: Buffer) => {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as { level: number; msg: string });
    });
    return { app: buildGateway({ config: config(cluster, 'warn'), logStream: stream, stateDir: dir, nodeId: () => 'n1' }), lines };
  };
  const useUp = async (app: ReturnType<typeof buildGateway>) => {
    await nodeLocalState(app)?.restore();
    await app.ready();
    for (let i = 0; i < 3; i++) assert.equal(await send(app, 'key-acme-00000'), 200);
    await app.close();
    await nodeLocalState(app)?.save();
  };

  test('usage saved by one gateway is loaded by the next: the limit holds', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    const a = gateway(dir);
    await nodeLocalState(a)?.restore();
    await a.ready();
    for (let i = 0; i < 3; i++) assert.equal(await send(a, 'key-acme-00000'), 200);
    await a.close();
    await nodeLocalState(a)?.save();
    const b = gateway(dir);
    await nodeLocalState(b)?.restore();
    await b.ready();
    assert.equal(await send(b, 'key-acme-00000'), 429);
    assert.equal(await send(b, 'key-beta-00000'), 200);
    await b.close();
  });

  test('a file saved by cluster alpha is not loaded by cluster beta in the same directory, and is by alpha', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    await useUp(clusterGateway(dir, 'alpha').app);
    const beta = clusterGateway(dir, 'beta');
    await nodeLocalState(beta.app)?.restore();
    await beta.app.ready();
    assert.equal(await send(beta.app, 'key-acme-00000'), 200, 'fresh: alpha\'s usage is not beta\'s');
    await beta.app.close();
    await nodeLocalState(beta.app)?.save();
    assert.deepEqual(readdirSync(dir).sort(), ['n1@alpha.json', 'n1@beta.json'], 'beta did not overwrite alpha\'s file');
    const alpha = clusterGateway(dir, 'alpha');
    await nodeLocalState(alpha.app)?.restore();
    await alpha.app.ready();
    assert.equal(await send(alpha.app, 'key-acme-00000'), 429, 'alpha loads its own');
    await alpha.app.close();
    assert.deepEqual([...beta.lines, ...alpha.lines].filter((l) => l.level >= 40), []);
  });

  test('cluster alpha\'s file at cluster beta\'s path is refused with a warn line naming both: beta starts fresh (not conservative)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    await useUp(clusterGateway(dir, 'alpha').app);
    const file = stateFilePath(dir, { cluster: 'beta', node: 'n1' });
    copyFileSync(stateFilePath(dir, { cluster: 'alpha', node: 'n1' }), file);
    const beta = clusterGateway(dir, 'beta');
    await nodeLocalState(beta.app)?.restore();
    await beta.app.ready();
    assert.deepEqual(
      beta.lines.filter((l) => l.level >= 40).map((l) => [l.level, l.msg, l.file]),
      [[40, `state file ${file} refused, starting fresh: it is the file of cluster "alpha" node "n1", this node is cluster "beta" node "n1"`, file]],
    );
    for (let i = 0; i < 3; i++) assert.equal(await send(beta.app, 'key-acme-00000'), 200);
    assert.equal(await send(beta.app, 'key-acme-00000'), 429);
    assert.equal(await send(beta.app, 'key-beta-00000'), 200);
    await beta.app.close();
  });

  test('a v1 file (n1.json, no cluster) is refused with a warn line: the node starts fresh', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    const file = v1StateFilePath(dir, 'n1');
    writeFileSync(file, JSON.stringify({ v: 1, node: 'n1', savedAt: Date.now(), states: [] }));
    const alpha = clusterGateway(dir, 'alpha');
    await nodeLocalState(alpha.app)?.restore();
    await alpha.app.ready();
    assert.deepEqual(
      alpha.lines.filter((l) => l.level >= 40).map((l) => l.msg),
      [`state file ${file} refused, starting fresh: it names no cluster (format v1, from before state files carried their cluster), this node is cluster "alpha" node "n1"`],
    );
    assert.equal(await send(alpha.app, 'key-acme-00000'), 200);
    assert.equal(await send(alpha.app, 'key-beta-00000'), 200);
    await alpha.app.close();
  });

  test('a corrupt file starts every tenant in the conservative state (refused), never fresh', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    writeFileSync(stateFilePath(dir, { cluster: 'default', node: 'n1' }), 'not json at all');
    const b = gateway(dir);
    await nodeLocalState(b)?.restore();
    await b.ready();
    assert.equal(await send(b, 'key-acme-00000'), 429);
    assert.equal(await send(b, 'key-beta-00000'), 429);
    await b.close();
  });

  test('a corrupt snapshot of one tenant makes that tenant conservative; the others load', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    await saveLocalState(dir, { cluster: 'default', node: 'n1' }, [{ tenant: 'acme', json: '{"v":1,"at":"nope"}', at: 1, expiresAtMs: Date.now() + 60_000 }]);
    const b = gateway(dir);
    await nodeLocalState(b)?.restore();
    await b.ready();
    assert.equal(await send(b, 'key-acme-00000'), 429);
    assert.equal(await send(b, 'key-beta-00000'), 200);
    await b.close();
  });
});
