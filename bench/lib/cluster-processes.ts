/**
 * Processes of the cluster benchmark: free ports, temp config files, children of the built CLI
 * (`dist/src/cli.js`) and `redis-server`, all registered in a {@link ProcessGroup} that stops them
 * (also on Ctrl-C and on exit). Free ports and temp configs come from test/helpers, as in bench/node.ts.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { freePort } from '../../test/helpers/processes.ts';
import { ClusterSecret, DEFAULT_SECRET_ENV } from '../../src/security/cluster-secret.ts';
import { RequestSigner } from '../../src/security/request-signature.ts';

export { freePort, writeConfig } from '../../test/helpers/processes.ts';

/** The cluster secret every child gets (`QUOTARING_CLUSTER_SECRET` from the environment, else a fixed benchmark one). */
export const BENCH_SECRET_VALUE = process.env[DEFAULT_SECRET_ENV] || 'quotaring-benchmark-cluster-secret-000000';
/** Signs the benchmark's own reads of nodes' internal routes. */
export const BENCH_SIGNER = new RequestSigner(new ClusterSecret(BENCH_SECRET_VALUE));

/** The built CLI; `npm run bench:cluster` builds it first. */
export const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** A child process started by the benchmark. */
export interface Child {
  readonly name: string;
  readonly proc: ChildProcess;
  /** The last 64 KiB it printed. */
  output(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves once it exited (with its exit code, null when killed). Idempotent. */
  stop(): Promise<number | null>;
}

/** True when `url` answers 200 (any error is false). */
export async function answers200(url: string): Promise<boolean> {
  try {
    const res = await request(url, { headersTimeout: 2_000, bodyTimeout: 2_000 });
    await res.body.dump();
    return res.statusCode === 200;
  } catch {
    return false;
  }
}

/** Polls `check` every `everyMs` until it is true. @throws Error naming `what` after `timeoutMs`. */
export async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 20_000, everyMs = 50): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** A running `redis-server` and an admin connection to it. */
export interface BenchRedis {
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /** `INFO commandstats` as calls per command (lower-case names, e.g. `zadd`, `evalsha`). */
  commandCalls(): Promise<Map<string, number>>;
  /** CPU seconds the server has used so far (`INFO cpu`: used_cpu_user + used_cpu_sys). */
  cpuSeconds(): Promise<number>;
}

/** Parses `INFO cpu` into the CPU seconds used (user + system, main thread and children). */
export function parseCpuSeconds(info: string): number {
  let total = 0;
  for (const line of info.split('\n')) {
    const m = /^used_cpu_(user|sys):([\d.]+)/.exec(line.trim());
    if (m?.[2] !== undefined) total += Number(m[2]);
  }
  return total;
}

/** CPU seconds (user + system) a live process has used, from `/proc/<pid>/stat` (Linux; NaN elsewhere or once it exited). */
export function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}

/** Resident set size of a live process in KiB, from `VmRSS` in `/proc/<pid>/status` (Linux; NaN elsewhere or once it exited). */
export function processRssKiB(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m?.[1] === undefined ? Number.NaN : Number(m[1]);
  } catch {
    return Number.NaN;
  }
}

/** USER_HZ of Linux /proc times (100 on every mainstream architecture). */
const CLOCK_TICKS = 100;

/** Parses `INFO commandstats` (`cmdstat_<name>:calls=N,usec=...` lines) into calls per command. */
export function parseCommandStats(info: string): Map<string, number> {
  const calls = new Map<string, number>();
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) calls.set(m[1], Number(m[2]));
  }
  return calls;
}

/** Calls per command of `after` minus `before`, commands with no new call left out. */
export function commandDelta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): Map<string, number> {
  const delta = new Map<string, number>();
  for (const [cmd, n] of after) {
    const d = n - (before.get(cmd) ?? 0);
    if (d > 0) delta.set(cmd, d);
  }
  return delta;
}

/**
 * On the first SIGINT or SIGTERM: says so on stderr, runs `stopAll` (every process the benchmark
 * started) and exits with 130 / 143. Later signals are ignored while it stops.
 */
export function stopOnSignals(stopAll: () => Promise<void>): void {
  let interrupted = false;
  const onSignal = (code: number) => (): void => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write('stopping every process...\n');
    void stopAll().then(() => process.exit(code));
  };
  process.once('SIGINT', onSignal(130));
  process.once('SIGTERM', onSignal(143));
}

/** Children of the benchmark, stopped together (newest first) by {@link ProcessGroup.stopAll}. */
export class ProcessGroup {
  readonly #children: Child[] = [];
  readonly #clients: Redis[] = [];

  constructor() {
    // Last resort: nothing outlives the benchmark, even when it crashes.
    process.once('exit', () => {
      for (const c of this.#children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
    });
  }

  /** Spawns `command args` (with the cluster secret in its environment) and registers it; output is kept (last 64 KiB), not printed. */
  spawn(name: string, command: string, args: readonly string[], env: Record<string, string> = {}): Child {
    const proc = spawn(command, args, { env: { ...process.env, [DEFAULT_SECRET_ENV]: BENCH_SECRET_VALUE, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const keep = (d: Buffer): void => {
      out += d.toString();
      if (out.length > 65_536) out = out.slice(-65_536);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    let stopping: Promise<number | null> | undefined;
    const exited = new Promise<number | null>((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) resolve(proc.exitCode);
      else proc.once('exit', (code) => resolve(code));
    });
    const child: Child = {
      name,
      proc,
      output: () => out,
      stop: () => {
        stopping ??= (async () => {
          if (proc.exitCode === null && proc.signalCode === null) {
            proc.kill('SIGTERM');
            const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
            const code = await exited;
            clearTimeout(timer);
            return code;
          }
          return proc.exitCode;
        })();
        return stopping;
      },
    };
    this.#children.push(child);
    return child;
  }

  /**
   * Runs `node dist/src/cli.js <args>` and waits until `healthUrl` answers 200.
   * @throws Error with the child's output when it exits or does not answer within 30 s.
   */
  cli(name: string, args: readonly string[], healthUrl: string, env: Record<string, string> = {}): Promise<Child> {
    return this.start(name, process.execPath, [CLI, ...args], healthUrl, env);
  }

  /**
   * Spawns `command args` (see {@link spawn}) and waits until `healthUrl` answers 200.
   * @throws Error with the child's output when it exits or does not answer within 30 s.
   */
  async start(name: string, command: string, args: readonly string[], healthUrl: string, env: Record<string, string> = {}): Promise<Child> {
    const child = this.spawn(name, command, args, env);
    try {
      await waitUntil(`${name} at ${healthUrl}`, async () => {
        if (child.proc.exitCode !== null) throw new Error(`${name} exited with ${child.proc.exitCode}`);
        return answers200(healthUrl);
      }, 30_000);
    } catch (err) {
      throw new Error(`${(err as Error).message}:\n${child.output().slice(-4_000)}`);
    }
    return child;
  }

  /**
   * Starts `redis-server` on a free port without persistence and waits until it answers PING.
   * @throws Error when it does not come up within 10 s (redis-server missing: `apt-get install redis-server`).
   */
  async redis(name: string): Promise<BenchRedis> {
    const port = await freePort();
    const child = this.spawn(name, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']);
    child.proc.once('error', () => {});
    const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    this.#clients.push(client);
    await waitUntil(`${name} on port ${port}`, async () => {
      if (child.proc.exitCode !== null || child.proc.signalCode !== null) throw new Error(`redis-server exited: ${child.output()}`);
      try {
        if (client.status !== 'ready') await client.connect();
        return (await client.ping()) === 'PONG';
      } catch {
        return false;
      }
    }, 10_000, 20);
    return {
      url: `redis://127.0.0.1:${port}`,
      commandCalls: async () => parseCommandStats(await client.info('commandstats')),
      cpuSeconds: async () => parseCpuSeconds(await client.info('cpu')),
    };
  }

  /** Stops every child, newest first (routers before nodes before the simulator and Redis). */
  async stopAll(): Promise<void> {
    for (const c of this.#clients.splice(0)) c.disconnect();
    const children = this.#children.splice(0).reverse();
    // Routers and nodes in parallel (a node's graceful leave takes ~drain), then the rest.
    const cli = children.filter((c) => !c.name.startsWith('redis') && c.name !== 'simulator');
    await Promise.all(cli.map((c) => c.stop()));
    await Promise.all(children.filter((c) => !cli.includes(c)).map((c) => c.stop()));
  }
}
