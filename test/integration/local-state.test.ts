/**
 * The replica store (replicated checkpoints in RAM) and the local state file, with real files and
 * a real gateway: latest per tenant, expiry, bounds; atomic writes; a corrupt file starts tenants
 * in the conservative state, like a corrupt value in Redis.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildConfig } from '../../src/config/load.ts';
import { loadLocalState, saveLocalState, stateFilePath } from '../../src/coord/local-state.ts';
import { ReplicaStore } from '../../src/coord/replicas.ts';
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

  test('saved atomically (no temp file left) and loaded back; expired states skipped', async () => {
    const file = await saveLocalState(dir, 'node-1', [
      { tenant: 'a', json: '{"v":1}', at: 5, expiresAtMs: 2_000 },
      { tenant: 'b', json: '{"v":1}', at: 5, expiresAtMs: 500 },
    ], 100);
    assert.equal(file, stateFilePath(dir, 'node-1'));
    assert.deepEqual(readdirSync(dir), ['node-1.json']);
    const loaded = await loadLocalState(dir, 'node-1', 1_000);
    assert.deepEqual(loaded, { kind: 'loaded', states: [{ tenant: 'a', json: '{"v":1}', at: 5, expiresAtMs: 2_000 }], expired: 1 });
    assert.deepEqual(await loadLocalState(dir, 'node-9'), { kind: 'none' });
  });

  test('a file that does not parse, is not a state file, or is another node\'s is corrupt', async () => {
    writeFileSync(stateFilePath(dir, 'bad'), '{"v":1,"node":"bad","sav');
    assert.equal((await loadLocalState(dir, 'bad')).kind, 'corrupt');
    writeFileSync(stateFilePath(dir, 'bad'), JSON.stringify({ v: 2, node: 'bad', savedAt: 0, states: [] }));
    assert.equal((await loadLocalState(dir, 'bad')).kind, 'corrupt');
    writeFileSync(stateFilePath(dir, 'bad'), JSON.stringify({ v: 1, node: 'other', savedAt: 0, states: [] }));
    assert.equal((await loadLocalState(dir, 'bad')).kind, 'corrupt');
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
  const config = () =>
    buildConfig(
      {
        server: { log_level: 'silent' },
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

  test('a corrupt file starts every tenant in the conservative state (refused), never fresh', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    writeFileSync(stateFilePath(dir, 'n1'), 'not json at all');
    const b = gateway(dir);
    await nodeLocalState(b)?.restore();
    await b.ready();
    assert.equal(await send(b, 'key-acme-00000'), 429);
    assert.equal(await send(b, 'key-beta-00000'), 429);
    await b.close();
  });

  test('a corrupt snapshot of one tenant makes that tenant conservative; the others load', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-state-'));
    await saveLocalState(dir, 'n1', [{ tenant: 'acme', json: '{"v":1,"at":"nope"}', at: 1, expiresAtMs: Date.now() + 60_000 }]);
    const b = gateway(dir);
    await nodeLocalState(b)?.restore();
    await b.ready();
    assert.equal(await send(b, 'key-acme-00000'), 429);
    assert.equal(await send(b, 'key-beta-00000'), 200);
    await b.close();
  });
});
