/**
 * Provider feedback without I/O: the rate-limit header parser (OpenAI, Azure, Anthropic; hostile
 * values ignored or clamped, never thrown, bounded work) and the lowering rule of
 * `ProviderFeedback` (target, ageing, margin, the node's own lease, one call per 250 ms) against a
 * fake lowering script and a manual clock.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { feedbackFromConfig, maxOutsideOf } from '../../src/globalcap/feedback-from-config.ts';
import type { LowerOptions, LowerResult } from '../../src/globalcap/feedback-script.ts';
import { ProviderFeedback } from '../../src/globalcap/provider-feedback.ts';
import type { FeedbackBucket } from '../../src/globalcap/provider-feedback.ts';
import { runCapCall } from '../../src/globalcap/cap-call.ts';
import { MAX_RESET_MS, parseCount, parseGoDuration, parseRfc3339, readProviderRateLimits } from '../../src/providers/rate-limit-read.ts';
import { formatGoDuration, rfc3339After } from '../../src/providers/rate-limit-headers.ts';

const NOW = Date.parse('2026-12-01T10:00:00Z');

describe('readProviderRateLimits', () => {
  test('OpenAI: remaining, limit and reset (Go durations) of both kinds', () => {
    const r = readProviderRateLimits(
      {
        'x-ratelimit-limit-requests': '500',
        'x-ratelimit-remaining-requests': '499',
        'x-ratelimit-reset-requests': '120ms',
        'x-ratelimit-limit-tokens': '30000',
        'x-ratelimit-remaining-tokens': '29100',
        'x-ratelimit-reset-tokens': '1.8s',
      },
      NOW,
    );
    assert.deepEqual(r, { requests: { remaining: 499, limit: 500, resetMs: 120 }, tokens: { remaining: 29100, limit: 30000, resetMs: 1800 }, invalid: { requests: 0, tokens: 0 } });
  });

  test('Azure sends remaining only', () => {
    assert.deepEqual(readProviderRateLimits({ 'x-ratelimit-remaining-requests': '59', 'x-ratelimit-remaining-tokens': '59000' }, NOW), {
      requests: { remaining: 59 },
      tokens: { remaining: 59000 },
      invalid: { requests: 0, tokens: 0 },
    });
  });

  test('Anthropic: reset as an RFC 3339 time, ms from now; array values read first', () => {
    const r = readProviderRateLimits(
      {
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-requests-remaining': ['49', '1'],
        'anthropic-ratelimit-requests-reset': '2026-12-01T10:00:02Z',
        'anthropic-ratelimit-tokens-limit': '40000',
        'anthropic-ratelimit-tokens-remaining': '39000',
        'anthropic-ratelimit-tokens-reset': '2026-12-01T10:00:01.500+00:00',
      },
      NOW,
    );
    assert.deepEqual(r, { requests: { remaining: 49, limit: 50, resetMs: 2000 }, tokens: { remaining: 39000, limit: 40000, resetMs: 1500 }, invalid: { requests: 0, tokens: 0 } });
  });

  test('both families: the least remaining wins; none: no kind', () => {
    const r = readProviderRateLimits({ 'x-ratelimit-remaining-tokens': '900', 'anthropic-ratelimit-tokens-remaining': '800' }, NOW);
    assert.deepEqual(r.tokens, { remaining: 800 });
    assert.deepEqual(readProviderRateLimits({}, NOW), { invalid: { requests: 0, tokens: 0 } });
  });

  test('what the gateway and simulator write reads back', () => {
    for (const ms of [0, 20, 999, 1000, 1574, 59_000, 360_000, 3_723_000]) assert.equal(parseGoDuration(formatGoDuration(ms)), ms, formatGoDuration(ms));
    assert.equal(parseRfc3339(rfc3339After(NOW, 1500)), NOW + 2000);
  });

  test('hostile values are left out and counted, never thrown; resets are clamped', () => {
    const hostile = ['-1', 'NaN', 'Infinity', '1e9', '0x10', '12abc', '', ' ', '99999999999999999999', '1'.repeat(10_000), '١٢٣', '+5', '5.5'];
    for (const v of hostile) {
      const r = readProviderRateLimits({ 'x-ratelimit-remaining-tokens': v, 'anthropic-ratelimit-requests-remaining': v }, NOW);
      assert.equal(r.tokens, undefined, JSON.stringify(v.slice(0, 20)));
      assert.equal(r.requests, undefined);
      assert.deepEqual(r.invalid, { requests: 1, tokens: 1 });
    }
    // Limits and resets that do not parse are left out; the remaining still counts.
    const r = readProviderRateLimits({ 'x-ratelimit-remaining-tokens': '10', 'x-ratelimit-limit-tokens': '-5', 'x-ratelimit-reset-tokens': '-1s' }, NOW);
    assert.deepEqual(r, { tokens: { remaining: 10 }, invalid: { requests: 0, tokens: 2 } });
    // A limit of 0 is not a limit; a reset of a year is a day; a reset in the past is 0.
    assert.deepEqual(readProviderRateLimits({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-limit-requests': '0', 'x-ratelimit-reset-requests': '8760h' }, NOW).requests, { remaining: 0, resetMs: MAX_RESET_MS });
    assert.deepEqual(readProviderRateLimits({ 'anthropic-ratelimit-tokens-remaining': '1', 'anthropic-ratelimit-tokens-reset': '2020-01-01T00:00:00Z' }, NOW).tokens, { remaining: 1, resetMs: 0 });
  });

  test('the parsers reject what is not their format, in bounded time', () => {
    for (const v of ['1', '1x', 's', '1..5s', '.s', '1s-', '--1s', '1h1', '1 s']) assert.equal(parseGoDuration(v), undefined, v);
    for (const v of ['2026-12-01', '2026-12-01T10:00:00', '2026-13-01T10:00:00Z', '2026-12-01T10:00:00.Z', '2026-12-01T10:00:00+0000', 'Tue, 01 Dec 2026 10:00:00 GMT']) assert.equal(parseRfc3339(v), undefined, v);
    assert.equal(parseCount('  42 '), 42);
    const long = '1'.repeat(1_000_000) + 's';
    const started = process.hrtime.bigint();
    assert.equal(parseGoDuration(long), undefined);
    assert.equal(parseRfc3339(long), undefined);
    assert.equal(parseCount(long), undefined);
    assert.ok(process.hrtime.bigint() - started < 50_000_000n, 'a long value is refused by its length, not scanned');
  });
});

/** A tokens bucket of a 60,000 TPM quota at headroom 0.9: capacity 54,000, margin 6,000, allowance 27,000. */
const TOKENS: FeedbackBucket = { kind: 'tokens', key: 'k', logKey: 'k:feedback', capacity: 54_000, ratePerSec: 900, ttlMs: 60_000, quota: 60_000, margin: 6_000, allowance: 27_000 };

function feedback(balance = 0): { fb: ProviderFeedback; clock: ManualClock; calls: { at: number; o: LowerOptions }[] } {
  const clock = new ManualClock(NOW);
  const calls: { at: number; o: LowerOptions }[] = [];
  const lower = async (_key: string, _log: string, o: LowerOptions): Promise<LowerResult> => {
    calls.push({ at: clock.now(), o });
    return { lowered: 1, capped: false, level: 0, used: 1 };
  };
  const fb = new ProviderFeedback({ clock, lower, call: runCapCall, deployments: new Map([['d', [TOKENS]]]), balance: () => balance, minIntervalMs: 250 });
  return { fb, clock, calls };
}

const tokensLeft = (remaining: number) => readProviderRateLimits({ 'x-ratelimit-remaining-tokens': String(remaining) }, NOW);

describe('ProviderFeedback: the lowering rule', () => {
  test('target = remaining aged by the refill since the request was sent − margin − own lease', async () => {
    const { fb, clock, calls } = feedback(500);
    const sentAt = clock.now();
    clock.advance(100);
    fb.observe('d', tokensLeft(20_000), sentAt);
    await fb.settled();
    // 20,000 + 100 ms × 1,000 tokens/s − 6,000 − 500.
    assert.equal(calls.length, 1);
    assert.equal(calls[0]?.o.target, 20_000 + 100 - 6_000 - 500);
    assert.equal(calls[0]?.o.allowance, 27_000);
    assert.equal(calls[0]?.o.capacity, 54_000);
  });

  test('a target at or above capacity needs no call (counted unchanged); a deployment without feedback is ignored', async () => {
    const { fb, clock, calls } = feedback();
    fb.observe('d', tokensLeft(60_000), clock.now());
    fb.observe('other', tokensLeft(0), clock.now());
    fb.observe('d', readProviderRateLimits({ 'x-ratelimit-remaining-requests': '0' }, NOW), clock.now());
    await fb.settled();
    assert.equal(calls.length, 0);
    assert.equal(fb.counts().find((c) => c.result === 'unchanged')?.n, 1);
    assert.equal(fb.has('other'), false);
  });

  test('at most one call per 250 ms: replies within it keep the lowest target, aged to the call', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const { fb, clock, calls } = feedback();
    const advance = (ms: number): void => {
      clock.advance(ms);
      t.mock.timers.tick(ms);
    };
    fb.observe('d', tokensLeft(30_000), clock.now());
    await fb.settled();
    assert.equal(calls.length, 1);
    advance(50);
    fb.observe('d', tokensLeft(10_000), clock.now());
    advance(50);
    fb.observe('d', tokensLeft(12_000), clock.now());
    await fb.settled();
    advance(149);
    await fb.settled();
    assert.equal(calls.length, 1, 'within 250 ms of the last call: no call yet');
    advance(1);
    await fb.settled();
    assert.equal(calls.length, 2);
    assert.equal(calls[1]?.at, NOW + 250);
    // The lower of the two (10,000 at +50 ms), aged by 200 ms at 1,000 tokens/s, less the margin.
    assert.equal(calls[1]?.o.target, 10_000 + 200 - 6_000);
    fb.stop();
  });

  test('invalid header values are counted per kind; a failed call is counted failed', async () => {
    const clock = new ManualClock(NOW);
    const fb = new ProviderFeedback({
      clock,
      lower: () => Promise.reject(new Error('down')),
      call: runCapCall,
      deployments: new Map([['d', [TOKENS]]]),
      balance: () => 0,
    });
    fb.observe('d', readProviderRateLimits({ 'x-ratelimit-remaining-tokens': '-3' }, NOW), clock.now());
    fb.observe('d', tokensLeft(0), clock.now());
    await fb.settled();
    const n = (result: string) => fb.counts().find((c) => c.kind === 'tokens' && c.result === result)?.n;
    assert.equal(n('invalid'), 1);
    assert.equal(n('failed'), 1);
  });

  test('quota.feedback: on by default with max_outside 0.5; false turns it off; max_outside in (0, 1]', () => {
    assert.equal(maxOutsideOf(undefined), 0.5);
    assert.equal(maxOutsideOf(true), 0.5);
    assert.equal(maxOutsideOf(false), undefined);
    assert.equal(maxOutsideOf({ max_outside: 0.2 }), 0.2);
    const base = (feedback: unknown) => ({
      tenants: [{ id: 't', keys: ['key-t-000000'], limits: [] }],
      models: [{ name: 'm', encoding: 'o200k_base', deployments: ['d'] }],
      deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:1', quota: { tpm: 1000, feedback } }],
    });
    assert.deepEqual(buildConfig(base({}), 'f.yaml', {}).config.deployments[0]?.quota.feedback, { max_outside: 0.5 });
    assert.throws(() => buildConfig(base({ max_outside: 0 }), 'f.yaml', {}), /max_outside/);
    assert.throws(() => buildConfig(base({ max_outside: 1.5 }), 'f.yaml', {}), /max_outside/);
    assert.throws(() => buildConfig(base({ maxOutside: 0.5 }), 'f.yaml', {}), /maxOutside/);
  });

  test('from the config: the margin is quota × (1 − headroom) for a token bucket, 0 for a sliding window; feedback: false has none', async () => {
    const deployments = [
      { name: 'tb', provider: 'openai', base_url: 'http://127.0.0.1:1', quota: { tpm: 60_000 } },
      { name: 'sw', provider: 'openai', base_url: 'http://127.0.0.1:1', quota: { tpm: 60_000, algorithm: 'sliding_window' } },
      { name: 'off', provider: 'openai', base_url: 'http://127.0.0.1:1', quota: { tpm: 60_000, feedback: false } },
    ];
    const config = buildConfig({ tenants: [{ id: 't', keys: ['key-t-000000'], limits: [] }], models: [{ name: 'm', encoding: 'o200k_base', deployments: ['tb', 'sw', 'off'] }], deployments }, 'f.yaml', {});
    const quotas = Object.fromEntries(['tb', 'sw', 'off'].map((n) => [n, { tpm: 60_000, headroom: 0.9, algorithm: n === 'sw' ? ('sliding_window' as const) : ('token_bucket' as const) }]));
    const never = (): Promise<never> => Promise.reject(new Error('no Redis here'));
    const clock = new ManualClock(NOW);
    const leases = new CapLeases({ cluster: 'c', deployments: quotas, scripts: { tokenBucket: never, lease: never }, clock, sweepMs: 0 });
    const calls: { key: string; o: LowerOptions }[] = [];
    const lower = async (key: string, _log: string, o: LowerOptions): Promise<LowerResult> => {
      calls.push({ key, o });
      return { lowered: 0, capped: false, level: 0, used: 0 };
    };
    const fb = feedbackFromConfig(config, quotas, { clock, call: runCapCall, lower, leases });
    assert.ok(fb !== undefined);
    assert.deepEqual([fb.has('tb'), fb.has('sw'), fb.has('off')], [true, true, false]);
    fb.observe('tb', tokensLeft(54_000), clock.now());
    fb.observe('sw', tokensLeft(54_000), clock.now());
    await fb.settled();
    // tb: 54,000 − 6,000 < its capacity of 54,000; sw: 54,000 ≥ its capacity of ⌊60,000 × 0.1⌋ = 5,999 (no call).
    assert.deepEqual(calls.map((c) => [c.key, c.o.target, c.o.capacity, c.o.allowance]), [['qr:default:cap:{deployment:tb:tpm}', 48_000, 54_000, 27_000]]);
    fb.observe('sw', tokensLeft(3_000), clock.now());
    await fb.settled();
    assert.deepEqual(calls.slice(1).map((c) => [c.key, c.o.target, c.o.capacity, c.o.allowance]), [['qr:default:cap:{deployment:sw:tpm}', 3_000, 5_999, 2_999.5]]);
    fb.stop();
    await leases.close();
  });
});
