/**
 * A stand-in's usage given back to the tenant's owner: what `windowUsageSince` and the bucket tally
 * find, and what `withUsage` / `Limiter.absorbUsage` make of it. The property: an owner that absorbed
 * a stand-in's usage holds the same sliding windows as one limiter that saw every request of both
 * nodes, and never more room in a token bucket.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { ManualClock } from '../../src/clock.ts';
import { Limiter, openRequestsSince, parseTenantSnapshot, windowUsageSince, withOpenRequests, withUsage } from '../../src/limiter/index.ts';
import type { Policy, TenantSnapshot, UsageDelta } from '../../src/limiter/index.ts';

const T0 = 1_700_000_000_000;

const POLICY: Policy = {
  limits: [
    { name: 'tokens/10s', kind: 'tokens', limit: 1_000, windowMs: 10_000, algorithm: 'sliding_window' },
    { name: 'requests/10s', kind: 'requests', limit: 100, windowMs: 10_000, algorithm: 'sliding_window' },
    { name: 'tokens/1m', kind: 'tokens', limit: 2_000, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'requests/1m', kind: 'requests', limit: 120, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'concurrent', kind: 'concurrent', limit: 100, leaseTtlMs: 60_000 },
  ],
};

/** The usage a stand-in sends: its new window entries and its bucket tally, through JSON. */
function usageOf(standIn: Limiter, base: TenantSnapshot | undefined, tenant = 't'): UsageDelta {
  return JSON.parse(JSON.stringify({ windows: windowUsageSince(base, standIn.exportTenant(tenant)), buckets: standIn.bucketUsage(tenant) })) as UsageDelta;
}

function remaining(limiter: Limiter, tenant = 't'): Record<string, number> {
  return Object.fromEntries(limiter.peek(tenant).map((l) => [l.name, l.remaining]));
}

describe('stand-in usage', () => {
  test('windowUsageSince: only entries whose id the base lacks, with their settled cost (0 included); reload carry-over (id "") never', () => {
    const base: TenantSnapshot = {
      v: 1,
      at: T0,
      limits: [{ name: 'w', algorithm: 'sliding_window', kind: 'tokens', entries: [[T0 - 5, 30, ''], [T0, 100, 'a']] }],
      reservations: [],
    };
    const current: TenantSnapshot = {
      ...base,
      limits: [
        { name: 'w', algorithm: 'sliding_window', kind: 'tokens', entries: [[T0 - 5, 30, ''], [T0, 100, 'a'], [T0 + 10, 40, 'b'], [T0 + 20, 0, 'c'], [T0 + 30, 7, '']] },
        { name: 'fresh', algorithm: 'sliding_window', entries: [[T0 + 40, 1, 'd']] },
        { name: 'b', algorithm: 'token_bucket', kind: 'tokens', limit: 10, windowMs: 1_000, level: 0, refilledAt: T0 },
      ],
    };
    assert.deepEqual(windowUsageSince(base, current), [
      { name: 'w', kind: 'tokens', entries: [[T0 + 10, 40, 'b'], [T0 + 20, 0, 'c']] },
      { name: 'fresh', entries: [[T0 + 40, 1, 'd']] },
    ]);
    assert.deepEqual(windowUsageSince(base, undefined), []);
    assert.deepEqual(windowUsageSince(undefined, base), [{ name: 'w', kind: 'tokens', entries: [[T0, 100, 'a']] }]);
  });

  test('withUsage: entries merged in time order (a known id skipped), a bucket refilled to now then lowered, missing limits added, reservations kept', () => {
    const owner: TenantSnapshot = {
      v: 1,
      at: T0,
      limits: [
        { name: 'w', algorithm: 'sliding_window', kind: 'tokens', entries: [[T0, 100, 'a'], [T0 + 50, 10, 'c']] },
        // 400 units left of 1,000 at T0, refilling 1 unit per ms (1,000 per 1,000 ms).
        { name: 'b', algorithm: 'token_bucket', kind: 'tokens', limit: 1_000, windowMs: 1_000, level: 400 * 1_000, refilledAt: T0 },
      ],
      reservations: [{ id: 'c', tokens: 10, requests: 1, expiresAt: T0 + 60_000, settled: false, released: false, limits: ['w', 'b'] }],
    };
    const merged = withUsage(
      owner,
      {
        windows: [
          { name: 'w', kind: 'tokens', entries: [[T0 + 20, 40, 'b'], [T0, 100, 'a']] },
          { name: 'w2', kind: 'requests', entries: [[T0 + 30, 1, 'b']] },
        ],
        buckets: [
          { name: 'b', kind: 'tokens', limit: 1_000, windowMs: 1_000, taken: 250 },
          { name: 'b2', kind: 'requests', limit: 10, windowMs: 1_000, taken: 3 },
        ],
      },
      T0 + 100,
    );
    assert.deepEqual(merged, {
      v: 1,
      at: T0 + 100,
      limits: [
        { name: 'w', algorithm: 'sliding_window', kind: 'tokens', entries: [[T0, 100, 'a'], [T0 + 20, 40, 'b'], [T0 + 50, 10, 'c']] },
        // 400 + 100 ms of refill − 250.
        { name: 'b', algorithm: 'token_bucket', kind: 'tokens', limit: 1_000, windowMs: 1_000, level: 250 * 1_000, refilledAt: T0 + 100 },
        { name: 'w2', algorithm: 'sliding_window', kind: 'requests', entries: [[T0 + 30, 1, 'b']] },
        { name: 'b2', algorithm: 'token_bucket', kind: 'requests', limit: 10, windowMs: 1_000, level: 7 * 1_000, refilledAt: T0 + 100 },
      ],
      reservations: owner.reservations,
    });
    // Valid for the wire: what an owner stores at its next checkpoint parses.
    assert.deepEqual(parseTenantSnapshot(JSON.stringify(merged)), merged);
    // An owner without state: the usage alone.
    assert.deepEqual(withUsage(undefined, { windows: [], buckets: [{ name: 'b', kind: 'tokens', limit: 1_000, windowMs: 1_000, taken: 1_200 }] }, T0).limits, [
      { name: 'b', algorithm: 'token_bucket', kind: 'tokens', limit: 1_000, windowMs: 1_000, level: -200 * 1_000, refilledAt: T0 },
    ]);
  });

  test('withOpenRequests: the running requests of the stand-in (not those it loaded) and their leases join the reloaded state', () => {
    const res = (id: string) => ({ id, tokens: 10, requests: 1, expiresAt: T0 + 60_000, settled: false, released: false, limits: ['w', 'c'] });
    const loaded: TenantSnapshot = { v: 1, at: T0, limits: [{ name: 'c', algorithm: 'semaphore', leases: [['o1', T0 + 60_000]] }], reservations: [res('o1')] };
    const standIn: TenantSnapshot = {
      v: 1,
      at: T0,
      limits: [
        { name: 'c', algorithm: 'semaphore', leases: [['old', T0 + 60_000], ['s1', T0 + 60_000]] },
        { name: 'c2', algorithm: 'semaphore', leases: [['s1', T0 + 30_000]] },
      ],
      reservations: [res('old'), res('s1')],
    };
    assert.deepEqual(withOpenRequests(loaded, standIn, new Set(['old'])), {
      v: 1,
      at: T0,
      limits: [
        { name: 'c', algorithm: 'semaphore', leases: [['o1', T0 + 60_000], ['s1', T0 + 60_000]] },
        { name: 'c2', algorithm: 'semaphore', leases: [['s1', T0 + 30_000]] },
      ],
      reservations: [res('o1'), res('s1')],
    });
    assert.equal(withOpenRequests(loaded, standIn, new Set(['old', 's1'])), loaded);
    assert.equal(withOpenRequests(loaded, undefined, new Set()), loaded);
  });

  test('the bucket tally counts admissions and their settlements for a tallied tenant only; untally takes off what was sent', () => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ clock, policyFor: () => POLICY });
    assert.equal(limiter.acquire('t', { id: 'before', tokens: 500 }).ok, true);
    limiter.startTally('t');
    assert.equal(limiter.acquire('t', { id: 'r1', tokens: 300 }).ok, true);
    assert.equal(limiter.acquire('u', { id: 'r1', tokens: 300 }).ok, true);
    limiter.settle('t', 'r1', 120); // −180
    limiter.settle('t', 'before', 600); // +100: a reservation admitted before the tally, settled during it
    const usage = limiter.bucketUsage('t');
    assert.deepEqual(usage, [
      { name: 'tokens/1m', kind: 'tokens', limit: 2_000, windowMs: 60_000, taken: 300 - 180 + 100 },
      { name: 'requests/1m', kind: 'requests', limit: 120, windowMs: 60_000, taken: 1 },
    ]);
    assert.deepEqual(limiter.bucketUsage('u'), []);
    assert.equal(limiter.acquire('t', { id: 'r2', tokens: 10 }).ok, true);
    limiter.untally('t', usage);
    assert.deepEqual(
      limiter.bucketUsage('t').map((b) => [b.name, b.taken]),
      [
        ['tokens/1m', 10],
        ['requests/1m', 1],
      ],
    );
    limiter.stopTally('t');
    assert.equal(limiter.acquire('t', { id: 'r3', tokens: 10 }).ok, true);
    assert.deepEqual(limiter.bucketUsage('t'), []);
  });

  test('absorbUsage keeps the owner\'s open reservation: its settlement still adjusts its own window entry and its slot', () => {
    const clock = new ManualClock(T0);
    const owner = new Limiter({ clock, policyFor: () => POLICY });
    const standIn = new Limiter({ clock, policyFor: () => POLICY });
    assert.equal(owner.acquire('t', { id: 'o1', tokens: 200 }).ok, true);
    const base = owner.exportTenant('t');
    standIn.importTenant('t', base as TenantSnapshot);
    standIn.startTally('t');
    clock.advance(10);
    assert.equal(standIn.acquire('t', { id: 's1', tokens: 300 }).ok, true);
    standIn.settle('t', 's1', 250);
    standIn.release('t', 's1');
    clock.advance(10);
    assert.equal(owner.acquire('t', { id: 'o2', tokens: 100 }).ok, true);
    owner.absorbUsage('t', usageOf(standIn, base));
    assert.deepEqual(remaining(owner), { 'tokens/10s': 1_000 - 200 - 250 - 100, 'requests/10s': 97, 'tokens/1m': 2_000 - 200 - 250 - 100, 'requests/1m': 117, concurrent: 98 });
    assert.deepEqual(owner.settle('t', 'o1', 50), { settled: true, deltaTokens: -150 });
    assert.equal(owner.release('t', 'o1'), true);
    assert.deepEqual(remaining(owner), { 'tokens/10s': 1_000 - 50 - 250 - 100, 'requests/10s': 97, 'tokens/1m': 2_000 - 50 - 250 - 100, 'requests/1m': 117, concurrent: 99 });
    // s1 leaves the window at its own admission time (T0 + 10), not at the time it was absorbed.
    clock.set(T0 + 10_000);
    assert.equal(remaining(owner)['tokens/10s'], 1_000 - 250 - 100);
    clock.set(T0 + 10_010);
    assert.equal(remaining(owner)['tokens/10s'], 1_000 - 100);
  });

  type Op = { readonly at: 'owner' | 'standIn'; readonly t: 'acquire'; readonly tokens: number } | { readonly at: 'owner' | 'standIn'; readonly t: 'settle'; readonly n: number; readonly actual: number } | { readonly t: 'advance'; readonly ms: number };
  const side = fc.constantFrom('owner' as const, 'standIn' as const);
  const opArb: fc.Arbitrary<Op> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ at: side, t: fc.constant('acquire' as const), tokens: fc.integer({ min: 0, max: 25 }) }) },
    { weight: 2, arbitrary: fc.record({ at: side, t: fc.constant('settle' as const), n: fc.nat(), actual: fc.integer({ min: 0, max: 40 }) }) },
    { weight: 2, arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3_000 }) }) },
  );

  test('property: owner + absorbed stand-in usage and running requests, then their settlements at the owner = one limiter that saw both (windows and slots exactly; a bucket never has more room)', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 10 }), fc.array(opArb, { maxLength: 40 }), (before, during) => {
        const clock = new ManualClock(T0);
        const make = (): Limiter => new Limiter({ clock, policyFor: () => POLICY });
        const [reference, owner, standIn] = [make(), make(), make()];
        const open: Record<'owner' | 'standIn', string[]> = { owner: [], standIn: [] };
        let n = 0;
        const run = (op: Op, targets: (at: 'owner' | 'standIn') => Limiter[]): void => {
          if (op.t === 'advance') {
            clock.advance(op.ms);
            return;
          }
          if (op.t === 'acquire') {
            const id = `${op.at}-${n++}`;
            // Limits are far above what the ops can take: nothing is ever refused, on either side.
            for (const l of [reference, ...targets(op.at)]) assert.equal(l.acquire('t', { id, tokens: op.tokens }).ok, true);
            open[op.at].push(id);
            return;
          }
          const ids = open[op.at];
          if (ids.length === 0) return;
          const [id] = ids.splice(op.n % ids.length, 1) as [string];
          for (const l of [reference, ...targets(op.at)]) {
            l.settle('t', id, op.actual);
            l.release('t', id);
          }
        };
        // The owner's history (its open requests stay the owner's), then the stand-in loads it.
        for (const op of before) run(op.t === 'advance' ? op : { ...op, at: 'owner' }, () => [owner]);
        standIn.importTenant('t', owner.exportTenant('t') ?? { v: 1, at: clock.now(), limits: [], reservations: [] });
        const base = standIn.exportTenant('t');
        standIn.startTally('t');
        for (const op of during) run(op, (at) => [at === 'owner' ? owner : standIn]);
        // The stand-in gives back while its own requests still run: they go with their reservations
        // and slots (through JSON, as on the wire), and end at the owner afterwards.
        const delta = usageOf(standIn, base);
        const carried = openRequestsSince(standIn.exportTenant('t'), new Set(base?.reservations.map((r) => r.id)));
        assert.deepEqual((carried?.reservations.map((r) => r.id) ?? []).sort(), [...open.standIn].sort());
        owner.absorbUsage('t', JSON.parse(JSON.stringify({ ...delta, ...(carried === undefined ? {} : { open: carried }) })) as UsageDelta);
        assert.equal(remaining(owner).concurrent, remaining(reference).concurrent, 'the owner holds the stand-in\'s running requests\' slots');
        for (const [k, id] of open.standIn.splice(0).entries()) {
          for (const l of [reference, owner]) {
            assert.equal(l.settle('t', id, 10 + k).settled, true);
            assert.equal(l.release('t', id), true);
          }
        }
        const got = remaining(owner);
        const want = remaining(reference);
        assert.equal(got['tokens/10s'], want['tokens/10s']);
        assert.equal(got['requests/10s'], want['requests/10s']);
        assert.ok((got['tokens/1m'] as number) <= (want['tokens/1m'] as number), `tokens/1m ${got['tokens/1m']} > ${want['tokens/1m']}`);
        assert.ok((got['requests/1m'] as number) <= (want['requests/1m'] as number), `requests/1m ${got['requests/1m']} > ${want['requests/1m']}`);
        // The windows hold the same admissions at the same times and costs.
        const windows = (l: Limiter): unknown[] =>
          (l.exportTenant('t')?.limits ?? [])
            .flatMap((x) => (x.algorithm === 'sliding_window' ? x.entries.map((e) => [x.name, ...e]) : []))
            .sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
        assert.deepEqual(windows(owner), windows(reference));
        assert.equal(got.concurrent, want.concurrent);
      }),
      { numRuns: 300 },
    );
  });

  test('without refill to capacity the buckets match exactly too', () => {
    const clock = new ManualClock(T0);
    const make = (): Limiter => new Limiter({ clock, policyFor: () => POLICY });
    const [reference, owner, standIn] = [make(), make(), make()];
    for (const l of [reference, owner]) assert.equal(l.acquire('t', { id: 'o1', tokens: 400 }).ok, true);
    standIn.importTenant('t', owner.exportTenant('t') as TenantSnapshot);
    const base = standIn.exportTenant('t');
    standIn.startTally('t');
    clock.advance(100);
    for (const l of [reference, standIn]) {
      assert.equal(l.acquire('t', { id: 's1', tokens: 300 }).ok, true);
      l.settle('t', 's1', 350);
      l.release('t', 's1');
    }
    for (const l of [reference, owner]) assert.equal(l.acquire('t', { id: 'o2', tokens: 100 }).ok, true);
    clock.advance(100);
    owner.absorbUsage('t', usageOf(standIn, base));
    assert.deepEqual(remaining(owner), remaining(reference));
    // 2,000 − 400 − 350 − 100 + 200 ms of refill (2,000 per 60 s).
    assert.equal(remaining(owner)['tokens/1m'], Math.floor(1_150 + (200 * 2_000) / 60_000));
  });
});
