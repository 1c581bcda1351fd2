import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';

const env = { SIM_KEY: 'secret-provider-key' };
const base = (tenant: Record<string, unknown> = {}, model: Record<string, unknown> = {}, deployment: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  tenants: [{ id: 'acme', keys: ['key-acme-0001'], limits: [], ...tenant }],
  models: [{ name: 'gpt-4o', encoding: 'o200k_base', deployments: ['sim'], ...model }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9090', api_key_env: 'SIM_KEY', ...deployment }],
  ...extra,
});
const PRICES = { input: 2.5, cached_input: '1.25', output: 10 };

function problems(raw: unknown): readonly string[] {
  try {
    buildConfig(raw, 'q.yaml', env);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err.problems;
  }
  assert.fail('expected a ConfigError');
}

describe('prices and cost limits in config', () => {
  test('prices become integer µ$ per million tokens, with documented defaults; a deployment may override them', () => {
    const loaded = buildConfig(base({ limits: [{ usd: 50, window: '1d' }, { usd: '1000', period: 'month', time_zone: 'Europe/Paris' }] }, { prices: PRICES }, { prices: { input: '2.75', output: 11 } }), 'q.yaml', env);
    assert.deepEqual(loaded.config.models[0]?.prices, { input: 2_500_000, cachedInput: 1_250_000, cacheWrite: 2_500_000, output: 10_000_000, reasoning: 10_000_000 });
    assert.deepEqual(loaded.config.deployments[0]?.prices, { input: 2_750_000, cachedInput: 2_750_000, cacheWrite: 2_750_000, output: 11_000_000, reasoning: 11_000_000 });
    assert.deepEqual(loaded.policies.get('acme')?.limits, [
      { name: 'cost/1d', kind: 'cost', limit: 50_000_000, period: { kind: 'window', ms: 86_400_000 } },
      { name: 'cost/month', kind: 'cost', limit: 1_000_000_000, period: { kind: 'calendar', unit: 'month', timeZone: 'Europe/Paris' } },
    ]);
  });

  test('a cost limit needs prices for every model it covers, a window or a period, and no tokens-limit options', () => {
    assert.deepEqual(problems(base({ limits: [{ usd: 5, window: '1d' }] })), ['q.yaml: tenants[0].limits[0].usd: a cost limit needs prices for every model it covers: set prices on model gpt-4o (or on each of its deployments)']);
    assert.deepEqual(problems(base({ limits: [{ usd: 5 }] }, { prices: PRICES })), ['q.yaml: tenants[0].limits[0].window: a cost (usd) limit needs either a window (e.g. 1d, 30d) or a calendar period (day, week, month)']);
    assert.deepEqual(problems(base({ limits: [{ usd: 5, window: '367d' }] }, { prices: PRICES })), ['q.yaml: tenants[0].limits[0].window: the window of a cost limit must be a whole number of ms from 1s to 366d']);
    assert.deepEqual(problems(base({ limits: [{ usd: 5, period: 'month', time_zone: 'Mars/Olympus' }] }, { prices: PRICES })), ['q.yaml: tenants[0].limits[0].time_zone: time_zone: an IANA time zone such as UTC, Europe/Paris or America/New_York']);
    assert.deepEqual(problems(base({ limits: [{ usd: '0.0000001', window: '1d' }] }, { prices: PRICES })), ['q.yaml: tenants[0].limits[0].usd: "0.0000001" is not an amount of US dollars (a number ≥ 0 with at most 6 decimals, e.g. 2.5 or "0.075")']);
    assert.deepEqual(problems(base({ limits: [{ tokens: 5, window: '30d' }] })), ['q.yaml: tenants[0].limits[0].window: window must be a whole number of ms from 1s to 1d']);
    assert.deepEqual(problems(base({ limits: [{ requests: 5, window: '1m', weights: { cache_read: 0 } }] })), ['q.yaml: tenants[0].limits[0].weights: weights apply to tokens limits only']);
    assert.deepEqual(problems(base({ spread: 2, limits: [{ usd: 5, window: '1d' }] }, { prices: PRICES })), ['q.yaml: tenants[0].limits[0].usd: cost (usd) limits are not supported on a spread tenant (spread: k)']);
  });

  test('a model priced only through its deployments is priced', () => {
    const loaded = buildConfig(base({ limits: [{ usd: 5, window: '30d' }] }, {}, { prices: PRICES }), 'q.yaml', env);
    assert.deepEqual(loaded.policies.get('acme')?.limits.map((l) => l.name), ['cost/30d']);
  });

  test('limits per key: named after the key id, scoped to it; a key with limits needs an id, unique in its tenant', () => {
    const loaded = buildConfig(
      base({ keys: ['key-acme-0001', { key: 'key-acme-0002', id: 'ci', limits: [{ usd: 5, window: '1d' }, { concurrent: 2 }, { tokens: 1000, window: '1m', weights: { cache_read: 0 } }] }], limits: [{ requests: 10, window: '1m' }] }, { prices: PRICES }),
      'q.yaml',
      env,
    );
    assert.deepEqual(loaded.policies.get('acme')?.limits.map((l) => [l.name, l.key]), [['requests/1m', undefined], ['cost/1d#ci', 'ci'], ['concurrent#ci', 'ci'], ['tokens/1m#ci', 'ci']]);
    assert.deepEqual((loaded.policies.get('acme')?.limits[3] as { weights?: unknown }).weights, { cacheRead: 0 });
    assert.equal(loaded.accessByKey.get('key-acme-0002')?.keyId, 'ci');
    assert.equal(loaded.accessByKey.get('key-acme-0001')?.keyId, undefined);
    assert.deepEqual(problems(base({ keys: [{ key: 'key-acme-0002', limits: [{ concurrent: 1 }] }] })), ['q.yaml: tenants[0].keys[0].id: a key with limits needs an id (a name for it: its limits are named after it)']);
    assert.deepEqual(problems(base({ keys: [{ key: 'key-acme-0002', id: 'a' }, { key: 'key-acme-0003', id: 'a' }] })), ['q.yaml: tenants[0].keys[1].id: duplicate key id "a" in tenant acme']);
  });

  test('central mode keeps no budgets', () => {
    const raw = base({ limits: [{ usd: 5, window: '1d' }] }, { prices: PRICES }, {}, { mode: 'central', cluster: { redis: { url: 'redis://127.0.0.1:6379' } } });
    assert.ok(problems(raw).includes('q.yaml: tenants[0].limits[0].usd: cost (usd) limits are kept in the owner\'s RAM: not supported with mode: central'));
  });
});
