/**
 * A Redis password from the environment (issue 14, finding 9): a real `redis-server` with
 * `requirepass` (a password full of URL delimiters), reached by the connections nodes and routers
 * make (membership, decision paths) with the URL resolved from `cluster.redis.url` +
 * `password_env`, or `url_env`; without the password Redis refuses them.
 */
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { buildConfig } from '../../src/config/load.ts';
import type { LoadedConfig } from '../../src/config/load.ts';
import { membershipFromConfig } from '../../src/coord/from-config.ts';
import { redisForDecisions } from '../../src/redis/connection.ts';
import { pings } from '../helpers/redis.ts';
import { freePort } from '../helpers/processes.ts';

const PASSWORD = 'p@ss:w/rd%41 #?é';

const base = {
  tenants: [{ id: 'acme', keys: ['key-acme-0001'], limits: [{ requests: 10, window: '1m' }] }],
  models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: 'http://127.0.0.1:9', api_key_env: 'SIM_KEY' }],
};

describe('Redis password from the environment', () => {
  let server: ChildProcess;
  let port: number;

  before(async () => {
    port = await freePort();
    server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--requirepass', PASSWORD], { stdio: 'ignore' });
    // PING without AUTH answers -NOAUTH, not +PONG: wait until the port accepts connections.
    for (let i = 0; i < 100; i++) {
      const probe = new Redis({ host: '127.0.0.1', port, password: PASSWORD, lazyConnect: true, retryStrategy: () => null });
      probe.on('error', () => {});
      const up = await probe.connect().then(
        () => true,
        () => false,
      );
      probe.disconnect();
      if (up) return;
      await sleep(50);
    }
    assert.fail(`redis-server did not start on ${port} (pings: ${await pings(port)})`);
  });
  after(async () => {
    server.kill('SIGKILL');
    if (server.exitCode === null) await once(server, 'exit');
  });

  const load = (redis: unknown, env: NodeJS.ProcessEnv): LoadedConfig => buildConfig({ ...base, cluster: { name: 'pw', redis } }, 'pw.yaml', { SIM_KEY: 'k', ...env });

  /** PING over the membership connection and a decision-path connection built from the loaded config. */
  const pingBoth = async (config: LoadedConfig): Promise<string[]> => {
    const configured = membershipFromConfig(config.config.cluster, undefined, TEST_SECRET);
    assert.ok(configured?.redis !== undefined);
    const decisions = redisForDecisions(config.config.cluster.redis?.url ?? '');
    try {
      await once(decisions, 'ready');
      return [await configured.redis.ping(), await decisions.ping()];
    } finally {
      configured.redis.disconnect();
      decisions.disconnect();
    }
  };

  test('url in the file + password_env: both connections authenticate', async () => {
    assert.deepEqual(await pingBoth(load({ url: `redis://127.0.0.1:${port}`, password_env: 'QR_REDIS_PASSWORD' }, { QR_REDIS_PASSWORD: PASSWORD })), ['PONG', 'PONG']);
  });

  test('url_env holding the whole URL (password percent-encoded): both connections authenticate', async () => {
    assert.deepEqual(await pingBoth(load({ url_env: 'QR_REDIS_URL' }, { QR_REDIS_URL: `redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}` })), ['PONG', 'PONG']);
  });

  test('without the password Redis refuses the connection (the server really requires it)', async () => {
    const config = load({ url: `redis://127.0.0.1:${port}` }, {});
    const configured = membershipFromConfig(config.config.cluster, undefined, TEST_SECRET);
    assert.ok(configured?.redis !== undefined);
    try {
      await assert.rejects(configured.redis.ping(), /NOAUTH/);
    } finally {
      configured.redis.disconnect();
    }
  });
});
