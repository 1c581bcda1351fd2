/**
 * Handoff between two nodes' limiters through a real redis-server: join (wait for the announcement),
 * timeout (start from the checkpoint), crash (fallback from the checkpoint), graceful leave, and
 * settlements forwarded to the new owner. The rings come from a test membership whose member list
 * the test sets; the state store, its keys and pub/sub are real.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.ts';
import { Handoff } from '../../src/coord/handoff/handoff.ts';
import type { ForwardedSettlement } from '../../src/coord/handoff/handoff.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { ReplicaStore } from '../../src/coord/handoff/replicas.ts';
import { TenantStateStore, stateKey } from '../../src/coord/handoff/state-store.ts';
import type { ProcessIdentity } from '../../src/coord/handoff/process-gone.ts';
import type { Member } from '../../src/coord/types.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import type { Policy } from '../../src/limiter/types.ts';
import { TestMembership } from '../helpers/membership.ts';
import { startRedis } from '../helpers/redis.ts';

const A: Member = { id: 'node-a', url: 'http://127.0.0.1:1' };
const B: Member = { id: 'node-b', url: 'http://127.0.0.1:2' };
const POLICY: Policy = {
  limits: [
    { name: 'tokens/1m', kind: 'tokens', limit: 10_000, windowMs: 60_000, algorithm: 'sliding_window' },
    { name: 'requests/1m', kind: 'requests', limit: 100, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'concurrent', kind: 'concurrent', limit: 2, leaseTtlMs: 60_000 },
  ],
};
/** A tenant that B owns once B joins A. */
const ringAB = createRing([A, B]);
const T = Array.from({ length: 100 }, (_, i) => `tenant-${i}`).find((t) => ringAB.owner(t)?.id === B.id) as string;

const quiet = { info: () => {}, warn: () => {} };

/** A state store whose pub/sub brings nothing: announcements published while its subscriber is away are lost. */
class DeafStore extends TenantStateStore {
  override async subscribe(): Promise<void> {}
}

describe('handoff through a real Redis', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const connections: Redis[] = [];
  let cluster = 0;
  let clock: ManualClock;

  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const c of connections) c.disconnect();
    await redis.stop();
  });
  beforeEach(() => {
    cluster++;
    clock = new ManualClock(Date.now());
  });

  /** A node: its limiter, membership and handoff, started with the members given. */
  async function node(
    self: Member,
    members: Member[],
    opts: {
      waitMs?: number;
      standInIdleMs?: number;
      send?: (from: Member, to: Member, s: ForwardedSettlement, hops: number) => Promise<void>;
      ownerGone?: (owner: ProcessIdentity) => Promise<boolean>;
      /** States go straight between the nodes of this map (in process: the handoff rules, not HTTP, are under test). */
      peers?: Map<string, Handoff>;
      /** Hears no handoff announcement on Redis pub/sub (a subscriber still reconnecting after a cut). */
      deaf?: boolean;
      /** The reclaim answer reaches this node after this many ms (real time): a slow or loaded peer. */
      reclaimDelayMs?: number;
    } = {},
  ) {
    const connection = new Redis(redis.url);
    connections.push(connection);
    const limiter = new Limiter({ clock, policyFor: () => POLICY });
    const membership = new TestMembership(createRing(members));
    const store = opts.deaf === true ? new DeafStore(connection, `t${cluster}`) : new TenantStateStore(connection, `t${cluster}`);
    const peers = opts.peers;
    const handoff = new Handoff({
      self,
      membership,
      limiter,
      store,
      ...(peers === undefined
        ? {}
        : {
            peers: {
              replicas: new ReplicaStore(),
              transport: {
                push: async (from, to, kind, states, ring) => {
                  const h = peers.get(to.id) as Handoff;
                  h.receive(states, () => true, kind === 'handoff' ? from.id : undefined);
                  if (ring !== undefined) h.handedHere(from.id, ring);
                },
                pull: async () => [],
                nudge: async (_from, to) => (peers.get(to.id) as Handoff).nudged(),
                reclaim: async (from, to) => {
                  const reclaimed = (peers.get(to.id) as Handoff).reclaim(from.id, 1_000);
                  if (opts.reclaimDelayMs !== undefined) await sleep(opts.reclaimDelayMs);
                  return reclaimed;
                },
              },
            },
          }),
      clock,
      waitMs: opts.waitMs ?? 250,
      checkpointMs: 60_000,
      ...(opts.standInIdleMs === undefined ? {} : { standInIdleMs: opts.standInIdleMs }),
      stateTtlMs: () => 120_000,
      send: opts.send ?? (async () => {}),
      ...(opts.ownerGone === undefined ? {} : { ownerGone: opts.ownerGone }),
      log: quiet,
    });
    await handoff.start();
    handoff.joined();
    peers?.set(self.id, handoff);
    return { limiter, membership, handoff };
  }

  test('join: the old owner hands the tenant over; the new owner waits for it and decides from the same state', async () => {
    const a = await node(A, [A]);
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 1_000 }).ok, true);
    a.limiter.settle(T, 'r0', 400);
    a.limiter.release(T, 'r0');
    for (const id of ['r1', 'r2']) assert.equal(a.limiter.acquire(T, { id, tokens: 1_000 }).ok, true);
    const before = a.limiter.peek(T);

    const b = await node(B, [A, B]);
    // B claims T before A has seen the ring change: it must wait for A's announcement.
    const loading = b.handoff.ready(T);
    assert.ok(loading !== undefined);
    await new Promise((resolve) => setTimeout(resolve, 20));
    a.membership.set(createRing([A, B]));
    await loading;
    assert.equal(b.handoff.stats.waited, 1);
    assert.equal(b.handoff.stats.loaded, 1);
    assert.equal(a.limiter.hasTenant(T), false);
    assert.deepEqual(b.limiter.peek(T), before);
    assert.deepEqual(
      before.map((l) => [l.name, l.remaining]),
      [
        ['tokens/1m', 10_000 - 2_400],
        ['requests/1m', 97],
        ['concurrent', 0],
      ],
    );
    // A no longer decides for T; B does, with no Redis command on the way.
    assert.deepEqual(a.handoff.place(T), { here: false, owner: B });
    assert.equal(b.handoff.ready(T), undefined);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('join: the new owner loads the tenants announced for it at once, before their first request', async () => {
    const a = await node(A, [A]);
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 1_500 }).ok, true);
    const b = await node(B, [A, B]);
    a.membership.set(createRing([A, B]));
    await a.handoff.settledDown();
    for (let i = 0; i < 100 && !b.handoff.claimed().has(T); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(b.handoff.ready(T), undefined);
    assert.deepEqual([b.handoff.stats.prefetched, b.handoff.stats.loaded, b.handoff.stats.waited], [1, 1, 0]);
    assert.deepEqual(
      b.limiter.peek(T).map((l) => l.remaining),
      [8_500, 99, 1],
    );
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a settlement of a request admitted before the move reaches the new owner: refund and slot', async () => {
    const nodes: { b?: Awaited<ReturnType<typeof node>> } = {};
    const a = await node(A, [A], {
      send: async (from, to, s, hops) => {
        assert.deepEqual([from.id, to.id], [A.id, B.id]);
        if (s.op === 'finish') await nodes.b?.handoff.finish(s.tenant, s.id, s.tokens, hops, from.id);
      },
    });
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'stream', tokens: 3_000 }).ok, true);
    const b = await node(B, [A, B]);
    nodes.b = b;
    a.membership.set(createRing([A, B]));
    await a.handoff.settledDown();
    assert.equal(a.handoff.holds(T), false);
    // The stream ends on A after the move: 1,200 tokens used of 3,000 reserved.
    await a.handoff.finish(T, 'stream', 1_200);
    assert.equal(a.handoff.stats.forwarded, 1);
    const [tokens, , concurrent] = b.limiter.peek(T);
    assert.equal(tokens?.remaining, 10_000 - 1_200);
    assert.equal(concurrent?.remaining, 2);
    // A second delivery changes nothing.
    assert.deepEqual(await b.handoff.finish(T, 'stream', 1_200), { settled: false, released: false });
    a.handoff.stop();
    b.handoff.stop();
  });

  test('join with peers: the new owner nudges the previous one, which reads the ring at once and hands over; its push is the announcement (no pub/sub)', async () => {
    const peers = new Map<string, Handoff>();
    const a = await node(A, [A], { peers });
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 1_000 }).ok, true);
    a.limiter.settle(T, 'r0', 700);
    a.limiter.release(T, 'r0');
    assert.equal(a.limiter.acquire(T, { id: 'r1', tokens: 2_000 }).ok, true);
    const before = a.limiter.peek(T);
    // A would see B only at its next read of the member list (none comes here but the nudge's).
    a.membership.nextRead = createRing([A, B]);
    // B hears no pub/sub and would wait 5 s for an announcement.
    const b = await node(B, [A, B], { peers, deaf: true, waitMs: 5_000 });
    const started = Date.now();
    await b.handoff.ready(T);
    const took = Date.now() - started;
    assert.ok(took < 2_000, `claim took ${took} ms: the wait did not end with A's push`);
    assert.equal(a.membership.refreshes, 1);
    assert.deepEqual([b.handoff.stats.waited, b.handoff.stats.timedOut], [1, 0]);
    assert.equal(a.limiter.hasTenant(T), false);
    assert.deepEqual(b.limiter.peek(T), before);
    assert.deepEqual(
      before.map((l) => l.remaining),
      [10_000 - 2_700, 98, 1],
    );
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a previous owner with nothing to hand a joiner still announces to it by push: the joiner stops waiting at once and starts fresh', async () => {
    const peers = new Map<string, Handoff>();
    const a = await node(A, [A], { peers });
    a.membership.nextRead = createRing([A, B]);
    const b = await node(B, [A, B], { peers, deaf: true, waitMs: 5_000 });
    const started = Date.now();
    await b.handoff.ready(T);
    assert.ok(Date.now() - started < 2_000);
    assert.deepEqual([b.handoff.stats.waited, b.handoff.stats.timedOut, b.handoff.stats.loaded], [1, 0, 0]);
    assert.deepEqual(
      b.limiter.peek(T).map((l) => l.remaining),
      [10_000, 100, 2],
    );
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a handoff that comes after the claim stopped waiting is merged: both nodes\' admissions count, and the previous owner\'s open request settles here', async () => {
    const peers = new Map<string, Handoff>();
    const nodes: { b?: Awaited<ReturnType<typeof node>> } = {};
    const a = await node(A, [A], {
      peers,
      send: async (from, _to, s, hops) => {
        if (s.op === 'finish') await nodes.b?.handoff.finish(s.tenant, s.id, s.tokens, hops, from.id);
      },
    });
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 1_000 }).ok, true);
    a.limiter.release(T, 'r0');
    a.handoff.touched(T);
    await a.handoff.checkpoint(); // Redis: r0
    assert.equal(a.limiter.acquire(T, { id: 'r1', tokens: 500 }).ok, true); // after the checkpoint, still running

    // B joins; A has not seen the ring yet (the nudge finds nothing new), and B stops waiting after 50 ms.
    const b = await node(B, [A, B], { peers, deaf: true, waitMs: 50 });
    nodes.b = b;
    await b.handoff.ready(T);
    assert.equal(b.handoff.stats.timedOut, 1);
    assert.deepEqual(b.limiter.peek(T).map((l) => l.remaining), [9_000, 99, 2]);
    assert.equal(b.limiter.acquire(T, { id: 'b1', tokens: 2_000 }).ok, true);
    b.limiter.release(T, 'b1');

    // A sees the ring and hands T over: B merges what A admitted after the checkpoint, and r1's slot.
    a.membership.set(createRing([A, B]));
    await a.handoff.settledDown();
    assert.equal(b.handoff.stats.lateMerged, 1);
    assert.deepEqual(b.limiter.peek(T).map((l) => l.remaining), [10_000 - 3_500, 97, 1]);
    // r1 ends on A with 300 tokens used: the settlement is forwarded and applies to the merged reservation.
    await a.handoff.finish(T, 'r1', 300);
    assert.deepEqual(b.limiter.peek(T).map((l) => l.remaining), [10_000 - 3_300, 97, 2]);
    // A second push of the same handoff merges nothing more.
    b.handoff.receive([{ tenant: T, json: JSON.stringify(a.limiter.exportTenant(T) ?? {}), at: Date.now() }], () => true, A.id);
    assert.equal(b.handoff.stats.lateMerged, 1);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('no announcement within wait_ms: the new owner starts from the last checkpoint', async () => {
    const a = await node(A, [A]);
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 2_000 }).ok, true);
    a.handoff.touched(T);
    await a.handoff.checkpoint();
    assert.equal(a.handoff.stats.checkpointed, 1);
    assert.equal(a.limiter.acquire(T, { id: 'r1', tokens: 500 }).ok, true); // after the checkpoint: lost

    const b = await node(B, [A, B], { waitMs: 50 });
    const started = Date.now();
    await b.handoff.ready(T);
    assert.ok(Date.now() - started >= 45);
    assert.equal(b.handoff.stats.timedOut, 1);
    // The previous owner is alive (only late): its request's slot stays held.
    assert.deepEqual(
      b.limiter.peek(T).map((l) => l.remaining),
      [8_000, 99, 1],
    );
    assert.equal(b.handoff.stats.slotsFreed, 0);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a router routes around a suspect owner (still a member): the stand-in starts from its checkpoint without waiting and keeps its slots until their leases expire', async () => {
    const a = await node(A, [A, B]);
    const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 4_000 }).ok, true);
    a.handoff.touched(U);
    await a.handoff.checkpoint();
    a.handoff.stop(); // SIGKILL: nothing more is written

    const b = await node(B, [A, B], { waitMs: 5_000 });
    assert.deepEqual(b.handoff.place(U), { here: false, owner: A });
    assert.deepEqual(b.handoff.place(U, A.id), { here: true });
    const started = Date.now();
    await b.handoff.ready(U, 'fallback');
    assert.ok(Date.now() - started < 1_000);
    // The owner may only be stalled: its request keeps its 4,000 tokens charged and its slot held.
    assert.deepEqual(
      b.limiter.peek(U).map((l) => l.remaining),
      [6_000, 99, 1],
    );
    assert.equal(b.handoff.stats.slotsFreed, 0);
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 100 }).ok, true);
    // Two slots held across both nodes (the owner's r0, the stand-in's s1): a third is refused.
    assert.equal(b.limiter.acquire(U, { id: 's2', tokens: 100 }).ok, false);
    // The owner's lease (60 s, never renewed while it is silent) expires: its slot frees.
    clock.advance(60_000);
    assert.equal(b.limiter.acquire(U, { id: 's3', tokens: 100 }).ok, true);
    b.handoff.stop();
  });

  test('an owner woken from a stall takes its tenant back from the stand-in: what the stand-in admitted, running requests included, counts on the owner; the stand-in stands in for it no more for dead_after', async () => {
    const peers = new Map<string, Handoff>();
    const a = await node(A, [A, B], { peers });
    const b = await node(B, [A, B], { peers });
    const U = Array.from({ length: 100 }, (_, i) => `w-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 100 }).ok, true);
    a.handoff.touched(U);
    await a.handoff.checkpoint(); // reaches B, its replica
    // A stalls; a router routes around it: B stands in from the replica and admits s1 (still running).
    await b.handoff.ready(U, 'fallback');
    assert.equal(b.handoff.isStandIn(U), true);
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 200 }).ok, true);
    // A wakes: its fence takes the tenant back before any decision.
    assert.equal(await a.handoff.takeBack(1_000), 1);
    assert.deepEqual(
      a.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 100 - 200, 98, 0],
    );
    assert.equal(b.handoff.isStandIn(U), false);
    assert.equal(b.handoff.ownerBack(A.id), true);
    clock.advance(1_001);
    assert.equal(b.handoff.ownerBack(A.id), false);
    // Nothing held for A any more: a second take-back finds nothing.
    assert.equal(await a.handoff.takeBack(1_000), 0);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a stand-in\'s answer read after the take-back\'s wait is absorbed all the same: the stand-in ended its claims when it answered', async () => {
    const peers = new Map<string, Handoff>();
    const a = await node(A, [A, B], { peers, reclaimDelayMs: 80 });
    const b = await node(B, [A, B], { peers });
    const U = Array.from({ length: 100 }, (_, i) => `l-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 100 }).ok, true);
    a.handoff.touched(U);
    await a.handoff.checkpoint();
    await b.handoff.ready(U, 'fallback');
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 200 }).ok, true);
    assert.equal(await a.handoff.takeBack(10), 0);
    assert.equal(b.handoff.isStandIn(U), false);
    assert.deepEqual(a.limiter.peek(U).map((l) => l.remaining), [10_000 - 100, 99, 1]);
    await sleep(200);
    assert.deepEqual(a.limiter.peek(U).map((l) => l.remaining), [10_000 - 100 - 200, 98, 0]);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a stand-in frees the owner\'s slots once the owner\'s port refuses connections (its process is gone), not before', async () => {
    const a = await node(A, [A, B]);
    const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 100 }).ok, true);
    assert.equal(a.limiter.acquire(U, { id: 'r1', tokens: 100 }).ok, true);
    a.handoff.touched(U);
    await a.handoff.checkpoint();
    a.handoff.stop();

    let gone = false;
    const asked: string[] = [];
    const b = await node(B, [A, B], { ownerGone: async (m) => (asked.push(m.id), gone) });
    await b.handoff.ready(U, 'fallback');
    assert.deepEqual(asked, ['node-a']);
    // Stalled, not gone: both slots stay held.
    assert.equal(b.limiter.peek(U)[2]?.remaining, 0);
    await b.handoff.returnStandIns();
    assert.equal(b.limiter.peek(U)[2]?.remaining, 0);
    // SIGKILLed meanwhile: the next look frees them (once).
    gone = true;
    await b.handoff.returnStandIns();
    assert.equal(b.limiter.peek(U)[2]?.remaining, 2);
    assert.equal(b.handoff.stats.slotsFreed, 2);
    await b.handoff.returnStandIns();
    assert.equal(b.handoff.stats.slotsFreed, 2);
    b.handoff.stop();
  });

  test(
    'crash, then a join before the successor claimed the tenant: the joiner frees the dead owner\'s slots (the checkpoint names its writer, gone from the ring)',
    async () => {
      const C: Member = { id: 'node-c', url: 'http://127.0.0.1:3' };
      const U = Array.from({ length: 2_000 }, (_, i) => `j-${i}`).find((t) => createRing([A, B]).owner(t)?.id === A.id && createRing([B, C]).owner(t)?.id === C.id) as string;
      const a = await node(A, [A, B]);
      await a.handoff.ready(U);
      assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 100 }).ok, true);
      a.handoff.touched(U);
      await a.handoff.checkpoint();
      a.handoff.stop(); // SIGKILL
      const b = await node(B, [A, B]);
      b.membership.set(createRing([B])); // A dropped; no request for U reaches B
      await b.handoff.settledDown();
      const asked: string[] = [];
      const c = await node(C, [B, C], { ownerGone: async (w) => (asked.push(`${w.id} ${w.url}`), true) });
      b.membership.set(createRing([B, C]));
      await b.handoff.settledDown();
      await c.handoff.ready(U);
      try {
        assert.equal(c.limiter.peek(U)[2]?.remaining, 2, 'the dead owner\'s slot is still held');
        // The writer named by the checkpoint (id and URL) was asked about, and proven gone.
        assert.deepEqual(asked, [`${A.id} ${A.url}`]);
      } finally {
        b.handoff.stop();
        c.handoff.stop();
      }
    },
  );

  for (const gone of [true, false]) {
    test(`owner left the ring without a handoff, ${gone ? 'proven gone (crashed): its successor starts from its checkpoint and frees its slots' : 'not proven gone (maybe stalled): its successor keeps its slots counted, and frees them once it is proven gone'}`, async () => {
      const a = await node(A, [A, B]);
      const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
      await a.handoff.ready(U);
      assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 4_000 }).ok, true);
      a.handoff.touched(U);
      await a.handoff.checkpoint();
      a.handoff.stop(); // SIGKILL or SIGSTOP: nothing more is written

      let proven = gone;
      const asked: string[] = [];
      const b = await node(B, [A, B], { waitMs: 5_000, ownerGone: async (w) => (asked.push(`${w.id} ${w.url} ${typeof w.inc}`), proven) });
      b.membership.set(createRing([B]));
      await b.handoff.ready(U);
      // The owner's request keeps its 4,000 tokens charged; its slot is free only once A is proven gone.
      assert.deepEqual(
        b.limiter.peek(U).map((l) => l.remaining),
        [6_000, 99, gone ? 2 : 1],
      );
      assert.equal(b.handoff.stats.slotsFreed, gone ? 1 : 0);
      assert.deepEqual(asked, [`${A.id} ${A.url} string`]);
      if (!gone) {
        // Asked again at every checkpoint period; the answer that proves it frees the slot.
        proven = true;
        await b.handoff.checkHeldSlots();
        assert.equal(b.limiter.peek(U)[2]?.remaining, 2);
        assert.equal(b.handoff.stats.slotsFreed, 1);
      }
      b.handoff.stop();
    });
  }

  test('a live owner routed around: the stand-in gives the tenant back with its usage; the owner counts both nodes\' admissions', async () => {
    const nodes: { a?: Awaited<ReturnType<typeof node>> } = {};
    const sent: string[] = [];
    let deliver = true;
    const b = await node(B, [A, B], {
      standInIdleMs: 1_000,
      send: async (from, to, s) => {
        sent.push(`${from.id}->${to.id}:${s.op}`);
        if (!deliver) throw new Error('connect ECONNREFUSED');
        if (s.op === 'absorb' && !(await nodes.a?.handoff.absorb(s.tenant, s.usage))) throw new Error('409 not_owner');
        if (s.op === 'finish') await nodes.a?.handoff.finish(s.tenant, s.id, s.tokens, 1, from.id);
      },
    });
    const a = await node(A, [A, B]);
    nodes.a = a;
    const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'o1', tokens: 4_000 }).ok, true);
    a.limiter.settle(U, 'o1', 3_000);
    a.limiter.release(U, 'o1');
    a.handoff.touched(U);
    await a.handoff.checkpoint(); // Redis: 3,000 tokens, 1 request
    assert.equal(a.limiter.acquire(U, { id: 'o2', tokens: 500 }).ok, true); // after the checkpoint: B cannot know it

    // A router finds A slow and sends U's requests to B, naming A.
    await b.handoff.ready(U, 'fallback');
    assert.deepEqual([...b.handoff.standIns()], [U]);
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 2_000 }).ok, true);
    b.limiter.settle(U, 's1', 1_500);
    b.limiter.release(U, 's1');
    assert.equal(b.limiter.acquire(U, { id: 's2', tokens: 1_000 }).ok, true); // still running on B
    // A is alive: the other router's requests still reach it.
    assert.equal(a.limiter.acquire(U, { id: 'o3', tokens: 200 }).ok, true);
    a.limiter.settle(U, 'o3', 200);
    a.limiter.release(U, 'o3');

    // Not yet idle: nothing is sent.
    await b.handoff.returnStandIns();
    assert.deepEqual(sent, []);
    clock.advance(1_000);
    // Idle (s2 still runs on B), but A cannot be reached: tried again later, B keeps holding U.
    deliver = false;
    await b.handoff.returnStandIns();
    assert.deepEqual(sent, ['node-b->node-a:absorb']);
    assert.equal(b.handoff.claimed().has(U), true);
    deliver = true;
    await b.handoff.returnStandIns();
    assert.deepEqual(sent, ['node-b->node-a:absorb', 'node-b->node-a:absorb']);
    assert.equal(b.handoff.claimed().has(U), false);
    assert.equal(b.limiter.hasTenant(U), false);
    assert.deepEqual([b.handoff.stats.stoodIn, b.handoff.stats.returned, a.handoff.stats.absorbed], [1, 1, 1]);
    // s2, still running on B, went with the give-back: A holds its slot (with o2's, both) and its 1,000 tokens.
    assert.deepEqual(
      a.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 3_000 - 500 - 200 - 1_500 - 1_000, 100 - 5 + 1, 0],
    );
    assert.equal(a.limiter.acquire(U, { id: 'o4', tokens: 1 }).ok, false, 'A refuses a third concurrent request');
    // s2 ends on B: its settlement goes to A, which refunds 400 tokens and frees the slot.
    assert.equal(b.handoff.settlesHere(U), false);
    await b.handoff.finish(U, 's2', 600);
    assert.deepEqual(sent.at(-1), 'node-b->node-a:finish');
    // A: its own 3,000 + 500 (open) + 200 and B's 1,500 + 600; 5 requests; o2's slot still held.
    assert.deepEqual(
      a.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 3_000 - 500 - 200 - 1_500 - 600, 100 - 5 + 1, 1],
    );
    // B's stand-in state was never checkpointed over A's.
    const stored = JSON.parse(((await new TenantStateStore(connections[0]!, `t${cluster}`).read(U)) as string | null) ?? '{}') as { limits: { name: string; entries?: unknown[] }[] };
    assert.deepEqual(stored.limits.find((l) => l.name === 'tokens/1m')?.entries?.length, 1);
    // A router routing around A again: B starts over from A's checkpoint, standing in afresh.
    await b.handoff.ready(U, 'fallback');
    assert.deepEqual([b.handoff.stats.stoodIn, b.handoff.standIns().has(U)], [2, true]);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a request that ends on the stand-in while its give-back travels: the settlement waits for it, then goes to the owner, which holds the request (exact tokens, slot freed)', async () => {
    const nodes: { a?: Awaited<ReturnType<typeof node>> } = {};
    const sent: string[] = [];
    let arrived = (): void => undefined;
    const absorbArrived = new Promise<void>((resolve) => (arrived = resolve));
    let letThrough = (): void => undefined;
    const gate = new Promise<void>((resolve) => (letThrough = resolve));
    const b = await node(B, [A, B], {
      standInIdleMs: 1_000,
      send: async (from, to, s) => {
        sent.push(`${from.id}->${to.id}:${s.op}`);
        if (s.op === 'absorb') {
          arrived();
          await gate;
          if (!(await nodes.a?.handoff.absorb(s.tenant, s.usage))) throw new Error('409 not_owner');
        }
        if (s.op === 'finish') await nodes.a?.handoff.finish(s.tenant, s.id, s.tokens, 1, from.id);
      },
    });
    const a = await node(A, [A, B]);
    nodes.a = a;
    const U = Array.from({ length: 100 }, (_, i) => `w-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    await b.handoff.ready(U, 'fallback');
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 2_000 }).ok, true);
    clock.advance(1_000);
    const giving = b.handoff.returnStandIns();
    await absorbArrived;
    // s1 ends now, on B, while its give-back is on the way.
    assert.equal(b.handoff.settlesHere(U), false);
    const settling = b.handoff.finish(U, 's1', 700);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(sent, ['node-b->node-a:absorb'], 'the settlement waits for the give-back');
    letThrough();
    await giving;
    await settling;
    assert.deepEqual(sent, ['node-b->node-a:absorb', 'node-b->node-a:finish']);
    assert.equal(b.handoff.claimed().has(U), false);
    // A: 700 tokens, one request, no slot held.
    assert.deepEqual(
      a.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 700, 100 - 1, 2],
    );
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a stand-in whose owner left the ring hands its state on with the ring change; one the ring gives it keeps the tenant as its own', async () => {
    const C: Member = { id: 'node-c', url: 'http://127.0.0.1:3' };
    const ringABC = createRing([A, B, C]);
    const ringBC = createRing([B, C]);
    const pick = (owner: string, next: string): string =>
      Array.from({ length: 500 }, (_, i) => `v-${i}`).find((t) => ringABC.owner(t)?.id === owner && ringBC.owner(t)?.id === next) as string;
    const toC = pick(A.id, C.id);
    const toB = pick(A.id, B.id);
    const b = await node(B, [A, B, C]);
    for (const t of [toC, toB]) {
      await b.handoff.ready(t, 'fallback');
      assert.equal(b.limiter.acquire(t, { id: `s-${t}`, tokens: 700 }).ok, true);
      b.limiter.settle(t, `s-${t}`, 700);
      b.limiter.release(t, `s-${t}`);
    }
    assert.equal(b.handoff.standIns().size, 2);
    // A crashed: the ring drops it.
    b.membership.set(ringBC);
    await b.handoff.settledDown();
    assert.deepEqual([...b.handoff.standIns()], []);
    assert.deepEqual([b.handoff.claimed().has(toC), b.handoff.claimed().has(toB)], [false, false]);
    // C's tenant went through Redis with B's usage.
    const c = await node(C, [B, C]);
    await c.handoff.ready(toC, 'handed');
    assert.equal(c.limiter.peek(toC)[0]?.remaining, 10_000 - 700);
    // B's own loads the dead owner's state (none was stored: fresh) and adds what B admitted for it.
    await b.handoff.ready(toB);
    assert.deepEqual(
      b.limiter.peek(toB).map((l) => l.remaining),
      [10_000 - 700, 99, 2],
    );
    await b.handoff.checkpoint();
    assert.equal(b.handoff.stats.checkpointed, 1);
    b.handoff.stop();
    c.handoff.stop();
  });

  test('an owner leaves gracefully while a stand-in holds its tenant, which the ring gives the stand-in: the owner\'s handoff plus the stand-in\'s usage and running requests', async () => {
    const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    const a = await node(A, [A, B]);
    const b = await node(B, [A, B]);
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'o1', tokens: 1_000 }).ok, true);
    a.limiter.settle(U, 'o1', 1_000);
    a.limiter.release(U, 'o1');
    await b.handoff.ready(U, 'fallback');
    assert.equal(b.limiter.acquire(U, { id: 's1', tokens: 2_000 }).ok, true);
    b.limiter.settle(U, 's1', 1_800);
    b.limiter.release(U, 's1');
    assert.equal(a.limiter.acquire(U, { id: 'o2', tokens: 300 }).ok, true); // after B's claim: B's copy lacks it
    a.limiter.settle(U, 'o2', 300);
    a.limiter.release(U, 'o2');
    assert.equal(b.limiter.acquire(U, { id: 's2', tokens: 500 }).ok, true); // still running on B at the ring change
    await a.handoff.leave();
    b.membership.set(createRing([B]));
    await b.handoff.settledDown();
    await b.handoff.ready(U);
    assert.deepEqual(
      b.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 1_000 - 300 - 1_800 - 500, 96, 1],
    );
    assert.equal(b.handoff.standIns().size, 0);
    // The running request settles and frees its slot on the reloaded state.
    assert.deepEqual(await b.handoff.finish(U, 's2', 200), { settled: true, released: true });
    assert.deepEqual(
      b.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 1_000 - 300 - 1_800 - 200, 96, 2],
    );
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a node dropped from the others\' ring while cut from Redis decides for none of its tenants, then reloads them from the interim owner\'s handoff', async () => {
    const b = await node(B, [A, B]);
    await b.handoff.ready(T);
    assert.equal(b.limiter.acquire(T, { id: 'b1', tokens: 1_000 }).ok, true);
    b.limiter.release(T, 'b1');
    b.handoff.touched(T);
    await b.handoff.checkpoint(); // Redis: 1,000 tokens
    assert.equal(b.limiter.acquire(T, { id: 'b2', tokens: 500 }).ok, true); // after the checkpoint, before the cut
    b.limiter.release(T, 'b2');

    // B cut from Redis: A drops it and takes T over from its checkpoint, admitting 3,000 more.
    const a = await node(A, [A, B]);
    a.membership.set(createRing([A]));
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'a1', tokens: 3_000 }).ok, true);
    a.limiter.release(T, 'a1');
    a.handoff.touched(T);
    clock.advance(10);

    // The link heals: B's membership finds its entry pruned: the ring without B, then with B.
    b.membership.set(createRing([A]));
    assert.equal(b.handoff.claimed().has(T), false);
    assert.deepEqual(b.handoff.place(T), { here: false, owner: A });
    b.membership.set(createRing([A, B]));
    const claim = b.handoff.ready(T);
    // A sees B again and hands T back.
    a.membership.set(createRing([A, B]));
    await a.handoff.settledDown();
    await claim;
    assert.equal(b.handoff.stats.waited, 1);
    // Both nodes' admissions count: 1,000 + 3,000 (B's 500 after its last checkpoint is the bound).
    assert.equal(b.limiter.peek(T)[0]?.remaining, 10_000 - 4_000);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a node that rejoins and finds no newer state of its tenant (Redis restarted empty) keeps its own', async () => {
    const b = await node(B, [A, B], { waitMs: 50 });
    await b.handoff.ready(T);
    assert.equal(b.limiter.acquire(T, { id: 'b1', tokens: 2_500 }).ok, true);
    b.limiter.release(T, 'b1');
    b.membership.set(createRing([A]));
    b.membership.set(createRing([A, B]));
    await b.handoff.ready(T);
    assert.equal(b.limiter.peek(T)[0]?.remaining, 10_000 - 2_500);
    b.handoff.stop();
  });

  test('a forwarded settlement the owner does not accept is retried for a few seconds (an owner just started, or loaded), then counted lost', async () => {
    const U = Array.from({ length: 100 }, (_, i) => `f-${i}`).find((t) => ringAB.owner(t)?.id === B.id) as string;
    let refusals = 3;
    const delivered: string[] = [];
    const a = await node(A, [A, B], {
      send: async (_from, to, s) => {
        if (refusals-- > 0) throw new Error(`${to.id} answered 503`);
        if (s.op === 'finish') delivered.push(`${to.id} ${s.id}`);
      },
    });
    // Refused three times, accepted on the last retry.
    await a.handoff.finish(U, 'r0', 100);
    assert.deepEqual(delivered, [`${B.id} r0`]);
    assert.deepEqual([a.handoff.stats.forwarded, a.handoff.stats.lost], [1, 0]);
    // Refused four times: lost.
    refusals = 4;
    await a.handoff.finish(U, 'r1', 100);
    assert.deepEqual(delivered, [`${B.id} r0`]);
    assert.deepEqual([a.handoff.stats.forwarded, a.handoff.stats.lost], [2, 1]);
    a.handoff.stop();
  });

  test('graceful leave: every tenant is handed over before the node deregisters; the next owner needs no wait', async () => {
    const nodes: { b?: Awaited<ReturnType<typeof node>> } = {};
    const a = await node(A, [A, B], {
      send: async (from, _to, s, hops) => {
        if (s.op === 'finish') await nodes.b?.handoff.finish(s.tenant, s.id, s.tokens, hops, from.id);
      },
    });
    const U = Array.from({ length: 100 }, (_, i) => `u-${i}`).find((t) => ringAB.owner(t)?.id === A.id) as string;
    await a.handoff.ready(U);
    assert.equal(a.limiter.acquire(U, { id: 'r0', tokens: 2_500 }).ok, true);
    a.limiter.settle(U, 'r0', 2_500);
    a.limiter.release(U, 'r0');
    assert.equal(a.limiter.acquire(U, { id: 'stream', tokens: 1_000 }).ok, true);
    const b = await node(B, [A, B], { waitMs: 5_000 });
    nodes.b = b;
    await a.handoff.leave();
    assert.deepEqual(a.handoff.place(U), { here: false, owner: B });
    assert.equal(a.handoff.stats.handedOff, 1);
    // The stream ends on A before B has seen A leave: B's ring still names A, the sender, as the
    // owner, so B applies it (loading the handed-over state) instead of sending it back.
    await a.handoff.finish(U, 'stream', 400);
    assert.deepEqual([a.handoff.stats.forwarded, a.handoff.stats.lost, b.handoff.stats.lost], [1, 0, 0]);
    b.membership.set(createRing([B]));
    const started = Date.now();
    await b.handoff.ready(U);
    assert.ok(Date.now() - started < 1_000);
    assert.equal(b.handoff.stats.timedOut, 0);
    assert.deepEqual(
      b.limiter.peek(U).map((l) => l.remaining),
      [10_000 - 2_500 - 400, 98, 2],
    );
    const ttl = ((await new TenantStateStore(connections[0]!, `t${cluster}`).expiresAt(U)) ?? 0) - Date.now();
    assert.ok(ttl > 100_000 && ttl <= 120_000, `ttl ${ttl}`);
    a.handoff.stop();
    b.handoff.stop();
  });

  test('a tenant swept idle has its stored state deleted and stays claimed: its next request starts fresh in RAM, not from a busy checkpoint', async () => {
    const a = await node(A, [A]);
    await a.handoff.ready(T);
    assert.equal(a.limiter.acquire(T, { id: 'r0', tokens: 1_000 }).ok, true);
    a.handoff.touched(T);
    await a.handoff.checkpoint(); // stores the open reservation and its slot
    assert.equal(await connections.at(-1)!.hexists(stateKey(`t${cluster}`), T), 1);
    assert.deepEqual(await a.handoff.finish(T, 'r0', 1_000), { settled: true, released: true });
    clock.advance(61_000);
    assert.equal(a.limiter.sweep(), 1);
    await a.handoff.forgetIdle();
    assert.equal(a.handoff.claimed().has(T), true);
    assert.equal(await connections.at(-1)!.hexists(stateKey(`t${cluster}`), T), 0);
    assert.equal(a.handoff.ready(T), undefined, 'still claimed: no read before the next decision');
    assert.equal(a.handoff.stats.loaded, 0);
    assert.deepEqual(
      a.limiter.peek(T).map((l) => l.remaining),
      [10_000, 100, 2],
    );
    // A ring change that takes the idle tenant away and gives it back: it is claimed again from Redis (nothing stored: fresh).
    const b = await node(B, [A, B]);
    a.membership.set(createRing([A, B]));
    a.membership.set(createRing([A]));
    assert.equal(a.handoff.claimed().has(T), false);
    b.handoff.stop();
    a.handoff.stop();
  });

  test('without a store (static members) nothing is loaded and every call is local', async () => {
    const limiter = new Limiter({ clock, policyFor: () => POLICY });
    const handoff = new Handoff({ self: A, membership: new TestMembership(createRing([A, B])), limiter, clock, stateTtlMs: () => 1, send: async () => {}, log: quiet });
    await handoff.start();
    handoff.joined();
    assert.equal(handoff.ready(T), undefined);
    assert.equal(handoff.holds(T), true);
    assert.deepEqual(handoff.place(T), { here: false, owner: B });
    assert.deepEqual(handoff.place(T, B.id), { here: true });
    handoff.stop();
  });
});
