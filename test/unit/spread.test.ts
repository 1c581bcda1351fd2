/**
 * Hot tenants (`spread: k`): placement over ring.range, the concurrency split, the global-cap group
 * and its bucket names, the router's round-robin over the range, and the config rule that a
 * concurrency limit must give every one of the k nodes a slot.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Ring } from '../../src/coord/types.ts';
import { SpreadTenants } from '../../src/gateway/spread.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import type { CapScripts } from '../../src/globalcap/scripts.ts';
import { chooseSpreadMember } from '../../src/router/choose-member.ts';

const members = [1, 2, 3, 4].map((i) => ({ id: `n${i}`, url: `http://127.0.0.1:810${i}` }));

function config(tenant: Record<string, unknown>) {
  return buildConfig(
    {
      tenants: [{ id: 'big', keys: ['key-big-00000000'], ...tenant }],
      models: [{ name: 'm', encoding: 'none', deployments: ['d'] }, { name: 'm2', encoding: 'none', deployments: ['d'] }],
      deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
    },
    'test.yaml',
    {},
  );
}

const noRedis: CapScripts = { tokenBucket: () => Promise.reject(new Error('no')), lease: () => Promise.reject(new Error('no')) };

function setup(selfId: string, ring: Ring) {
  const cfg = config({ spread: 3, limits: [{ tokens: 60_000, window: '1m' }, { requests: 100, window: '1d', model: 'm2' }, { concurrent: 10 }] });
  const leases = new CapLeases({ cluster: 'c', scripts: noRedis, clock: new ManualClock(0), localOnly: true });
  return { spread: new SpreadTenants({ config: cfg, leases, ring: () => ring, selfId }), leases };
}

describe('spread tenants', () => {
  const ring = createRing(members);
  const range = ring.range('big', 3).map((m) => m.id);

  test('placed on ring.range(tenant, 3); a node outside the range has index -1', () => {
    assert.equal(range.length, 3);
    for (const [i, id] of range.entries()) assert.equal(setup(id, ring).spread.placement('big').index, i);
    const outside = members.find((m) => !range.includes(m.id))?.id ?? '';
    assert.equal(setup(outside, ring).spread.placement('big').index, -1);
  });

  test('concurrent 10 over 3 nodes: 4, 3, 3 (sum 10); the local policy keeps only concurrency', () => {
    const slots = range.map((id) => {
      const policy = setup(id, ring).spread.localPolicy('big');
      assert.deepEqual(policy.limits.map((l) => l.kind), ['concurrent']);
      return policy.limits[0]?.limit;
    });
    assert.deepEqual(slots, [4, 3, 3]);
    const { spread } = setup(range[0] ?? '', ring);
    assert.equal(spread.localPolicy('big'), spread.localPolicy('big'), 'the same object while the split is unchanged');
  });

  test('one ring member left: that node holds the whole limit (share 1)', () => {
    const one = createRing([members[0] as (typeof members)[number]]);
    const { spread } = setup('n1', one);
    assert.equal(spread.share('big'), 1);
    assert.equal(spread.localPolicy('big').limits[0]?.limit, 10);
  });

  test('groups: unscoped limits for every model, plus the model-scoped ones; buckets shared between groups', () => {
    const { spread, leases } = setup(range[0] ?? '', ring);
    const g1 = spread.group('big', 'm');
    const g2 = spread.group('big', 'm2');
    assert.deepEqual(leases.buckets(g1).map((b) => [b.kind, b.capacity]), [['tokens', 60_000]]);
    assert.deepEqual(leases.buckets(g2).map((b) => [b.kind, b.capacity]), [['tokens', 60_000], ['requests', 100]]);
    // No Redis (local only): each node's remaining is its share, limit / 3.
    assert.deepEqual(spread.limitStates(g2).map((l) => [l.name, l.limit, l.remaining]), [['tokens/1m', 60_000, 20_000], ['requests/1d@m2', 100, 33]]);
    // Fallback (no Redis): each of the 3 nodes takes 60,000 / 3 per minute.
    assert.deepEqual(leases.take(g1, { tokens: 20_000 }), { ok: true });
    assert.equal(leases.take(g2, { tokens: 1 }).ok, false, 'the tokens bucket is the same one');
    const refused = spread.refusal(g2, 3, { requests: 1, tokens: 1 });
    assert.equal(refused.limit, 'tokens/1m');
    assert.equal(refused.limits[0]?.remaining, 0, 'a refused limit never reads as if the request fit');
    assert.equal(refused.reason, 'limited');
    assert.equal(spread.refusal(g1, -1, { requests: 1, tokens: 70_000 }).reason, 'too_large');
  });

  test('the router takes the range in turn and skips suspect members', () => {
    const picks = Array.from({ length: 6 }, () => chooseSpreadMember(ring, 'big', 3, () => false)?.id);
    assert.deepEqual(new Set(picks), new Set(range));
    const suspect = range[1] ?? '';
    const healthy = Array.from({ length: 6 }, () => chooseSpreadMember(ring, 'big', 3, (id) => id === suspect)?.id);
    assert.ok(!healthy.includes(suspect));
    assert.deepEqual(new Set(healthy), new Set(range.filter((id) => id !== suspect)));
  });

  test('central mode routes over every member in turn (k = Infinity)', () => {
    const picks = Array.from({ length: 8 }, () => chooseSpreadMember(ring, 'any', Number.POSITIVE_INFINITY, () => false)?.id);
    assert.deepEqual(new Set(picks), new Set(members.map((m) => m.id)));
  });

  test('config: a concurrency limit smaller than spread is refused', () => {
    assert.throws(() => config({ spread: 4, limits: [{ concurrent: 3 }] }), /concurrent 3 cannot be split over spread 4 nodes/);
    assert.throws(() => config({ spread: 1, limits: [] }), /spread/);
  });
});
