/**
 * The money counter: integer pico-dollars added exactly, shown in USD only at scrape time as the
 * double nearest the exact sum (a float sum of the same additions drifts); a negative amount is
 * refused; NodeMetrics labels a tenant's spend by tenant and model, and by key only when given one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { NodeMetrics } from '../../src/ops/metrics.ts';
import { UsdCounter, picoToUsd } from '../../src/ops/usd-counter.ts';

test('picoToUsd: the double nearest the exact decimal value', () => {
  assert.equal(picoToUsd(0n), 0);
  assert.equal(picoToUsd(1n), 1e-12);
  assert.equal(picoToUsd(2_500_000_000n), 0.0025);
  assert.equal(picoToUsd(123_456_789_012_345n), 123.456789012345);
  // Beyond 2⁵³ p$ (about $9,007): still the nearest double of the exact text.
  assert.equal(picoToUsd(12_345_678_901_234_567_891n), Number('12345678.901234567891'));
  assert.equal(picoToUsd(-1_500_000_000_000n), -1.5);
});

test('UsdCounter adds exactly: 0.1 $ ten times shows 1, where a float sum shows 0.9999999999999999', async () => {
  const r = new Registry();
  const c = new UsdCounter(r, 'x_spend_usd_total', 'Spend.');
  let float = 0;
  for (let i = 0; i < 10; i++) {
    c.add('a', () => ({ tenant: 'a' }), 100_000_000_000n);
    float += 0.1;
  }
  assert.notEqual(float, 1);
  assert.match(await r.metrics(), /^# TYPE x_spend_usd_total counter$/m);
  assert.match(await r.metrics(), /^x_spend_usd_total\{tenant="a"\} 1$/m);
  assert.throws(() => c.add('a', () => ({ tenant: 'a' }), -1n), RangeError);
});

test('NodeMetrics.spent: tenant and model, key only for a budgeted key', async () => {
  const m = new NodeMetrics();
  m.spent('acme', 'gpt-4o', undefined, 1_000_000n);
  m.spent('acme', 'gpt-4o', 'ci', 3_000_000n);
  m.spent('acme', 'gpt-4o', undefined, 2_000_000n);
  const text = await m.registry.metrics();
  assert.match(text, /^quotaring_tenant_spend_usd_total\{tenant="acme",model="gpt-4o"\} 0\.000003$/m);
  assert.match(text, /^quotaring_tenant_spend_usd_total\{tenant="acme",model="gpt-4o",key="ci"\} 0\.000003$/m);
  assert.equal(text.match(/^quotaring_tenant_spend_usd_total\{/gm)?.length, 2);
});
