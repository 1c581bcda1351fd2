import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ManualClock } from '../../src/clock.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Algorithm, LimitSpec, Policy } from '../../src/limiter/index.ts';

type Op =
  | { readonly t: 'advance'; readonly ms: number }
  | { readonly t: 'acquire'; readonly cost: number }
  | { readonly t: 'settle'; readonly pick: number; readonly actual: number };

interface Admission {
  readonly seq: number;
  readonly time: number;
  readonly id: string;
  readonly reserved: number;
  /** Cost after every settle that the limiter applied. */
  final: number;
  /** Positive settle delta, 0 otherwise. */
  debit: number;
  settled: boolean;
}
interface Settlement {
  readonly seq: number;
  readonly time: number;
  readonly delta: number;
}

/** Open reservations live 10 min without a concurrency limit (see DEFAULT_RESERVATION_TTL_MS). */
const RESERVATION_TTL_MS = 600_000;

const caseArb = fc.record({
  limit: fc.integer({ min: 1, max: 60 }),
  windowMs: fc.integer({ min: 1_000, max: 120_000 }),
  ops: fc.array(
    fc.oneof(
      fc.record({
        t: fc.constant('advance' as const),
        ms: fc.oneof(fc.integer({ min: 0, max: 3_000 }), fc.integer({ min: 0, max: 90_000 })),
      }),
      fc.record({ t: fc.constant('acquire' as const), cost: fc.integer({ min: 0, max: 60 }) }),
      fc.record({ t: fc.constant('settle' as const), pick: fc.nat(), actual: fc.integer({ min: 0, max: 120 }) }),
    ),
    { minLength: 10, maxLength: 150, size: 'max' },
  ),
});

/**
 * Plays `ops` against a single `tokens` limit. Every refusal is checked for an exact retry:
 * the same acquire 1 ms before `retryAfterMs` is refused, at `retryAfterMs` it is admitted.
 */
function play(algorithm: Algorithm, limit: number, windowMs: number, ops: readonly Op[]) {
  const clock = new ManualClock(1_700_000_000_000);
  const spec: LimitSpec = { name: 'tok', kind: 'tokens', limit, windowMs, algorithm };
  const policy: Policy = { limits: [spec] };
  const limiter = new Limiter({ clock, policyFor: () => policy });
  const admissions: Admission[] = [];
  const settlements: Settlement[] = [];
  let seq = 0;
  let n = 0;

  const admit = (cost: number): boolean => {
    const id = `r${n++}`;
    const r = limiter.acquire('t', { id, tokens: cost });
    if (r.ok) {
      admissions.push({ seq: seq++, time: clock.now(), id, reserved: cost, final: cost, debit: 0, settled: false });
      return true;
    }
    return false;
  };

  for (const op of ops) {
    if (op.t === 'advance') {
      clock.advance(op.ms);
    } else if (op.t === 'acquire') {
      const cost = Math.min(op.cost, limit);
      if (admit(cost)) continue;
      const r = limiter.acquire('t', { id: 'probe', tokens: cost });
      assert.equal(r.ok, false);
      if (r.ok) continue;
      assert.equal(r.reason, 'limited');
      assert.ok(r.retryAfterMs >= 1, `retryAfterMs ${r.retryAfterMs}`);
      clock.advance(r.retryAfterMs - 1);
      assert.equal(admit(cost), false, `admitted 1 ms before retryAfterMs=${r.retryAfterMs}`);
      clock.advance(1);
      assert.equal(admit(cost), true, `refused at retryAfterMs=${r.retryAfterMs}`);
    } else if (admissions.length > 0) {
      const a = admissions[op.pick % admissions.length] as Admission;
      const res = limiter.settle('t', a.id, op.actual);
      const expected = !a.settled && clock.now() < a.time + RESERVATION_TTL_MS;
      assert.equal(res.settled, expected);
      if (!expected) {
        assert.deepEqual(res, { settled: false, deltaTokens: 0 });
        continue;
      }
      const delta = op.actual - a.reserved;
      assert.equal(res.deltaTokens, delta);
      a.settled = true;
      // The window adjusts the entry only while it is in the window (at its timestamp).
      if (algorithm === 'token_bucket' || clock.now() < a.time + windowMs) a.final += delta;
      if (delta > 0) a.debit = delta;
      settlements.push({ seq: seq++, time: clock.now(), delta });
    }
  }
  return { admissions, settlements };
}

describe('limiter properties', () => {
  test('sliding window: no window of windowMs ending at an admission holds more than limit + its debits', () => {
    fc.assert(
      fc.property(caseArb, ({ limit, windowMs, ops }) => {
        const { admissions } = play('sliding_window', limit, windowMs, ops);
        for (const b of admissions) {
          let sum = 0;
          let debits = 0;
          for (const a of admissions) {
            if (a.time > b.time - windowMs && a.time <= b.time) {
              sum += a.final;
              debits += a.debit;
            }
          }
          assert.ok(sum <= limit + debits, `window ending ${b.time}: ${sum} > ${limit} + ${debits}`);
        }
      }),
      { numRuns: 400 },
    );
  });

  test('token bucket: over any (a, b] ending at an admission, net charge ≤ limit + rate × (b − a)', () => {
    // A token bucket's guarantee is one full bucket plus the refill, so a window of windowMs
    // may carry up to 2 × limit; this checks that exact bound, with a from b − windowMs up to b.
    fc.assert(
      fc.property(caseArb, ({ limit, windowMs, ops }) => {
        const { admissions, settlements } = play('token_bucket', limit, windowMs, ops);
        const times = [...new Set([...admissions.map((a) => a.time), ...settlements.map((s) => s.time)])];
        for (const b of admissions) {
          const starts = [b.time - windowMs, ...times.filter((t) => t >= b.time - windowMs && t < b.time)];
          for (const start of starts) {
            let net = 0;
            for (const a of admissions) if (a.time > start && a.seq <= b.seq) net += a.reserved;
            for (const s of settlements) if (s.time > start && s.seq <= b.seq) net += s.delta;
            // net ≤ limit + (limit / windowMs) × (b − start), in integers
            assert.ok(
              net * windowMs <= limit * windowMs + limit * (b.time - start),
              `(${start}, ${b.time}]: net ${net} > ${limit} + ${limit}/${windowMs} × ${b.time - start}`,
            );
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  test('a refusal changes nothing (all-or-nothing over a bucket, a window and a semaphore)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ ms: fc.integer({ min: 0, max: 20_000 }), tokens: fc.integer({ min: 0, max: 100 }), release: fc.boolean() }), { maxLength: 80 }),
        (steps) => {
          const clock = new ManualClock(0);
          const policy: Policy = {
            limits: [
              { name: 'req', kind: 'requests', limit: 5, windowMs: 60_000, algorithm: 'token_bucket' },
              { name: 'tok', kind: 'tokens', limit: 300, windowMs: 60_000, algorithm: 'sliding_window' },
              { name: 'conc', kind: 'concurrent', limit: 2, leaseTtlMs: 45_000 },
            ],
          };
          const limiter = new Limiter({ clock, policyFor: () => policy });
          let n = 0;
          for (const s of steps) {
            clock.advance(s.ms);
            const before = limiter.peek('t');
            const id = `r${n++}`;
            const r = limiter.acquire('t', { id, tokens: s.tokens });
            if (!r.ok) {
              assert.deepEqual(r.limits, before);
              assert.deepEqual(limiter.peek('t'), before);
              assert.equal(r.retryAfterMs > 0, true);
            } else if (s.release) {
              limiter.release('t', id);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
