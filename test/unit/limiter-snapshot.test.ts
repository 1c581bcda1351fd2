import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ManualClock } from '../../src/clock.ts';
import { Limiter, parseTenantSnapshot } from '../../src/limiter/index.ts';
import type { Algorithm, Policy, TenantSnapshot } from '../../src/limiter/index.ts';

const T0 = 1_700_000_000_000;

/** What a handoff does with a snapshot: JSON through Redis, parsed on the other side. */
function roundTrip(snap: TenantSnapshot): TenantSnapshot {
  return parseTenantSnapshot(JSON.stringify(snap));
}

/** A snapshot with leases and reservations sorted by id (their order is not part of the state). */
function normalised(snap: TenantSnapshot | undefined): unknown {
  if (snap === undefined) return undefined;
  return {
    ...snap,
    limits: snap.limits.map((l) => (l.algorithm === 'semaphore' ? { ...l, leases: [...l.leases].sort((a, b) => (a[0] < b[0] ? -1 : 1)) } : l)),
    reservations: [...snap.reservations].sort((a, b) => (a.id < b.id ? -1 : 1)),
  };
}

type Op =
  | { readonly t: 'acquire'; readonly id: number; readonly tokens: number }
  | { readonly t: 'settle'; readonly id: number; readonly actual: number }
  | { readonly t: 'release'; readonly id: number }
  | { readonly t: 'renew'; readonly id: number }
  | { readonly t: 'advance'; readonly ms: number }
  | { readonly t: 'peek' };

const idArb = fc.integer({ min: 0, max: 5 }); // few ids: duplicates and reuse after close happen
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ t: fc.constant('acquire' as const), id: idArb, tokens: fc.integer({ min: 0, max: 40 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('acquire' as const), id: idArb, tokens: fc.integer({ min: 0, max: 120 }) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('settle' as const), id: idArb, actual: fc.integer({ min: 0, max: 250 }) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('release' as const), id: idArb }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('renew' as const), id: idArb }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2_000 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 20_000 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('peek' as const) }) },
);

/** A token bucket, a sliding window (tokens), a requests limit and a concurrency limit. */
function propertyPolicy(requestsAlgorithm: Algorithm): Policy {
  return {
    limits: [
      { name: 'tokens/1m', kind: 'tokens', limit: 200, windowMs: 60_000, algorithm: 'token_bucket' },
      { name: 'tokens/10s', kind: 'tokens', limit: 100, windowMs: 10_000, algorithm: 'sliding_window' },
      { name: 'requests/10s', kind: 'requests', limit: 4, windowMs: 10_000, algorithm: requestsAlgorithm },
      { name: 'concurrent', kind: 'concurrent', limit: 3, leaseTtlMs: 8_000 },
    ],
  };
}

function apply(limiter: Limiter, clock: ManualClock | null, op: Op): unknown {
  switch (op.t) {
    case 'acquire':
      return limiter.acquire('t', { id: `r${op.id}`, tokens: op.tokens });
    case 'settle':
      return limiter.settle('t', `r${op.id}`, op.actual);
    case 'release':
      return limiter.release('t', `r${op.id}`);
    case 'renew':
      return limiter.renew('t', `r${op.id}`);
    case 'advance':
      clock?.advance(op.ms);
      return op.ms;
    case 'peek':
      return limiter.peek('t');
  }
}

describe('limiter snapshots', () => {
  test('property: a limiter that imported the export at any point answers every later op exactly like the original', () => {
    fc.assert(
      fc.property(
        fc.constantFrom<Algorithm>('token_bucket', 'sliding_window'),
        fc.array(opArb, { minLength: 1, maxLength: 80 }),
        fc.nat(),
        (requestsAlgorithm, ops, splitPick) => {
          const clock = new ManualClock(T0);
          const policy = propertyPolicy(requestsAlgorithm);
          const a = new Limiter({ clock, policyFor: () => policy });
          const b = new Limiter({ clock, policyFor: () => policy });
          const split = splitPick % (ops.length + 1);
          for (const op of ops.slice(0, split)) apply(a, clock, op);
          const snap = a.exportTenant('t');
          assert.equal(snap === undefined, !a.hasTenant('t'));
          // A state beyond the import bounds (debt over one capacity, a window entry over twice its limit,
          // from settlements far above their reservations) is clamped on import: tested on its own below.
          if (snap !== undefined) fc.pre(b.importTenant('t', roundTrip(snap)) === 0);
          for (const [k, op] of ops.slice(split).entries()) {
            const ra = apply(a, clock, op);
            const rb = apply(b, null, op); // same clock: advance once
            assert.deepEqual(rb, ra, `op ${split + k} ${JSON.stringify(op)}`);
            assert.equal(b.hasTenant('t'), a.hasTenant('t'));
          }
          assert.deepEqual(normalised(b.exportTenant('t')), normalised(a.exportTenant('t')));
          assert.equal(b.sweep(), a.sweep());
        },
      ),
      { numRuns: 500 },
    );
  });

  test('settle after import adjusts the window entry at its original timestamp; a second settle is a no-op', () => {
    const clock = new ManualClock(T0);
    const policy: Policy = { limits: [{ name: 'tokens/10s', kind: 'tokens', limit: 100, windowMs: 10_000, algorithm: 'sliding_window' }] };
    const a = new Limiter({ clock, policyFor: () => policy });
    const b = new Limiter({ clock, policyFor: () => policy });
    assert.equal(a.acquire('t', { id: 'a', tokens: 40 }).ok, true); // entry at T0
    clock.advance(4_000);
    assert.equal(a.acquire('t', { id: 'b', tokens: 30 }).ok, true); // entry at T0 + 4 s
    clock.advance(1_000);
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    assert.deepEqual(snap.limits, [
      { name: 'tokens/10s', algorithm: 'sliding_window', kind: 'tokens', entries: [[T0, 40, 'a'], [T0 + 4_000, 30, 'b']] },
    ]);
    b.importTenant('t', snap);

    assert.deepEqual(b.settle('t', 'a', 10), { settled: true, deltaTokens: -30 }); // refund
    assert.deepEqual(b.peek('t'), [{ name: 'tokens/10s', kind: 'tokens', limit: 100, remaining: 60, resetMs: 9_000 }]);
    // 70 more need 10 of a's (now 10) tokens to leave: at T0 + 10 s, 5 s from now (not 10 s).
    const refused = b.acquire('t', { id: 'c', tokens: 70 });
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.retryAfterMs, 5_000);
    assert.deepEqual(b.settle('t', 'b', 50), { settled: true, deltaTokens: 20 }); // debit
    assert.equal(b.peek('t')[0]?.remaining, 40);
    assert.deepEqual(b.settle('t', 'a', 90), { settled: false, deltaTokens: 0 });
    assert.equal(b.peek('t')[0]?.remaining, 40);
    clock.advance(5_000); // a's entry (10) leaves at T0 + 10 s
    assert.deepEqual(b.peek('t'), [{ name: 'tokens/10s', kind: 'tokens', limit: 100, remaining: 50, resetMs: 4_000 }]);
    assert.equal(b.acquire('t', { id: 'c', tokens: 50 }).ok, true);
  });

  test('settle after import refunds and debits the token bucket', () => {
    const clock = new ManualClock(T0);
    // 100 tokens per 100 s: refills 1 token per second.
    const policy: Policy = { limits: [{ name: 'tokens/100s', kind: 'tokens', limit: 100, windowMs: 100_000, algorithm: 'token_bucket' }] };
    const a = new Limiter({ clock, policyFor: () => policy });
    const b = new Limiter({ clock, policyFor: () => policy });
    a.acquire('t', { id: 'x', tokens: 40 });
    a.acquire('t', { id: 'y', tokens: 50 });
    clock.advance(5_000); // level 10 + 5
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    assert.deepEqual(snap.limits, [
      { name: 'tokens/100s', algorithm: 'token_bucket', kind: 'tokens', limit: 100, windowMs: 100_000, level: 10 * 100_000, refilledAt: T0 },
    ]);
    b.importTenant('t', snap);
    assert.deepEqual(b.peek('t'), [{ name: 'tokens/100s', kind: 'tokens', limit: 100, remaining: 15, resetMs: 85_000 }]);
    assert.deepEqual(b.settle('t', 'x', 10), { settled: true, deltaTokens: -30 });
    assert.deepEqual(b.peek('t'), [{ name: 'tokens/100s', kind: 'tokens', limit: 100, remaining: 45, resetMs: 55_000 }]);
    assert.deepEqual(b.settle('t', 'y', 100), { settled: true, deltaTokens: 50 });
    assert.deepEqual(b.peek('t'), [{ name: 'tokens/100s', kind: 'tokens', limit: 100, remaining: 0, resetMs: 105_000 }]);
    const refused = b.acquire('t', { id: 'z', tokens: 1 });
    assert.equal(!refused.ok && refused.retryAfterMs, 6_000); // level −5 → 1 takes 6 s
    assert.deepEqual(b.settle('t', 'x', 0), { settled: false, deltaTokens: 0 });
  });

  test('release after import frees the slot once; renew after import extends the imported lease', () => {
    const clock = new ManualClock(T0);
    const policy: Policy = { limits: [{ name: 'concurrent', kind: 'concurrent', limit: 1, leaseTtlMs: 10_000 }] };
    const a = new Limiter({ clock, policyFor: () => policy, concurrencyRetryHintMs: 60_000 });
    const b = new Limiter({ clock, policyFor: () => policy, concurrencyRetryHintMs: 60_000 });
    assert.equal(a.acquire('t', { id: 'a', tokens: 0 }).ok, true);
    clock.advance(8_000);
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    assert.deepEqual(snap.limits, [{ name: 'concurrent', algorithm: 'semaphore', leases: [['a', T0 + 10_000]] }]);
    assert.deepEqual(snap.reservations, [
      { id: 'a', tokens: 0, requests: 1, expiresAt: T0 + 10_000, settled: false, released: false, limits: ['concurrent'] },
    ]);

    b.importTenant('t', snap);
    const refused = b.acquire('t', { id: 'b', tokens: 0 });
    assert.equal(!refused.ok && refused.retryAfterMs, 2_000); // the imported lease expires at T0 + 10 s
    assert.equal(b.renew('t', 'a'), true); // now until T0 + 18 s
    clock.advance(5_000);
    const still = b.acquire('t', { id: 'b', tokens: 0 });
    assert.equal(!still.ok && still.retryAfterMs, 5_000);
    assert.equal(b.release('t', 'a'), true);
    assert.equal(b.release('t', 'a'), false);
    assert.equal(b.acquire('t', { id: 'b', tokens: 0 }).ok, true);
  });

  test('import onto a changed policy: a renamed limit, a removed one, a new value, a new algorithm', () => {
    const clock = new ManualClock(T0);
    const before: Policy = {
      limits: [
        { name: 'tokens/1m', kind: 'tokens', limit: 1_000, windowMs: 60_000, algorithm: 'token_bucket' },
        { name: 'requests/1m', kind: 'requests', limit: 10, windowMs: 60_000, algorithm: 'sliding_window' },
        { name: 'tokens/1d', kind: 'tokens', limit: 10_000, windowMs: 86_400_000, algorithm: 'sliding_window' },
        { name: 'concurrent', kind: 'concurrent', limit: 2, leaseTtlMs: 30_000 },
      ],
    };
    const after: Policy = {
      limits: [
        { name: 'tokens/1m', kind: 'tokens', limit: 500, windowMs: 60_000, algorithm: 'token_bucket' }, // new value
        { name: 'req/1m', kind: 'requests', limit: 10, windowMs: 60_000, algorithm: 'sliding_window' }, // renamed
        { name: 'tokens/1d', kind: 'tokens', limit: 10_000, windowMs: 86_400_000, algorithm: 'token_bucket' }, // new algorithm
        // concurrent: removed
      ],
    };
    const a = new Limiter({ clock, policyFor: () => before });
    const b = new Limiter({ clock, policyFor: () => after });
    assert.equal(a.acquire('t', { id: 'x', tokens: 300 }).ok, true);
    assert.equal(a.acquire('t', { id: 'y', tokens: 100 }).ok, true);
    b.importTenant('t', roundTrip(a.exportTenant('t') as TenantSnapshot));
    assert.deepEqual(b.peek('t'), [
      // 400 used of 500: refills 500 per minute, so full in 400 × 60 s / 500 = 48 s
      { name: 'tokens/1m', kind: 'tokens', limit: 500, remaining: 100, resetMs: 48_000 },
      { name: 'req/1m', kind: 'requests', limit: 10, remaining: 10, resetMs: 0 },
      { name: 'tokens/1d', kind: 'tokens', limit: 10_000, remaining: 10_000, resetMs: 0 },
    ]);
    assert.deepEqual(b.settle('t', 'x', 100), { settled: true, deltaTokens: -200 });
    assert.equal(b.peek('t')[0]?.remaining, 300);
    assert.equal(b.release('t', 'x'), true); // no concurrency limit left: the reservation just closes
    assert.equal(b.release('t', 'x'), false);
    assert.deepEqual(b.settle('t', 'x', 0), { settled: false, deltaTokens: 0 });
    // Used above the new limit is clamped to it (as a reload does).
    const c = new Limiter({
      clock,
      policyFor: () => ({ limits: [{ name: 'tokens/1m', kind: 'tokens', limit: 300, windowMs: 60_000, algorithm: 'token_bucket' }] }),
    });
    c.importTenant('t', roundTrip(a.exportTenant('t') as TenantSnapshot));
    assert.deepEqual(c.peek('t'), [{ name: 'tokens/1m', kind: 'tokens', limit: 300, remaining: 0, resetMs: 60_000 }]);
  });

  test('after a reload, an exported reservation names only the limits its settle and release still act on', () => {
    const clock = new ManualClock(T0);
    const p1: Policy = {
      limits: [
        { name: 'tokens/1m', kind: 'tokens', limit: 100, windowMs: 60_000, algorithm: 'sliding_window' },
        { name: 'tokens/1h', kind: 'tokens', limit: 1_000, windowMs: 3_600_000, algorithm: 'token_bucket' },
      ],
    };
    // Reload: tokens/1m becomes a bucket (usage carried over, but x's window entry is gone).
    const p2: Policy = {
      limits: [
        { name: 'tokens/1m', kind: 'tokens', limit: 100, windowMs: 60_000, algorithm: 'token_bucket' },
        { name: 'tokens/1h', kind: 'tokens', limit: 1_000, windowMs: 3_600_000, algorithm: 'token_bucket' },
      ],
    };
    let policy = p1;
    const a = new Limiter({ clock, policyFor: () => policy });
    const b = new Limiter({ clock, policyFor: () => p2 });
    assert.equal(a.acquire('t', { id: 'x', tokens: 50 }).ok, true);
    policy = p2;
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    assert.deepEqual(snap.reservations[0]?.limits, ['tokens/1h']);
    b.importTenant('t', snap);
    assert.deepEqual(b.settle('t', 'x', 0), a.settle('t', 'x', 0));
    assert.deepEqual(b.peek('t'), a.peek('t'));
    assert.deepEqual(
      b.peek('t').map((l) => l.remaining),
      [50, 1_000],
    );
  });

  test('entries, leases and reservations already expired at import time are dropped; a bucket refills from its own time', () => {
    const clock = new ManualClock(T0);
    const policy: Policy = {
      limits: [
        { name: 'tokens/10s', kind: 'tokens', limit: 100, windowMs: 10_000, algorithm: 'sliding_window' },
        { name: 'tokens/100s', kind: 'tokens', limit: 100, windowMs: 100_000, algorithm: 'token_bucket' },
        { name: 'concurrent', kind: 'concurrent', limit: 1, leaseTtlMs: 5_000 },
      ],
    };
    const a = new Limiter({ clock, policyFor: () => policy });
    const b = new Limiter({ clock, policyFor: () => policy });
    a.acquire('t', { id: 'old', tokens: 60 });
    a.release('t', 'old');
    clock.advance(3_000);
    a.acquire('t', { id: 'new', tokens: 30 });
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    assert.equal(snap.reservations.length, 2);
    clock.advance(7_000); // T0 + 10 s: 'old' leaves the window; 'new''s lease and reservation expired at T0 + 8 s
    b.importTenant('t', snap);
    assert.deepEqual(b.peek('t'), [
      { name: 'tokens/10s', kind: 'tokens', limit: 100, remaining: 70, resetMs: 3_000 },
      { name: 'tokens/100s', kind: 'tokens', limit: 100, remaining: 20, resetMs: 80_000 }, // 10 + 10 s × 1/s
      { name: 'concurrent', kind: 'concurrent', limit: 1, remaining: 1, resetMs: 0 },
    ]);
    assert.deepEqual(b.settle('t', 'new', 0), { settled: false, deltaTokens: 0 });
    assert.equal(b.release('t', 'new'), false);
    a.peek('t'); // refills a's bucket to now, as b's peek did
    assert.deepEqual(normalised(b.exportTenant('t')), normalised(a.exportTenant('t')));
  });

  test('import replaces existing state, and is a no-op for a tenant without a policy', () => {
    const clock = new ManualClock(T0);
    const policy: Policy = { limits: [{ name: 'requests/1m', kind: 'requests', limit: 3, windowMs: 60_000, algorithm: 'token_bucket' }] };
    const a = new Limiter({ clock, policyFor: () => policy });
    const b = new Limiter({ clock, policyFor: (t) => (t === 't' ? policy : undefined) });
    a.acquire('t', { id: 'x', tokens: 0 });
    const snap = roundTrip(a.exportTenant('t') as TenantSnapshot);
    b.acquire('t', { id: 'p', tokens: 0 });
    b.acquire('t', { id: 'q', tokens: 0 });
    b.importTenant('t', snap);
    assert.equal(b.peek('t')[0]?.remaining, 2);
    assert.deepEqual(b.settle('t', 'p', 0), { settled: false, deltaTokens: 0 });
    b.importTenant('other', snap);
    assert.equal(b.hasTenant('other'), false);
  });

  test('export of an unknown tenant is undefined; dropTenant, hasTenant and tenants()', () => {
    const clock = new ManualClock(T0);
    const policy: Policy = { limits: [{ name: 'requests/1m', kind: 'requests', limit: 3, windowMs: 60_000, algorithm: 'token_bucket' }] };
    const l = new Limiter({ clock, policyFor: () => policy });
    assert.equal(l.exportTenant('t'), undefined);
    l.acquire('t', { id: 'x', tokens: 0 });
    l.acquire('u', { id: 'x', tokens: 0 });
    assert.deepEqual([...l.tenants()], ['t', 'u']);
    assert.equal(l.hasTenant('t'), true);
    assert.equal(l.dropTenant('t'), true);
    assert.equal(l.dropTenant('t'), false);
    assert.equal(l.hasTenant('t'), false);
    assert.equal(l.exportTenant('t'), undefined);
    assert.deepEqual([...l.tenants()], ['u']);
    assert.equal(l.peek('t')[0]?.remaining, 3); // dropped = fresh
    assert.deepEqual(l.exportTenant('u'), {
      v: 1,
      at: T0,
      limits: [{ name: 'requests/1m', algorithm: 'token_bucket', kind: 'requests', limit: 3, windowMs: 60_000, level: 2 * 60_000, refilledAt: T0 }],
      reservations: [{ id: 'x', tokens: 0, requests: 1, expiresAt: T0 + 600_000, settled: false, released: false, limits: ['requests/1m'] }],
    });
  });
});

describe('parseTenantSnapshot', () => {
  const valid = {
    v: 1,
    at: T0,
    limits: [
      { name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 100, windowMs: 60_000, level: -600_000, refilledAt: T0 },
      { name: 'tokens/10s', algorithm: 'sliding_window', entries: [[T0 - 5, 10, 'a'], [T0, 0, 'b']] },
      { name: 'concurrent', algorithm: 'semaphore', leases: [['a', T0 + 5]] },
    ],
    reservations: [{ id: 'a', tokens: 10, requests: 1, expiresAt: T0 + 5, settled: false, released: true, limits: ['tokens/10s'] }],
  };
  const text = JSON.stringify(valid);

  test('accepts a valid snapshot as it is (a negative bucket level, a window without kind)', () => {
    assert.deepEqual(parseTenantSnapshot(text), valid);
  });

  test('rejects, naming the field', () => {
    const cases: [string, RegExp][] = [
      [text.replace('"v":1', '"v":2'), /^Error: tenant snapshot: v: /],
      [text.replace(`"at":${T0},`, ''), /^Error: tenant snapshot: at: .*undefined/],
      [text.replace(`[${T0 - 5},10,"a"]`, `[${T0 - 5},-1,"a"]`), /^Error: tenant snapshot: limits\[1\]\.entries\[0\]\[1\]: Too small/],
      [text.replace('"level":-600000', '"level":1e999'), /^Error: tenant snapshot: limits\[0\]\.level: .*Infinity/],
      [text.replace('"tokens":10,', '"tokens":-1e999,'), /^Error: tenant snapshot: reservations\[0\]\.tokens: /],
      [text.replace(`"expiresAt":${T0 + 5}`, '"expiresAt":"soon"'), /^Error: tenant snapshot: reservations\[0\]\.expiresAt: .*string/],
      [text.replace('"settled":false,', ''), /^Error: tenant snapshot: reservations\[0\]\.settled: /],
      [text.replace('"algorithm":"semaphore"', '"algorithm":"leaky"'), /^Error: tenant snapshot: limits\[2\]\.algorithm: /],
      [text.replace('"windowMs":60000', '"windowMs":0'), /^Error: tenant snapshot: limits\[0\]\.windowMs: /],
      [text.replace('"v":1', '"v":1,"extra":0'), /^Error: tenant snapshot: \(root\): .*extra/],
      [text.replace(`[${T0},0,"b"]`, `[${T0 - 6},0,"b"]`), /^Error: tenant snapshot: limits\[1\]\.entries\[1\]\[0\]: entries must be in timestamp order$/],
      [text.replace('"name":"concurrent"', '"name":"tokens/1m"'), /^Error: tenant snapshot: limits\[2\]\.name: limit "tokens\/1m" appears twice$/],
      [text.replace('"leases":[["a",', `"leases":[["x",1],["x",`), /^Error: tenant snapshot: limits\[2\]\.leases\[1\]\[0\]: lease "x" appears twice$/],
      [text.slice(0, -1), /^Error: tenant snapshot: not JSON/],
      ['null', /^Error: tenant snapshot: \(root\): /],
    ];
    for (const [json, message] of cases) {
      assert.notEqual(json, text);
      assert.throws(() => parseTenantSnapshot(json), (err: unknown) => {
        assert.match(String(err), message);
        return true;
      });
    }
    const twice = JSON.stringify({ ...valid, reservations: [valid.reservations[0], valid.reservations[0]] });
    assert.throws(() => parseTenantSnapshot(twice), /^Error: tenant snapshot: reservations\[1\]\.id: reservation "a" appears twice$/);
  });
});
