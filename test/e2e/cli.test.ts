/**
 * End to end: the built CLI's small commands a newcomer meets first (issue 19): `--version`, and
 * `config check` on the demo config in an empty environment (checking a file needs no secrets: a
 * variable it names that is not set is a warning, an error only with `--require-env`).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CLI } from '../helpers/processes.ts';

const DEMO = fileURLToPath(new URL('../../cluster/demo.yaml', import.meta.url));
const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Runs the CLI with only PATH in its environment. */
function cli(args: readonly string[], env: Record<string, string> = {}): { code: number | null; stdout: string; stderr: string } {
  const res = spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 30_000 });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

describe('the CLI a newcomer meets first', () => {
  test('--version and -V print package.json\'s version', () => {
    for (const flag of ['--version', '-V']) {
      const r = cli([flag]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `${VERSION}\n`);
    }
  });

  test('config check cluster/demo.yaml passes without QUOTARING_SIM_KEY, warning that nodes will need it', () => {
    const r = cli(['config', 'check', DEMO]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /demo\.yaml: ok \(tenants: 2, keys: 2, plans: 2, models: 3, deployments: 2\)/);
    assert.equal(r.stderr, 'warning: environment variable QUOTARING_SIM_KEY is not set here; nodes and routers started with this config need it (--require-env makes this an error)\n');
  });

  test('config check with the variable set: no warning; --require-env without it: exit 2 naming the variable', () => {
    const set = cli(['config', 'check', DEMO], { QUOTARING_SIM_KEY: 'sim-demo-key' });
    assert.equal(set.code, 0, set.stderr);
    assert.equal(set.stderr, '');
    const strict = cli(['config', 'check', '--require-env', DEMO]);
    assert.equal(strict.code, 2);
    assert.match(strict.stderr, /deployments\[0\]\.api_key_env: environment variable QUOTARING_SIM_KEY is not set/);
  });
});
