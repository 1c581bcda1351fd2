/**
 * What every phase of `npm run bench` (bench/compare/compare.ts) shares: its knobs (environment), log,
 * process groups and temporary files, the setups of the throughput and latency phases (direct, the
 * bare proxy, the reference, quotaring clusters), their tenants and config, and the number formats
 * of the Markdown.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import type { BenchMode } from '../lib/bench-cluster.ts';
import { freePort, processCpuSeconds, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { BenchRedis, Child } from '../lib/cluster-processes.ts';
import { MODEL } from '../lib/load.ts';
import { startBareProxy } from '../lib/targets.ts';

/** The knobs of `npm run bench`, from the environment (see bench/compare/compare.ts): rounds, seconds, connections, tenants, seconds of replay. */
export const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
export const DURATION_S = Number(process.env['BENCH_DURATION'] ?? 6);
export const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 64);
export const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 1_000);
export const ACCURACY_S = Number(process.env['BENCH_ACCURACY_S'] ?? 240);
/** Latency phase: seconds of closed loop per setup and round. */
export const LATENCY_S = Number(process.env['BENCH_LATENCY_DURATION'] ?? 3);
/** Streams phase: concurrent streams, output tokens of each, the simulator's tokens a second, the ramp over which they open (s). */
export const STREAMS = Number(process.env['BENCH_STREAMS'] ?? 500);
/** Streams phase: output tokens of each stream. */
export const STREAM_TOKENS = Number(process.env['BENCH_STREAM_TOKENS'] ?? 200);
/** Streams phase: the simulator's tokens a second. */
export const STREAM_TPS = Number(process.env['BENCH_STREAM_TPS'] ?? 20);
/** Streams phase: the ramp over which the streams open, s. */
export const STREAM_RAMP_S = Number(process.env['BENCH_STREAM_RAMP'] ?? 5);
/** Streams phase: ramp of the unmeasured pass that opens the connections before each measured pass, s. */
export const STREAM_WARM_RAMP_S = Math.min(STREAM_RAMP_S, 2);
/** Phases to skip (`throughput`, `latency`, `streams`, `accuracy`). */
export const SKIP = new Set((process.env['BENCH_SKIP'] ?? '').split(',').filter((s) => s !== ''));
/** Prompt of every throughput and latency request, tokens. */
export const PROMPT_TOKENS = 200;
/** Seconds of each warm-up run (repeated until every tenant was sent two requests). */
export const WARMUP_S = 2;
/** Unmeasured load on a setup right before each of its measured runs, s (its tenants went idle meanwhile). */
export const REWARM_S = 1;
/** Accuracy: tenants per workload, Zipf exponent and seed of their draw. */
export const ACC_TENANTS = 8;
/** Accuracy: Zipf exponent of the tenants' draw. */
export const ZIPF_S = 1.1;
/** Accuracy: seed of the tenants' draw. */
export const ZIPF_SEED = 42;
/** Accuracy: each tenant's token limit per minute, as a fraction of the trace's mean demand per minute at 1×. */
export const LIMIT_FRACTION = 0.1;
/** Accuracy: windows of the over-admission sweep are shortened by this (client send time vs gateway decision time), ms. */
export const TOLERANCE_MS = 20;
/** Accuracy: the sliding window of the over-admission sweep, ms. */
export const WINDOW_MS = 60_000;
/** The repository's root folder. */
export const root = new URL('../../', import.meta.url);
/** A timestamped line on stderr. */
export const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

/** The processes of each phase (stopped at its end) and those of the whole run (`base`). */
export const groups = { base: new ProcessGroup(), throughput: new ProcessGroup(), streams: new ProcessGroup(), accuracy: new ProcessGroup() };
/** Stops every process of the run (on exit, error and Ctrl-C too). */
export const stopAll = async (): Promise<void> => {
  await Promise.all([groups.throughput.stopAll(), groups.streams.stopAll(), groups.accuracy.stopAll()]);
  await groups.base.stopAll();
};
stopOnSignals(stopAll);
/** Temporary files and folders of this run, removed when the process exits (also after Ctrl-C). */
export const temporary: string[] = [];
process.once('exit', () => {
  for (const path of temporary) rmSync(path, { recursive: true, force: true });
});

/** How a setup decides: no limiter (direct), a proxy with no limiter (bare), the outside reference, or quotaring in a mode. */
export type SetupMode = 'direct' | 'bare' | 'reference' | BenchMode;

/** One measured setup of the throughput phase. */
export interface Setup {
  readonly name: string;
  readonly mode: SetupMode;
  /** Gateway processes: quotaring nodes, 1 for a proxy (bare, reference), 0 direct. */
  readonly nodes: number;
  readonly url: string;
  readonly redis?: BenchRedis;
  /** Processes that decide and proxy (quotaring nodes, the bare or reference proxy). */
  readonly gateways: readonly Child[];
  readonly router?: Child;
}

/** Latency percentiles of one autocannon run, ms. */
export type Percentiles = Readonly<Record<string, number>>;

/** Figures of one setup over the rounds. */
export interface SetupResult {
  setup: string;
  mode: SetupMode;
  nodes: number;
  rps: number[];
  p50: number[];
  p99: number[];
  p999: number[];
  /** Percentiles of the round with the median req/s (for the CDF). */
  percentiles: Percentiles;
  served: number;
  non2xx: number;
  errors: number;
  seconds: number;
  redisCalls: Record<string, number>;
  redisCpuS: number;
  gatewayCpuS: number;
  routerCpuS: number;
  /** CPU µs per 2xx request of the gateway processes (nodes, or the proxy) and of the router, one entry a round. */
  gatewayCpuUs: number[];
  routerCpuUs: number[];
}

/** CPU seconds used so far by `children`, summed (/proc). */
export const cpuOf = (children: readonly (Child | undefined)[]): number =>
  children.reduce((sum, c) => sum + (c === undefined ? 0 : processCpuSeconds(c.proc.pid)), 0);

/** Tenant `i` with key `key` and limits that never refuse. */
const unlimited = (i: number, key: string): Record<string, unknown> => ({
  id: `t${i}`,
  keys: [key],
  limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 10_000 }],
});

/** Starts the reference proxy (its own Redis) in front of `simUrl`; tenants as JSON `{ upstreamKey, tenants }`. */
export async function startReference(group: ProcessGroup, tag: string, simUrl: string, tenants: unknown): Promise<{ url: string; redis: BenchRedis; child: Child }> {
  const redis = await group.redis(`redis-${tag}`);
  const file = join(tmpdir(), `quotaring-bench-${tag}-${process.pid}.json`);
  writeFileSync(file, JSON.stringify(tenants));
  temporary.push(file);
  const port = await freePort();
  const script = fileURLToPath(new URL('reference-limiter.ts', import.meta.url));
  const url = `http://127.0.0.1:${port}`;
  const child = await group.start(tag, process.execPath, ['--import', 'tsx', script, '--port', String(port), '--redis', redis.url, '--upstream', simUrl, '--tenants', file], `${url}/healthz`);
  return { url, redis, child };
}

/** The API keys of the throughput, latency and streams tenants, one per tenant. */
export const keys = Array.from({ length: TENANTS }, (_, i) => `bench-compare-key-${i}`);
/** The quotaring config of every throughput and streams cluster in front of `simUrl`: limits that never refuse. */
export const unlimitedConfig = (simUrl: string): Record<string, unknown> => ({
  tenants: keys.map((key, i) => unlimited(i, key)),
  models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
});
/** The environment of every cluster: the simulator's key. */
export const simEnv = { BENCH_SIM_KEY: 'bench-sim-key' };
/** Whether a setup is the path users run: 1 sharded node behind a router. */
export const isPath = (s: { mode: SetupMode; nodes: number }): boolean => s.mode === 'sharded' && s.nodes === 1;

/**
 * Starts the setups in front of `simUrl`: all of them for the throughput phase, else only those of
 * the latency phase (direct, the reference, 1 node + router sharded).
 */
export async function startSetups(simUrl: string, all: boolean): Promise<Setup[]> {
  const ref = await startReference(groups.throughput, 'reference', simUrl, {
    upstreamKey: 'bench-sim-key',
    tenants: keys.map((key, i) => ({ id: `t${i}`, key, requestsPerMinute: 1_000_000_000, tokensPerMinute: 1_000_000_000_000 })),
  });
  const setups: Setup[] = [{ name: 'simulator direct', mode: 'direct', nodes: 0, url: simUrl, gateways: [] }];
  if (all) {
    const bare = await startBareProxy(groups.throughput, 'bare-proxy', simUrl, 'buffer');
    setups.push({ name: 'bare proxy (fastify + undici)', mode: 'bare', nodes: 1, url: bare.url, gateways: [bare.child] });
  }
  setups.push({ name: 'reference (rate-limiter-flexible)', mode: 'reference', nodes: 1, url: ref.url, redis: ref.redis, gateways: [ref.child] });
  for (const mode of ['sharded', 'central'] as const) {
    for (const n of [1, 2, 3]) {
      if (!all && !isPath({ mode, nodes: n })) continue;
      const c = await startBenchCluster(groups.throughput, { tag: `${mode}-${n}`, nodes: n, mode, config: unlimitedConfig(simUrl), env: simEnv });
      setups.push({ name: c.name, mode, nodes: n, url: c.url, redis: c.redis, gateways: c.nodeChildren, router: c.router });
    }
  }
  return setups;
}

/** Number formats of the Markdown: whole, one decimal, percent, signed, ms from µs, ratio; '—' for a non-finite value. */
export const fmt0 = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
export const fmt1 = (x: number): string => (Number.isFinite(x) ? (Math.round(x * 10) / 10).toString() : '—');
export const pct = (x: number | null): string => (x === null || !Number.isFinite(x) ? '—' : `${(x * 100).toFixed(2)}%`);
export const signed = (x: number): string => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${fmt1(x)}` : '—');
export const ms = (us: number): string => (Number.isFinite(us) ? (us / 1_000).toFixed(2) : '—');
export const signedMs = (us: number): string => (Number.isFinite(us) ? `${us >= 0 ? '+' : ''}${ms(us)}` : '—');
export const times = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(2)}×` : '—');
