/**
 * A real PostgreSQL for integration tests: `initdb` in a temp folder, `postgres` on a free port of
 * 127.0.0.1 (its unix socket in the temp folder), one database `quotaring`, trust authentication.
 * fsync and full-page writes are off for speed: a committed transaction still survives a crash of
 * the server process (its WAL is in the kernel before COMMIT answers), only not one of the machine.
 * `synchronous_commit` stays on, else a SIGKILL loses the last commits. Integration tests never
 * mock PostgreSQL. A test can crash it (`kill()`: SIGKILL) and start it again on the same port
 * and data (`restart()`), as a database host's crash and recovery would.
 *
 * The programs come from PATH or the newest `/usr/lib/postgresql/<version>/bin` (Debian's
 * `postgresql` package, installed by `scripts/ensure-test-deps.sh`). PostgreSQL refuses to run as
 * root: as root, `initdb` and `postgres` run as the `postgres` user (the package creates it), still
 * as children of the test process so that it can signal and reap them.
 */
import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from './processes.ts';

/** A running test PostgreSQL. */
export interface RunningPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/quotaring` (no password: trust authentication). */
  readonly url: string;
  readonly port: number;
  /** The folder of its programs (`pg_dump`, `psql` are there too). */
  readonly bin: string;
  /** Runs `sql` with `psql` against the database (ON_ERROR_STOP); returns its output. @throws Error with psql's output when it fails. */
  psql(sql: string): string;
  /**
   * SIGKILL, as a crash: no shutdown, its clients' connections reset. Resolves once the process
   * exited; the data stays for {@link RunningPostgres.restart}. No-op when it is not running.
   */
  kill(): Promise<void>;
  /**
   * Starts it again on the same port and data (killing it first if it still runs), after crash
   * recovery, and resolves once it accepts connections.
   * @throws Error with the server's output when it does not come up within 30 s.
   */
  restart(): Promise<void>;
  /** The same as {@link RunningPostgres.restart} (its older name). */
  start(): Promise<void>;
  /** Stops it (fast shutdown, SIGKILL after 5 s) and removes its folder. Idempotent. */
  stop(): Promise<void>;
}

/** The folder of PostgreSQL's server programs. @throws Error (with how to install it) when none is installed. */
export function postgresBin(): string {
  // On PATH (possibly a link into the versioned folder, which also holds pg_dump and psql).
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir !== '' && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dirname(realpathSync(join(dir, 'initdb')));
  }
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions[0] === undefined) {
    throw new Error('PostgreSQL is not installed; catalogue integration tests start a real one. Install it: `apt-get install postgresql` (npm test does), `brew install postgresql`, or put initdb and postgres on PATH.');
  }
  return join(root, versions[0], 'bin');
}

/** As root: the `postgres` user's uid and gid, to spawn the programs as. */
function postgresUser(): { uid: number; gid: number } | Record<string, never> {
  if (process.getuid?.() !== 0) return {};
  try {
    return { uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()) };
  } catch {
    throw new Error('running as root, and there is no `postgres` user to run PostgreSQL as (it refuses root): install the postgresql package, or run the tests as another user');
  }
}

/** True when a connection to `postgres` on 127.0.0.1:port succeeds; creates database `quotaring` on the first success. */
async function ready(port: number): Promise<boolean> {
  const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, connectionTimeoutMillis: 1_000 });
  c.on('error', () => {});
  try {
    await c.connect();
    const exists = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', ['quotaring']);
    if (exists.rowCount === 0) await c.query('CREATE DATABASE quotaring');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

/**
 * Initializes a data folder and starts PostgreSQL on a free port (a port taken meanwhile is retried
 * on another, 3 tries); resolves once database `quotaring` accepts connections (≤ 30 s).
 * @throws Error when PostgreSQL is not installed, or with its output when it does not come up.
 */
export async function startPostgres(): Promise<RunningPostgres> {
  const bin = postgresBin();
  const user = postgresUser();
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-pg-'));
  const data = join(dir, 'data');
  if ('uid' in user) {
    chmodSync(dir, 0o700);
    chownSync(dir, user.uid, user.gid);
  }
  const removeDir = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    execFileSync(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'], { stdio: 'pipe', cwd: dir, ...user });
  } catch (err) {
    removeDir();
    throw new Error(`initdb failed: ${String((err as { stderr?: unknown }).stderr ?? err)}`);
  }

  let proc: ChildProcess | undefined;
  let output = '';
  const running = (): boolean => proc !== undefined && proc.exitCode === null && proc.signalCode === null;
  const killOnExit = (): void => {
    if (running()) proc?.kill('SIGKILL');
    removeDir();
  };
  process.once('exit', killOnExit);

  const kill = async (): Promise<void> => {
    const p = proc;
    if (p === undefined || !running()) return;
    const exited = new Promise((resolve) => p.once('exit', resolve));
    p.kill('SIGKILL');
    await exited;
  };

  /** Spawns `postgres` on `port` until it accepts connections (a new postmaster refuses while the old one's backends still hold its shared memory: it exits, and is spawned again). */
  const up = async (port: number, ms: number): Promise<boolean> => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      output = '';
      const p = spawn(join(bin, 'postgres'), ['-D', data, '-p', String(port), '-h', '127.0.0.1', '-k', dir, '-c', 'fsync=off', '-c', 'full_page_writes=off', '-c', 'max_connections=100'], { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir, ...user });
      proc = p;
      p.stdout?.on('data', (d: Buffer) => (output += d.toString()));
      p.stderr?.on('data', (d: Buffer) => (output += d.toString()));
      while (Date.now() < deadline && running()) {
        if (await ready(port)) return true;
        await sleep(100);
      }
      if (running()) await kill();
      else await sleep(200);
      if (/could not bind|Address already in use/.test(output)) return false;
    }
    return false;
  };

  let port = 0;
  for (let attempt = 0; attempt < 3 && port === 0; attempt++) {
    const p = await freePort();
    if (await up(p, 30_000)) port = p;
  }
  if (port === 0) {
    killOnExit();
    process.off('exit', killOnExit);
    throw new Error(`postgres did not start; its output:\n${output}`);
  }

  let stopped: Promise<void> | undefined;
  const restart = async (): Promise<void> => {
    if (stopped !== undefined) throw new Error('postgres was stopped: it cannot be restarted');
    await kill();
    if (!(await up(port, 30_000))) throw new Error(`postgres did not come back on port ${port}; its output:\n${output}`);
  };
  const url = `postgres://postgres@127.0.0.1:${port}/quotaring`;
  return {
    url,
    port,
    bin,
    psql: (sql) => execFileSync(join(bin, 'psql'), ['--dbname', url, '-q', '-X', '-v', 'ON_ERROR_STOP=1'], { input: sql, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] }),
    kill,
    restart,
    start: restart,
    stop: () => {
      stopped ??= (async () => {
        const p = proc;
        if (p !== undefined && running()) {
          const exited = new Promise((resolve) => p.once('exit', resolve));
          p.kill('SIGINT'); // fast shutdown
          const timer = setTimeout(() => p.kill('SIGKILL'), 5_000);
          await exited;
          clearTimeout(timer);
        }
        process.off('exit', killOnExit);
        removeDir();
      })();
      return stopped;
    },
  };
}
