import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../../src/clock.ts';
import { Limiter, parseTenantSnapshot } from '../../src/limiter/index.ts';
import type { Policy } from '../../src/limiter/index.ts';
import { weightedTokens } from '../../src/limiter/limiter.ts';
import { periodAt } from '../../src/limiter/budget-period.ts';
import { boundSnapshot, conservativeSnapshot } from '../../src/limiter/snapshot-bounds.ts';
import { compilePolicy } from '../../src/limiter/compiled-policy.ts';
import { formatMicros, parseUsdMicros, picoToMicrosCeil, picoToMicrosFloor } from '../../src/pricing/usd.ts';
import { reservationCostPico, usageCostPico } from '../../src/pricing/prices.ts';
import type { PriceTable } from '../../src/pricing/prices.ts';
import { budgetHeaders } from '../../src/providers/rate-limit-headers.ts';
import { settleDetail } from '../../src/gateway/spend.ts';

/** gpt-4o-like prices, µ$ per million tokens: $2.50 input, $1.25 cached, $10 output. */
const PRICES: PriceTable = { input: 2_500_000, cachedInput: 1_250_000, cacheWrite: 2_500_000, output: 10_000_000, reasoning: 10_000_000 };
const T0 = Date.parse('2025-03-10T12:00:00Z');

describe('USD amounts in config', () => {
  test('decimal text is read exactly to micro-dollars (no float product)', () => {
    assert.equal(parseUsdMicros(2.5), 2_500_000);
    assert.equal(parseUsdMicros('0.075'), 75_000);
    assert.equal(parseUsdMicros('$50'), 50_000_000);
    assert.equal(parseUsdMicros(0.1), 100_000); // 0.1 × 1e6 as a float product is 100000.00000000001
    assert.equal(parseUsdMicros(1.005), 1_005_000); // 1.005 × 1e6 = 1004999.9999999999 as a float
    assert.equal(parseUsdMicros('1000.000001'), 1_000_000_001);
    assert.equal(parseUsdMicros('0.0000010'), 1); // trailing zeros past 6 places are fine
  });
  test('amounts finer than a micro-dollar, negative, exponent or garbage are refused', () => {
    for (const bad of ['0.0000001', -1, '-1', 1e-7, 'abc', '', '1.2.3', Number.NaN, Infinity, '1e3']) assert.equal(parseUsdMicros(bad as number | string), undefined, String(bad));
    assert.equal(parseUsdMicros('9007199254.740991'), Number.MAX_SAFE_INTEGER);
    assert.equal(parseUsdMicros('9007199254.740992'), undefined);
  });
  test('formatting and rounding of pico-dollars', () => {
    assert.equal(formatMicros(12_345_678), '12.345678');
    assert.equal(formatMicros(5), '0.000005');
    assert.equal(formatMicros(-1_500_000n), '-1.500000');
    assert.equal(picoToMicrosFloor(2_500_001n), 2n);
    assert.equal(picoToMicrosCeil(2_500_001n), 3n);
    assert.equal(picoToMicrosCeil(3_000_000n), 3n);
    assert.equal(picoToMicrosFloor(-1n), -1n);
  });
});

describe('prices applied to usage (pico-dollars, exact)', () => {
  test('every kind at its own price; parts inside their whole', () => {
    // 1000 input of which 600 cached, 200 output of which 50 reasoning.
    const pico = usageCostPico({ input: 1000, output: 200, cacheRead: 600, reasoning: 50 }, { ...PRICES, reasoning: 12_000_000 });
    assert.equal(pico, 400n * 2_500_000n + 600n * 1_250_000n + 150n * 10_000_000n + 50n * 12_000_000n);
    assert.equal(pico, 3_850_000_000n); // $0.00385
  });
  test('cache writes at their price; a part larger than its whole is the whole', () => {
    const anthropic: PriceTable = { input: 3_000_000, cachedInput: 300_000, cacheWrite: 3_750_000, output: 15_000_000, reasoning: 15_000_000 };
    assert.equal(usageCostPico({ input: 1500, output: 10, cacheRead: 1000, cacheWrite: 400 }, anthropic), 100n * 3_000_000n + 1000n * 300_000n + 400n * 3_750_000n + 10n * 15_000_000n);
    assert.equal(usageCostPico({ input: 10, output: 5, cacheRead: 99, reasoning: 99 }, PRICES), 10n * 1_250_000n + 5n * 10_000_000n);
  });
  test('products beyond 2^53 stay exact', () => {
    const huge: PriceTable = { input: 9_000_000_000_000, cachedInput: 1, cacheWrite: 1, output: 1, reasoning: 1 };
    assert.equal(usageCostPico({ input: 1_000_001, output: 0 }, huge), 9_000_000_000_000n * 1_000_001n);
    assert.ok(usageCostPico({ input: 1_000_001, output: 0 }, huge) > BigInt(Number.MAX_SAFE_INTEGER));
  });
  test('a reservation prices the prompt at input and the reserved output at the dearer of output and reasoning', () => {
    assert.equal(reservationCostPico(100, 50, PRICES), 100n * 2_500_000n + 50n * 10_000_000n);
    assert.equal(reservationCostPico(100, 50, { ...PRICES, reasoning: 40_000_000 }), 100n * 2_500_000n + 50n * 40_000_000n);
  });
  test('settlement detail: reported usage priced exactly; a cut stream at prompt + delivered; nothing reported keeps the reservation', () => {
    assert.deepEqual(settleDetail(PRICES, { input: 10, output: 4, cacheRead: 6 }, 10, 14), { cost: 4n * 2_500_000n + 6n * 1_250_000n + 4n * 10_000_000n, kinds: { cacheRead: 6 } });
    assert.deepEqual(settleDetail(PRICES, undefined, 10, 13), { cost: 10n * 2_500_000n + 3n * 10_000_000n });
    assert.deepEqual(settleDetail(PRICES, undefined, 10, 0), { cost: 0n });
    assert.deepEqual(settleDetail(PRICES, undefined, 10, undefined), {});
    assert.deepEqual(settleDetail(undefined, undefined, 10, 13), { cost: 0n });
  });
});

describe('budget periods', () => {
  test('fixed windows are aligned to the epoch', () => {
    assert.deepEqual(periodAt({ kind: 'window', ms: 86_400_000 }, Date.parse('2025-03-10T12:00:00Z')), { start: Date.parse('2025-03-10T00:00:00Z'), end: Date.parse('2025-03-11T00:00:00Z') });
    const thirty = periodAt({ kind: 'window', ms: 30 * 86_400_000 }, T0);
    assert.equal(thirty.start % (30 * 86_400_000), 0);
    assert.ok(thirty.start <= T0 && T0 < thirty.end);
  });
  test('a month in a zone with a DST change is 743 hours; boundaries are local midnights', () => {
    const p = { kind: 'calendar', unit: 'month', timeZone: 'America/New_York' } as const;
    assert.deepEqual(periodAt(p, Date.parse('2025-03-15T12:00:00Z')), { start: Date.parse('2025-03-01T05:00:00Z'), end: Date.parse('2025-04-01T04:00:00Z') });
    assert.equal(periodAt(p, Date.parse('2025-03-01T04:59:59.999Z')).start, Date.parse('2025-02-01T05:00:00Z'));
    assert.equal(periodAt(p, Date.parse('2025-03-01T05:00:00Z')).start, Date.parse('2025-03-01T05:00:00Z'));
    assert.equal(periodAt(p, Date.parse('2025-11-15T12:00:00Z')).end - periodAt(p, Date.parse('2025-11-15T12:00:00Z')).start, 721 * 3_600_000);
  });
  test('weeks start on Monday; a midnight swallowed by DST starts the day at the end of the gap', () => {
    assert.deepEqual(periodAt({ kind: 'calendar', unit: 'week', timeZone: 'Europe/Paris' }, Date.parse('2025-03-30T12:00:00Z')), { start: Date.parse('2025-03-23T23:00:00Z'), end: Date.parse('2025-03-30T22:00:00Z') });
    // Chile, 2024-09-08: clocks go from 24:00 to 01:00; the day begins at 04:00 UTC.
    const day = { kind: 'calendar', unit: 'day', timeZone: 'America/Santiago' } as const;
    assert.deepEqual(periodAt(day, Date.parse('2024-09-08T12:00:00Z')), { start: Date.parse('2024-09-08T04:00:00Z'), end: Date.parse('2024-09-09T03:00:00Z') });
    assert.deepEqual(periodAt(day, Date.parse('2024-09-07T12:00:00Z')), { start: Date.parse('2024-09-07T04:00:00Z'), end: Date.parse('2024-09-08T04:00:00Z') });
  });
});

const $ = (usd: number): bigint => BigInt(Math.round(usd * 1e6)) * 1_000_000n;

function budgetLimiter(policy: Policy, at = T0): { clock: ManualClock; limiter: Limiter } {
  const clock = new ManualClock(at);
  return { clock, limiter: new Limiter({ clock, policyFor: () => policy }) };
}

describe('cost limits in the limiter', () => {
  const daily: Policy = { limits: [{ name: 'cost/1d', kind: 'cost', limit: 1_000_000, period: { kind: 'window', ms: 86_400_000 } }] };

  test('admits while spent + reservation ≤ budget, exactly; refuses until the period ends', () => {
    const { clock, limiter } = budgetLimiter(daily);
    const a = limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.6) });
    assert.equal(a.ok, true);
    assert.deepEqual(a.limits, [{ name: 'cost/1d', kind: 'cost', limit: 1_000_000, remaining: 400_000, resetMs: 12 * 3_600_000, resetAt: T0 + 12 * 3_600_000 }]);
    assert.equal(limiter.acquire('t', { id: 'b', tokens: 0, cost: $(0.4) + 1n }).ok, false);
    const c = limiter.acquire('t', { id: 'c', tokens: 0, cost: $(0.4) });
    assert.equal(c.ok, true);
    const d = limiter.acquire('t', { id: 'd', tokens: 0, cost: 1n });
    assert.equal(d.ok, false);
    assert.equal(!d.ok && d.reason, 'limited');
    assert.equal(!d.ok && d.kind, 'cost');
    assert.equal(!d.ok && d.retryAfterMs, 12 * 3_600_000);
    clock.advance(12 * 3_600_000);
    assert.equal(limiter.acquire('t', { id: 'd', tokens: 0, cost: $(1) }).ok, true);
  });

  test('a reservation above the budget can never pass: too_large', () => {
    const { limiter } = budgetLimiter(daily);
    const r = limiter.acquire('t', { id: 'a', tokens: 0, cost: $(1) + 1n });
    assert.equal(!r.ok && r.reason, 'too_large');
    assert.equal(limiter.waitMs('t', { tokens: 0, cost: $(1) + 1n }), Infinity);
  });

  test('settlement applies actual − reserved exactly (pico-dollars), refunds the unused, debits past the budget', () => {
    const { limiter } = budgetLimiter(daily);
    limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.5) });
    limiter.settle('t', 'a', 0, { cost: 123_456_789n });
    const peek = () => limiter.peek('t')[0]?.remaining;
    assert.equal(peek(), 999_876); // 123.456789 µ$ spent: 999,876.543211 µ$ left, shown rounded down
    assert.equal(parseTenantSnapshot(JSON.stringify(limiter.exportTenant('t'))).limits[0]?.algorithm, 'budget');
    assert.deepEqual(limiter.exportTenant('t')?.limits[0], { name: 'cost/1d', algorithm: 'budget', spent: '123456789', start: Date.parse('2025-03-10T00:00:00Z') });
    limiter.acquire('t', { id: 'b', tokens: 0, cost: $(0.1) });
    limiter.settle('t', 'b', 0, { cost: $(2) });
    assert.equal(peek(), 0);
    assert.equal(limiter.exportTenant('t')?.limits[0] && 'spent' in limiter.exportTenant('t')!.limits[0]! ? (limiter.exportTenant('t')!.limits[0] as { spent: string }).spent : '', ($(2) + 123_456_789n).toString());
  });

  test('a settle without a cost keeps the reservation charged; a refund never takes the spend below 0', () => {
    const { limiter } = budgetLimiter(daily);
    limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.25) });
    limiter.settle('t', 'a', 0);
    assert.equal(limiter.peek('t')[0]?.remaining, 750_000);
    limiter.acquire('t', { id: 'b', tokens: 0, cost: $(0.25) });
    limiter.importTenant('t', { ...limiter.exportTenant('t')!, limits: [{ name: 'cost/1d', algorithm: 'budget', spent: '0', start: Date.parse('2025-03-10T00:00:00Z') }] });
    limiter.settle('t', 'b', 0, { cost: 0n });
    assert.equal(limiter.peek('t')[0]?.remaining, 1_000_000);
  });

  test('a request admitted before its period ended is charged its whole actual cost in the new period', () => {
    const { clock, limiter } = budgetLimiter(daily, Date.parse('2025-03-10T23:59:00Z'));
    limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.5) });
    clock.advance(120_000);
    limiter.settle('t', 'a', 0, { cost: $(0.3) });
    assert.equal(limiter.peek('t')[0]?.remaining, 700_000);
  });

  test('a floor keeps its part of the budget for higher tiers', () => {
    const { limiter } = budgetLimiter(daily);
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.8) + 1n, floor: 0.2 }).ok, false);
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 0, cost: $(0.8), floor: 0.2 }).ok, true);
    assert.equal(limiter.acquire('t', { id: 'b', tokens: 0, cost: 1n, floor: 0.2 }).ok, false);
    assert.equal(limiter.acquire('t', { id: 'b', tokens: 0, cost: $(0.2) }).ok, true);
  });

  test('all-or-nothing with the other limits: a budget refusal takes no tokens, a token refusal no money', () => {
    const { limiter } = budgetLimiter({ limits: [{ name: 'tokens/1m', kind: 'tokens', limit: 100, windowMs: 60_000, algorithm: 'token_bucket' }, daily.limits[0]!] });
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 10, cost: $(2) }).ok, false);
    assert.equal(limiter.acquire('t', { id: 'b', tokens: 200, cost: $(0.5) }).ok, false);
    assert.deepEqual(limiter.peek('t').map((l) => l.remaining), [100, 1_000_000]);
  });

  test('a month budget survives export → JSON → import on another limiter, and a reload that keeps its name', () => {
    const policy: Policy = { limits: [{ name: 'cost/month', kind: 'cost', limit: 50_000_000, period: { kind: 'calendar', unit: 'month', timeZone: 'America/New_York' } }] };
    const { clock, limiter } = budgetLimiter(policy, Date.parse('2025-03-20T12:00:00Z'));
    limiter.acquire('t', { id: 'a', tokens: 0, cost: $(10) });
    limiter.settle('t', 'a', 0, { cost: $(7.25) });
    limiter.acquire('t', { id: 'open', tokens: 0, cost: $(1) });
    clock.advance(60_000);
    const json = JSON.stringify(limiter.exportTenant('t'));
    const other = new Limiter({ clock, policyFor: () => policy });
    assert.equal(other.importTenant('t', parseTenantSnapshot(json)), 0);
    assert.equal(other.peek('t')[0]?.remaining, 41_750_000);
    // The open reservation settles there: its unused part comes back.
    other.settle('t', 'open', 0, { cost: $(0.5) });
    assert.equal(other.peek('t')[0]?.remaining, 42_250_000);
    // A reload with a new budget keeps the spend.
    let current: Policy = policy;
    const reloading = new Limiter({ clock, policyFor: () => current });
    reloading.importTenant('t', parseTenantSnapshot(json));
    current = { limits: [{ ...policy.limits[0]!, limit: 100_000_000 } as Policy['limits'][number]] };
    assert.equal(reloading.peek('t')[0]?.remaining, 91_750_000);
    // At the month boundary (local midnight, New York, after DST began) the spend is forgotten.
    clock.set(Date.parse('2025-04-01T04:00:00Z'));
    assert.equal(other.peek('t')[0]?.remaining, 50_000_000);
    // A snapshot of the past month imported now starts empty.
    const fresh = new Limiter({ clock, policyFor: () => policy });
    fresh.importTenant('t', parseTenantSnapshot(json));
    assert.equal(fresh.peek('t')[0]?.remaining, 50_000_000);
  });

  test('stored budgets are clamped (spend to 2 × budget, a future period start to now); a corrupt state spends the period', () => {
    const policy: Policy = { limits: [{ name: 'cost/month', kind: 'cost', limit: 50_000_000, period: { kind: 'calendar', unit: 'month', timeZone: 'UTC' } }] };
    const c = compilePolicy(policy);
    const now = Date.parse('2025-03-20T00:00:00Z');
    const b = boundSnapshot(c, { v: 1, at: now, limits: [{ name: 'cost/month', algorithm: 'budget', spent: '9'.repeat(25), start: 9e15 }], reservations: [{ id: 'r', tokens: 0, requests: 0, expiresAt: now + 1000, settled: false, released: false, limits: ['cost/month'], cost: '9'.repeat(25), admittedAt: 9e15 }] }, now);
    assert.equal(b.clamped, 4);
    assert.deepEqual(b.snapshot.limits[0], { name: 'cost/month', algorithm: 'budget', spent: '100000000000000', start: Date.parse('2025-03-01T00:00:00Z') });
    assert.equal(b.snapshot.reservations[0]?.cost, '50000000000000');
    assert.deepEqual(conservativeSnapshot(c, now).limits, [{ name: 'cost/month', algorithm: 'budget', spent: '50000000000000', start: Date.parse('2025-03-01T00:00:00Z') }]);
    assert.throws(() => parseTenantSnapshot(JSON.stringify({ v: 1, at: now, limits: [{ name: 'x', algorithm: 'budget', spent: '-1', start: 0 }], reservations: [] })), /limits\[0\]\.spent/);
  });
});

describe('budget headers', () => {
  test('the binding budget: name, limit and remaining in dollars, reset as RFC 3339', () => {
    const h = budgetHeaders(
      [
        { name: 'cost/month', kind: 'cost', limit: 50_000_000, remaining: 12_345_678, resetMs: 86_400_000 },
        { name: 'cost/1d#ci', kind: 'cost', limit: 5_000_000, remaining: 4_000_000, resetMs: 3_600_000 },
        { name: 'tokens/1m', kind: 'tokens', limit: 10, remaining: 1, resetMs: 1 },
      ],
      T0,
    );
    assert.deepEqual(h, { 'x-quotaring-budget': 'cost/1d#ci', 'x-quotaring-budget-limit-usd': '5.000000', 'x-quotaring-budget-remaining-usd': '4.000000', 'x-quotaring-budget-reset': '2025-03-10T13:00:00Z' });
    assert.deepEqual(budgetHeaders([{ name: 'tokens/1m', kind: 'tokens', limit: 10, remaining: 1, resetMs: 1 }], T0), {});
  });
});

describe('limits per key', () => {
  test('a key\'s limits apply on top of its tenant\'s, only to that key', () => {
    const policy: Policy = {
      limits: [
        { name: 'requests/1m', kind: 'requests', limit: 3, windowMs: 60_000, algorithm: 'token_bucket' },
        { name: 'requests/1m#ci', kind: 'requests', limit: 1, windowMs: 60_000, algorithm: 'token_bucket', key: 'ci' },
        { name: 'concurrent#ci', kind: 'concurrent', limit: 1, leaseTtlMs: 60_000, key: 'ci' },
      ],
    };
    const { limiter } = budgetLimiter(policy);
    assert.equal(limiter.acquire('t', { id: 'a', tokens: 0, key: 'ci' }).ok, true);
    const refused = limiter.acquire('t', { id: 'b', tokens: 0, key: 'ci' });
    assert.equal(!refused.ok && refused.limit, 'requests/1m#ci');
    assert.equal(limiter.acquire('t', { id: 'c', tokens: 0, key: 'web' }).ok, true);
    assert.equal(limiter.acquire('t', { id: 'd', tokens: 0 }).ok, true);
    const tenantFull = limiter.acquire('t', { id: 'e', tokens: 0, key: 'web' });
    assert.equal(!tenantFull.ok && tenantFull.limit, 'requests/1m');
    assert.deepEqual(limiter.peek('t', undefined, 'ci').map((l) => l.name), ['requests/1m', 'requests/1m#ci', 'concurrent#ci']);
    assert.deepEqual(limiter.peek('t', undefined, 'web').map((l) => l.name), ['requests/1m']);
    // The key's state travels with the tenant's snapshot.
    assert.deepEqual(limiter.exportTenant('t')?.limits.map((l) => l.name), ['requests/1m', 'requests/1m#ci', 'concurrent#ci']);
  });
});

describe('weighted tokens', () => {
  const spec = { name: 'tokens/1m', kind: 'tokens', limit: 1000, windowMs: 60_000, algorithm: 'token_bucket', weights: { cacheRead: 0, reasoning: 0.5 } } as const;
  test('cache reads weigh 0 and reasoning 0.5: settled on the weighted count, rounded up', () => {
    assert.equal(weightedTokens(100, { cacheRead: 60, reasoning: 11 }, spec), 35); // 100 − 60 − 5.5 = 34.5 → 35
    assert.equal(weightedTokens(100, undefined, spec), 100);
    assert.equal(weightedTokens(100, { cacheRead: 500 }, spec), 0);
    assert.equal(weightedTokens(10, { cacheWrite: 4 }, { ...spec, weights: { cacheWrite: 1.25 } }), 11);
  });
  test('the limiter settles each tokens limit with its own weights', () => {
    const { limiter } = budgetLimiter({ limits: [spec, { name: 'tokens/1d', kind: 'tokens', limit: 1000, windowMs: 86_400_000, algorithm: 'token_bucket' }] });
    limiter.acquire('t', { id: 'a', tokens: 300 });
    limiter.settle('t', 'a', 200, { kinds: { cacheRead: 150 } });
    assert.deepEqual(limiter.peek('t').map((l) => l.remaining), [950, 800]);
  });
});

describe('a stand-in gives back the spend it admitted', () => {
  test('budget usage since the loaded state, added to the owner\'s budget of the same period', async () => {
    const { budgetUsageSince, withUsage } = await import('../../src/limiter/usage-delta.ts');
    const start = Date.parse('2025-03-01T00:00:00Z');
    const base = { v: 1 as const, at: 0, limits: [{ name: 'cost/month', algorithm: 'budget' as const, spent: '500', start }], reservations: [] };
    const current = { ...base, limits: [{ name: 'cost/month', algorithm: 'budget' as const, spent: '1700', start }] };
    const usage = budgetUsageSince(base, current);
    assert.deepEqual(usage, [{ name: 'cost/month', start, spent: '1200' }]);
    assert.deepEqual(budgetUsageSince(base, base), []);
    const owner = { ...base, limits: [{ name: 'cost/month', algorithm: 'budget' as const, spent: '9000', start }] };
    assert.deepEqual(withUsage(owner, { windows: [], buckets: [], budgets: usage }, start + 10).limits, [{ name: 'cost/month', algorithm: 'budget', spent: '10200', start }]);
    // An owner still holding an earlier period takes the new period's spend; fresh owners take it as is.
    const older = { ...base, limits: [{ name: 'cost/month', algorithm: 'budget' as const, spent: '9000', start: start - 1 }] };
    assert.deepEqual(withUsage(older, { windows: [], buckets: [], budgets: usage }, start + 10).limits, [{ name: 'cost/month', algorithm: 'budget', spent: '1200', start }]);
    assert.deepEqual(withUsage(undefined, { windows: [], buckets: [], budgets: usage }, start + 10).limits, [{ name: 'cost/month', algorithm: 'budget', spent: '1200', start }]);
  });
});
