/**
 * When a budget renews, as clients are told it: the exact end of its period, whatever time passed
 * between the limiter's decision and the rendering of the reply (`x-quotaring-budget-reset`, the
 * `budget_exceeded` message), and for a tenant the limiter has no state for yet.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Policy } from '../../src/limiter/index.ts';
import { budgetHeaders } from '../../src/providers/rate-limit-headers.ts';

const MONTH: Policy = { limits: [{ name: 'cost/month', kind: 'cost', limit: 1_000_000, period: { kind: 'calendar', unit: 'month', timeZone: 'America/New_York' } }] };
/** Mid-March 2025 in New York, not on a whole second: the month ends 2025-04-01T04:00:00Z. */
const T0 = Date.parse('2025-03-20T12:00:00.400Z');
const END = Date.parse('2025-04-01T04:00:00Z');

describe('a budget\'s renewal time', () => {
  test('the period end exactly, even when the reply is rendered a few ms after the decision', () => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ clock, policyFor: () => MONTH });
    const admitted = limiter.acquire('t', { id: 'a', tokens: 0, cost: 400_000_000_000n });
    assert.equal(admitted.ok, true);
    assert.equal(admitted.limits[0]?.resetMs, END - T0);
    // The reply's headers are rendered later (an await, a busy event loop): 700 ms here.
    assert.equal(budgetHeaders(admitted.limits, T0 + 700)['x-quotaring-budget-reset'], '2025-04-01T04:00:00Z');
    clock.advance(3);
    const refused = limiter.acquire('t', { id: 'b', tokens: 0, cost: 700_000_000_000n });
    assert.equal(refused.ok, false);
    assert.equal(refused.limits[0]?.resetAt, END);
    assert.equal(budgetHeaders(refused.limits, T0 + 900)['x-quotaring-budget-reset'], '2025-04-01T04:00:00Z');
  });

  test('a tenant without state yet: its budget renews at the end of the current period, not now', () => {
    const limiter = new Limiter({ clock: new ManualClock(T0), policyFor: () => MONTH });
    const [fresh] = limiter.peekAll('fresh');
    assert.deepEqual(fresh, { name: 'cost/month', kind: 'cost', limit: 1_000_000, remaining: 1_000_000, resetMs: END - T0, resetAt: END });
    // The first request of a tenant, refused because it alone exceeds the budget.
    const tooLarge = limiter.acquire('other', { id: 'x', tokens: 0, cost: 2_000_000_000_000n });
    assert.equal(!tooLarge.ok && tooLarge.reason, 'too_large');
    assert.equal(budgetHeaders(tooLarge.limits, T0)['x-quotaring-budget-reset'], '2025-04-01T04:00:00Z');
  });
});
