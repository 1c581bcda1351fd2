/**
 * Bounds on restored snapshots (src/limiter/snapshot-bounds.ts): each clamp function alone, then
 * the limiter importing hostile values (a level of 1e300, a lease or entry dated 9e15) and a
 * tenant started in the conservative state. Values read from Redis, docs/security.md.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { compilePolicy } from '../../src/limiter/compiled-policy.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import {
  boundBucket,
  boundLeaseExpiry,
  boundReservation,
  boundSnapshot,
  boundWindowCount,
  boundWindowEntries,
  conservativeSnapshot,
  keepLatest,
  MAX_CLOCK_SKEW_MS,
  MAX_RESTORED_ENTRIES,
} from '../../src/limiter/snapshot-bounds.ts';
import type { ReservationSnapshot, TenantSnapshot } from '../../src/limiter/snapshot.ts';
import type { Policy } from '../../src/limiter/types.ts';

const NOW = 1_700_000_000_000;
const FAR = 9e15;

describe('clamp functions', () => {
  test('boundBucket: level into [−capacity, capacity] (unit·ms), refill time at most now + skew; in-range values kept exactly', () => {
    const full = 20_000 * 60_000;
    assert.deepEqual(boundBucket(1e300, NOW, 20_000, 60_000, NOW), { level: full, refilledAt: NOW, clamped: 1 });
    assert.deepEqual(boundBucket(-1e300, NOW, 20_000, 60_000, NOW), { level: -full, refilledAt: NOW, clamped: 1 });
    assert.deepEqual(boundBucket(5, FAR, 20_000, 60_000, NOW), { level: 5, refilledAt: NOW + MAX_CLOCK_SKEW_MS, clamped: 1 });
    assert.deepEqual(boundBucket(1e300, FAR, 20_000, 60_000, NOW), { level: full, refilledAt: NOW + MAX_CLOCK_SKEW_MS, clamped: 2 });
    for (const [level, at] of [
      [full, NOW],
      [-full, NOW - 1],
      [-3.5, NOW + MAX_CLOCK_SKEW_MS],
      [0, 0],
    ] as const) {
      assert.deepEqual(boundBucket(level, at, 20_000, 60_000, NOW), { level, refilledAt: at, clamped: 0 });
    }
  });

  test('boundWindowEntries: times at most now + skew (order kept), costs at most twice the limit', () => {
    const entries: [number, number, string][] = [
      [NOW - 10, 5, 'a'],
      [NOW + 10, 250, 'b'],
      [FAR, 7, 'c'],
      [FAR + 1, 1e300, 'd'],
    ];
    assert.deepEqual(boundWindowEntries(entries, 100, NOW), {
      entries: [
        [NOW - 10, 5, 'a'],
        [NOW + 10, 200, 'b'],
        [NOW + MAX_CLOCK_SKEW_MS, 7, 'c'],
        [NOW + MAX_CLOCK_SKEW_MS, 200, 'd'],
      ],
      clamped: 4,
    });
    assert.equal(boundWindowEntries([[NOW, 150, 'x']], 100, NOW).clamped, 0);
  });

  test('boundLeaseExpiry: at most now + leaseTtlMs', () => {
    assert.equal(boundLeaseExpiry(FAR, 30_000, NOW), NOW + 30_000);
    assert.equal(boundLeaseExpiry(NOW + 29_999, 30_000, NOW), NOW + 29_999);
  });

  test('boundReservation: expiry at most now + ttl, tokens and requests at most the largest capacity', () => {
    const r: ReservationSnapshot = { id: 'r', tokens: 1e300, requests: 1e9, expiresAt: FAR, settled: false, released: false, limits: ['t'] };
    const b = boundReservation(r, 60_000, 20_000, 10, NOW);
    assert.deepEqual(b, { reservation: { ...r, tokens: 20_000, requests: 10, expiresAt: NOW + 60_000 }, clamped: 3 });
    const ok = { ...r, tokens: 20_000, requests: 1, expiresAt: NOW + 60_000 };
    assert.equal(boundReservation(ok, 60_000, 20_000, 10, NOW).reservation, ok);
  });

  test('boundWindowCount: the oldest entries over the bound merged into one at the newest of their times, their costs summed; within it, the entries themselves', () => {
    const entries: [number, number, string][] = [
      [1, 1, 'a'],
      [2, 2, 'b'],
      [3, 3, 'c'],
      [4, 4, 'd'],
    ];
    assert.deepEqual(boundWindowCount(entries, 2), { entries: [[3, 6, ''], [4, 4, 'd']], clamped: 2 });
    assert.deepEqual(boundWindowCount(entries, 1), { entries: [[4, 10, '']], clamped: 3 });
    const same = boundWindowCount(entries, 4);
    assert.equal(same.entries, entries);
    assert.equal(same.clamped, 0);
  });

  test('keepLatest: the latest-expiring kept in their order, the count of the others dropped', () => {
    const items = [5, 1, 9, 3, 7];
    assert.deepEqual(keepLatest(items, 2, (x) => x), { items: [9, 7], clamped: 3 });
    assert.deepEqual(keepLatest(items, 3, (x) => x), { items: [5, 9, 7], clamped: 2 });
    assert.deepEqual(keepLatest(items, 0, (x) => x), { items: [], clamped: 5 });
    assert.equal(keepLatest(items, 5, (x) => x).items, items);
  });

  test('boundSnapshot bounds counts: leases to the semaphore limit, window entries and reservations to MAX_RESTORED_ENTRIES', () => {
    const c = compilePolicy({
      limits: [
        { name: 'requests/1m', kind: 'requests', limit: 1_000_000, windowMs: 60_000, algorithm: 'sliding_window' },
        { name: 'concurrent', kind: 'concurrent', limit: 4, leaseTtlMs: 30_000 },
      ],
    });
    const n = MAX_RESTORED_ENTRIES + 10;
    const reservation = (i: number): ReservationSnapshot => ({ id: `r${i}`, tokens: 0, requests: 1, expiresAt: NOW + 1 + i / 1_000, settled: false, released: false, limits: ['requests/1m'] });
    const { snapshot, clamped } = boundSnapshot(
      c,
      {
        v: 1,
        at: NOW,
        limits: [
          { name: 'requests/1m', algorithm: 'sliding_window', kind: 'requests', entries: Array.from({ length: n }, (_, i): [number, number, string] => [NOW - n + i, 1, `e${i}`]) },
          { name: 'concurrent', algorithm: 'semaphore', leases: Array.from({ length: 100 }, (_, i): [string, number] => [`l${i}`, NOW + 1_000 + ((i * 37) % 100)]) },
        ],
        reservations: Array.from({ length: n }, (_, i) => reservation(i)),
      },
      NOW,
    );
    // 11 entries merged into 1 (10 fewer), 96 leases and 10 reservations dropped.
    assert.equal(clamped, 10 + 96 + 10);
    const [window, semaphore] = snapshot.limits;
    assert.equal(window?.algorithm === 'sliding_window' ? window.entries.length : 0, MAX_RESTORED_ENTRIES);
    assert.deepEqual(window?.algorithm === 'sliding_window' ? window.entries[0] : undefined, [NOW - n + 10, 11, '']);
    assert.deepEqual(semaphore?.algorithm === 'semaphore' ? semaphore.leases.map(([, e]) => e - NOW - 1_000).sort((a, b) => a - b) : [], [96, 97, 98, 99]);
    assert.equal(snapshot.reservations.length, MAX_RESTORED_ENTRIES);
    assert.equal(snapshot.reservations[0]?.id, 'r10');
  });

  test('boundSnapshot returns the snapshot itself when nothing is out of range', () => {
    const c = compilePolicy(POLICY);
    const snap = conservativeSnapshot(c, NOW);
    assert.deepEqual(boundSnapshot(c, snap, NOW), { snapshot: snap, clamped: 0 });
  });
});

const POLICY: Policy = {
  limits: [
    { name: 'tokens/1m', kind: 'tokens', limit: 20_000, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'requests/1m', kind: 'requests', limit: 100, windowMs: 60_000, algorithm: 'sliding_window' },
    { name: 'concurrent', kind: 'concurrent', limit: 1, leaseTtlMs: 30_000 },
  ],
};

function limiterAt(now = NOW): { limiter: Limiter; clock: ManualClock } {
  const clock = new ManualClock(now);
  return { clock, limiter: new Limiter({ clock, policyFor: () => POLICY }) };
}

/** Requests of `tokens` admitted out of `n` (each settled and released at once). */
function admitted(limiter: Limiter, n: number, tokens: number, prefix = 'q'): number {
  let ok = 0;
  for (let i = 0; i < n; i++) {
    if (limiter.acquire('t', { id: `${prefix}${i}`, tokens }).ok) {
      ok++;
      limiter.settle('t', `${prefix}${i}`, tokens);
      limiter.release('t', `${prefix}${i}`);
    }
  }
  return ok;
}

describe('Limiter.importTenant clamps hostile values', () => {
  test('a bucket level of 1e300: 100 requests of 5,000 tokens, exactly 4 admitted against 20k (was 100)', () => {
    const { limiter } = limiterAt();
    const snap: TenantSnapshot = {
      v: 1,
      at: NOW,
      limits: [{ name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 1e300, refilledAt: NOW }],
      reservations: [],
    };
    assert.equal(limiter.importTenant('t', snap), 1);
    assert.equal(admitted(limiter, 100, 5_000), 4);
  });

  test('a lease dated 9e15 frees its slot one lease TTL from the import (was never)', () => {
    const { limiter, clock } = limiterAt();
    const snap: TenantSnapshot = { v: 1, at: NOW, limits: [{ name: 'concurrent', algorithm: 'semaphore', leases: [['ghost', FAR]] }], reservations: [] };
    assert.equal(limiter.importTenant('t', snap), 1);
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 1 }).ok, false);
    clock.advance(29_999);
    assert.equal(limiter.acquire('t', { id: 'b', tokens: 1 }).ok, false);
    clock.advance(1);
    assert.equal(limiter.acquire('t', { id: 'c', tokens: 1 }).ok, true);
  });

  test('a window entry and a bucket refill time dated 9e15 hold the tenant for at most a window plus the skew (was forever)', () => {
    const { limiter, clock } = limiterAt();
    const snap: TenantSnapshot = {
      v: 1,
      at: NOW,
      limits: [
        { name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 0, refilledAt: FAR },
        { name: 'requests/1m', algorithm: 'sliding_window', kind: 'requests', entries: [[FAR, 1e300, 'x']] },
      ],
      reservations: [],
    };
    assert.equal(limiter.importTenant('t', snap), 3);
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 1 }).ok, false);
    clock.advance(60_000 + MAX_CLOCK_SKEW_MS);
    const r = limiter.acquire('t', { id: 'b', tokens: 1 });
    assert.equal(r.ok, true);
    // The bucket refilled for one window since now + skew: full again.
    assert.deepEqual(
      r.limits.map((l) => [l.name, l.remaining]),
      [
        ['tokens/1m', 19_999],
        ['requests/1m', 99],
        ['concurrent', 0],
      ],
    );
  });

  test('a reservation of 1e300 tokens expiring at 9e15: its tokens clamped to the capacity, gone after the reservation TTL', () => {
    const { limiter, clock } = limiterAt();
    const snap: TenantSnapshot = {
      v: 1,
      at: NOW,
      limits: [{ name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 0, refilledAt: NOW }],
      reservations: [{ id: 'big', tokens: 1e300, requests: 1, expiresAt: FAR, settled: false, released: true, limits: ['tokens/1m'] }],
    };
    assert.equal(limiter.importTenant('t', snap), 2);
    const exported = limiter.exportTenant('t');
    assert.deepEqual(
      exported?.reservations.map((r) => [r.tokens, r.expiresAt]),
      [[20_000, NOW + 30_000]],
    );
    clock.advance(30_000);
    assert.deepEqual(limiter.settle('t', 'big', 0), { settled: false, deltaTokens: 0 });
  });
});

describe('Limiter.importConservative (a corrupt stored state)', () => {
  test('every requests and tokens limit starts used up: nothing admitted until it refills or slides, all of it after one window', () => {
    const { limiter, clock } = limiterAt();
    limiter.importConservative('t');
    assert.deepEqual(
      limiter.peek('t').map((l) => [l.name, l.remaining]),
      [
        ['tokens/1m', 0],
        ['requests/1m', 0],
        ['concurrent', 1],
      ],
    );
    const refused = limiter.acquire('t', { id: 'a', tokens: 1 });
    assert.equal(refused.ok, false);
    assert.equal(refused.ok ? 0 : refused.retryAfterMs, 60_000);
    clock.advance(60_000);
    assert.equal(admitted(limiter, 100, 5_000), 4);
  });

  test('the conservative snapshot: a bucket at level 0 now, a window with one entry of its limit now, no semaphore', () => {
    assert.deepEqual(conservativeSnapshot(compilePolicy(POLICY), NOW), {
      v: 1,
      at: NOW,
      limits: [
        { name: 'tokens/1m', algorithm: 'token_bucket', kind: 'tokens', limit: 20_000, windowMs: 60_000, level: 0, refilledAt: NOW },
        { name: 'requests/1m', algorithm: 'sliding_window', kind: 'requests', entries: [[NOW, 100, '']] },
      ],
      reservations: [],
    });
  });
});
