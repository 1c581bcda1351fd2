/**
 * Runtime changes of a budget's spend (the admin API's top-up): the limiter's `changeSpend` and
 * `budgets`, the body's checks (`resolveSpendChange`) and how a budget reads in dollars.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Policy } from '../../src/limiter/index.ts';
import { budgetUsage, resolveSpendChange } from '../../src/ops/spend-admin.ts';

const T0 = Date.parse('2025-03-10T12:00:00Z');
const DAY = 86_400_000;
const POLICY: Policy = {
  limits: [
    { name: 'cost/1d', kind: 'cost', limit: 1_000, period: { kind: 'window', ms: DAY } },
    { name: 'requests/1m', kind: 'requests', limit: 10, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'cost/1d#ci', kind: 'cost', limit: 500, period: { kind: 'window', ms: DAY }, key: 'ci' },
  ],
};

function limiter(): { limiter: Limiter; clock: ManualClock; freed: string[] } {
  const clock = new ManualClock(T0);
  const freed: string[] = [];
  return { limiter: new Limiter({ clock, policyFor: (t) => (t === 'acme' ? POLICY : undefined), onFreed: (t) => freed.push(t) }), clock, freed };
}

describe('Limiter.changeSpend', () => {
  test('a credit lowers the spend, never below 0; set makes it; waiters woken only when it went down', () => {
    const { limiter: l, freed } = limiter();
    assert.equal(l.acquire('acme', { id: 'a', tokens: 0, cost: 700_000_000n }).ok, true); // 700 µ$
    assert.equal(l.acquire('acme', { id: 'b', tokens: 0, cost: 400_000_000n }).ok, false);
    const credited = l.changeSpend('acme', 'cost/1d', { op: 'credit', pico: 300_000_001n });
    assert.equal(credited.beforePico, 700_000_000n);
    assert.equal(credited.after.spentPico, 399_999_999n);
    assert.deepEqual(freed, ['acme']);
    assert.equal(l.acquire('acme', { id: 'b', tokens: 0, cost: 600_000_001n }).ok, true); // 999.999999… + … = exactly 1000 µ$
    assert.equal(l.changeSpend('acme', 'cost/1d', { op: 'credit', pico: 5_000_000_000n }).after.spentPico, 0n);
    assert.equal(l.changeSpend('acme', 'cost/1d', { op: 'set', pico: 900_000_000n }).after.spentPico, 900_000_000n);
    assert.equal(freed.length, 2);
    // A settlement refund after a credit cannot take the spend below 0 either.
    l.changeSpend('acme', 'cost/1d', { op: 'set', pico: 0n });
    assert.equal(l.settle('acme', 'b', 0, { cost: 0n }).settled, true);
    assert.equal(l.budgets('acme').find((b) => b.name === 'cost/1d')?.spentPico, 0n);
  });

  test('the current period only: once the period ends the changed spend is forgotten like any spend', () => {
    const { limiter: l, clock } = limiter();
    l.changeSpend('acme', 'cost/1d#ci', { op: 'set', pico: 500_000_000n });
    assert.equal(l.acquire('acme', { id: 'x', tokens: 0, key: 'ci', cost: 1n }).ok, false);
    assert.equal(l.acquire('acme', { id: 'y', tokens: 0, cost: 1n }).ok, true); // the tenant's own budget is untouched
    clock.set(Date.parse('2025-03-11T00:00:00Z'));
    const moved = l.changeSpend('acme', 'cost/1d#ci', { op: 'credit', pico: 1n });
    assert.deepEqual([moved.beforePico, moved.after.spentPico, moved.after.startMs, moved.after.endMs], [0n, 0n, T0 - 12 * 3_600_000 + DAY, T0 - 12 * 3_600_000 + 2 * DAY]);
  });

  test('creates the state of a tenant that has none; refuses what is not a budget', () => {
    const { limiter: l } = limiter();
    assert.equal(l.hasTenant('acme'), false);
    assert.equal(l.changeSpend('acme', 'cost/1d', { op: 'set', pico: 1_000_000n }).after.spentPico, 1_000_000n);
    assert.equal(l.hasTenant('acme'), true);
    assert.throws(() => l.changeSpend('acme', 'requests/1m', { op: 'set', pico: 0n }), RangeError);
    assert.throws(() => l.changeSpend('acme', 'cost/week', { op: 'set', pico: 0n }), RangeError);
    assert.throws(() => l.changeSpend('nobody', 'cost/1d', { op: 'set', pico: 0n }), RangeError);
    assert.throws(() => l.changeSpend('acme', 'cost/1d', { op: 'credit', pico: -1n }), RangeError);
  });

  test('budgets(): every budget, fresh ones with their period; dollars round the spend up and the remainder down', () => {
    const { limiter: l } = limiter();
    const fresh = l.budgets('acme');
    assert.deepEqual(
      fresh.map((b) => [b.name, b.key ?? null, b.limitMicros, b.spentPico, b.startMs, b.endMs]),
      [
        ['cost/1d', null, 1_000, 0n, T0 - 12 * 3_600_000, T0 + 12 * 3_600_000],
        ['cost/1d#ci', 'ci', 500, 0n, T0 - 12 * 3_600_000, T0 + 12 * 3_600_000],
      ],
    );
    l.changeSpend('acme', 'cost/1d', { op: 'set', pico: 1_500_000n }); // 1.5 µ$
    const view = l.budgets('acme')[0];
    assert.ok(view !== undefined);
    assert.deepEqual(budgetUsage(view, T0), {
      name: 'cost/1d',
      key: null,
      model: null,
      usd: { limit: '0.001000', spent: '0.000002', remaining: '0.000998' },
      periodStart: '2025-03-10T00:00:00Z',
      resetsAt: '2025-03-11T00:00:00Z',
      resetMs: 12 * 3_600_000,
    });
  });
});

describe('resolveSpendChange', () => {
  const config = buildConfig(
    {
      tenants: [
        {
          id: 'acme',
          keys: ['key-acme-00000', { key: 'key-acme-ci-000', id: 'ci', limits: [{ usd: 0.5, window: '1d' }] }, { key: 'key-acme-nb-000', id: 'nobudget' }],
          limits: [{ usd: 1, window: '1d' }, { usd: 20, period: 'month' }, { requests: 5, window: '1m' }],
        },
      ],
      models: [{ name: 'm', encoding: 'none', deployments: ['d'], prices: { input: 1, output: 1 } }],
      deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:1', api_key_env: 'K' }],
    },
    'spend.yaml',
    { K: 'k' },
  );
  const ok = (body: unknown) => {
    const r = resolveSpendChange(config, 'acme', body);
    assert.ok(r.ok, r.ok ? '' : r.problem.message);
    return [r.value.name, r.value.key ?? null, r.value.change.op, r.value.change.pico, r.value.amountUsd];
  };
  const refused = (body: unknown, tenant = 'acme') => {
    const r = resolveSpendChange(config, tenant, body);
    assert.ok(!r.ok);
    return [r.problem.status, r.problem.code];
  };

  test('names: the full name, the name without #key plus key, or the only budget of the key', () => {
    assert.deepEqual(ok({ limit: 'cost/1d', credit_usd: '0.25' }), ['cost/1d', null, 'credit', 250_000_000_000n, '0.250000']);
    assert.deepEqual(ok({ limit: 'cost/1d#ci', credit_usd: '$1' }), ['cost/1d#ci', 'ci', 'credit', 1_000_000_000_000n, '1.000000']);
    assert.deepEqual(ok({ limit: 'cost/1d', key: 'ci', set_spent_usd: '0.5' }), ['cost/1d#ci', 'ci', 'set', 500_000_000_000n, '0.500000']);
    assert.deepEqual(ok({ key: 'ci', set_spent_usd: '0' }), ['cost/1d#ci', 'ci', 'set', 0n, '0.000000']);
    assert.deepEqual(ok({ limit: 'cost/month', credit_usd: '0.000001' }), ['cost/month', null, 'credit', 1_000_000n, '0.000001']);
  });

  test('refusals: 400 for the body, the limit or the amount; 404 for the tenant or the key', () => {
    assert.deepEqual(refused({ credit_usd: '1' }), [400, 'invalid_request']); // two tenant budgets: name one
    assert.deepEqual(refused({ key: 'nobudget', credit_usd: '1' }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'requests/1m', credit_usd: '1' }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'cost/1d#ci', key: 'nobudget', credit_usd: '1' }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'cost/1d', set_spent_usd: '1.000001' }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'cost/1d', credit_usd: '1e3' }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'cost/1d', credit_usd: 0.5 }), [400, 'invalid_request']);
    assert.deepEqual(refused({ limit: 'cost/1d' }), [400, 'invalid_request']);
    assert.deepEqual(refused([]), [400, 'invalid_request']);
    assert.deepEqual(refused({ key: 'ghost', credit_usd: '1' }), [404, 'not_found']);
    assert.deepEqual(refused({ credit_usd: '1' }, 'ghost'), [404, 'not_found']);
  });
});
