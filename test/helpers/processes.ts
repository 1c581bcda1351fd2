/**
 * Test helpers that run quotaring for real: free ports, temp config files, and child processes of
 * the built CLI (`dist/src/cli.js`) that are stopped after the test.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { stringify } from 'yaml';
import type { SimulatorStats } from '../../src/simulator/stats.ts';
import { TEST_SECRET_ENV } from './cluster-secret.ts';

/** The built CLI; `npm run test:e2e` builds it first. */
export const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** Ports handed out by {@link freePort} in this process: never handed out twice. */
const handedOut = new Set<number>();

/**
 * A free TCP port on 127.0.0.1 for a process the test starts later. Drawn from 20000-32767, below
 * Linux's ephemeral range (32768-60999): a port the kernel picked (`listen(0)`) lies in that range,
 * and so does the local port of every outgoing connection, which a child process may open between
 * this call and its own bind (seen in CI: a router's admin port taken by a connection, EADDRINUSE).
 * Never returns the same port twice in one process. Throws after 200 tries.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_768);
    if (handedOut.has(port) || !(await bindable(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error('no free port found in 20000-32767');
}

/** Whether `port` can be bound on 127.0.0.1 right now. */
export async function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * The first of `count` consecutive free ports on 127.0.0.1, for launchers that take consecutive
 * ports. Drawn, like {@link freePort}, from below Linux's ephemeral range (32768-60999), so it cannot
 * meet an outgoing connection's local port; none of them handed out before. Throws after 50 tries.
 */
export async function freePortRun(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (12_768 - count));
    let free = true;
    for (let i = 0; i < count && free; i++) free = !handedOut.has(base + i) && (await bindable(base + i));
    if (!free) continue;
    for (let i = 0; i < count; i++) handedOut.add(base + i);
    return base;
  }
  throw new Error(`no run of ${count} free ports found in 20000-32767`);
}

/**
 * A config whose nodes keep their state files (`server.state_dir`) in `dir` unless it names one: a
 * test never loads what an earlier run left in the working directory.
 */
function withStateDir(config: unknown, dir: string): unknown {
  if (typeof config !== 'object' || config === null || Array.isArray(config)) return config;
  const c = config as { server?: Record<string, unknown> };
  if (c.server?.state_dir !== undefined) return config;
  return { ...c, server: { ...c.server, state_dir: dir } };
}

/** Writes a config object as YAML to a temp file (nodes' state files beside it, see `withStateDir`); returns its path. */
export function writeConfig(config: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-test-'));
  const file = join(dir, 'quotaring.yaml');
  writeFileSync(file, stringify(withStateDir(config, join(dir, 'state'))));
  return file;
}

/** A child process of the CLI. */
export interface Running {
  readonly proc: ChildProcess;
  /** Everything it printed so far. */
  output(): string;
  /** SIGTERM, then SIGKILL after 3 s; resolves with the exit code (null when killed). */
  stop(): Promise<number | null>;
}

/**
 * Runs `node dist/src/cli.js <args>` and waits until `healthUrl` answers 200. The child gets the
 * test cluster secret (`QUOTARING_CLUSTER_SECRET`) unless `env` sets that variable (to '' to unset it).
 * @throws Error with the child's output when it exits or stays silent for 15 s.
 */
export async function runCli(args: readonly string[], healthUrl: string, env: Record<string, string> = {}): Promise<Running> {
  const proc = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...TEST_SECRET_ENV, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const running: Running = {
    proc,
    output: () => out,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 3_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`${args.join(' ')} exited with ${proc.exitCode}:\n${out}`);
    try {
      const res = await request(healthUrl);
      await res.body.dump();
      if (res.statusCode === 200) return running;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  await running.stop();
  throw new Error(`${args.join(' ')} did not answer ${healthUrl}:\n${out}`);
}

/** Simulator counters from `GET /sim/stats`. */
export type SimStats = SimulatorStats;

/** Reads the simulator's counters. */
export async function simStats(simUrl: string): Promise<SimStats> {
  const res = await request(`${simUrl}/sim/stats`);
  return (await res.body.json()) as SimStats;
}

/** A simulator and one gateway node as real processes, with a config built from `tenants`. */
export interface Stack {
  readonly simUrl: string;
  readonly url: string;
  stop(): Promise<void>;
}

/** The simulator key the test stacks use. */
export const SIM_KEY = 'sim-test-key';

/**
 * Starts the simulator and a node. Models: `gpt-4o-mini` (o200k, exact counting), `gpt-4o-est`
 * (o200k, estimate), `text-embedding-3-small` (cl100k, exact) on an OpenAI deployment;
 * `claude-test` (cl100k exact, to match the simulator's stand-in count) on an Anthropic one.
 */
export async function startStack(tenants: unknown[], opts: { simArgs?: string[]; server?: Record<string, unknown> } = {}): Promise<Stack> {
  const simPort = await freePort();
  const port = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  const forward = ['x-sim-output-tokens', 'x-sim-fault', 'x-sim-ttft-ms', 'x-sim-anthropic-delta-input'];
  const file = writeConfig({
    server: { port, log_level: 'warn', ...opts.server },
    tenants,
    models: [
      { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', default_max_output: 256, deployments: ['sim-openai'] },
      { name: 'gpt-4o-est', encoding: 'o200k_base', estimator: 'estimate', default_max_output: 256, deployments: ['sim-openai'] },
      { name: 'text-embedding-3-small', encoding: 'cl100k_base', estimator: 'exact', deployments: ['sim-openai'] },
      { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['sim-anthropic'] },
    ],
    deployments: [
      { name: 'sim-openai', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', forward_headers: forward },
      { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', forward_headers: forward },
    ],
  });
  const sim = await runCli(['simulate', '--port', String(simPort), ...(opts.simArgs ?? [])], `${simUrl}/sim/stats`);
  let node: Running;
  try {
    node = await runCli(['node', '--config', file], `http://127.0.0.1:${port}/readyz`, { QUOTARING_SIM_KEY: SIM_KEY });
  } catch (err) {
    await sim.stop();
    throw err;
  }
  return {
    simUrl,
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      await node.stop();
      await sim.stop();
    },
  };
}
