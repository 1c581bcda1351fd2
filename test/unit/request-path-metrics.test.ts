/**
 * The request-path counter and histogram expose exactly what prom-client's own Counter and
 * Histogram expose for the same observations: the same text, line for line, from `registry.metrics()`
 * (cumulative buckets with `le` including `+Inf`, `_sum`, `_count`; label sets in first-seen order).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { PathCounter, PathHistogram } from '../../src/ops/request-path-metrics.ts';

const BOUNDS = [0.001, 0.01, 0.1, 1];
const VALUES: [string, number][] = [
  ['interactive', 0],
  ['interactive', 0.001],
  ['batch', 0.5],
  ['interactive', 0.0105],
  ['batch', 7],
  ['interactive', 1],
];

test('PathHistogram = prom-client Histogram, text for text', async () => {
  const ours = new Registry();
  const theirs = new Registry();
  const h = new PathHistogram(ours, 'x_wait_seconds', 'Wait.', BOUNDS);
  const ref = new Histogram({ name: 'x_wait_seconds', help: 'Wait.', labelNames: ['priority'], buckets: BOUNDS, registers: [theirs] });
  for (const [priority, v] of VALUES) {
    h.observe(priority, () => ({ priority }), v);
    ref.observe({ priority }, v);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /^x_wait_seconds_bucket\{le="0\.001",priority="interactive"\} 2$/m);
  assert.match(await ours.metrics(), /^x_wait_seconds_bucket\{le="\+Inf",priority="batch"\} 2$/m);
  assert.match(await ours.metrics(), /^x_wait_seconds_sum\{priority="batch"\} 7\.5$/m);
});

test('PathCounter = prom-client Counter, text for text; a series without labels too', async () => {
  const ours = new Registry();
  const theirs = new Registry();
  const c = new PathCounter(ours, 'x_decisions_total', 'Decisions.');
  const ref = new Counter({ name: 'x_decisions_total', help: 'Decisions.', labelNames: ['result', 'kind'], registers: [theirs] });
  for (const [result, kind, by] of [['admitted', 'none', 1], ['limited', 'tokens', 1], ['admitted', 'none', 3]] as const) {
    c.add(`${result}|${kind}`, () => ({ result, kind }), by);
    ref.inc({ result, kind }, by);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /^x_decisions_total\{result="admitted",kind="none"\} 4$/m);
  const h = new PathHistogram(ours, 'x_duration_seconds', 'Duration.', BOUNDS);
  h.observe('', () => ({}), 0.05);
  assert.match(await ours.metrics(), /^x_duration_seconds_bucket\{le="0\.1"\} 1$/m);
  assert.match(await ours.metrics(), /^x_duration_seconds_count 1$/m);
});
