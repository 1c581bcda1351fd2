import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createRing } from '../../src/coord/ring/ring.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import type { Ring } from '../../src/coord/types.ts';

const MEMBERS = [
  { id: 'node-2', url: 'http://127.0.0.1:8082' },
  { id: 'node-1', url: 'http://127.0.0.1:8081' },
];

describe('StaticMembership', () => {
  test('ring() covers every listed member, before and after start, and is one object', async () => {
    const membership = new StaticMembership(MEMBERS);
    const before = membership.ring();
    await membership.start();
    assert.equal(membership.ring(), before);
    assert.deepEqual(before.members.map((m) => m.id), ['node-1', 'node-2']);
    assert.equal(before.version, createRing(MEMBERS).version);
    assert.equal(before.owner('tenant-01')?.id, createRing(MEMBERS).owner('tenant-01')?.id);
  });

  test('onChange never fires; stop is idempotent', async () => {
    const membership = new StaticMembership(MEMBERS);
    const seen: Ring[] = [];
    const off = membership.onChange((r) => seen.push(r));
    await membership.start();
    await membership.stop();
    await membership.stop();
    off();
    assert.deepEqual(seen, []);
  });

  test('passes ring options through and rejects duplicate ids', () => {
    assert.throws(() => new StaticMembership(MEMBERS, { vnodes: 0 }), /vnodes/);
    assert.throws(() => new StaticMembership([...MEMBERS, MEMBERS[0]!]), /node-2 appears twice/);
  });

  test('an empty list gives the empty ring', () => {
    const ring = new StaticMembership([]).ring();
    assert.equal(ring.version, '');
    assert.equal(ring.owner('t'), undefined);
  });
});
