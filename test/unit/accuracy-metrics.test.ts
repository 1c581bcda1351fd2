/**
 * Accuracy metrics of the comparison benchmark (bench/compare/accuracy-metrics.ts) on hand-built replay
 * records whose expected values are worked out by hand in each test: over-admission on sliding
 * windows shortened by the tolerance (exact limiter → 0 exactly, one request too many → exactly
 * (limit + x) / limit − 1), utilisation over saturated whole aligned windows only (demand counts
 * refused requests, idle and partial windows are not counted), the client-side 429 split, tenants
 * without a limit of a kind, RangeErrors, and a fast-check property: the two-pointer sweep equals
 * a brute-force O(n²) computation over random record sequences.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { accuracyOf } from '../../bench/compare/accuracy-metrics.ts';
import type { LimitKind, TenantLimits } from '../../bench/compare/accuracy-metrics.ts';
import type { ReplayRecord } from '../../src/replay/report.ts';

interface Spec {
  readonly tenant?: string;
  readonly sentMs: number;
  readonly status?: number;
  /** usage.totalTokens; null for no usage. Default: reserved. */
  readonly used?: number | null;
  readonly reserved?: number;
  readonly gatewayError?: boolean;
}

let seq = 0;
function rec(s: Spec): ReplayRecord {
  const status = s.status ?? 200;
  const reserved = s.reserved ?? 100;
  const used = s.used === undefined ? reserved : s.used;
  const i = seq++;
  return {
    i,
    row: i,
    tenant: s.tenant ?? 'a',
    atMs: s.sentMs,
    sentMs: s.sentMs,
    status,
    latencyMs: 1,
    promptTokens: reserved,
    completionTokens: 0,
    reservedTokens: reserved,
    usage: status >= 200 && status < 300 && used !== null ? { promptTokens: used, completionTokens: 0, totalTokens: used } : null,
    headers: { limitTokens: null, remainingTokens: null, limitRequests: null, remainingRequests: null },
    retryAfterMs: null,
    errorCode: status >= 200 && status < 300 ? null : status === 0 ? 'network:ECONNRESET' : 'rate_limit_exceeded',
    gatewayError: s.gatewayError ?? false,
  };
}

const limitsOf = (entries: Record<string, TenantLimits>): Map<string, TenantLimits> => new Map(Object.entries(entries));
const W = 1_000;
const opts = (toleranceMs = 0, durationMs = 10_000) => ({ windowMs: W, toleranceMs, durationMs });

describe('over-admission (sliding windows)', () => {
  // Limit 3 requests / 300 tokens per 1 s; 100 tokens each. Admitted at 0, 100, 200, 1000, 1100,
  // 1200: every window [t, t + 1000) starting at an admitted record holds exactly 3 of them.
  // Gateway 429s in between do not count.
  const exact = [0, 100, 200, 1_000, 1_100, 1_200].map((t) => rec({ sentMs: t }));
  const refused = [150, 500, 999, 1_050].map((t) => rec({ sentMs: t, status: 429, gatewayError: true }));

  test('an exact limiter: max window sum = limit → 0 exactly', () => {
    const r = accuracyOf([...refused, ...exact].reverse(), limitsOf({ a: { tokens: 300, requests: 3 } }), opts());
    assert.equal(r.overAdmission, 0);
    assert.deepEqual(r.overAdmissionAt, { tenant: 'a', kind: 'tokens', windowStartMs: 0 });
    assert.deepEqual(r.perTenant, [
      { tenant: 'a', kind: 'tokens', limit: 300, overAdmission: 0, admittedInWindow: 300, windowStartMs: 0 },
      { tenant: 'a', kind: 'requests', limit: 3, overAdmission: 0, admittedInWindow: 3, windowStartMs: 0 },
    ]);
    assert.equal(r.toleranceMs, 0);
  });

  test('one request too many inside a window → exactly (limit + x) / limit − 1', () => {
    // +1 request of 50 tokens at 999: window [0, 1000) holds 4 requests and 350 tokens.
    const r = accuracyOf([...exact, rec({ sentMs: 999, reserved: 80, used: 50 })], limitsOf({ a: { tokens: 300, requests: 3 } }), opts());
    assert.equal(r.perTenant[0]?.overAdmission, 350 / 300 - 1);
    assert.equal(r.perTenant[0]?.admittedInWindow, 350);
    assert.equal(r.perTenant[1]?.overAdmission, 4 / 3 - 1);
    assert.equal(r.overAdmission, 4 / 3 - 1);
    assert.deepEqual(r.overAdmissionAt, { tenant: 'a', kind: 'requests', windowStartMs: 0 });
  });

  test('negative when the limit is never reached; null without admitted records', () => {
    const r = accuracyOf(
      [rec({ sentMs: 0 }), rec({ sentMs: 10 }), rec({ sentMs: 20 }), rec({ tenant: 'b', sentMs: 5, status: 429, gatewayError: true })],
      limitsOf({ a: { requests: 10 }, b: { requests: 1 } }),
      opts(),
    );
    assert.deepEqual(r.perTenant, [
      { tenant: 'a', kind: 'requests', limit: 10, overAdmission: 3 / 10 - 1, admittedInWindow: 3, windowStartMs: 0 },
      { tenant: 'b', kind: 'requests', limit: 1, overAdmission: null, admittedInWindow: null, windowStartMs: null },
    ]);
    assert.equal(r.overAdmission, 3 / 10 - 1);
    const none = accuracyOf([rec({ sentMs: 0, status: 429, gatewayError: true })], limitsOf({ a: { requests: 1 } }), opts());
    assert.equal(none.overAdmission, null);
    assert.equal(none.overAdmissionAt, null);
  });

  test('tolerance: a pair closer than the window by less than it is counted separately, by more counted together', () => {
    const limits = limitsOf({ a: { requests: 1 } });
    // Tolerance 5 ms: windows are [t, t + 995). 997 apart (3 ms short of the window) → separate.
    assert.equal(accuracyOf([rec({ sentMs: 0 }), rec({ sentMs: 997 })], limits, opts(5)).overAdmission, 0);
    // Exactly 995 apart: the boundary is excluded → separate.
    assert.equal(accuracyOf([rec({ sentMs: 0 }), rec({ sentMs: 995 })], limits, opts(5)).overAdmission, 0);
    // 994 apart (6 ms short, more than the tolerance) → together: 2 / 1 − 1.
    const together = accuracyOf([rec({ sentMs: 40 }), rec({ sentMs: 1_034 })], limits, opts(5));
    assert.equal(together.overAdmission, 1);
    assert.deepEqual(together.overAdmissionAt, { tenant: 'a', kind: 'requests', windowStartMs: 40 });
    assert.equal(together.toleranceMs, 5);
    // Without tolerance the 997 ms pair is one window.
    assert.equal(accuracyOf([rec({ sentMs: 0 }), rec({ sentMs: 997 })], limits, opts(0)).overAdmission, 1);
    // A pair exactly windowMs apart is never together.
    assert.equal(accuracyOf([rec({ sentMs: 0 }), rec({ sentMs: 1_000 })], limits, opts(0)).overAdmission, 0);
  });

  test('records sent at the same instant are one window', () => {
    const r = accuracyOf([rec({ sentMs: 500 }), rec({ sentMs: 500 }), rec({ sentMs: 500 })], limitsOf({ a: { requests: 2 } }), opts());
    assert.deepEqual(r.perTenant[0], { tenant: 'a', kind: 'requests', limit: 2, overAdmission: 3 / 2 - 1, admittedInWindow: 3, windowStartMs: 500 });
  });

  test('a tenant without a limit of a kind is skipped for that kind; a tenant without limits for both', () => {
    // c: 5 requests of 1,000 tokens in one window, only a requests limit of 5 (→ 0); d has no limits at all.
    const recs = [0, 1, 2, 3, 4].flatMap((t) => [rec({ tenant: 'c', sentMs: t, reserved: 1_000 }), rec({ tenant: 'd', sentMs: t, reserved: 1_000 })]);
    const r = accuracyOf(recs, limitsOf({ c: { requests: 5 } }), opts(0, 1_000));
    assert.deepEqual(r.perTenant, [{ tenant: 'c', kind: 'requests', limit: 5, overAdmission: 0, admittedInWindow: 5, windowStartMs: 0 }]);
    assert.equal(r.overAdmission, 0);
    assert.equal(r.utilisation.tokens.saturatedWindows, 0);
    // d still shows in the chart windows, with null limits.
    assert.deepEqual(r.windows.find((w) => w.tenant === 'd'), { tenant: 'd', window: 0, startMs: 0, admittedTokens: 5_000, demandTokens: 5_000, tokensLimit: null, admittedRequests: 5, demandRequests: 5, requestsLimit: null });
  });

  test('100,000 records in one tenant (a quadratic sweep would not finish): 60,000 / 59,999 − 1', () => {
    const recs = Array.from({ length: 100_000 }, (_, t) => rec({ sentMs: t, reserved: 10 }));
    const started = performance.now();
    const r = accuracyOf(recs, limitsOf({ a: { requests: 59_999, tokens: 600_000 } }), { windowMs: 60_000, toleranceMs: 0, durationMs: 100_000 });
    assert.ok(performance.now() - started < 5_000);
    assert.deepEqual(r.perTenant, [
      { tenant: 'a', kind: 'tokens', limit: 600_000, overAdmission: 0, admittedInWindow: 600_000, windowStartMs: 0 },
      { tenant: 'a', kind: 'requests', limit: 59_999, overAdmission: 60_000 / 59_999 - 1, admittedInWindow: 60_000, windowStartMs: 0 },
    ]);
  });
});

describe('utilisation (whole aligned windows, saturated only)', () => {
  // windowMs 1000, durationMs 3500 → whole windows 0, 1, 2; [3000, 3500) is partial.
  // a (tokens 1000, requests 10):
  //   w0: admitted reserved 600 (used 500) + refused 600 → demand 1200 ≥ 1100 → 500 / 1000 = 0.5
  //   w1: only a status-0 record reserving 5000 → demand 0 → idle, not saturated
  //   w2: reserved 700 used 700 + reserved 400 without usage (→ 400) → demand 1100 ≥ 1100 → 1.1
  //   [3000, 3500): demand 5000, admitted 100 → partial, not counted
  // b (tokens 200): w0: admitted 150 + upstream 429 of 70 → demand 220 = 1.1 × 200 → 150 / 200 = 0.75
  //   (1.1 × 200 is 220.00000000000003 in floats: the comparison must be exact)
  //   w1: demand 219 → not saturated
  // c (requests 2): w1: 3 requests (2 admitted) → demand 3 ≥ 2.2 → 2 / 2 = 1; w2: 2 requests → 2 < 2.2.
  const records = [
    rec({ sentMs: 10, reserved: 600, used: 500 }),
    rec({ sentMs: 20, reserved: 600, status: 429, gatewayError: true }),
    rec({ sentMs: 1_500, reserved: 5_000, status: 0 }),
    rec({ sentMs: 2_000, reserved: 700 }),
    rec({ sentMs: 2_999, reserved: 400, used: null }),
    rec({ sentMs: 3_000, reserved: 100 }),
    rec({ sentMs: 3_001, reserved: 4_900, status: 429, gatewayError: true }),
    rec({ tenant: 'b', sentMs: 0, reserved: 150 }),
    rec({ tenant: 'b', sentMs: 999, reserved: 70, status: 429 }),
    rec({ tenant: 'b', sentMs: 1_000, reserved: 219 }),
    rec({ tenant: 'c', sentMs: 1_000, reserved: 1 }),
    rec({ tenant: 'c', sentMs: 1_001, reserved: 1 }),
    rec({ tenant: 'c', sentMs: 1_002, reserved: 1, status: 429, gatewayError: true }),
    rec({ tenant: 'c', sentMs: 2_000, reserved: 1 }),
    rec({ tenant: 'c', sentMs: 2_001, reserved: 1 }),
  ];
  const limits = limitsOf({ a: { tokens: 1_000, requests: 10 }, b: { tokens: 200 }, c: { requests: 2 } });
  const r = accuracyOf(records, limits, { windowMs: W, toleranceMs: 0, durationMs: 3_500 });

  test('tokens: only saturated whole windows, exact mean, min, max and aggregate', () => {
    assert.equal(r.wholeWindows, 3);
    assert.deepEqual(r.utilisation.tokens, {
      saturatedWindows: 3,
      mean: (0.5 + 1.1 + 0.75) / 3,
      min: 0.5,
      max: 1.1,
      aggregate: (500 + 1_100 + 150) / (1_000 + 1_000 + 200),
    });
  });

  test('requests: counted separately (a is never saturated at 10, c once)', () => {
    assert.deepEqual(r.utilisation.requests, { saturatedWindows: 1, mean: 1, min: 1, max: 1, aggregate: 1 });
  });

  test('none saturated → count 0 and nulls', () => {
    const idle = accuracyOf(records, limitsOf({ a: { tokens: 1_000_000, requests: 1_000 } }), { windowMs: W, toleranceMs: 0, durationMs: 3_500 });
    assert.deepEqual(idle.utilisation.tokens, { saturatedWindows: 0, mean: null, min: null, max: null, aggregate: null });
    assert.deepEqual(idle.utilisation.requests, { saturatedWindows: 0, mean: null, min: null, max: null, aggregate: null });
  });

  test('demand includes refused requests, excludes status 0; the chart has every tenant and whole window', () => {
    const a = r.windows.filter((w) => w.tenant === 'a');
    assert.deepEqual(a, [
      { tenant: 'a', window: 0, startMs: 0, admittedTokens: 500, demandTokens: 1_200, tokensLimit: 1_000, admittedRequests: 1, demandRequests: 2, requestsLimit: 10 },
      { tenant: 'a', window: 1, startMs: 1_000, admittedTokens: 0, demandTokens: 0, tokensLimit: 1_000, admittedRequests: 0, demandRequests: 0, requestsLimit: 10 },
      { tenant: 'a', window: 2, startMs: 2_000, admittedTokens: 1_100, demandTokens: 1_100, tokensLimit: 1_000, admittedRequests: 2, demandRequests: 2, requestsLimit: 10 },
    ]);
    assert.deepEqual(r.windows.map((w) => `${w.tenant}${w.window}`), ['a0', 'a1', 'a2', 'b0', 'b1', 'b2', 'c0', 'c1', 'c2']);
    assert.deepEqual(r.windows.find((w) => w.tenant === 'b' && w.window === 0), { tenant: 'b', window: 0, startMs: 0, admittedTokens: 150, demandTokens: 220, tokensLimit: 200, admittedRequests: 1, demandRequests: 2, requestsLimit: null });
  });

  test('a run shorter than one window has no whole window', () => {
    const short = accuracyOf(records, limits, { windowMs: W, toleranceMs: 0, durationMs: 999 });
    assert.equal(short.wholeWindows, 0);
    assert.deepEqual(short.windows, []);
    assert.equal(short.utilisation.tokens.saturatedWindows, 0);
  });
});

describe('utilisation at refusals (how full the sliding window was when the limiter said no)', () => {
  // Tokens limit 1,000 per 1 s window, tolerance 0. Admitted: 400 at 0, 500 at 300, 300 at 1,200.
  // Refusals at 350 (window (−650, 350]: 400 + 500 = 900 → 0.9), at 999 (same → 0.9), at 1,000
  // ((0, 1000]: 500 → 0.5: the record at 0 left the window), at 1,250 ((250, 1250]: 500 + 300 → 0.8).
  const records = [
    rec({ sentMs: 0, reserved: 400 }),
    rec({ sentMs: 300, reserved: 500 }),
    rec({ sentMs: 1_200, reserved: 300 }),
    ...[350, 999, 1_000, 1_250].map((t) => rec({ sentMs: t, status: 429, reserved: 200, gatewayError: true })),
    rec({ tenant: 'unlimited', sentMs: 10, status: 429, gatewayError: true }),
  ];
  test('tokens: one ratio per 429 of a limited tenant, exact mean, median, p5 and min', () => {
    const r = accuracyOf(records, limitsOf({ a: { tokens: 1_000 } }), opts());
    assert.equal(r.atRefusal.tokens.refusals, 4);
    assert.ok(Math.abs((r.atRefusal.tokens.mean ?? 0) - (0.9 + 0.9 + 0.5 + 0.8) / 4) < 1e-12);
    assert.equal(r.atRefusal.tokens.median, 0.8);
    assert.equal(r.atRefusal.tokens.p5, 0.5);
    assert.equal(r.atRefusal.tokens.min, 0.5);
    assert.deepEqual(r.atRefusal.requests, { refusals: 0, mean: null, median: null, p5: null, min: null });
  });
  test('the tolerance shortens the window back from the refusal', () => {
    const r = accuracyOf(records, limitsOf({ a: { tokens: 1_000 } }), opts(300));
    // Windows (t − 700, t]: 350 → (−350, 350] 900 → 0.9; 999 → (299, 999] 500 → 0.5;
    // 1,000 → (300, 1000]: the record at 300 is out → 0; 1,250 → (550, 1250] 300 → 0.3.
    assert.equal(r.atRefusal.tokens.refusals, 4);
    assert.equal(r.atRefusal.tokens.min, 0);
    assert.equal(r.atRefusal.tokens.median, 0.3);
    assert.ok(Math.abs((r.atRefusal.tokens.mean ?? 0) - (0.9 + 0.5 + 0 + 0.3) / 4) < 1e-12);
  });
});

describe('what clients saw', () => {
  test('429 split gateway / upstream, other statuses, network', () => {
    const r = accuracyOf(
      [
        rec({ sentMs: 0 }),
        rec({ sentMs: 1, status: 201 }),
        rec({ sentMs: 2, status: 429, gatewayError: true }),
        rec({ sentMs: 3, status: 429, gatewayError: true }),
        rec({ sentMs: 4, status: 429 }),
        rec({ sentMs: 5, status: 500 }),
        rec({ sentMs: 6, status: 503, gatewayError: true }),
        rec({ sentMs: 7, status: 503 }),
        rec({ sentMs: 8, status: 0 }),
        rec({ tenant: 'z', sentMs: 9, status: 0 }),
      ],
      new Map(),
      opts(),
    );
    assert.deepEqual(r.clients, { sent: 10, admitted: 2, status429: 3, gateway429: 2, upstream429: 1, otherByStatus: { 500: 1, 503: 2 }, network: 2 });
    assert.equal(r.overAdmission, null);
    assert.deepEqual(r.perTenant, []);
  });
});

describe('options', () => {
  test('RangeError on windowMs ≤ 0, toleranceMs < 0 or ≥ windowMs, a limit ≤ 0, durationMs < 0', () => {
    const ok = limitsOf({ a: { tokens: 1, requests: 1 } });
    for (const windowMs of [0, -1, Number.NaN]) assert.throws(() => accuracyOf([], ok, { windowMs, toleranceMs: 0, durationMs: 0 }), RangeError);
    for (const toleranceMs of [-1, 1_000, 1_001, Number.NaN]) assert.throws(() => accuracyOf([], ok, { windowMs: 1_000, toleranceMs, durationMs: 0 }), RangeError);
    assert.throws(() => accuracyOf([], ok, { windowMs: 1_000, toleranceMs: 0, durationMs: -1 }), RangeError);
    for (const bad of [{ tokens: 0 }, { requests: -3 }, { tokens: 5, requests: 0 }, { tokens: Number.NaN }]) {
      assert.throws(() => accuracyOf([], limitsOf({ a: { tokens: 1 }, b: bad }), opts()), RangeError);
    }
    assert.doesNotThrow(() => accuracyOf([], ok, { windowMs: 1_000, toleranceMs: 999, durationMs: 0 }));
  });
});

describe('property: two-pointer over-admission = brute force', () => {
  const TENANTS = ['a', 'b', 'c'] as const;

  /** O(n²): every window [t, t + windowMs − toleranceMs) at an admitted sentMs, every admitted record checked. */
  function brute(records: readonly ReplayRecord[], tenant: string, kind: LimitKind, limit: number, windowMs: number, toleranceMs: number) {
    const admitted = records.filter((r) => r.tenant === tenant && r.status >= 200 && r.status < 300);
    const starts = [...new Set(admitted.map((r) => r.sentMs))].sort((x, y) => x - y);
    let best: { overAdmission: number; admittedInWindow: number; windowStartMs: number } | null = null;
    for (const t of starts) {
      let sum = 0;
      for (const r of admitted) {
        if (r.sentMs >= t && r.sentMs < t + (windowMs - toleranceMs)) sum += kind === 'tokens' ? (r.usage?.totalTokens ?? r.reservedTokens) : 1;
      }
      if (best === null || sum / limit - 1 > best.overAdmission) best = { overAdmission: sum / limit - 1, admittedInWindow: sum, windowStartMs: t };
    }
    return { tenant, kind, limit, overAdmission: best?.overAdmission ?? null, admittedInWindow: best?.admittedInWindow ?? null, windowStartMs: best?.windowStartMs ?? null };
  }

  const recordArb = fc.record({
    tenant: fc.constantFrom(...TENANTS),
    sentMs: fc.oneof(fc.integer({ min: 0, max: 4_000 }), fc.constantFrom(0, 250, 1_000), fc.double({ min: 0, max: 4_000, noNaN: true })),
    status: fc.constantFrom(200, 200, 200, 201, 429, 500, 0),
    used: fc.option(fc.integer({ min: 0, max: 500 })),
    reserved: fc.integer({ min: 1, max: 600 }),
    gatewayError: fc.boolean(),
  });
  const limitArb = fc.record({ tokens: fc.option(fc.integer({ min: 1, max: 3_000 })), requests: fc.option(fc.integer({ min: 1, max: 20 })) });
  const caseArb = fc
    .integer({ min: 1, max: 2_000 })
    .chain((windowMs) => fc.record({
      windowMs: fc.constant(windowMs),
      toleranceMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: windowMs - 1 }), fc.double({ min: 0, max: windowMs - 1, noNaN: true })),
      specs: fc.array(recordArb, { maxLength: 120 }),
      limits: fc.tuple(limitArb, limitArb, limitArb),
    }));

  test('per tenant and kind, and overall', () => {
    fc.assert(
      fc.property(caseArb, ({ windowMs, toleranceMs, specs, limits }) => {
        const records = specs.map((s) => rec(s));
        const map = new Map<string, TenantLimits>();
        TENANTS.forEach((t, k) => {
          const l = limits[k] as { tokens: number | null; requests: number | null };
          map.set(t, { ...(l.tokens === null ? {} : { tokens: l.tokens }), ...(l.requests === null ? {} : { requests: l.requests }) });
        });
        const r = accuracyOf(records, map, { windowMs, toleranceMs, durationMs: 4_000 });
        const expected = TENANTS.flatMap((t) => (['tokens', 'requests'] as const).flatMap((kind) => {
          const limit = map.get(t)?.[kind];
          return limit === undefined ? [] : [brute(records, t, kind, limit, windowMs, toleranceMs)];
        }));
        assert.deepEqual(r.perTenant, expected);
        let overall: number | null = null;
        for (const e of expected) if (e.overAdmission !== null && (overall === null || e.overAdmission > overall)) overall = e.overAdmission;
        assert.equal(r.overAdmission, overall);
      }),
      { numRuns: 500 },
    );
  });
});
