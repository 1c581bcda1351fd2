/**
 * A real PostgreSQL for tests: `initdb` in a temp folder, `postgres` on a free port of 127.0.0.1
 * (fsync off: a test database), one database `quotaring`. As root it runs as the `postgres` user
 * (PostgreSQL refuses root). The binaries come from PATH or the newest `/usr/lib/postgresql/<v>/bin`
 * (Debian's `postgresql` package, installed by `scripts/ensure-test-deps.sh`).
 */
import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from './processes.ts';

/** A running test PostgreSQL. */
export interface RunningPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/quotaring`. */
  readonly url: string;
  readonly port: number;
  /** Stops it (fast shutdown) and removes its folder. */
  stop(): Promise<void>;
  /** SIGKILL, as a crash; the data stays for {@link RunningPostgres.start}. */
  kill(): Promise<void>;
  /** Starts it again on the same port and data (after `kill`). */
  start(): Promise<void>;
}

/** The folder of PostgreSQL's server programs. @throws Error when none is installed. */
export function postgresBin(): string {
  // On PATH (possibly a link to the versioned folder, which also holds pg_dump and psql).
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir !== '' && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dirname(realpathSync(join(dir, 'initdb')));
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions[0] === undefined) throw new Error('PostgreSQL is not installed: apt-get install postgresql (npm test installs it)');
  return join(root, versions[0], 'bin');
}

const asRoot = process.getuid?.() === 0;

/** As root: the `postgres` user's uid and gid, to spawn the server as (this process stays its parent and reaps it). */
function postgresUser(): { uid: number; gid: number } | Record<string, never> {
  if (!asRoot) return {};
  return { uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()) };
}

/** Starts a PostgreSQL and waits until it accepts connections (≤ 20 s). */
export async function startPostgres(): Promise<RunningPostgres> {
  const bin = postgresBin();
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-pg-'));
  const data = join(dir, 'data');
  const user = postgresUser();
  if ('uid' in user) {
    chmodSync(dir, 0o755);
    chownSync(dir, user.uid, user.gid);
  }
  execFileSync(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'], { stdio: 'pipe', cwd: dir, ...user });
  const port = await freePort();
  let proc: ChildProcess | undefined;
  let out = '';
  const start = async (): Promise<void> => {
    proc = spawn(join(bin, 'postgres'), ['-D', data, '-p', String(port), '-h', '127.0.0.1', '-k', dir, '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'], { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir, ...user });
    proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    const deadline = Date.now() + 20_000;
    for (;;) {
      const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, connectionTimeoutMillis: 1_000 });
      c.on('error', () => {});
      try {
        await c.connect();
        const exists = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', ['quotaring']);
        if (exists.rowCount === 0) await c.query('CREATE DATABASE quotaring');
        await c.end();
        return;
      } catch {
        await c.end().catch(() => {});
      }
      if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`postgres did not start:\n${out}`);
      await sleep(100);
    }
  };
  const kill = async (): Promise<void> => {
    const p = proc;
    if (p === undefined || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await exited;
    // Backends exit once the postmaster is gone; a new one starts only when none is left.
    for (let i = 0; i < 100; i++) {
      try {
        execFileSync('pgrep', ['-f', `postgres -D ${data}`]);
      } catch {
        return;
      }
      await sleep(50);
    }
  };
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/quotaring`,
    port,
    start,
    kill,
    stop: async () => {
      const p = proc;
      if (p !== undefined && p.exitCode === null && p.signalCode === null) {
        const exited = new Promise((r) => p.once('exit', r));
        p.kill('SIGINT');
        await Promise.race([exited, sleep(5_000)]);
        await kill();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
