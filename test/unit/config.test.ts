import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseDuration, windowLabel } from '../../src/config/duration.ts';
import { ConfigError, buildConfig, loadConfig } from '../../src/config/load.ts';

const base = () => ({
  tenants: [{ id: 'acme', keys: ['key-acme-0001'], limits: [{ requests: 100, window: '1m' }, { tokens: 300, window: '1m' }, { concurrent: 2 }] }],
  models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9090', api_key_env: 'SIM_KEY' }],
});
const env = { SIM_KEY: 'secret-provider-key' };

function problems(raw: unknown, e: NodeJS.ProcessEnv = env): readonly string[] {
  try {
    buildConfig(raw, 'q.yaml', e);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err.problems;
  }
  assert.fail('expected a ConfigError');
}

describe('durations', () => {
  test('parse', () => {
    assert.equal(parseDuration('500ms'), 500);
    assert.equal(parseDuration('1s'), 1_000);
    assert.equal(parseDuration('1m'), 60_000);
    assert.equal(parseDuration('1h30m'), 5_400_000);
    assert.equal(parseDuration('1d'), 86_400_000);
    assert.equal(parseDuration('1x'), undefined);
    assert.equal(parseDuration('m'), undefined);
    assert.equal(parseDuration(''), undefined);
    assert.equal(parseDuration('1m '), undefined);
  });
  test('window labels', () => {
    assert.equal(windowLabel(60_000), '1m');
    assert.equal(windowLabel(86_400_000), '1d');
    assert.equal(windowLabel(90_000), '90s');
  });
});

describe('config', () => {
  test('a valid config gets defaults, policies and key lookup', () => {
    const loaded = buildConfig(base(), 'q.yaml', env);
    assert.equal(loaded.config.server.port, 8080);
    assert.equal(loaded.config.server.body_limit, 4 * 1_048_576);
    assert.equal(loaded.tenantByKey.get('key-acme-0001')?.id, 'acme');
    assert.deepEqual(loaded.policies.get('acme')?.limits.map((l) => l.name), ['requests/1m', 'tokens/1m', 'concurrent']);
    assert.equal(loaded.deployments.get('sim')?.apiKey, 'secret-provider-key');
    assert.equal(loaded.deployments.get('sim')?.headroom, 0.9);
    assert.ok(Object.isFrozen(loaded.config.tenants[0]));
  });

  test('cluster: what each bad cluster section gets', () => {
    const m = { id: 'node-1', url: 'http://127.0.0.1:8101' };
    assert.deepEqual(problems({ ...base(), cluster: { members: [m], redis: { url: 'redis://127.0.0.1:6379' } } }), [
      'q.yaml: cluster: set either members (static membership) or redis.url (Redis membership), not both',
    ]);
    assert.deepEqual(problems({ ...base(), cluster: { members: [{ id: 'node-1', url: '127.0.0.1:8101' }] } }), [
      'q.yaml: cluster.members[0].url: member url: an http:// or https:// URL such as http://127.0.0.1:8101',
    ]);
    assert.deepEqual(problems({ ...base(), cluster: { members: [{ ...m, weight: 0 }] } }), ['q.yaml: cluster.members[0].weight: member weight: a positive integer']);
    assert.deepEqual(problems({ ...base(), cluster: { members: [m, { ...m }] } }), ['q.yaml: cluster.members[1].id: duplicate member id "node-1"']);
    assert.deepEqual(problems({ ...base(), cluster: { redis: { url: 'http://127.0.0.1:6379' } } }), ['q.yaml: cluster.redis.url: a redis:// or rediss:// URL']);
    const keyed = base();
    keyed.tenants[0]!.keys = [{ env: 'ACME_KEY' } as unknown as string];
    assert.deepEqual(problems(keyed), ['q.yaml: tenants[0].keys[0].env: environment variable ACME_KEY is not set']);
  });

  test('cluster.redis: the URL from the file (no password), from url_env, with password_env; problems never echo a value', () => {
    const redis = (r: unknown, e: NodeJS.ProcessEnv = env) => buildConfig({ ...base(), cluster: { redis: r } }, 'q.yaml', e).config.cluster.redis?.url;
    assert.equal(redis({ url: 'redis://10.0.0.5:6379/2' }), 'redis://10.0.0.5:6379/2');
    assert.equal(redis({ url_env: 'QR_REDIS' }, { ...env, QR_REDIS: 'rediss://app:pw%40x@cache:6380' }), 'rediss://app:pw%40x@cache:6380');
    // The password goes into the URL percent-encoded (ioredis decodes it): any character survives.
    const withPassword = redis({ url: 'redis://app@cache:6379/1', password_env: 'QR_PW' }, { ...env, QR_PW: 'p@ss:w/rd%41 é' });
    assert.equal(withPassword, `redis://app:${encodeURIComponent('p@ss:w/rd%41 é')}@cache:6379/1`);
    assert.equal(decodeURIComponent(new URL(withPassword ?? '').password), 'p@ss:w/rd%41 é');
    assert.equal(redis({ url_env: 'QR_REDIS', password_env: 'QR_PW' }, { ...env, QR_REDIS: 'redis://cache:6379', QR_PW: 'hunter22' }), 'redis://:hunter22@cache:6379');

    const bad = (r: unknown, e: NodeJS.ProcessEnv = env) => problems({ ...base(), cluster: { redis: r } }, e);
    assert.deepEqual(bad({ url: 'redis://:hunter22@cache:6379' }), [
      'q.yaml: cluster.redis.url: a password in the config file: put the whole URL in an environment variable named by url_env, or the password in one named by password_env',
    ]);
    assert.deepEqual(bad({ url: 'redis://u:hunter22@cache:6379' }).length, 1);
    assert.deepEqual(bad({ url: 'redis://cache:6379', url_env: 'QR_REDIS' }), ['q.yaml: cluster.redis: set exactly one of url, url_env and sentinels']);
    assert.deepEqual(bad({ password_env: 'QR_PW' }), ['q.yaml: cluster.redis: set exactly one of url, url_env and sentinels']);
    assert.deepEqual(bad({ url_env: 'qr redis' }), ['q.yaml: cluster.redis.url_env: an environment variable name']);
    assert.deepEqual(bad({ url_env: 'QR_REDIS' }), ['q.yaml: cluster.redis.url_env: environment variable QR_REDIS is not set']);
    assert.deepEqual(bad({ url_env: 'QR_REDIS' }, { ...env, QR_REDIS: 'http://:hunter22@cache' }), ['q.yaml: cluster.redis.url_env: environment variable QR_REDIS does not hold a redis:// or rediss:// URL']);
    assert.deepEqual(bad({ url: 'redis://cache:6379', password_env: 'QR_PW' }), ['q.yaml: cluster.redis.password_env: environment variable QR_PW is not set']);
    assert.deepEqual(bad({ url_env: 'QR_REDIS', password_env: 'QR_PW' }, { ...env, QR_REDIS: 'redis://:one@cache', QR_PW: 'two' }), [
      'q.yaml: cluster.redis.password_env: the URL already carries a password; keep it in one place',
    ]);
    for (const p of [...bad({ url_env: 'QR_REDIS' }, { ...env, QR_REDIS: 'http://:hunter22@cache' }), ...bad({ url: 'redis://:hunter22@cache:6379' })]) assert.ok(!p.includes('hunter22'), p);
  });

  test('unknown keys are refused with the file and key path', () => {
    const raw = base();
    (raw.tenants[0] as Record<string, unknown>).rate = 5;
    assert.deepEqual(problems(raw), ['q.yaml: tenants[0]: unknown key "rate"']);
  });

  test('bad values name their path', () => {
    const raw = base();
    raw.tenants[0]!.limits[0] = { requests: -1, window: '1m' };
    assert.match(problems(raw)[0] ?? '', /^q\.yaml: tenants\[0\]\.limits\[0\]\.requests: /);
    const raw2 = base();
    raw2.tenants[0]!.limits[1] = { tokens: 10, window: '2d' };
    assert.deepEqual(problems(raw2), ['q.yaml: tenants[0].limits[1].window: window must be a whole number of ms from 1s to 1d']);
    const raw3 = base();
    raw3.tenants[0]!.limits[1] = { tokens: 10, window: 'soon' };
    assert.deepEqual(problems(raw3), ['q.yaml: tenants[0].limits[1].window: "soon" is not a duration (use e.g. 500ms, 1s, 1m, 1h, 1d)']);
  });

  test('a limit sets exactly one kind', () => {
    const raw = base();
    (raw.tenants[0]!.limits as unknown[])[0] = { requests: 5, tokens: 5, window: '1m' };
    assert.deepEqual(problems(raw), ['q.yaml: tenants[0].limits[0]: a limit sets exactly one of requests, tokens, concurrent or usd']);
  });

  test('cross references are checked', () => {
    const raw = base();
    raw.models[0]!.deployments = ['nope'];
    assert.deepEqual(problems(raw), ['q.yaml: models[0].deployments[0]: no deployment named "nope"']);
  });

  test('missing env vars are named, and secrets never appear in messages', () => {
    const msgs = problems(base(), {});
    assert.deepEqual(msgs, ['q.yaml: deployments[0].api_key_env: environment variable SIM_KEY is not set']);
    const raw = base();
    raw.tenants.push({ id: 'other', keys: ['key-acme-0001'], limits: [] });
    const dup = problems(raw);
    assert.deepEqual(dup, ['q.yaml: tenants[1].keys[0]: this key is already given to tenant "acme"']);
    assert.ok(!dup.join().includes('key-acme-0001'));
  });

  test('YAML files: syntax errors give a line, valid files load', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qr-config-'));
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'tenants:\n  - id: a\n    keys: [x\n');
    assert.throws(() => loadConfig(bad, env), (err: unknown) => err instanceof ConfigError && /bad\.yaml: line \d+/.test(err.message));
    assert.throws(() => loadConfig(join(dir, 'missing.yaml'), env), /missing\.yaml: cannot read: ENOENT/);
    const good = join(dir, 'good.yaml');
    writeFileSync(good, JSON.stringify(base()));
    assert.equal(loadConfig(good, env).config.tenants[0]?.id, 'acme');
  });

  test('the shipped demo config is valid', () => {
    const loaded = loadConfig(new URL('../../cluster/demo.yaml', import.meta.url).pathname, { QUOTARING_SIM_KEY: 'x' });
    assert.equal(loaded.config.tenants.length, 2);
  });
});

describe('priority tiers', () => {
  test('defaults: interactive (no floor, no wait) then batch (floor 0.2, 60 s); a tenant defaults to the first tier', () => {
    const loaded = buildConfig(base(), 'q.yaml', env);
    assert.deepEqual([...loaded.tiers.values()], [
      { name: 'interactive', rank: 0, floor: 0, maxWaitMs: 0 },
      { name: 'batch', rank: 1, floor: 0.2, maxWaitMs: 60_000 },
    ]);
    const access = loaded.accessByKey.get('key-acme-0001');
    assert.equal(access?.tier.name, 'interactive');
    assert.deepEqual([...(access?.tiers.keys() ?? [])], ['interactive', 'batch']);
    assert.equal(loaded.config.queue.max_depth, 100);
  });
  test('a key may narrow its tiers and pick its default; a key limited to other tiers defaults to the first of its own', () => {
    const raw = base();
    (raw.tenants[0] as Record<string, unknown>).keys = ['key-acme-0001', { key: 'key-acme-batch', priority: 'batch' }, { env: 'BATCH_KEY', priorities: ['batch'] }];
    const loaded = buildConfig(raw, 'q.yaml', { ...env, BATCH_KEY: 'key-from-env-01' });
    assert.equal(loaded.accessByKey.get('key-acme-batch')?.tier.name, 'batch');
    assert.deepEqual([...(loaded.accessByKey.get('key-acme-batch')?.tiers.keys() ?? [])], ['interactive', 'batch']);
    assert.equal(loaded.accessByKey.get('key-from-env-01')?.tier.name, 'batch');
    assert.deepEqual([...(loaded.accessByKey.get('key-from-env-01')?.tiers.keys() ?? [])], ['batch']);
  });
  test('model weights: one per deployment, at least one above 0', () => {
    const raw = base();
    (raw.models[0] as Record<string, unknown>).weights = [1, 2];
    assert.deepEqual(problems(raw), ['q.yaml: models[0].weights: give one weight per deployment (1), got 2']);
    (raw.models[0] as Record<string, unknown>).weights = [0];
    assert.deepEqual(problems(raw), ['q.yaml: models[0].weights: at least one weight must be > 0']);
  });
  test('what each bad tier setting gets', () => {
    const withTenant = (extra: Record<string, unknown>, top: Record<string, unknown> = {}) => {
      const raw = base();
      Object.assign(raw.tenants[0] as Record<string, unknown>, extra);
      return { ...raw, ...top };
    };
    assert.deepEqual(problems(withTenant({ priority: 'urgent' })), ['q.yaml: tenants[0].priority: no tier named "urgent" (tiers: interactive, batch)']);
    assert.deepEqual(problems(withTenant({ priorities: ['batch'], priority: 'interactive' })), ['q.yaml: tenants[0].priority: "interactive" is not among the tenant\'s priorities']);
    assert.deepEqual(problems(withTenant({ priorities: ['nope'] })), ['q.yaml: tenants[0].priorities[0]: no tier named "nope" (tiers: interactive, batch)']);
    assert.deepEqual(problems(withTenant({ priorities: ['batch'], keys: [{ key: 'key-acme-0001', priorities: ['interactive'] }] })), ['q.yaml: tenants[0].keys[0].priorities[0]: "interactive" is not among the tenant\'s tiers (batch)']);
    assert.deepEqual(problems(withTenant({ keys: [{ key: 'key-acme-0001', env: 'X' }] })), ['q.yaml: tenants[0].keys[0]: give the key itself (key) or the environment variable holding it (env), one of the two']);
    assert.deepEqual(problems(withTenant({}, { priorities: [{ name: 'a' }, { name: 'a' }] })).slice(0, 1), ['q.yaml: priorities[1].name: duplicate tier "a"']);
    assert.deepEqual(problems(withTenant({}, { priorities: [{ name: 'a', floor: 1 }] })), ['q.yaml: priorities[0].floor: floor: a fraction from 0 up to (not including) 1, e.g. 0.2']);
  });
});
