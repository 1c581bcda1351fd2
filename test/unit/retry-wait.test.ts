/**
 * providerRetryWaitMs: the wait each provider writes into a 429, in ms.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { providerRetryWaitMs } from '../../src/providers/retry-wait.ts';

const NOW = Date.parse('2026-12-01T10:00:00Z');

test('retry-after-ms wins, then x-ms-retry-after-ms, then retry-after seconds or date', () => {
  assert.equal(providerRetryWaitMs({ 'retry-after-ms': '1574', 'retry-after': '2' }, NOW), 1574);
  assert.equal(providerRetryWaitMs({ 'x-ms-retry-after-ms': '250.2' }, NOW), 251);
  assert.equal(providerRetryWaitMs({ 'retry-after': '3' }, NOW), 3000);
  assert.equal(providerRetryWaitMs({ 'retry-after': 'Tue, 01 Dec 2026 10:00:05 GMT' }, NOW), 5000);
  assert.equal(providerRetryWaitMs({ 'retry-after': 'Tue, 01 Dec 2026 09:00:00 GMT' }, NOW), 0, 'a date in the past: no wait');
});

test('OpenAI reset durations count only for the exhausted limit; the later of two wins', () => {
  assert.equal(providerRetryWaitMs({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '1.574s', 'x-ratelimit-remaining-requests': '5', 'x-ratelimit-reset-requests': '20s' }, NOW), 1574);
  assert.equal(providerRetryWaitMs({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '6m0s', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '20ms' }, NOW), 360_000);
  assert.equal(providerRetryWaitMs({ 'x-ratelimit-remaining-tokens': '7', 'x-ratelimit-reset-tokens': '1s' }, NOW), undefined, 'nothing exhausted: no basis for a wait');
});

test('Anthropic reset timestamps of the exhausted limit', () => {
  const h = { 'anthropic-ratelimit-output-tokens-remaining': '0', 'anthropic-ratelimit-output-tokens-reset': '2026-12-01T10:00:02.500Z', 'anthropic-ratelimit-requests-remaining': '10', 'anthropic-ratelimit-requests-reset': '2026-12-01T10:00:30Z' };
  assert.equal(providerRetryWaitMs(h, NOW), 2500);
});

test('no usable header: undefined; garbage is ignored', () => {
  assert.equal(providerRetryWaitMs({}, NOW), undefined);
  assert.equal(providerRetryWaitMs({ 'retry-after': 'soon', 'retry-after-ms': 'x' }, NOW), undefined);
  assert.equal(providerRetryWaitMs({ 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': 'later' }, NOW), undefined);
});
