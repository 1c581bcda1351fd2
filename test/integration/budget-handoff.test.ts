/**
 * A month budget (and a key's limits) through a handoff between two nodes over a real
 * redis-server: the new owner decides from the same spend, and a settlement of a request admitted
 * before the move, forwarded with its actual cost, refunds the exact unused part there.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.ts';
import { Handoff } from '../../src/coord/handoff/handoff.ts';
import type { ForwardedSettlement } from '../../src/coord/handoff/handoff.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { TenantStateStore } from '../../src/coord/handoff/state-store.ts';
import type { Member } from '../../src/coord/types.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import type { Policy } from '../../src/limiter/types.ts';
import { stateTtlMs } from '../../src/gateway/state-file.ts';
import { TestMembership } from '../helpers/membership.ts';
import { startRedis } from '../helpers/redis.ts';

const A: Member = { id: 'node-a', url: 'http://127.0.0.1:1' };
const B: Member = { id: 'node-b', url: 'http://127.0.0.1:2' };
const POLICY: Policy = {
  limits: [
    { name: 'cost/month', kind: 'cost', limit: 1_000_000_000, period: { kind: 'calendar', unit: 'month', timeZone: 'America/New_York' } },
    { name: 'cost/1d#ci', kind: 'cost', limit: 5_000_000, period: { kind: 'window', ms: 86_400_000 }, key: 'ci' },
    { name: 'concurrent#ci', kind: 'concurrent', limit: 1, leaseTtlMs: 60_000, key: 'ci' },
  ],
};
const ringAB = createRing([A, B]);
const T = Array.from({ length: 100 }, (_, i) => `tenant-${i}`).find((t) => ringAB.owner(t)?.id === B.id) as string;
const quiet = { info: () => {}, warn: () => {} };
/** Pico-dollars of `usd` dollars (whole micro-dollars). */
const $ = (usd: number): bigint => BigInt(Math.round(usd * 1e6)) * 1_000_000n;

describe('a budget through a handoff (real Redis)', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const connections: Redis[] = [];
  const clock = new ManualClock(Date.parse('2025-03-20T12:00:00Z'));
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const c of connections) c.disconnect();
    await redis.stop();
  });

  async function node(self: Member, members: Member[], send: (from: Member, to: Member, s: ForwardedSettlement, hops: number) => Promise<void> = async () => {}) {
    const connection = new Redis(redis.url);
    connections.push(connection);
    const limiter = new Limiter({ clock, policyFor: () => POLICY });
    const membership = new TestMembership(createRing(members));
    const handoff = new Handoff({ self, membership, limiter, store: new TenantStateStore(connection, 'budgets'), clock, waitMs: 250, checkpointMs: 60_000, stateTtlMs: () => stateTtlMs(POLICY), send, log: quiet });
    await handoff.start();
    handoff.joined();
    return { limiter, membership, handoff };
  }

  test('the new owner has the same spend; a forwarded settlement carries the exact cost', async () => {
    // A month budget is checkpointed for its longest month plus a minute.
    assert.equal(stateTtlMs(POLICY), 31 * 86_400_000 + 3_600_000 + 60_000);
    const nodes: { b?: Awaited<ReturnType<typeof node>> } = {};
    const a = await node(A, [A], async (from, to, s, hops) => {
      if (s.op !== 'finish') return;
      await nodes.b?.handoff.finish(s.tenant, s.id, s.tokens, hops, from.id, { ...(s.cost === undefined ? {} : { cost: BigInt(s.cost) }) });
    });
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'done', tokens: 0, cost: $(3) }).ok, true);
    a.limiter.settle(T, 'done', 0, { cost: 2_123_456_789_012n }); // $2.123456789012
    a.limiter.release(T, 'done');
    assert.equal(a.limiter.acquire(T, { id: 'stream', tokens: 0, key: 'ci', cost: $(4) }).ok, true);
    const before = a.limiter.peekAll(T);
    assert.deepEqual(before.map((l) => [l.name, l.remaining]), [['cost/month', 1_000_000_000 - 6_123_457], ['cost/1d#ci', 1_000_000], ['concurrent#ci', 0]]);

    const b = await node(B, [A, B]);
    nodes.b = b;
    a.membership.set(createRing([A, B]));
    await a.handoff.settledDown();
    for (let i = 0; i < 100 && !b.handoff.claimed().has(T); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    await b.handoff.ready(T);
    assert.equal(a.handoff.holds(T), false);
    assert.deepEqual(b.limiter.peekAll(T), before);
    // The key's stream ends on A after the move, having cost $1.5: forwarded, the $2.5 unused comes back on B.
    await a.handoff.finish(T, 'stream', 0, 0, undefined, { cost: $(1.5) });
    assert.equal(a.handoff.stats.forwarded, 1);
    assert.deepEqual(b.limiter.peekAll(T).map((l) => [l.name, l.remaining]), [['cost/month', 1_000_000_000 - 3_623_457], ['cost/1d#ci', 3_500_000], ['concurrent#ci', 1]]);
    assert.equal((b.limiter.exportTenant(T)?.limits[0] as { spent: string }).spent, (2_123_456_789_012n + $(1.5)).toString());
    a.handoff.stop();
    b.handoff.stop();
  });
});
