/**
 * The tenant state store against a real redis-server: states live in one hash per cluster, so a
 * checkpoint or an idle sweep of 2,500 tenants is 3 commands (`HSET`/`HDEL`, 1,000 tenants each),
 * counted with `INFO commandstats`; values carry their own expiry (Redis 7.0 has no per-field
 * TTL) and a reader treats an expired value as absent, a malformed one as corrupt (returned whole,
 * for the snapshot parser to reject: never read as absent, which would mean fresh limits).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseStoredValue, stateKey, TenantStateStore } from '../../src/coord/handoff/state-store.ts';
import { startRedis } from '../helpers/redis.ts';

/** Calls of `command` so far (`INFO commandstats`). */
async function calls(redis: Awaited<ReturnType<typeof startRedis>>, command: string): Promise<number> {
  const info = await redis.client().info('commandstats');
  const m = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info);
  return m?.[1] === undefined ? 0 : Number(m[1]);
}

describe('tenant state store', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  test('2,500 tenants are written in 3 HSETs and removed in 3 HDELs; every state reads back', async () => {
    let now = 1_000_000;
    const store = new TenantStateStore(redis.client(), 'bulk', () => now);
    const tenants = Array.from({ length: 2_500 }, (_, i) => `tenant-${i}`);
    const hsetBefore = await calls(redis, 'hset');
    await store.write(tenants.map((tenant, i) => ({ tenant, json: `{"n":${i}}`, ttlMs: 60_000 })));
    assert.equal((await calls(redis, 'hset')) - hsetBefore, 3);
    assert.equal(await redis.client().hlen(stateKey('bulk')), 2_500);
    const read = await store.readMany(tenants);
    assert.deepEqual(read, tenants.map((_, i) => `{"n":${i}}`));
    assert.equal(await store.expiresAt('tenant-7'), 1_060_000);
    now += 59_999;
    assert.equal(await store.read('tenant-7'), '{"n":7}');
    const hdelBefore = await calls(redis, 'hdel');
    await store.remove(tenants);
    assert.equal((await calls(redis, 'hdel')) - hdelBefore, 3);
    assert.equal(await redis.client().exists(stateKey('bulk')), 0);
    assert.deepEqual(await store.readMany(['tenant-0', 'tenant-2499']), [null, null]);
  });

  test('a value over the byte cap is answered by its length, never transferred; one within it reads whole', async () => {
    const store = new TenantStateStore(redis.client(), 'cap', () => 0);
    await store.write([
      { tenant: 'small', json: '{"v":1}', ttlMs: 60_000 },
      { tenant: 'big', json: 'x'.repeat(100), ttlMs: 60_000 },
    ]);
    // Stored as `60000 <json>`: 6 + 100 bytes.
    assert.deepEqual(await store.readMany(['small', 'big', 'none'], 106), ['{"v":1}', 'x'.repeat(100), null]);
    assert.deepEqual(await store.readMany(['small', 'big', 'none'], 105), ['{"v":1}', { bytes: 106 }, null]);
    assert.deepEqual(await store.read('big', 105), { bytes: 106 });
    assert.equal(await store.read('small', 105), '{"v":1}');
  });

  test('an expired value reads as absent, and the next write replaces it', async () => {
    let now = 5_000;
    const store = new TenantStateStore(redis.client(), 'expiry', () => now);
    await store.write([{ tenant: 'a', json: '{"v":1}', ttlMs: 100 }]);
    now = 5_099;
    assert.equal(await store.read('a'), '{"v":1}');
    now = 5_100;
    assert.equal(await store.read('a'), null);
    assert.deepEqual(await store.readMany(['a']), [null]);
    await store.write([{ tenant: 'a', json: '{"v":2}', ttlMs: 100 }]);
    assert.equal(await store.read('a'), '{"v":2}');
    assert.equal(await redis.client().hlen(stateKey('expiry')), 1);
  });

  test('a value that is not `<expiresAtMs> <json>` is returned whole (corrupt), not read as absent', async () => {
    const store = new TenantStateStore(redis.client(), 'garbage');
    await redis.client().hset(stateKey('garbage'), 'a', '{"no":"expiry"}', 'b', ' {}');
    assert.deepEqual(await store.readMany(['a', 'b', 'missing']), ['{"no":"expiry"}', ' {}', null]);
    assert.equal(await store.read('a'), '{"no":"expiry"}');
    assert.equal(parseStoredValue('{"no":"expiry"}'), undefined);
    assert.deepEqual(parseStoredValue('12 {"x":1}'), { expiresAtMs: 12, json: '{"x":1}' });
  });
});
