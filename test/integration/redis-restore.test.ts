/**
 * Issue 13, item 3: Redis restored from an older copy of the global cap's keys, on a real
 * redis-server. Three `CapLeases` (one per node, each on its own injected clock: real time plus a
 * random skew of up to a day, since the reseed compares the age of a node's knowledge with Redis TIME;
 * leases live 50 ms, and some steps sleep up to 80 ms so leases expire unspent) share a spread tenant's `tokens: 10000/1d` bucket; a seeded fast-check run draws random
 * traffic, random snapshot points (`DUMP` of the bucket key) and random restores (`RESTORE REPLACE`
 * of an older dump, or `DEL` when the key did not exist then: an older copy written back), each
 * noticed by every node (`restored`, what `RestoreWatch` calls within one probe interval) either at
 * once or, for some nodes, only after up to three more takes (within the probe interval of 10 s).
 * 40 runs, seed 1313, about 12 s. After each reseed the test waits 60 ms before more traffic: units
 * taken within 50 ms after a bucket's first reseed may be counted twice (lua/reseed.lua), a refusal
 * bound not asserted here.
 *
 * The ledger: every unit a node admits came from a lease Redis granted (no fallback here, no
 * refunds), so with G = units granted, B = units given back (leases expired unspent or idle, a
 * negative-cost token-bucket call), A = units admitted, r = the refill (at most 10,000 / 86,400
 * per s over the run's virtual and real time) and X = units granted or given back between a restore
 * and the last node noticing it, after every step (renewals and give-backs settled):
 * - over-admission: A ≤ capacity + r + X (A ≤ G − B, and the bucket's usage never drops below
 *   G − B − X − r);
 * - over-refusal: the usage Redis holds (capacity − level) ≤ G − B + F + 1 (floors), F = units given
 *   back after the restored copy was taken, or after a reseeding node last heard from Redis (its
 *   known level predates them): the documented safe-side loss of reconcile.ts; Redis never counts more than was granted and not given back
 *   beyond F, so a lease for `need` units is denied only when G − B + F + need > capacity − 1. Before the change a restore charged each node's known usage on top of the restored
 *   level (usage counted twice: this fails), and a node without traffic never told Redis what it
 *   knew (the other nodes leased from the stale level: the first bound fails).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import type { Clock } from '../../src/clock.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { capEpochKey, capKey } from '../../src/globalcap/keys.ts';
import { RestoreWatch, defineReconcileScripts } from '../../src/globalcap/reconcile.ts';
import type { RestoreCheck } from '../../src/globalcap/reconcile.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import type { CapScripts } from '../../src/globalcap/scripts.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const CAPACITY = 10_000;
const WINDOW_MS = 86_400_000;
const RATE = (CAPACITY * 1000) / WINDOW_MS;
const NODES = 3;
const KEY = capKey('restore', 'tenant:t:tokens');

type Op =
  | { readonly kind: 'take'; readonly node: number; readonly cost: number; readonly advanceMs: number }
  | { readonly kind: 'snapshot' }
  | { readonly kind: 'restore'; readonly pick: number; readonly late: readonly number[] };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 12, arbitrary: fc.record({ kind: fc.constant('take' as const), node: fc.integer({ min: 0, max: NODES - 1 }), cost: fc.integer({ min: 1, max: 1500 }), advanceMs: fc.oneof({ weight: 8, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 10, max: 80 }) }) }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'snapshot' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('restore' as const), pick: fc.nat(), late: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: NODES, maxLength: NODES }) }) },
);

describe('global cap after Redis restored from an older copy (real Redis)', () => {
  let redis: RunningRedis;
  let c: Redis;

  before(async () => {
    redis = await startRedis();
    c = redis.client();
  });
  after(async () => {
    await redis.stop();
  });

  test('random traffic and restores over 3 nodes: admitted ≤ capacity + refill + pre-detection grants; Redis never counts more usage than was granted', async () => {
    const real = defineCapScripts(c);
    const reseed = defineReconcileScripts(c).reseed;
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 10, maxLength: 50 }), fc.array(fc.integer({ min: -86_400_000, max: 86_400_000 }), { minLength: NODES, maxLength: NODES }), async (ops, skews) => {
        runs++;
        await c.del(KEY);
        const t0 = Date.now();
        const trace: string[] = [];
        const ledger = { granted: 0, admitted: 0, window: 0, x: 0, givenBack: 0, forgettable: 0 };
        /** Give-backs in flight (a token-bucket call with a negative cost): `settle` waits for them. */
        const givingBack = new Set<Promise<unknown>>();
        const scripts: CapScripts = {
          tokenBucket: (key, o) => {
            const call = real.tokenBucket(key, o);
            if (o.cost >= 0) return call;
            const counted = call.then((r) => {
              trace.push(`give back ${-o.cost}: ${JSON.stringify(r)}`);
              ledger.givenBack += -o.cost;
              // Given back to regressed data before every node noticed: the bucket may grant it again.
              if (ledger.window > 0) ledger.x += -o.cost;
              return r;
            });
            givingBack.add(counted);
            void counted.finally(() => givingBack.delete(counted)).catch(() => undefined);
            return counted;
          },
          lease: async (key, o) => {
            const r = await real.lease(key, o);
            trace.push(`lease want ${o.want} min ${o.min}: ${JSON.stringify(r)}`);
            ledger.granted += r.granted;
            if (ledger.window > 0) ledger.x += r.granted;
            return r;
          },
        };
        // Each node's clock runs at the real rate (as Redis TIME does) with its own offset (skew of up to a day).
        const clocks: Clock[] = skews.map((skew) => ({ now: () => Date.now() + skew }));
        // The give-backs counted when each node last heard from Redis: a reseed to that node's known
        // level may forget the ones made since (the safe side, see reconcile.ts).
        const backSeen = clocks.map(() => 0);
        const nodeScripts = (i: number): CapScripts => ({
          tokenBucket: async (key, o) => {
            const r = await scripts.tokenBucket(key, o);
            backSeen[i] = ledger.givenBack;
            return r;
          },
          lease: async (key, o) => {
            const r = await scripts.lease(key, o);
            backSeen[i] = ledger.givenBack;
            return r;
          },
        });
        const nodes = clocks.map((clock, i) => {
          const l = new CapLeases({
            cluster: 'restore',
            scripts: nodeScripts(i),
            clock,
            reseed: async (k, o) => {
              const forgettable = ledger.givenBack - (backSeen[i] as number);
              const r = await reseed(k, o);
              ledger.forgettable += forgettable;
              backSeen[i] = ledger.givenBack;
              trace.push(`reseed known ${o.knownLevel} age ${o.ageMs} ${o.epoch}: ${JSON.stringify(r)}`);
              return r;
            },
            probeIntervalMs: 10_000,
            leaseTtlMs: 50,
          });
          l.define('t', { buckets: [{ kind: 'tokens', name: 'tenant:t:tokens', capacity: CAPACITY, windowMs: WINDOW_MS }], share: () => NODES });
          return l;
        });
        const settle = async (): Promise<void> => {
          for (let i = 0; i < 4; i++) {
            await Promise.all(nodes.map((n) => n.whenRenewed('t')));
            await Promise.allSettled([...givingBack]);
            await new Promise((r) => setImmediate(r));
          }
        };
        /** Dumps of the bucket, with the give-backs counted when each was taken. */
        const snapshots: { dump: Buffer | null; back: number }[] = [];
        /** Nodes still to notice the last restore: takes left before they do. */
        let pending: { node: number; left: number; epoch: string }[] = [];
        let epochs = 0;
        const notice = (node: number, epoch: string): void => (nodes[node] as CapLeases).restored(epoch);
        const check = async (step: string): Promise<void> => {
          await settle();
          const refill = (RATE * (Date.now() - t0)) / 1000;
          assert.ok(ledger.admitted <= CAPACITY + refill + ledger.x + 1e-9, `${step}: admitted ${ledger.admitted} > ${CAPACITY} + refill ${refill.toFixed(1)} + X ${ledger.x}`);
          const level = (await real.tokenBucket(KEY, { capacity: CAPACITY, ratePerSec: RATE, cost: 0, ttlMs: WINDOW_MS })).level;
          const usage = CAPACITY - level;
          const net = ledger.granted - ledger.givenBack;
          assert.ok(usage <= net + ledger.forgettable + 1, `${step}: Redis holds usage ${usage} > granted ${ledger.granted} − given back ${ledger.givenBack} + forgettable ${ledger.forgettable} + 1 (usage counted twice)`);
          if (pending.length === 0) {
            assert.ok(usage >= net - ledger.x - refill - 2, `${step}: Redis holds usage ${usage} < granted ${ledger.granted} − given back ${ledger.givenBack} − X ${ledger.x} − refill ${refill.toFixed(1)} (usage forgotten)`);
          }
        };
        try {
          for (const [i, op] of ops.entries()) {
            trace.push(`${i} ${JSON.stringify(op)} ${JSON.stringify(ledger)}`);
            if (op.kind === 'snapshot') {
              await settle();
              snapshots.push({ dump: await c.dumpBuffer(KEY), back: ledger.givenBack });
            } else if (op.kind === 'restore') {
              if (snapshots.length === 0) continue;
              await settle();
              // A node yet to notice the previous restore notices this one (a probe sees the current epoch).
              const snap = snapshots[op.pick % snapshots.length] as { dump: Buffer | null; back: number };
              const dump = snap.dump;
              // The restored copy lacks the give-backs made after it was taken (the safe side).
              ledger.forgettable += ledger.givenBack - snap.back;
              if (dump === null) await c.del(KEY);
              else await c.restore(KEY, 0, dump, 'REPLACE');
              const epoch = `restore-${++epochs}`;
              pending = [];
              ledger.window = 1;
              op.late.forEach((left, node) => {
                if (left === 0) notice(node, epoch);
                else pending.push({ node, left, epoch });
              });
              if (pending.length === 0) ledger.window = 0;
              // A level seen within 50 ms after a bucket's first reseed counts as seen before it (see lua/reseed.lua).
              await settle();
              await new Promise((r) => setTimeout(r, 60));
            } else {
              if (op.advanceMs > 0) await new Promise((r) => setTimeout(r, op.advanceMs));
              const l = nodes[op.node] as CapLeases;
              const r = await l.takeAfterRenewals('t', { tokens: op.cost }, l.take('t', { tokens: op.cost }));
              if (r.ok) ledger.admitted += op.cost;
              for (const p of pending) p.left--;
              const noticing = pending.filter((q) => q.left <= 0);
              for (const p of noticing) notice(p.node, p.epoch);
              if (noticing.length > 0) {
                // Traffic within 50 ms after a reseed is counted twice by a later reseed (lua/reseed.lua): not tested here.
                await settle();
                await new Promise((r) => setTimeout(r, 60));
              }
              pending = pending.filter((q) => q.left > 0);
              if (pending.length === 0 && ledger.window > 0) {
                await settle();
                ledger.window = 0;
              }
            }
            await check(`op ${i} ${JSON.stringify(op)}`);
          }
        } catch (err) {
          console.error(trace.join('\n'));
          console.error(String(err));
          throw err;
        } finally {
          await settle();
          // Closing gives back what the nodes hold (and stops their sweeps) before the next run deletes the key.
          await Promise.all(nodes.map((n) => n.close()));
        }
      }),
      { seed: 1313, numRuns: 40, endOnFailure: true },
    );
    assert.equal(runs >= 40, true);
  });

  test('RestoreWatch notices, without traffic and within a probe interval, a FLUSHALL, an older copy of the epoch written back and a restart', async () => {
    const probeMs = 100;
    const client = redis.client();
    const watch = new RestoreWatch(client, capEpochKey('watch'), probeMs);
    const events: { kind: 'lost' | 'back' | 'restored'; check?: RestoreCheck | undefined }[] = [];
    watch.start({
      lost: () => events.push({ kind: 'lost' }),
      back: (check) => events.push({ kind: 'back', check }),
      restored: (check) => events.push({ kind: 'restored', check }),
    });
    const waitFor = async (pred: () => boolean, what: string, maxMs: number): Promise<number> => {
      const t0 = Date.now();
      while (!pred()) {
        assert.ok(Date.now() - t0 < maxMs, `${what}: not within ${maxMs} ms; events ${JSON.stringify(events)}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      return Date.now() - t0;
    };
    try {
      if (client.status !== 'ready') await new Promise((r) => client.once('ready', r));
      await waitFor(() => events.some((e) => e.kind === 'back'), 'first check', 5_000);
      assert.equal(events.find((e) => e.kind === 'back')?.check?.restored, false, 'the first check only learns');
      await new Promise((r) => setTimeout(r, 3 * probeMs));
      assert.equal(events.filter((e) => e.kind === 'restored').length, 0, 'nothing changed: no restore');

      await c.flushall();
      // One probe interval, plus scheduling slack on a loaded machine.
      await waitFor(() => events.some((e) => e.kind === 'restored'), 'FLUSHALL', probeMs * 10);

      const older = await c.dumpBuffer(capEpochKey('watch'));
      assert.ok(older !== null);
      await new Promise((r) => setTimeout(r, 3 * probeMs)); // the counter moves on
      const before = events.filter((e) => e.kind === 'restored').length;
      await c.restore(capEpochKey('watch'), 0, older, 'REPLACE');
      await waitFor(() => events.filter((e) => e.kind === 'restored').length > before, 'older epoch written back', probeMs * 10);

      const backs = events.filter((e) => e.kind === 'back').length;
      await redis.restart();
      await waitFor(() => events.filter((e) => e.kind === 'back').length > backs, 'restart', 10_000);
      assert.equal(events.at(-1)?.check?.restored, true, 'a restart (new run_id, empty) is a restore');
    } finally {
      watch.stop();
    }
  });
});
