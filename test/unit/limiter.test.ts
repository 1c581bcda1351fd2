import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/clock.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { AcquireResult, LimitSpec, LimitState, Policy } from '../../src/limiter/index.ts';

const MIN = 60_000;

function bucket(name: string, kind: 'requests' | 'tokens', limit: number, windowMs: number, model?: string): LimitSpec {
  return { name, kind, limit, windowMs, algorithm: 'token_bucket', ...(model === undefined ? {} : { model }) };
}
function window(name: string, kind: 'requests' | 'tokens', limit: number, windowMs: number, model?: string): LimitSpec {
  return { name, kind, limit, windowMs, algorithm: 'sliding_window', ...(model === undefined ? {} : { model }) };
}
function concurrent(name: string, limit: number, leaseTtlMs: number): LimitSpec {
  return { name, kind: 'concurrent', limit, leaseTtlMs };
}

function setup(limits: LimitSpec[], concurrencyRetryHintMs?: number) {
  const clock = new ManualClock(1_700_000_000_000);
  const policies = new Map<string, Policy>([['t', { limits }]]);
  const limiter = new Limiter({
    clock,
    policyFor: (tenant) => policies.get(tenant),
    ...(concurrencyRetryHintMs === undefined ? {} : { concurrencyRetryHintMs }),
  });
  let n = 0;
  const acquire = (tokens: number, extra: { id?: string; model?: string; requests?: number; floor?: number } = {}) =>
    limiter.acquire('t', { id: extra.id ?? `r${n++}`, tokens, ...extra });
  const remaining = (name: string, model?: string): number => {
    const s = limiter.peek('t', model).find((l) => l.name === name);
    assert.ok(s, `no limit ${name}`);
    return s.remaining;
  };
  return { clock, limiter, policies, acquire, remaining };
}

function refused(r: AcquireResult) {
  assert.equal(r.ok, false, 'expected a refusal');
  if (r.ok) throw new Error('unreachable');
  return r;
}
function byName(limits: readonly LimitState[], name: string): LimitState {
  const s = limits.find((l) => l.name === name);
  assert.ok(s);
  return s;
}

describe('token bucket', () => {
  test('admits to the limit, then refuses with the exact wait; refills over time', () => {
    const { clock, acquire, remaining } = setup([bucket('req/10s', 'requests', 10, 10_000)]);
    for (let i = 0; i < 10; i++) {
      const r = acquire(0);
      assert.equal(r.ok, true);
      assert.deepEqual(r.limits, [{ name: 'req/10s', kind: 'requests', limit: 10, remaining: 9 - i, resetMs: (i + 1) * 1000 }]);
    }
    const r = refused(acquire(0));
    assert.equal(r.reason, 'limited');
    assert.equal(r.limit, 'req/10s');
    assert.equal(r.kind, 'requests');
    assert.equal(r.retryAfterMs, 1000);
    clock.advance(999);
    assert.equal(refused(acquire(0)).retryAfterMs, 1);
    clock.advance(1);
    assert.equal(acquire(0).ok, true);
    clock.advance(5_500);
    assert.equal(remaining('req/10s'), 5);
    clock.advance(60_000);
    assert.equal(remaining('req/10s'), 10);
  });

  test('settle refunds (capped at capacity), debits below zero, and is idempotent', () => {
    const { clock, limiter, acquire, remaining } = setup([bucket('tok/1m', 'tokens', 1000, MIN)]);
    assert.equal(acquire(600, { id: 'a' }).ok, true);
    assert.equal(remaining('tok/1m'), 400);
    const r = refused(acquire(500));
    assert.equal(r.retryAfterMs, 6000); // 100 tokens at 1000/60000 per ms
    assert.deepEqual(limiter.settle('t', 'a', 200), { settled: true, deltaTokens: -400 });
    assert.equal(remaining('tok/1m'), 800);
    assert.deepEqual(limiter.settle('t', 'a', 0), { settled: false, deltaTokens: 0 });
    assert.equal(remaining('tok/1m'), 800);

    // debit: level 800 − 600 − 900 = −700
    assert.equal(acquire(600, { id: 'b' }).ok, true);
    assert.deepEqual(limiter.settle('t', 'b', 1500), { settled: true, deltaTokens: 900 });
    assert.equal(remaining('tok/1m'), 0);
    assert.equal(refused(acquire(1)).retryAfterMs, 701 * 60);
    assert.equal(byName(limiter.peek('t'), 'tok/1m').resetMs, 1700 * 60);

    // a refund never lifts the bucket above capacity
    clock.advance(10 * MIN);
    assert.equal(acquire(100, { id: 'c' }).ok, true);
    clock.advance(MIN);
    assert.deepEqual(limiter.settle('t', 'c', 0), { settled: true, deltaTokens: -100 });
    assert.equal(remaining('tok/1m'), 1000);
    assert.equal(byName(limiter.peek('t'), 'tok/1m').resetMs, 0);
    assert.equal(acquire(1000).ok, true);
    assert.equal(refused(acquire(1)).retryAfterMs, 60);
  });

  test('too_large is refused at once and changes nothing', () => {
    const { acquire, remaining } = setup([bucket('req/1m', 'requests', 5, MIN), bucket('tok/1m', 'tokens', 1000, MIN)]);
    const r = refused(acquire(1001));
    assert.equal(r.reason, 'too_large');
    assert.equal(r.limit, 'tok/1m');
    assert.equal(r.retryAfterMs, 0);
    assert.equal(remaining('req/1m'), 5);
    const q = refused(acquire(1, { requests: 6 }));
    assert.equal(q.reason, 'too_large');
    assert.equal(q.limit, 'req/1m');
    assert.equal(acquire(1000).ok, true);
  });
});

describe('sliding window', () => {
  test('admits to the limit, refuses with the exact wait, rolls as entries leave', () => {
    const { clock, acquire, remaining } = setup([window('tok/1m', 'tokens', 1000, MIN)]);
    assert.equal(acquire(400).ok, true);
    clock.advance(10_000);
    assert.equal(acquire(400).ok, true);
    clock.advance(10_000);
    const r = refused(acquire(300));
    assert.equal(r.reason, 'limited');
    assert.equal(r.retryAfterMs, 40_000); // the first entry (400) leaves at t0 + 60 s
    assert.deepEqual(r.limits, [{ name: 'tok/1m', kind: 'tokens', limit: 1000, remaining: 200, resetMs: 50_000 }]);
    const ok = acquire(200);
    assert.equal(ok.ok, true);
    assert.deepEqual(ok.limits, [{ name: 'tok/1m', kind: 'tokens', limit: 1000, remaining: 0, resetMs: 60_000 }]);
    // 600 needs the first two entries gone: t0 + 10 s + 60 s
    assert.equal(refused(acquire(600)).retryAfterMs, 50_000);
    clock.advance(39_999);
    assert.equal(refused(acquire(300)).retryAfterMs, 1);
    clock.advance(1);
    assert.equal(remaining('tok/1m'), 400);
    assert.equal(acquire(300).ok, true);
    clock.advance(MIN);
    assert.equal(remaining('tok/1m'), 1000);
  });

  test('settle adjusts the entry at its timestamp: refund, debit above the limit, idempotent', () => {
    const { clock, limiter, acquire, remaining } = setup([window('tok/1m', 'tokens', 1000, MIN)]);
    assert.equal(acquire(500, { id: 'a' }).ok, true);
    clock.advance(30_000);
    assert.equal(acquire(500, { id: 'b' }).ok, true);
    assert.deepEqual(limiter.settle('t', 'a', 100), { settled: true, deltaTokens: -400 });
    assert.equal(remaining('tok/1m'), 400);
    assert.deepEqual(limiter.settle('t', 'a', 900), { settled: false, deltaTokens: 0 });
    assert.equal(remaining('tok/1m'), 400);
    // debit on b: window sum 100 + 1500 = 1600 > 1000
    assert.deepEqual(limiter.settle('t', 'b', 1500), { settled: true, deltaTokens: 1000 });
    assert.equal(remaining('tok/1m'), 0);
    // a (100) leaves at +60 s, sum 1500: still over; b leaves at +90 s
    assert.equal(refused(acquire(1)).retryAfterMs, 60_000);
    clock.advance(30_000); // a has left: the refund was applied at a's timestamp
    assert.equal(refused(acquire(1)).retryAfterMs, 30_000);
    clock.advance(30_000);
    assert.equal(remaining('tok/1m'), 1000);
  });

  test('a settle after the entry left the window does not touch the current window', () => {
    const { clock, limiter, acquire, remaining } = setup([window('tok/1m', 'tokens', 1000, MIN)]);
    assert.equal(acquire(500, { id: 'a' }).ok, true);
    clock.advance(MIN);
    assert.equal(acquire(300, { id: 'b' }).ok, true);
    assert.deepEqual(limiter.settle('t', 'a', 2000), { settled: true, deltaTokens: 1500 });
    assert.equal(remaining('tok/1m'), 700);
  });

  test('too_large', () => {
    const { acquire } = setup([window('req/1m', 'requests', 3, MIN)]);
    const r = refused(acquire(0, { requests: 4 }));
    assert.equal(r.reason, 'too_large');
    assert.equal(r.kind, 'requests');
    assert.equal(r.retryAfterMs, 0);
  });
});

describe('concurrency', () => {
  test('refuses when full with min(hint, earliest lease expiry); release is idempotent', () => {
    const { clock, limiter, acquire } = setup([concurrent('conc', 2, 30_000)]);
    assert.equal(acquire(0, { id: 'a' }).ok, true);
    clock.advance(5_000);
    assert.equal(acquire(0, { id: 'b' }).ok, true);
    const r = refused(acquire(0));
    assert.equal(r.kind, 'concurrent');
    assert.equal(r.retryAfterMs, 1000);
    assert.deepEqual(r.limits, [{ name: 'conc', kind: 'concurrent', limit: 2, remaining: 0, resetMs: 30_000 }]);
    clock.advance(24_500); // a expires in 500 ms
    assert.equal(refused(acquire(0)).retryAfterMs, 500);
    assert.equal(limiter.release('t', 'b'), true);
    assert.equal(limiter.release('t', 'b'), false);
    assert.equal(acquire(0, { id: 'c' }).ok, true);
    assert.equal(refused(acquire(0)).retryAfterMs, 500);
  });

  test('an expired lease frees its slot; renew extends it by the TTL from now', () => {
    const { clock, limiter, acquire } = setup([concurrent('conc', 1, 30_000)], 100_000);
    assert.equal(acquire(0, { id: 'a' }).ok, true);
    clock.advance(20_000);
    assert.equal(limiter.renew('t', 'a'), true); // now expires at +50 s
    clock.advance(15_000);
    assert.equal(refused(acquire(0)).retryAfterMs, 15_000);
    clock.advance(14_999);
    assert.equal(refused(acquire(0)).retryAfterMs, 1);
    clock.advance(1);
    assert.equal(limiter.renew('t', 'a'), false);
    assert.equal(limiter.release('t', 'a'), false);
    assert.equal(acquire(0, { id: 'b' }).ok, true);
  });
});

describe('Limiter', () => {
  test('scenario: requests 100/1m + tokens 300/1m, three acquires of 150 tokens', () => {
    const { acquire } = setup([bucket('requests/1m', 'requests', 100, MIN), bucket('tokens/1m', 'tokens', 300, MIN)]);
    assert.equal(acquire(150).ok, true);
    const second = acquire(150);
    assert.equal(second.ok, true);
    assert.equal(byName(second.limits, 'tokens/1m').remaining, 0);
    assert.equal(byName(second.limits, 'requests/1m').remaining, 98);
    const third = refused(acquire(150));
    assert.equal(third.reason, 'limited');
    assert.equal(third.limit, 'tokens/1m');
    assert.equal(third.kind, 'tokens');
    assert.equal(third.retryAfterMs, 30_000);
    assert.equal(byName(third.limits, 'requests/1m').remaining, 98);
  });

  for (const algorithm of ['sliding_window', 'token_bucket'] as const) {
    test(`scenario: tokens 10k/1m, 50 tokens a second for 3 minutes settled at 50 (${algorithm})`, () => {
      const spec = algorithm === 'sliding_window' ? window('tokens/1m', 'tokens', 10_000, MIN) : bucket('tokens/1m', 'tokens', 10_000, MIN);
      const { clock, limiter, acquire } = setup([spec]);
      for (let s = 0; s < 180; s++) {
        if (s > 0) clock.advance(1000);
        const r = acquire(50, { id: `q${s}` });
        assert.equal(r.ok, true);
        const expected = algorithm === 'token_bucket' ? 9_950 : 10_000 - 50 * Math.min(s + 1, 60);
        assert.equal(byName(r.limits, 'tokens/1m').remaining, expected, `second ${s}`);
        if (s >= 59 && algorithm === 'sliding_window') assert.equal(expected, 7_000);
        assert.deepEqual(limiter.settle('t', `q${s}`, 50), { settled: true, deltaTokens: 0 });
        assert.equal(limiter.release('t', `q${s}`), true);
      }
    });
  }

  test('all-or-nothing: a refusal by one limit takes nothing from the others', () => {
    const { acquire, remaining } = setup([bucket('req/1m', 'requests', 5, MIN), window('tok/1m', 'tokens', 100, MIN)]);
    assert.equal(acquire(80).ok, true);
    const r = refused(acquire(30));
    assert.equal(r.limit, 'tok/1m');
    assert.equal(byName(r.limits, 'req/1m').remaining, 4);
    assert.equal(remaining('req/1m'), 4);
    assert.equal(remaining('tok/1m'), 20);
    assert.equal(acquire(20).ok, true);
    assert.equal(remaining('req/1m'), 3);
  });

  test('a concurrency refusal uses no request and no tokens', () => {
    const { acquire, remaining } = setup([
      bucket('req/1m', 'requests', 10, MIN),
      window('tok/1m', 'tokens', 1000, MIN),
      concurrent('conc', 1, 30_000),
    ]);
    assert.equal(acquire(100).ok, true);
    const r = refused(acquire(100));
    assert.equal(r.limit, 'conc');
    assert.equal(r.kind, 'concurrent');
    assert.equal(remaining('req/1m'), 9);
    assert.equal(remaining('tok/1m'), 900);
  });

  test('retryAfterMs is the max over limits; the first refusing limit in policy order is named', () => {
    const { acquire } = setup([bucket('req/10s', 'requests', 1, 10_000), bucket('tok/1m', 'tokens', 100, MIN)]);
    assert.equal(acquire(100).ok, true);
    const r = refused(acquire(50));
    assert.equal(r.limit, 'req/10s');
    assert.equal(r.retryAfterMs, 30_000); // tokens: 50 at 100/60000 per ms; requests: 10 000
  });

  test('model-scoped limits apply only to their model', () => {
    const { acquire, limiter } = setup([bucket('req/1m', 'requests', 100, MIN), bucket('tok-4o/1m', 'tokens', 100, MIN, 'gpt-4o')]);
    assert.equal(acquire(100, { model: 'gpt-4o' }).ok, true);
    const r = refused(acquire(1, { model: 'gpt-4o' }));
    assert.equal(r.limit, 'tok-4o/1m');
    const other = acquire(5000, { model: 'gpt-4o-mini' });
    assert.equal(other.ok, true);
    assert.deepEqual(other.limits.map((l) => l.name), ['req/1m']);
    assert.equal(acquire(5000).ok, true);
    assert.deepEqual(limiter.peek('t', 'gpt-4o').map((l) => [l.name, l.remaining]), [['req/1m', 97], ['tok-4o/1m', 0]]);
  });

  test('duplicate open id; the id is free again once settled and released', () => {
    const { limiter, acquire } = setup([bucket('req/1m', 'requests', 10, MIN)]);
    assert.equal(acquire(1, { id: 'x' }).ok, true);
    const d = refused(acquire(1, { id: 'x' }));
    assert.equal(d.reason, 'duplicate');
    assert.equal(d.retryAfterMs, 0);
    assert.equal(byName(d.limits, 'req/1m').remaining, 9);
    limiter.settle('t', 'x', 1);
    assert.equal(refused(acquire(1, { id: 'x' })).reason, 'duplicate');
    limiter.release('t', 'x');
    assert.equal(acquire(1, { id: 'x' }).ok, true);
  });

  test('an open reservation expires after 10 min without a concurrency limit; settle then changes nothing', () => {
    const { clock, limiter, acquire, remaining } = setup([window('tok/1h', 'tokens', 1000, 3_600_000)]);
    assert.equal(acquire(500, { id: 'a' }).ok, true);
    clock.advance(599_999);
    assert.equal(acquire(100, { id: 'b' }).ok, true);
    clock.advance(1);
    assert.deepEqual(limiter.settle('t', 'a', 0), { settled: false, deltaTokens: 0 });
    assert.equal(remaining('tok/1h'), 400);
    assert.deepEqual(limiter.settle('t', 'b', 0), { settled: true, deltaTokens: -100 });
    assert.equal(remaining('tok/1h'), 500);
  });

  test('reservations expire with the concurrency lease TTL', () => {
    const { clock, limiter, acquire } = setup([bucket('tok/1m', 'tokens', 1000, MIN), concurrent('conc', 5, 30_000)]);
    assert.equal(acquire(500, { id: 'a' }).ok, true);
    clock.advance(30_000);
    assert.deepEqual(limiter.settle('t', 'a', 0), { settled: false, deltaTokens: 0 });
    assert.equal(acquire(500, { id: 'a' }).ok, true);
  });

  test('a tenant without a policy is unlimited and gets no state', () => {
    const { limiter } = setup([bucket('req/1m', 'requests', 1, MIN)]);
    assert.deepEqual(limiter.acquire('nobody', { id: 'a', tokens: 1e9 }), { ok: true, limits: [] });
    assert.deepEqual(limiter.peek('nobody'), []);
    assert.equal(limiter.size, 0);
  });

  test('invalid numbers are faults', () => {
    const { limiter, acquire } = setup([bucket('req/1m', 'requests', 1, MIN)]);
    assert.throws(() => acquire(-1), RangeError);
    assert.throws(() => acquire(Number.NaN), RangeError);
    assert.equal(acquire(1, { id: 'a' }).ok, true);
    assert.throws(() => limiter.settle('t', 'a', -5), RangeError);
  });

  test('a policy reload keeps usage by name, clamped to the new limit; open reservations still settle', () => {
    const { limiter, policies, acquire, remaining } = setup([bucket('tok/1m', 'tokens', 1000, MIN), window('req/1m', 'requests', 10, MIN)]);
    assert.equal(acquire(600, { id: 'a' }).ok, true);
    assert.equal(acquire(0, { id: 'b' }).ok, true);
    policies.set('t', { limits: [bucket('tok/1m', 'tokens', 500, MIN), window('req/1m', 'requests', 5, MIN), concurrent('conc', 1, 10_000)] });
    assert.equal(remaining('tok/1m'), 0); // 600 used, clamped to 500
    assert.equal(remaining('req/1m'), 3);
    assert.equal(remaining('conc'), 1);
    policies.set('t', { limits: [bucket('tok/1m', 'tokens', 2000, MIN), bucket('req/1m', 'requests', 10, MIN)] });
    assert.equal(remaining('tok/1m'), 1500); // 500 used carries over
    assert.equal(remaining('req/1m'), 8); // window → bucket: 2 used
    assert.deepEqual(limiter.settle('t', 'a', 100), { settled: true, deltaTokens: -500 });
    assert.equal(remaining('tok/1m'), 2000);
  });

  test('a reload keeps held leases; a release after it frees the slot', () => {
    const { limiter, policies, acquire, remaining } = setup([concurrent('conc', 2, 30_000), bucket('tok/1m', 'tokens', 100, MIN)]);
    assert.equal(acquire(10, { id: 'a' }).ok, true);
    assert.equal(acquire(10, { id: 'b' }).ok, true);
    policies.set('t', { limits: [bucket('tok/1m', 'tokens', 100, MIN), concurrent('conc', 3, 30_000)] });
    assert.equal(remaining('conc'), 1);
    assert.equal(remaining('tok/1m'), 80);
    assert.equal(limiter.release('t', 'a'), true);
    assert.equal(remaining('conc'), 2);
    assert.deepEqual(limiter.settle('t', 'b', 0), { settled: true, deltaTokens: -10 });
    assert.equal(remaining('tok/1m'), 90);
  });

  test('renew keeps a reservation settleable past its TTL', () => {
    const { clock, limiter, acquire, remaining } = setup([bucket('tok/1m', 'tokens', 1000, MIN), concurrent('conc', 1, 30_000)]);
    assert.equal(acquire(500, { id: 'a' }).ok, true);
    clock.advance(20_000);
    assert.equal(limiter.renew('t', 'a'), true);
    clock.advance(20_000); // 40 s after admission, 20 s after renew
    assert.deepEqual(limiter.settle('t', 'a', 100), { settled: true, deltaTokens: -400 });
    assert.equal(remaining('conc'), 0);
    assert.equal(limiter.release('t', 'a'), true);
    assert.equal(limiter.renew('t', 'a'), false);
    assert.equal(remaining('conc'), 1);
  });

  test('sweep drops idle tenants only', () => {
    const { clock, limiter, acquire } = setup([bucket('req/1m', 'requests', 10, MIN), window('tok/1m', 'tokens', 1000, MIN), concurrent('conc', 2, 30_000)]);
    assert.equal(acquire(100, { id: 'a' }).ok, true);
    assert.equal(limiter.size, 1);
    assert.equal(limiter.settle('t', 'a', 100).settled, true);
    assert.equal(limiter.release('t', 'a'), true);
    clock.advance(MIN - 1);
    assert.equal(limiter.sweep(), 0);
    clock.advance(1);
    assert.equal(limiter.sweep(), 1);
    assert.equal(limiter.size, 0);
    assert.equal(byName(acquire(100).limits, 'tok/1m').remaining, 900);
  });
});

describe('floors (a lower priority tier leaves floor × limit to higher ones)', () => {
  test('a floored request must leave floor × limit of every requests/tokens limit; concurrency is not floored', () => {
    const { acquire, clock, remaining } = setup([bucket('tokens/1m', 'tokens', 100, 60_000), concurrent('concurrent', 1, 60_000)]);
    // 80 + a floor of 20 fits the full bucket exactly.
    assert.equal(acquire(80, { floor: 0.2, id: 'b1' }).ok, true);
    assert.equal(remaining('tokens/1m'), 20);
    // Concurrency 1 is held by b1: the next refusal names it whatever the floor.
    const r = refused(acquire(1, { floor: 0.2 }));
    assert.equal(r.limit, 'tokens/1m');
    // 1 more token with 20 left behind needs 21: 1 token of refill = 600 ms at 100 tokens / 60 s;
    // the wait is the longest of the refusing limits: the held slot's 1 s hint.
    assert.equal(r.retryAfterMs, 1_000);
    clock.advance(600);
    const r2 = refused(acquire(1, { floor: 0.2 }));
    assert.equal(r2.limit, 'concurrent', 'the tokens fit now; the slot does not');
  });
  test('without a floor the last 20% is taken; a floored request larger than limit − floor is too_large', () => {
    const { acquire, remaining } = setup([bucket('tokens/1m', 'tokens', 100, 60_000)]);
    assert.equal(acquire(80, { floor: 0.2 }).ok, true);
    assert.equal(refused(acquire(1, { floor: 0.2 })).reason, 'limited');
    assert.equal(acquire(20).ok, true);
    assert.equal(remaining('tokens/1m'), 0);
    assert.equal(refused(acquire(81, { floor: 0.2 })).reason, 'too_large');
    assert.throws(() => acquire(1, { floor: 1 }), /floor must be a fraction in \[0, 1\)/);
  });
  test('sliding windows are floored the same way', () => {
    const { acquire, remaining } = setup([window('requests/1m', 'requests', 10, 60_000)]);
    for (let i = 0; i < 8; i++) assert.equal(acquire(0, { floor: 0.2 }).ok, true);
    assert.equal(refused(acquire(0, { floor: 0.2 })).reason, 'limited');
    assert.equal(remaining('requests/1m'), 2);
    assert.equal(acquire(0).ok, true);
  });
});

describe('waitMs (how long a request like this would wait, taking nothing)', () => {
  test('0 when it fits, the exact refill time when it does not, Infinity when it never can; nothing is taken', () => {
    const { acquire, limiter, remaining } = setup([bucket('tokens/1m', 'tokens', 100, 60_000)]);
    assert.equal(limiter.waitMs('t', { tokens: 10 }), 0, 'a fresh tenant');
    assert.equal(acquire(100).ok, true);
    assert.equal(limiter.waitMs('t', { tokens: 10 }), 6_000);
    assert.equal(limiter.waitMs('t', { tokens: 10, floor: 0.2 }), 18_000, 'with a floor: 30 tokens of refill');
    assert.equal(limiter.waitMs('t', { tokens: 101 }), Infinity);
    assert.equal(remaining('tokens/1m'), 0);
    assert.equal(limiter.waitMs('nobody', { tokens: 1e9 }), 0, 'a tenant without limits');
  });
});
