import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createRing, ringVersion } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';

const THREE: readonly Member[] = [
  { id: 'node-1', url: 'http://127.0.0.1:8081' },
  { id: 'node-2', url: 'http://127.0.0.1:8082' },
  { id: 'node-3', url: 'http://127.0.0.1:8083' },
];
const FOURTH: Member = { id: 'node-4', url: 'http://127.0.0.1:8084' };
const TENANTS = Array.from({ length: 20 }, (_, i) => `tenant-${String(i + 1).padStart(2, '0')}`);

/**
 * Golden owners. If this table changes, a dependency (hashring, its md5 points, the key prefix or
 * the vnode rule) remaps tenants: every running cluster would move them at the upgrade.
 */
const GOLDEN_3: Record<string, string> = {
  'tenant-01': 'node-1', 'tenant-02': 'node-2', 'tenant-03': 'node-1', 'tenant-04': 'node-2',
  'tenant-05': 'node-3', 'tenant-06': 'node-1', 'tenant-07': 'node-3', 'tenant-08': 'node-1',
  'tenant-09': 'node-2', 'tenant-10': 'node-1', 'tenant-11': 'node-3', 'tenant-12': 'node-2',
  'tenant-13': 'node-1', 'tenant-14': 'node-2', 'tenant-15': 'node-2', 'tenant-16': 'node-2',
  'tenant-17': 'node-2', 'tenant-18': 'node-1', 'tenant-19': 'node-2', 'tenant-20': 'node-3',
};
/** After node-4 joins: only tenant-12 moves, and to node-4. */
const GOLDEN_4: Record<string, string> = { ...GOLDEN_3, 'tenant-12': 'node-4' };

function owners(members: readonly Member[]): Record<string, string | undefined> {
  const ring = createRing(members);
  return Object.fromEntries(TENANTS.map((t) => [t, ring.owner(t)?.id]));
}

describe('createRing golden', () => {
  test('pins the owners of 20 tenants over 3 members, and the version', () => {
    assert.deepEqual(owners(THREE), GOLDEN_3);
    assert.equal(createRing(THREE).version, 'e72a248b9396');
  });

  test('pins the owners after a fourth member joins: moved tenants all went to it', () => {
    assert.deepEqual(owners([...THREE, FOURTH]), GOLDEN_4);
    assert.equal(createRing([...THREE, FOURTH]).version, '138e162f7484');
  });

  test('over 10,000 tenants a join moves exactly the new member\'s share, never between old members', () => {
    const r3 = createRing(THREE);
    const r4 = createRing([...THREE, FOURTH]);
    let moved = 0;
    const count: Record<string, number> = {};
    for (let i = 0; i < 10_000; i++) {
      const before = r3.owner(`tenant-${i}`)?.id;
      const after = r4.owner(`tenant-${i}`)?.id ?? 'none';
      count[after] = (count[after] ?? 0) + 1;
      if (before !== after) {
        moved++;
        assert.equal(after, 'node-4', `tenant-${i} moved from ${before} to ${after}`);
      }
    }
    assert.equal(moved, 2457);
    assert.deepEqual(count, { 'node-1': 2591, 'node-2': 2469, 'node-3': 2483, 'node-4': 2457 });
  });
});

describe('createRing version', () => {
  test('is the first 12 hex of sha256 over sorted id@url*weight lines', () => {
    const lines = 'node-1@http://127.0.0.1:8081*1\nnode-2@http://127.0.0.1:8082*1\nnode-3@http://127.0.0.1:8083*1';
    const expected = createHash('sha256').update(lines).digest('hex').slice(0, 12);
    assert.equal(createRing(THREE).version, expected);
    assert.equal(ringVersion(THREE), expected);
  });

  test('an explicit weight of 1 is the same member as no weight; another weight or url is not', () => {
    const v = createRing(THREE).version;
    assert.equal(createRing(THREE.map((m) => ({ ...m, weight: 1 }))).version, v);
    assert.notEqual(createRing([...THREE.slice(0, 2), { ...THREE[2]!, weight: 2 }]).version, v);
    assert.notEqual(createRing([...THREE.slice(0, 2), { ...THREE[2]!, url: 'http://127.0.0.1:9999' }]).version, v);
  });

  test('the same members in any order give the same version, members and owners', () => {
    const a = createRing(THREE);
    const orders = [[2, 0, 1], [1, 2, 0], [2, 1, 0]];
    for (const order of orders) {
      const b = createRing(order.map((i) => THREE[i]!));
      assert.equal(b.version, a.version);
      assert.deepEqual(b.members.map((m) => m.id), ['node-1', 'node-2', 'node-3']);
      for (let i = 0; i < 1000; i++) assert.equal(b.owner(`t${i}`)?.id, a.owner(`t${i}`)?.id);
    }
  });
});

describe('createRing lookups', () => {
  test('an empty ring has version \'\', no owner and an empty range', () => {
    const ring = createRing([]);
    assert.equal(ring.version, '');
    assert.deepEqual(ring.members, []);
    assert.equal(ring.owner('tenant-01'), undefined);
    assert.deepEqual(ring.range('tenant-01', 3), []);
  });

  test('range gives distinct members, owner first, at most k and at most all members', () => {
    const ring = createRing([...THREE, FOURTH]);
    for (const t of TENANTS) {
      const owner = ring.owner(t);
      const two = ring.range(t, 2);
      assert.equal(two.length, 2);
      assert.equal(two[0], owner);
      assert.notEqual(two[1], owner);
      const all = ring.range(t, 10);
      assert.equal(all.length, 4);
      assert.equal(new Set(all.map((m) => m.id)).size, 4);
      assert.deepEqual(all.slice(0, 2), two);
    }
    assert.deepEqual(ring.range('tenant-01', 0), []);
    assert.deepEqual(ring.range('tenant-01', -1), []);
    assert.deepEqual(createRing(THREE).range('tenant-05', 3).map((m) => m.id), ['node-3', 'node-2', 'node-1']);
  });

  test('tenant ids named like Object.prototype properties get the same owner from owner() and range()', () => {
    const ring = createRing(THREE);
    const expected: [string, string][] = [['constructor', 'node-1'], ['toString', 'node-2'], ['__proto__', 'node-1'], ['hasOwnProperty', 'node-1']];
    for (const [t, id] of expected) {
      assert.equal(ring.owner(t)?.id, id, t);
      assert.equal(ring.owner(t)?.id, id, `${t} (cached)`);
      assert.equal(ring.range(t, 1)[0]?.id, id, `${t} range`);
    }
  });

  test('a weight-2 member owns about twice the tenants of a weight-1 member (exact counts)', () => {
    const ring = createRing([{ id: 'a', url: 'http://a', weight: 2 }, { id: 'b', url: 'http://b' }, { id: 'c', url: 'http://c' }]);
    const count: Record<string, number> = {};
    for (let i = 0; i < 10_000; i++) {
      const id = ring.owner(`tenant-${i}`)?.id ?? 'none';
      count[id] = (count[id] ?? 0) + 1;
    }
    assert.deepEqual(count, { a: 5183, b: 2292, c: 2525 });
  });

  test('a small cache gives the same owners as the default one', () => {
    const big = createRing(THREE);
    const small = createRing(THREE, { cacheSize: 10 });
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 500; i++) assert.equal(small.owner(`t${i}`)?.id, big.owner(`t${i}`)?.id);
    }
  });

  test('members are frozen copies sorted by id', () => {
    const input = [THREE[2]!, THREE[0]!, THREE[1]!];
    const ring = createRing(input);
    assert.deepEqual(ring.members, THREE);
    assert.ok(Object.isFrozen(ring.members));
    assert.ok(Object.isFrozen(ring.members[0]));
    assert.notEqual(ring.members[0], THREE[0]);
  });

  test('rejects an empty or duplicate id, a bad weight and bad options', () => {
    assert.throws(() => createRing([{ id: '', url: 'http://x' }]), RangeError);
    assert.throws(() => createRing([THREE[0]!, { ...THREE[0]!, url: 'http://other' }]), /node-1 appears twice/);
    assert.throws(() => createRing([{ id: 'a', url: 'http://a', weight: 0 }]), /weight must be a positive number/);
    assert.throws(() => createRing([{ id: 'a', url: 'http://a', weight: Number.NaN }]), RangeError);
    assert.throws(() => createRing(THREE, { vnodes: 0 }), /vnodes/);
    assert.throws(() => createRing(THREE, { cacheSize: 0 }), /cacheSize/);
  });
});
