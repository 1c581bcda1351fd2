/**
 * `quotaring up` never puts a secret on a child's command line or in the generated config file
 * (issue 14, finding 9): the Redis URL with its password, the admin token and the simulator key go
 * to the children in their environment. And `--redis` refuses a URL with a password (a command
 * line is readable by every user of the machine); `--redis-env NAME` reads it from a variable.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { BANNER_HEADLINE, clusterBanner } from '../../cluster/banner.ts';
import { REDIS_URL_ENV, planCluster, usesSimulator } from '../../cluster/up.ts';
import { redisUrlFromFlags } from '../../cluster/up-options.ts';
import { buildConfig } from '../../src/config/load.ts';

const PASSWORD = 'hunter22-redis-pw';
const REDIS = `redis://app:${PASSWORD}@10.0.0.7:6379/0`;
const TOKEN = 'admin-token-0123456789abcdef';

describe('up: secrets travel in the environment', () => {
  const plan = planCluster({ nodes: 2, routers: 2, redis: REDIS, adminPort: 9200, adminToken: TOKEN }, '/tmp/quotaring-up-x/cluster.yaml');

  test('no argument of any child carries the Redis password, the admin token or the simulator key', () => {
    assert.deepEqual(plan.specs.map((s) => s.name), ['simulator', 'node-1', 'node-2', 'router-1', 'router-2']);
    for (const spec of plan.specs) {
      const argv = spec.args.join(' ');
      for (const secret of [PASSWORD, TOKEN, 'sim-demo-key']) assert.ok(!argv.includes(secret), `${spec.name}: ${argv}`);
    }
  });

  test('the generated config names the variable (url_env), not the URL', () => {
    for (const secret of [PASSWORD, TOKEN, 'sim-demo-key']) assert.ok(!plan.configText.includes(secret), plan.configText);
    const raw = parse(plan.configText) as { cluster: { redis: unknown; members: unknown[] } };
    assert.deepEqual(raw.cluster.redis, { url_env: REDIS_URL_ENV });
    assert.deepEqual(raw.cluster.members, []);
  });

  test('every child gets the URL and the token in its environment, and the config resolves to that URL', () => {
    for (const spec of plan.specs) {
      assert.equal(spec.env?.[REDIS_URL_ENV], REDIS);
      assert.equal(spec.env?.['QUOTARING_ADMIN_TOKEN'], TOKEN);
      assert.equal(spec.env?.['QUOTARING_SIM_KEY'], 'sim-demo-key');
    }
    const loaded = buildConfig(parse(plan.configText), 'cluster.yaml', { ...plan.specs[1]?.env });
    assert.equal(loaded.config.cluster.redis?.url, REDIS);
  });

  test('static members: no Redis variable at all', () => {
    const statics = planCluster({ nodes: 1 }, '/tmp/x.yaml');
    assert.equal(statics.specs[1]?.env?.[REDIS_URL_ENV], undefined);
    assert.equal((parse(statics.configText) as { cluster: { redis?: unknown } }).cluster.redis, undefined);
  });
});

describe('up: what the launch waits for', () => {
  test('static members: each router once its /readyz is 200; with Redis, once its /healthz is (Redis may be down: it waits for it)', () => {
    const health = (plan: ReturnType<typeof planCluster>): string[] => plan.specs.filter((s) => s.name.startsWith('router')).map((s) => new URL(s.healthUrl).pathname);
    assert.deepEqual(health(planCluster({ routers: 2 }, '/tmp/x.yaml')), ['/readyz', '/readyz']);
    assert.deepEqual(health(planCluster({ routers: 2, redis: 'redis://127.0.0.1:6379' }, '/tmp/x.yaml')), ['/healthz', '/healthz']);
  });
});

describe('up: --redis and --redis-env', () => {
  test('--redis without a password is used as given; with one it is refused, the password not echoed', () => {
    assert.equal(redisUrlFromFlags({ redis: 'redis://127.0.0.1:6379' }, {}), 'redis://127.0.0.1:6379');
    assert.equal(redisUrlFromFlags({ redis: 'redis://app@127.0.0.1:6379' }, {}), 'redis://app@127.0.0.1:6379');
    assert.throws(() => redisUrlFromFlags({ redis: REDIS }, {}), (err: Error) => {
      assert.match(err.message, /^--redis: the URL carries a password, and a command line is readable by every user of this machine \(ps\); put the URL in an environment variable and pass its name: --redis-env NAME \(got "redis:\/\/app:\*\*\*@10\.0\.0\.7:6379\/0"\)$/);
      return !err.message.includes(PASSWORD);
    });
  });

  test('--redis-env reads the URL (password included) from the variable; unset or both flags are refused', () => {
    assert.equal(redisUrlFromFlags({ redisEnv: 'MY_REDIS' }, { MY_REDIS: REDIS }), REDIS);
    assert.throws(() => redisUrlFromFlags({ redisEnv: 'MY_REDIS' }, {}), /^Error: --redis-env: environment variable MY_REDIS is not set$/);
    assert.throws(() => redisUrlFromFlags({ redis: 'redis://h:1', redisEnv: 'MY_REDIS' }, { MY_REDIS: REDIS }), /^Error: --redis and --redis-env: give one of them$/);
    assert.equal(redisUrlFromFlags({}, { MY_REDIS: REDIS }), undefined);
  });
});

describe('up --config with real providers (issue 15): no simulator, no "no provider key needed"', () => {
  const file = (deployments: unknown[]): string => {
    const path = join(mkdtempSync(join(tmpdir(), 'qr-up-plan-')), 'my.yaml');
    writeFileSync(path, stringify({ tenants: [{ id: 'a', keys: ['key-a-00000'] }], models: [{ name: 'm', encoding: 'o200k_base', deployments: deployments.map((d) => (d as { name: string }).name) }], deployments }));
    return path;
  };
  const env = { GEMINI_API_KEY: 'g', OPENAI_API_KEY: 'o' };
  const real = [
    { name: 'gemini', provider: 'gemini', base_url: 'https://generativelanguage.googleapis.com/v1beta/openai', api_key_env: 'GEMINI_API_KEY' },
    { name: 'openai', provider: 'openai', base_url: 'https://api.openai.com', api_key_env: 'OPENAI_API_KEY' },
    { name: 'vllm', provider: 'vllm', base_url: 'http://127.0.0.1:8000' },
  ];

  test('the plan starts no simulator when no deployment sends to it', () => {
    const plan = planCluster({ nodes: 1, config: file(real), env }, '/tmp/x.yaml');
    assert.deepEqual(plan.specs.map((s) => s.name), ['node-1', 'router-1']);
    assert.equal(plan.simulator, undefined);
  });

  test('a deployment on the simulator\'s port (127.0.0.1 or localhost) starts it; the demo always does', () => {
    const local = planCluster({ nodes: 1, config: file([...real, { name: 'sim', provider: 'openai', base_url: 'http://localhost:9191/' }]), env, simulatorPort: 9191 }, '/tmp/x.yaml');
    assert.deepEqual(local.specs.map((s) => s.name), ['simulator', 'node-1', 'router-1']);
    assert.equal(local.simulator, 'http://127.0.0.1:9191');
    assert.equal(usesSimulator({ deployments: [{ base_url: 'http://127.0.0.1:9090' }] }, false, 9090), true);
    assert.equal(usesSimulator({ deployments: [{ base_url: 'http://127.0.0.1:9091' }] }, false, 9090), false);
    assert.equal(usesSimulator({ deployments: [{ base_url: 'http://10.0.0.5:9090' }] }, false, 9090), false);
    assert.equal(usesSimulator({}, true, 9090), true);
  });

  test('the banner: "your providers", no simulator line, each upstream with its key variable', () => {
    const text = clusterBanner({
      routers: ['http://127.0.0.1:8080'],
      nodes: [{ id: 'node-1', url: 'http://127.0.0.1:8101' }],
      configSource: 'my.yaml',
      upstreams: [
        { name: 'gemini', baseUrl: 'https://generativelanguage.googleapis.com/v1beta/openai', keyEnv: 'GEMINI_API_KEY' },
        { name: 'vllm', baseUrl: 'http://127.0.0.1:8000' },
      ],
      models: { openai: 'm' },
    });
    assert.ok(text.includes(`${BANNER_HEADLINE}: 1 router, 1 node, your providers (no simulator started: the provider keys come from the variables below)`), text);
    assert.ok(!text.includes('no provider key needed'), text);
    assert.ok(!/simulator {2}http/.test(text), text);
    assert.ok(text.includes('  upstream   gemini  https://generativelanguage.googleapis.com/v1beta/openai  (key from GEMINI_API_KEY)'), text);
    assert.ok(text.includes('             vllm  http://127.0.0.1:8000  (no key)'), text);
    const demo = clusterBanner({ routers: ['http://127.0.0.1:8080'], nodes: [], simulator: 'http://127.0.0.1:9090', configSource: 'cluster/demo.yaml', models: {} });
    assert.ok(demo.includes('no provider key needed') && demo.includes('  simulator  http://127.0.0.1:9090'), demo);
  });
});
