/**
 * An admin listener reachable from other machines needs a token the operator chose (issue 14,
 * finding 9): on a non-loopback `admin.host` a placeholder (`change-me`) or a token shorter than 16
 * characters is refused — by the config loader (the process does not start) and by
 * `startAdminServer` itself, before it listens. Loopback hosts take any token; an unset token
 * leaves the listener off as before.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { FastifyBaseLogger } from 'fastify';
import { buildConfig, ConfigError } from '../../src/config/load.ts';
import { AdminSchema } from '../../src/config/schema.ts';
import { startAdminServer } from '../../src/ops/admin-server.ts';
import { adminExposureProblem, isLoopbackHost } from '../../src/security/admin-exposure.ts';

const GOOD = '3f9a0c1d7e2b4a6f8c0d1e2f3a4b5c6d';

/** A logger that drops everything. */
function silentLog(): FastifyBaseLogger {
  const noop = (): void => {};
  const log = { level: 'silent', fatal: noop, error: noop, warn: noop, info: noop, debug: noop, trace: noop, silent: noop, child: () => log };
  return log as unknown as FastifyBaseLogger;
}

describe('admin exposure', () => {
  test('loopback hosts', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1']) assert.equal(isLoopbackHost(h), true, h);
    for (const h of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'node1', 'example.com', '::ffff:10.0.0.1']) assert.equal(isLoopbackHost(h), false, h);
  });

  test('what each token gets on 0.0.0.0 and on 127.0.0.1', () => {
    assert.equal(
      adminExposureProblem('0.0.0.0', 'QUOTARING_ADMIN_TOKEN', 'change-me'),
      '0.0.0.0 is not a loopback address and QUOTARING_ADMIN_TOKEN holds the placeholder "change-me": set QUOTARING_ADMIN_TOKEN to a token of your own (at least 16 characters, e.g. openssl rand -hex 16), or bind admin.host to 127.0.0.1',
    );
    assert.match(adminExposureProblem('0.0.0.0', 'T', 'Change-Me') ?? '', /placeholder/);
    assert.equal(adminExposureProblem('10.0.0.5', 'T', 'abc123'), '10.0.0.5 is not a loopback address and T is shorter than 16 characters: set T to a token of your own (at least 16 characters, e.g. openssl rand -hex 16), or bind admin.host to 127.0.0.1');
    assert.equal(adminExposureProblem('0.0.0.0', 'T', GOOD), undefined);
    assert.equal(adminExposureProblem('0.0.0.0', 'T', undefined), undefined, 'unset: the listener is off anyway');
    assert.equal(adminExposureProblem('0.0.0.0', 'T', ''), undefined, 'empty: the listener is off anyway');
    assert.equal(adminExposureProblem('127.0.0.1', 'T', 'change-me'), undefined);
  });

  const raw = (admin: unknown) => ({
    admin,
    tenants: [{ id: 'acme', keys: ['key-acme-0001'], limits: [{ requests: 1, window: '1m' }] }],
    models: [{ name: 'm', encoding: 'o200k_base', deployments: ['d'] }],
    deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:9' }],
  });

  test('the config loader refuses a non-loopback admin.host with a weak token, naming the path and not the token', () => {
    assert.throws(
      () => buildConfig(raw({ host: '0.0.0.0' }), 'a.yaml', { QUOTARING_ADMIN_TOKEN: 'tiny-secret-1' }),
      (err: unknown) =>
        err instanceof ConfigError &&
        err.problems.length === 1 &&
        err.problems[0] === 'a.yaml: admin.host: 0.0.0.0 is not a loopback address and QUOTARING_ADMIN_TOKEN is shorter than 16 characters: set QUOTARING_ADMIN_TOKEN to a token of your own (at least 16 characters, e.g. openssl rand -hex 16), or bind admin.host to 127.0.0.1' &&
        !err.message.includes('tiny-secret-1'),
    );
    assert.throws(() => buildConfig(raw({ host: '0.0.0.0', token_env: 'ADM' }), 'a.yaml', { ADM: 'change-me' }), /a\.yaml: admin\.host: 0\.0\.0\.0 is not a loopback address and ADM holds the placeholder "change-me"/);
    assert.equal(buildConfig(raw({ host: '0.0.0.0' }), 'a.yaml', { QUOTARING_ADMIN_TOKEN: GOOD }).config.admin.host, '0.0.0.0');
    assert.equal(buildConfig(raw({}), 'a.yaml', { QUOTARING_ADMIN_TOKEN: 'change-me' }).config.admin.host, '127.0.0.1');
  });

  test('startAdminServer refuses before listening', async () => {
    const settings = AdminSchema.parse({ host: '0.0.0.0' });
    let registered = false;
    await assert.rejects(
      startAdminServer({ settings, env: { QUOTARING_ADMIN_TOKEN: 'change-me' }, port: 0, log: silentLog(), what: 'admin API', register: () => (registered = true) }),
      /^Error: admin API not started: 0\.0\.0\.0 is not a loopback address and QUOTARING_ADMIN_TOKEN holds the placeholder "change-me"/,
    );
    assert.equal(registered, false);
  });
});
