/**
 * End to end: `scripts/ensure-test-deps.sh`, the `pretest` script of `npm test` (issue 19), run by
 * /bin/sh against a PATH of stub programs: `id` says who we are, `apt-get` and `sudo` record their
 * arguments. Nothing is installed for real.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../../scripts/ensure-test-deps.sh', import.meta.url));
const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> };
const CI_RUN = readFileSync(new URL('../../.ci/run', import.meta.url), 'utf8');

const dirs: string[] = [];
/** The image test's programs (needed only as root). */
const CONTAINER_TOOLS = ['podman', 'runc', 'mmdebstrap', 'docker-compose'];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

interface Machine {
  readonly uid: number;
  /** Programs on the PATH besides `id`. */
  readonly present: readonly string[];
  /** `sudo -n true` succeeds (password-less sudo). */
  readonly sudo?: boolean;
}

/** Runs the script on a PATH holding only stubs; @returns its exit code, stderr and the recorded calls. */
function run(machine: Machine, env: Record<string, string> = {}): { code: number | null; stderr: string; calls: string[] } {
  const bin = mkdtempSync(join(tmpdir(), 'qr-deps-'));
  dirs.push(bin);
  const log = join(bin, 'calls.log');
  const stub = (name: string, body: string): void => {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  stub('id', `echo ${machine.uid}`);
  for (const p of machine.present) stub(p, `echo "${p} $*" >> ${log}`);
  if (machine.sudo !== undefined) stub('sudo', machine.sudo ? `echo "sudo $*" >> ${log}` : 'exit 1');
  const res = spawnSync('/bin/sh', [SCRIPT], { env: { PATH: bin, QUOTARING_PG_BIN_GLOB: join(bin, 'no-postgresql-*'), QUOTARING_CONTAINERS_CONF: join(bin, 'containers.conf'), ...env }, encoding: 'utf8', timeout: 10_000 });
  const calls = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : [];
  return { code: res.status, stderr: res.stderr, calls };
}

describe('npm test installs its own dependencies (scripts/ensure-test-deps.sh)', () => {
  test('is the pretest script, and .ci/run runs the README\'s npm test', () => {
    assert.equal(PACKAGE.scripts.pretest, 'sh scripts/ensure-test-deps.sh && sh scripts/ensure-python-sdks.sh');
    assert.match(CI_RUN, /^npm test$/m);
  });

  test('everything present: exits 0 and installs nothing', () => {
    const r = run({ uid: 0, present: ['redis-server', 'redis-sentinel', 'initdb', 'chromium', 'python3', 'ip', 'apt-get', ...CONTAINER_TOOLS] });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.calls, []);
  });

  test('as root with podman: containers.conf gets only the settings it lacks, under their sections, once', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qr-conf-'));
    dirs.push(dir);
    const conf = join(dir, 'containers.conf');
    writeFileSync(conf, '# mine\n[engine]\nevents_logger = "file"\n  runtime = "crun"\n');
    const present = ['redis-server', 'redis-sentinel', 'initdb', 'chromium', 'python3', 'ip', 'apt-get', ...CONTAINER_TOOLS];
    const first = run({ uid: 0, present }, { QUOTARING_CONTAINERS_CONF: conf });
    assert.equal(first.code, 0, first.stderr);
    const written = readFileSync(conf, 'utf8');
    assert.equal(written, '# mine\n[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n  runtime = "crun"\n[containers]\ndefault_ulimits = []\n', 'the operator\'s runtime is kept, indented or not');
    const again = run({ uid: 0, present }, { QUOTARING_CONTAINERS_CONF: conf });
    assert.equal(again.stderr, '');
    assert.equal(readFileSync(conf, 'utf8'), written);
    // Not root: never touched.
    const other = join(dir, 'other.conf');
    run({ uid: 1000, present, sudo: true }, { QUOTARING_CONTAINERS_CONF: other });
    assert.ok(!existsSync(other));
  });

  test('PostgreSQL: found on PATH or in its versioned folder (Debian), else postgresql is installed', () => {
    const missing = run({ uid: 0, present: ['redis-server', 'redis-sentinel', 'chromium', 'python3', 'ip', 'apt-get', ...CONTAINER_TOOLS] });
    assert.deepEqual(missing.calls, ['apt-get update -q', 'apt-get install -y -q --no-install-recommends postgresql']);
    const versioned = mkdtempSync(join(tmpdir(), 'qr-pg-'));
    dirs.push(versioned);
    mkdirSync(join(versioned, '15', 'bin'), { recursive: true });
    writeFileSync(join(versioned, '15', 'bin', 'initdb'), '#!/bin/sh\n');
    chmodSync(join(versioned, '15', 'bin', 'initdb'), 0o755);
    const found = run({ uid: 0, present: ['redis-server', 'redis-sentinel', 'chromium', 'python3', 'ip', 'apt-get', ...CONTAINER_TOOLS] }, { QUOTARING_PG_BIN_GLOB: join(versioned, '*', 'bin') });
    assert.equal(found.code, 0, found.stderr);
    assert.deepEqual(found.calls, []);
  });

  test('as root with programs missing: apt-get update, then one install of exactly the missing packages', () => {
    const r = run({ uid: 0, present: ['chromium', 'initdb', 'python3', 'apt-get'] });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.calls, ['apt-get update -q', 'apt-get install -y -q --no-install-recommends redis-server redis-sentinel iproute2 podman runc mmdebstrap docker-compose']);
  });

  test('not root: `ip` is not required (the partition test runs only as root); the rest goes through password-less sudo', () => {
    const r = run({ uid: 1000, present: ['chromium', 'initdb', 'python3', 'apt-get'], sudo: true });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.calls, [
      'sudo -n true',
      'sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -q',
      'sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server redis-sentinel',
    ]);
  });

  test('not root and no password-less sudo: fails at once, naming the exact command', () => {
    const r = run({ uid: 1000, present: ['initdb', 'python3', 'apt-get'], sudo: false });
    assert.equal(r.code, 1);
    assert.deepEqual(r.calls, []);
    assert.match(r.stderr, /missing test dependencies: redis-server redis-sentinel chromium/);
    assert.match(r.stderr, /sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends redis-server redis-sentinel chromium'/);
  });

  test('no apt-get, or QUOTARING_NO_INSTALL=1: fails naming the packages, installs nothing', () => {
    const noApt = run({ uid: 0, present: ['chromium', 'python3', 'ip', 'redis-sentinel', 'initdb', ...CONTAINER_TOOLS] });
    assert.equal(noApt.code, 1);
    assert.match(noApt.stderr, /missing test dependencies: redis-server \(no apt-get here/);
    const refused = run({ uid: 0, present: ['apt-get', 'ip', 'redis-sentinel', 'initdb', ...CONTAINER_TOOLS] }, { QUOTARING_NO_INSTALL: '1' });
    assert.equal(refused.code, 1);
    assert.deepEqual(refused.calls, []);
    assert.match(refused.stderr, /apt-get update && apt-get install -y --no-install-recommends redis-server chromium/);
  });

  test('no python3: python3-venv is installed (the Python SDK test\'s venv is made by scripts/ensure-python-sdks.sh)', () => {
    const r = run({ uid: 0, present: ['redis-server', 'redis-sentinel', 'initdb', 'chromium', 'ip', 'apt-get', ...CONTAINER_TOOLS] });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.calls, ['apt-get update -q', 'apt-get install -y -q --no-install-recommends python3-venv']);
  });
});
