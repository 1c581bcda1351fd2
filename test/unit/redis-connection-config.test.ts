/**
 * `cluster.redis` beyond a single URL (issue 18): Redis Sentinel (`sentinels` + `name`), ACL
 * credentials from the environment (`username_env`, `password_env`, `sentinel_*_env`) and TLS
 * options, resolved at load into a `RedisConnection`, and the ioredis options made of it.
 * Problems name the key path and never echo a value.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';
import { reconnectOnReadonly, redisConnectionOptions } from '../../src/config/redis-client.ts';

const base = (redis: unknown) => ({
  tenants: [{ id: 'acme', keys: ['sk-acme-0001'], limits: [{ requests: 10, window: '1m' }] }],
  models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9090' }],
  cluster: { redis },
});
const load = (redis: unknown, env: NodeJS.ProcessEnv = {}) => buildConfig(base(redis), 'q.yaml', env).config.cluster.redis;
const problems = (redis: unknown, env: NodeJS.ProcessEnv = {}): readonly string[] => {
  try {
    buildConfig(base(redis), 'q.yaml', env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
};
const SENTINELS = [{ host: '10.0.0.1' }, { host: '10.0.0.2', port: 26380 }];

describe('cluster.redis: Sentinel, ACL and TLS', () => {
  test('sentinels + name resolve to a sentinel connection with the credentials from the environment', () => {
    const env = { R_USER: 'quotaring', R_PW: 'p@ss', S_PW: 'sentinel-pw' };
    const redis = load({ sentinels: SENTINELS, name: 'mymaster', username_env: 'R_USER', password_env: 'R_PW', sentinel_password_env: 'S_PW' }, env);
    assert.equal(redis?.url, undefined);
    assert.deepEqual(redis?.connection, {
      kind: 'sentinel',
      sentinels: [{ host: '10.0.0.1', port: 26379 }, { host: '10.0.0.2', port: 26380 }],
      name: 'mymaster',
      username: 'quotaring',
      password: 'p@ss',
      sentinelPassword: 'sentinel-pw',
    });
  });

  test('username_env goes into the URL beside password_env, percent-encoded', () => {
    const redis = load({ url: 'rediss://cache:6380', username_env: 'R_USER', password_env: 'R_PW' }, { R_USER: 'app user', R_PW: 'p@ss:w' });
    assert.equal(redis?.url, `rediss://${encodeURIComponent('app user')}:${encodeURIComponent('p@ss:w')}@cache:6380`);
    assert.deepEqual(redis?.connection, { kind: 'url', url: redis?.url });
  });

  test('refused: none or two of url/url_env/sentinels, sentinels without name, sentinel keys or sentinels_tls without sentinels, tls with redis://, a variable unset (named, never echoed)', () => {
    assert.deepEqual(problems({ password_env: 'X' }), ['q.yaml: cluster.redis: set exactly one of url, url_env and sentinels']);
    assert.deepEqual(problems({ url: 'redis://a:6379', sentinels: SENTINELS, name: 'm' }), ['q.yaml: cluster.redis: set exactly one of url, url_env and sentinels']);
    assert.deepEqual(problems({ sentinels: SENTINELS }), ["q.yaml: cluster.redis.name: name: the primary's name in the sentinels' configuration (sentinel monitor <name> ...), required with sentinels"]);
    assert.deepEqual(problems({ sentinels: [], name: 'm' }), ['q.yaml: cluster.redis.sentinels: sentinels: list at least one sentinel (three for a quorum of two)']);
    assert.deepEqual(problems({ url: 'redis://a:6379', name: 'm', sentinel_password_env: 'S' }), [
      'q.yaml: cluster.redis.name: name applies with sentinels only',
      'q.yaml: cluster.redis.sentinel_password_env: sentinel_password_env applies with sentinels only',
    ]);
    assert.deepEqual(problems({ url: 'rediss://a:6379', tls: { sentinels_tls: true } }), ['q.yaml: cluster.redis.tls.sentinels_tls: sentinels_tls applies with sentinels only']);
    assert.deepEqual(problems({ url: 'redis://a:6379', tls: { ca_file: '/ca.pem' } }), ['q.yaml: cluster.redis.tls: tls options with a redis:// URL: use rediss:// for TLS']);
    assert.deepEqual(problems({ url_env: 'R_URL', tls: { ca_file: '/ca.pem' } }, { R_URL: 'redis://:hunter22@a:6379' }), ['q.yaml: cluster.redis.tls: tls options with a redis:// URL: use rediss:// for TLS']);
    assert.deepEqual(problems({ sentinels: SENTINELS, name: 'm', password_env: 'R_PW', sentinel_password_env: 'S_PW' }, { R_PW: 'hunter22' }), ['q.yaml: cluster.redis.sentinel_password_env: environment variable S_PW is not set']);
    assert.deepEqual(problems({ url: 'redis://app@a:6379', username_env: 'R_USER' }, { R_USER: 'other' }), ['q.yaml: cluster.redis.username_env: the URL already names a user; keep it in one place']);
    assert.deepEqual(problems({ url: 'rediss://a:6379', tls: { verify: false } }), ['q.yaml: cluster.redis.tls: unknown key "verify"']);
  });

  test('ioredis options: Sentinel with failover detection, READONLY reconnects, TLS to the primary (and the sentinels when asked); a URL passes through', () => {
    const { url, options } = redisConnectionOptions({ kind: 'sentinel', sentinels: [{ host: 'h', port: 26379 }], name: 'm', password: 'pw', sentinelPassword: 'spw', tls: { reject_unauthorized: false, sentinels_tls: true, servername: 'redis.internal' } });
    assert.equal(url, undefined);
    assert.deepEqual(
      { ...options, reconnectOnError: undefined, sentinelRetryStrategy: undefined },
      {
        sentinels: [{ host: 'h', port: 26379 }],
        name: 'm',
        role: 'master',
        password: 'pw',
        sentinelPassword: 'spw',
        failoverDetector: true,
        sentinelCommandTimeout: 1_000,
        sentinelRetryStrategy: undefined,
        reconnectOnError: undefined,
        tls: { servername: 'redis.internal', rejectUnauthorized: false },
        enableTLSForSentinelMode: true,
        sentinelTLS: { servername: 'redis.internal', rejectUnauthorized: false },
      },
    );
    const retry = options.sentinelRetryStrategy as (n: number) => number;
    assert.deepEqual([1, 2, 3, 6, 20].map(retry), [50, 100, 200, 1_000, 1_000]);
    assert.equal(reconnectOnReadonly(new Error("READONLY You can't write against a read only replica.")), true);
    assert.equal(reconnectOnReadonly(new Error('ERR unknown command')), false);
    assert.equal(redisConnectionOptions({ kind: 'url', url: 'redis://a:6379' }).url, 'redis://a:6379');
    assert.throws(() => redisConnectionOptions({ kind: 'url', url: 'rediss://a', tls: { ca_file: '/nonexistent/ca.pem', reject_unauthorized: true, sentinels_tls: false } }), /cluster\.redis\.tls\.ca_file: cannot read \/nonexistent\/ca\.pem: ENOENT/);
  });
});
