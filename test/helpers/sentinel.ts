/**
 * A real Redis Sentinel group on 127.0.0.1 for end-to-end tests: a primary and a replica
 * (`redis-server`, no persistence) and three sentinels (Debian's `redis-sentinel`, quorum 2,
 * `down-after-milliseconds` 1000), each on a free port with its own temp directory (a sentinel
 * rewrites its config file). Returned once the replica is in sync and every sentinel knows the
 * replica and the two other sentinels, so a failover can be elected.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from './processes.ts';

/** Debian's sentinel binary (package `redis-sentinel`, a `redis-server` started under that name). */
export const SENTINEL_BINARY = 'redis-sentinel';

/** Why the group cannot run here (a binary missing from the PATH), or undefined. */
export function sentinelUnavailable(): string | undefined {
  for (const binary of ['redis-server', SENTINEL_BINARY]) {
    const found = (process.env['PATH'] ?? '').split(delimiter).some((dir) => {
      try {
        accessSync(join(dir, binary), constants.X_OK);
        return dir !== '';
      } catch {
        return false;
      }
    });
    if (!found) return `${binary} is not on the PATH (Debian: apt-get install redis-server redis-sentinel; .ci/run installs both)`;
  }
  return undefined;
}

/** A running group. */
export interface SentinelGroup {
  /** The primary's name in the sentinels' configuration. */
  readonly name: string;
  /** The three sentinels. */
  readonly sentinels: readonly { readonly host: string; readonly port: number }[];
  /** Port of the data server the sentinels name as primary now. */
  primaryPort(): Promise<number>;
  /**
   * SIGKILL of the current primary (no shutdown, nothing saved), then waits (≤ 30 s) until every
   * sentinel names the replica as the new primary.
   * @returns ms from the kill until all three sentinels named the new primary.
   * @throws Error when they do not within 30 s.
   */
  killPrimary(): Promise<number>;
  /** Everything the servers and sentinels printed. */
  output(): string;
  /** Stops every process (SIGTERM, SIGKILL after 3 s) and removes the temp directories. */
  stop(): Promise<void>;
}

interface Proc {
  readonly port: number;
  readonly child: ChildProcess;
  out: string;
}

function start(binary: string, args: readonly string[], port: number): Proc {
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const proc: Proc = { port, child, out: '' };
  child.stdout?.on('data', (d: Buffer) => (proc.out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (proc.out += d.toString()));
  return proc;
}

async function stopProc(p: Proc): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => p.child.once('exit', () => resolve()));
  p.child.kill('SIGTERM');
  const timer = setTimeout(() => p.child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}

/** A short-lived client that does not retry (a dead server answers with an error at once). */
async function ask<T>(port: number, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1_000 });
  c.on('error', () => {});
  try {
    await c.connect();
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>, output: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch {
      // not there yet
    }
    await sleep(100);
  }
  throw new Error(`sentinel group: ${what} within ${timeoutMs} ms\n${output()}`);
}

/**
 * Starts the group. @throws Error with every process's output when it does not come up within 30 s.
 */
export async function startSentinelGroup(name = 'qr'): Promise<SentinelGroup> {
  const dirs: string[] = [];
  const procs: Proc[] = [];
  const output = (): string => procs.map((p) => `--- :${p.port}\n${p.out.split('\n').slice(-30).join('\n')}`).join('\n');
  const dataServer = async (replicaOf?: number): Promise<Proc> => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'qr-sentinel-data-'));
    dirs.push(dir);
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...(replicaOf === undefined ? [] : ['--replicaof', '127.0.0.1', String(replicaOf)])];
    const p = start('redis-server', args, port);
    procs.push(p);
    return p;
  };
  try {
    const primary = await dataServer();
    await until('the primary answers', 10_000, () => ask(primary.port, async (c) => (await c.ping()) === 'PONG'), output);
    const replica = await dataServer(primary.port);
    await until('the replica is in sync', 15_000, () => ask(primary.port, async (c) => /slave0:.*state=online/.test(await c.info('replication'))), output);
    const sentinels: Proc[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const dir = mkdtempSync(join(tmpdir(), 'qr-sentinel-'));
      dirs.push(dir);
      const file = join(dir, 'sentinel.conf');
      writeFileSync(
        file,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${name} 1000`,
          `sentinel failover-timeout ${name} 10000`,
          `sentinel parallel-syncs ${name} 1`,
          '',
        ].join('\n'),
      );
      const p = start(SENTINEL_BINARY, [file], port);
      procs.push(p);
      sentinels.push(p);
    }
    for (const s of sentinels) {
      await until(`sentinel :${s.port} knows the replica and both other sentinels`, 30_000, () =>
        ask(s.port, async (c) => {
          const replicas = (await c.call('SENTINEL', 'REPLICAS', name)) as unknown[];
          const others = (await c.call('SENTINEL', 'SENTINELS', name)) as unknown[];
          return replicas.length === 1 && others.length === 2;
        }), output);
    }
    const primaryPort = async (): Promise<number> => {
      const reply = (await ask((sentinels[0] as Proc).port, (c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name))) as [string, string];
      return Number(reply[1]);
    };
    return {
      name,
      sentinels: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
      primaryPort,
      killPrimary: async () => {
        const port = await primaryPort();
        const victim = procs.find((p) => p.port === port);
        if (victim === undefined) throw new Error(`no data server on :${port}`);
        const next = port === primary.port ? replica.port : primary.port;
        const killedAt = Date.now();
        victim.child.kill('SIGKILL');
        for (const s of sentinels) {
          await until(`sentinel :${s.port} names :${next} the primary after the kill`, 30_000, async () => {
            const reply = (await ask(s.port, (c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name))) as [string, string];
            return Number(reply[1]) === next;
          }, output);
        }
        return Date.now() - killedAt;
      },
      output,
      stop: async () => {
        await Promise.all(procs.map(stopProc));
        for (const d of dirs) rmSync(d, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await Promise.all(procs.map(stopProc));
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    throw err;
  }
}
