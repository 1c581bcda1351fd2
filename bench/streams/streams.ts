/**
 * `npm run bench:streams`: thousands of concurrent streams (issue 16).
 *
 * The provider simulator streams at `BENCH_STREAM_TPS` tokens a second; in front of it, 1-node
 * clusters (node + router + their own redis-server, bench/lib/bench-cluster.ts), one per upstream pool
 * size in `BENCH_POOLS` (the deployment's `connections`; `default` leaves the key out so the schema's
 * default applies). Per target — the simulator directly, then router → node for each pool size —
 * `BENCH_STREAMS` streaming chat requests of `BENCH_STREAM_TOKENS` output tokens are opened from one
 * undici Agent (a connection per stream), spread evenly over `BENCH_STREAM_RAMP` s so that all are
 * open at once for half of their life (1,000 new streams a second by default: the arrival rate of
 * 5,000 concurrent 5-s streams), after one unmeasured pass (the same number of streams, same ramp,
 * all overlapping) that opens the keep-alive connections on every hop. Requests go through undici's
 * `dispatch` with a handler (no Readable per response), so that the client takes little CPU.
 * Per target:
 * - the statuses (0 = connection error), and the streams that completed with exactly the asked
 *   number of content tokens;
 * - time to headers p50 / p99 (request sent → status and headers received), and each stream's
 *   duration (headers → end; `tokens / tps` s when nothing is late);
 * - the RSS of the router and of the node (`VmRSS`, /proc/<pid>/status) before the target's first
 *   stream (warm-up included, so the figure is conservative) and at its peak during the measured
 *   pass (sampled every 100 ms): (peak − idle) / streams, an upper bound of the KiB per open stream
 *   per process; and the figure itself, the slope of RSS over the number of streams open during the
 *   ramp (what the process grows by under any load falls into the intercept).
 *
 * Writes bench/results/<date>/streams.{json,md} and prints the Markdown. Every process is stopped
 * at the end, on error and on Ctrl-C.
 * BENCH_PROFILE=<folder>: routers and nodes write CPU profiles there (summarise with bench/lib/profile-top.ts).
 * Environment: BENCH_STREAMS (5,000), BENCH_STREAM_TOKENS (200), BENCH_STREAM_TPS (20),
 * BENCH_STREAM_RAMP (5 s), BENCH_POOLS (`128,default`), BENCH_TENANTS (100), BENCH_SKIP_DIRECT (1: no direct pass).
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { Child } from '../lib/cluster-processes.ts';
import { writeResults } from '../lib/load.ts';
import { measureStreams, streamAgent, warmStreams } from '../lib/stream-load.ts';
import type { StreamPass } from '../lib/stream-load.ts';
import { rssByRole } from '../lib/targets.ts';
import type { Target as LoadTarget } from '../lib/targets.ts';

const STREAMS = Number(process.env['BENCH_STREAMS'] ?? 5_000);
const TOKENS = Number(process.env['BENCH_STREAM_TOKENS'] ?? 200);
const TPS = Number(process.env['BENCH_STREAM_TPS'] ?? 20);
const RAMP_S = Number(process.env['BENCH_STREAM_RAMP'] ?? 5);
const POOLS = (process.env['BENCH_POOLS'] ?? '128,default').split(',').filter((s) => s !== '');
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 100);
const SKIP_DIRECT = process.env['BENCH_SKIP_DIRECT'] === '1';
/** A folder: the routers and nodes run with `--cpu-prof` and write their profiles there. */
const PROFILE = process.env['BENCH_PROFILE'];
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

const group = new ProcessGroup();
stopOnSignals(() => group.stopAll());

const keys = Array.from({ length: TENANTS }, (_, i) => `bench-streams-key-${i}`);

/** A measured target, with the deployment's `connections` (`default (no bound)`: left out), '—' for direct. */
interface Target extends LoadTarget {
  readonly pool: string;
}

/** Figures of one target. */
interface Result extends Omit<StreamPass, 'rssPeakKiB' | 'cpuSeconds'> {
  readonly target: string;
  readonly pool: string;
  /** RSS per process, KiB: before the target's first stream and the peak of the measured pass. */
  readonly rssKiB: Record<string, { readonly idle: number; readonly peak: number }>;
  /** (peak − idle) / streams per process, KiB. */
  readonly kibPerStream: Record<string, number>;
  /** CPU of each process (and of this client) during the measured pass, in cores (CPU s / wall s). */
  readonly cpuCores: Record<string, number>;
}

/** Warm-up pass, then the measured pass of STREAMS streams against `t`, RSS sampled every 100 ms. */
async function measure(t: Target): Promise<Result> {
  const agent = streamAgent(STREAMS);
  try {
    const idle = rssByRole(t.procs);
    // The same ramp, streams that all overlap: the pass opens a connection per stream on each hop.
    const warmBad = await warmStreams(agent, { url: t.url, keys, streams: STREAMS, rampS: RAMP_S }, TPS);
    log(`${t.name} (pool ${t.pool}): warm-up ${STREAMS} streams, ${warmBad} not 200`);
    const { rssPeakKiB, cpuSeconds, ...pass } = await measureStreams(agent, t, { keys, streams: STREAMS, tokens: TOKENS, rampS: RAMP_S });
    const rssKiB: Record<string, { idle: number; peak: number }> = {};
    const kibPerStream: Record<string, number> = {};
    for (const role of Object.keys(t.procs)) {
      rssKiB[role] = { idle: idle[role] ?? Number.NaN, peak: rssPeakKiB[role] ?? Number.NaN };
      kibPerStream[role] = ((rssPeakKiB[role] ?? Number.NaN) - (idle[role] ?? Number.NaN)) / STREAMS;
    }
    const cpuCores = Object.fromEntries(Object.entries(cpuSeconds).map(([role, s]) => [role, s / pass.seconds]));
    return { ...pass, target: t.name, pool: t.pool, rssKiB, kibPerStream, cpuCores };
  } finally {
    await agent.destroy();
  }
}

const profiled = (): Record<string, string> => (PROFILE === undefined ? {} : { NODE_OPTIONS: `--import=${fileURLToPath(new URL('../lib/cpu-profile.mjs', import.meta.url))}`, QUOTARING_CPU_PROFILE_DIR: PROFILE });

/** A 1-node cluster whose deployment has `pool` connections (`default`: the key left out). */
async function clusterTarget(simUrl: string, pool: string, i: number): Promise<Target> {
  const deployment: Record<string, unknown> = { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' };
  if (pool !== 'default') deployment['connections'] = Number(pool);
  const cluster = await startBenchCluster(group, {
    tag: `streams-${i}`,
    nodes: 1,
    mode: 'sharded',
    env: { BENCH_SIM_KEY: 'bench-sim-key', ...profiled() },
    config: {
      tenants: keys.map((key, t) => ({ id: `t${t}`, keys: [key], limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 1_000_000 }] })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
      deployments: [deployment],
    },
  });
  log(`cluster pool ${pool}: router pid ${cluster.router.proc.pid ?? '?'}, node pid ${cluster.nodeChildren[0]?.proc.pid ?? '?'}`);
  return { name: 'router → node', pool: pool === 'default' ? 'default (no bound)' : pool, url: cluster.url, procs: { router: cluster.router, node: cluster.nodeChildren[0] as Child } };
}

const fmtMs = (ms: number): string => (Number.isNaN(ms) ? '—' : ms >= 100 ? ms.toFixed(0) : ms.toFixed(1));
const fmtKiB = (kib: number | undefined): string => (kib === undefined || Number.isNaN(kib) ? '—' : kib.toFixed(1));
const fmtMiB = (r: { idle: number; peak: number } | undefined): string => (r === undefined ? '—' : `${(r.idle / 1_024).toFixed(0)} → ${(r.peak / 1_024).toFixed(0)}`);
const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

function table(results: readonly Result[]): string[] {
  const direct = results.find((r) => r.target === 'simulator direct');
  const lines = [
    '| target | upstream pool | statuses | complete | peak open | time to headers p50 / p99 ms | p99 vs direct | stream duration p50 / p99 s | chunks per stream p50 | router KiB/stream (slope; upper bound) | node KiB/stream (slope; upper bound) | router RSS MiB idle → peak | node RSS MiB idle → peak | CPU cores (pass average) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const statuses = Object.entries(r.statuses).map(([s, n]) => `${n} × ${s}`).join(', ');
    const vs = direct === undefined || r === direct ? '—' : `${(r.headersMs.p99 / direct.headersMs.p99).toFixed(2)}×`;
    lines.push(
      `| ${r.target} | ${r.pool} | ${statuses} | ${r.complete} / ${r.streams} | ${r.peakOpen} | ${fmtMs(r.headersMs.p50)} / ${fmtMs(r.headersMs.p99)} | ${vs} | ${r.durationS.p50.toFixed(1)} / ${r.durationS.p99.toFixed(1)} | ${r.chunksP50} | ${fmtKiB(r.rssSlopeKiB['router'])}; ${fmtKiB(r.kibPerStream['router'])} | ${fmtKiB(r.rssSlopeKiB['node'])}; ${fmtKiB(r.kibPerStream['node'])} | ${fmtMiB(r.rssKiB['router'])} | ${fmtMiB(r.rssKiB['node'])} | ${Object.entries(r.cpuCores).map(([role, c]) => `${role} ${c.toFixed(2)}`).join(', ')} |`,
    );
  }
  return lines;
}

try {
  const date = new Date().toISOString();
  const loadBefore = loadavg();
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  const sim = await group.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0', '--tps', String(TPS)], `${simUrl}/sim/stats`);
  log(`simulator pid ${sim.proc.pid ?? '?'} at ${TPS} tokens/s; ${STREAMS} streams of ${TOKENS} tokens over a ${RAMP_S} s ramp; pools ${POOLS.join(', ')}; load ${loadBefore}`);
  const results: Result[] = [];
  const report = (r: Result): void => {
    results.push(r);
    log(`${r.target} (pool ${r.pool}): ${JSON.stringify(r.statuses)} complete ${r.complete}/${r.streams}, peak open ${r.peakOpen}, headers p50 ${fmtMs(r.headersMs.p50)} p99 ${fmtMs(r.headersMs.p99)} ms, duration p50 ${r.durationS.p50.toFixed(1)} p99 ${r.durationS.p99.toFixed(1)} s, chunks p50 ${r.chunksP50}, CPU ${JSON.stringify(Object.fromEntries(Object.entries(r.cpuCores).map(([k, v]) => [k, Math.round(v * 100) / 100])))}, KiB/stream ${JSON.stringify(Object.fromEntries(Object.entries(r.kibPerStream).map(([k, v]) => [k, Math.round(v * 10) / 10])))}${r.errors.length > 0 ? `, errors: ${r.errors.join(' | ')}` : ''}; load ${loadavg()}`);
  };
  if (!SKIP_DIRECT) report(await measure({ name: 'simulator direct', pool: '—', url: simUrl, procs: { simulator: sim } }));
  for (const [i, pool] of POOLS.entries()) {
    const t = await clusterTarget(simUrl, pool, i);
    const r = await measure(t);
    report(r);
    if (r.complete < r.streams) for (const c of Object.values(t.procs)) log(`${c.name} output (last 3 KB):\n${c.output().slice(-3_000)}`);
    await Promise.all([t.procs['router']?.stop(), t.procs['node']?.stop()]);
  }
  const loadAfter = loadavg();
  const md = [
    `## Streams — ${date.slice(0, 10)}, ${cpus().length} cores, Node ${process.version}; load average ${loadBefore} before, ${loadAfter} after`,
    '',
    `${STREAMS} concurrent streams of ${TOKENS} tokens at ${TPS} tokens/s (the simulator), opened over ${RAMP_S} s from one undici Agent after a warm-up pass that opens the connections; ${TENANTS} tenants, no limit refusing; "complete" = status 200 and exactly ${TOKENS} content tokens; KiB per stream: the least-squares slope of RSS (every 100 ms) over the streams open during the ramp (what one more open stream costs); upper bound (peak RSS − RSS before the first stream) / ${STREAMS}.`,
    '',
    ...table(results),
    '',
  ].join('\n');
  writeResults('streams', date, { date, settings: { streams: STREAMS, tokens: TOKENS, tps: TPS, rampS: RAMP_S, pools: POOLS, tenants: TENANTS }, load: { before: loadBefore, after: loadAfter }, results }, md);
} catch (err) {
  log(`bench failed: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
} finally {
  await group.stopAll();
}
