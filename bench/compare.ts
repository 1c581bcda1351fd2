/**
 * `npm run bench`: what sharding buys over a central store, and how the path users run compares with
 * a bare proxy (issue 16's targets), measured end to end on this machine in one run (about 13
 * minutes; every process it starts is stopped at the end, on error and on Ctrl-C).
 *
 * 1. Throughput — the simulator called directly, the bare fastify + undici proxy (bench/bare-proxy.ts:
 *    no limits, the floor of proxying), the outside reference (rate-limiter-flexible's
 *    RateLimiterRedis in a proxy, bench/reference-limiter.ts), and quotaring with 1, 2 and 3 nodes
 *    behind a router in each mode (`sharded`, `central`), each cluster with its own redis-server.
 *    Same load for all (autocannon, fixed connections, 200-token prompts, 1,000 tenants, limits that
 *    never refuse, the simulator answering at once); setups interleave round by round; figures are
 *    medians over rounds, ratios medians of the per-round ratios. Per setup: Redis commands
 *    (`INFO commandstats`, script internals included) and Redis CPU (`INFO cpu`) per request, and the
 *    CPU per request (`/proc/<pid>/stat`) of the proxy (bare or reference), of the nodes and of the
 *    router, from which the projected ceiling of each design is computed.
 * 2. Added latency at one connection — direct, the reference and 1 node + router (sharded), a closed
 *    loop of one request at a time for BENCH_LATENCY_DURATION s per setup and round, interleaved,
 *    latencies in µs (HDR histogram; autocannon's are whole milliseconds): p50 / p99 / p99.9 and
 *    what each adds over direct (median of the per-round differences).
 * 3. Streams — a simulator streaming BENCH_STREAM_TPS tokens a second; BENCH_STREAMS concurrent
 *    streams of BENCH_STREAM_TOKENS tokens, opened over BENCH_STREAM_RAMP s through undici's dispatch
 *    (bench/stream-load.ts), against the simulator directly, the bare proxy in pass-through mode and
 *    router → node (1 node, the deployment's default pool); each measured pass follows an unmeasured
 *    one that opens the connections; targets interleave (order rotated) over the rounds. Per target:
 *    CPU µs per streamed event (SSE `data:` line received) of each process, KiB of RSS per open
 *    stream of each process ((peak − lowest RSS since the phase began) / streams), time to headers
 *    p50 / p99, and the gap between consecutive events of a stream p50 / p99 minus direct's.
 * 4. Accuracy — both Azure traces (cluster/traces), each at 1× and 3× speed for the same wall-clock
 *    time, replayed at once against a 3-node sharded cluster, a 3-node central cluster and the
 *    reference, each in front of its own simulator whose per-key TPM quota is the sum of the
 *    tenants' limits. Tenants: 8 per workload, drawn by a seeded Zipf rule on the row index;
 *    every tenant gets the same sliding-window token limit, a tenth of the trace's average demand
 *    per minute, so the top tenants ask several times their limit. Over-admission, utilisation and
 *    429s come from the replay records (bench/accuracy-metrics.ts).
 *
 * summary.md ends with issue 16's targets: each one, its value in this run, met or not.
 * Writes bench/results/<date>/results.json (every per-round figure), summary.md and the charts
 * throughput.svg, latency-cdf.svg, tenant-minutes.svg, and prints the Markdown. Environment:
 * BENCH_ROUNDS (3, every phase), BENCH_DURATION (6 s), BENCH_CONNECTIONS (64), BENCH_TENANTS (1,000),
 * BENCH_LATENCY_DURATION (3 s), BENCH_STREAMS (500), BENCH_STREAM_TPS (20), BENCH_STREAM_TOKENS (200),
 * BENCH_STREAM_RAMP (5 s), BENCH_ACCURACY_S (240 s of replay), BENCH_SKIP (comma list of
 * `throughput`, `latency`, `streams`, `accuracy`).
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type autocannon from 'autocannon';
import { runReplay, simulatorRateLimited } from '../src/replay/replay.ts';
import type { ReplayRecord } from '../src/replay/report.ts';
import { ZipfAssigner } from '../src/replay/tenants.ts';
import { readTrace } from '../src/replay/trace.ts';
import type { TraceRow } from '../src/replay/trace.ts';
import { accuracyOf } from './accuracy-metrics.ts';
import type { AccuracyResult, TenantLimits } from './accuracy-metrics.ts';
import { startBenchCluster } from './bench-cluster.ts';
import type { BenchMode } from './bench-cluster.ts';
import { latencyCdfChart, tenantMinuteChart, throughputChart } from './charts.ts';
import { commandDelta, freePort, processCpuSeconds, ProcessGroup, stopOnSignals } from './cluster-processes.ts';
import type { BenchRedis, Child } from './cluster-processes.ts';
import { chatBody, median, MODEL, pairedDifference, pairedRatio, runAutocannon, runClosedLoop } from './load.ts';
import { measureStreams, streamAgent, warmStreams } from './stream-load.ts';
import type { StreamPass } from './stream-load.ts';
import { rssByRole, startBareProxy } from './targets.ts';
import type { Target } from './targets.ts';

const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
const DURATION_S = Number(process.env['BENCH_DURATION'] ?? 6);
const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 64);
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 1_000);
const ACCURACY_S = Number(process.env['BENCH_ACCURACY_S'] ?? 240);
/** Latency phase: seconds of closed loop per setup and round. */
const LATENCY_S = Number(process.env['BENCH_LATENCY_DURATION'] ?? 3);
/** Streams phase: concurrent streams, output tokens of each, the simulator's tokens a second, the ramp over which they open (s). */
const STREAMS = Number(process.env['BENCH_STREAMS'] ?? 500);
const STREAM_TOKENS = Number(process.env['BENCH_STREAM_TOKENS'] ?? 200);
const STREAM_TPS = Number(process.env['BENCH_STREAM_TPS'] ?? 20);
const STREAM_RAMP_S = Number(process.env['BENCH_STREAM_RAMP'] ?? 5);
/** Streams phase: ramp of the unmeasured pass that opens the connections before each measured pass, s. */
const STREAM_WARM_RAMP_S = Math.min(STREAM_RAMP_S, 2);
const SKIP = new Set((process.env['BENCH_SKIP'] ?? '').split(',').filter((s) => s !== ''));
const PROMPT_TOKENS = 200;
const WARMUP_S = 2;
/** Unmeasured load on a setup right before each of its measured runs, s (its tenants went idle meanwhile). */
const REWARM_S = 1;
/** Accuracy: tenants per workload, Zipf exponent and seed of their draw. */
const ACC_TENANTS = 8;
const ZIPF_S = 1.1;
const ZIPF_SEED = 42;
/** Accuracy: each tenant's token limit per minute, as a fraction of the trace's mean demand per minute at 1×. */
const LIMIT_FRACTION = 0.1;
/** Accuracy: windows of the over-admission sweep are shortened by this (client send time vs gateway decision time), ms. */
const TOLERANCE_MS = 20;
const WINDOW_MS = 60_000;
const root = new URL('..', import.meta.url);
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

const groups = { base: new ProcessGroup(), throughput: new ProcessGroup(), streams: new ProcessGroup(), accuracy: new ProcessGroup() };
const stopAll = async (): Promise<void> => {
  await Promise.all([groups.throughput.stopAll(), groups.streams.stopAll(), groups.accuracy.stopAll()]);
  await groups.base.stopAll();
};
stopOnSignals(stopAll);
/** Temporary files and folders of this run, removed when the process exits (also after Ctrl-C). */
const temporary: string[] = [];
process.once('exit', () => {
  for (const path of temporary) rmSync(path, { recursive: true, force: true });
});

/** How a setup decides: no limiter (direct), a proxy with no limiter (bare), the outside reference, or quotaring in a mode. */
type SetupMode = 'direct' | 'bare' | 'reference' | BenchMode;

/** One measured setup of the throughput phase. */
interface Setup {
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
type Percentiles = Readonly<Record<string, number>>;

/** Figures of one setup over the rounds. */
interface SetupResult {
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

/** autocannon's percentile fields, as fractions of requests. */
const PERCENTILE_FIELDS: readonly [keyof autocannon.Histogram, number][] = [
  ['p0_001', 0.001], ['p0_01', 0.01], ['p0_1', 0.1], ['p1', 1], ['p2_5', 2.5], ['p10', 10], ['p25', 25], ['p50', 50],
  ['p75', 75], ['p90', 90], ['p97_5', 97.5], ['p99', 99], ['p99_9', 99.9], ['p99_99', 99.99], ['p99_999', 99.999],
];

const cpuOf = (children: readonly (Child | undefined)[]): number =>
  children.reduce((sum, c) => sum + (c === undefined ? 0 : processCpuSeconds(c.proc.pid)), 0);

const unlimited = (i: number, key: string): Record<string, unknown> => ({
  id: `t${i}`,
  keys: [key],
  limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 10_000 }],
});

/** Starts the reference proxy (its own Redis) in front of `simUrl`; tenants as JSON `{ upstreamKey, tenants }`. */
async function startReference(group: ProcessGroup, tag: string, simUrl: string, tenants: unknown): Promise<{ url: string; redis: BenchRedis; child: Child }> {
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

const keys = Array.from({ length: TENANTS }, (_, i) => `bench-compare-key-${i}`);
/** The quotaring config of every throughput and streams cluster in front of `simUrl`: limits that never refuse. */
const unlimitedConfig = (simUrl: string): Record<string, unknown> => ({
  tenants: keys.map((key, i) => unlimited(i, key)),
  models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
});
const simEnv = { BENCH_SIM_KEY: 'bench-sim-key' };
const isPath = (s: { mode: SetupMode; nodes: number }): boolean => s.mode === 'sharded' && s.nodes === 1;

/**
 * Starts the setups in front of `simUrl`: all of them for the throughput phase, else only those of
 * the latency phase (direct, the reference, 1 node + router sharded).
 */
async function startSetups(simUrl: string, all: boolean): Promise<Setup[]> {
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

async function throughput(setups: readonly Setup[]): Promise<SetupResult[]> {
  const body = chatBody(PROMPT_TOKENS);
  log(`throughput: ${setups.length} setups up; warm-up of ${WARMUP_S} s runs until every tenant was sent 2 requests, then ${ROUNDS} rounds × ${DURATION_S} s`);
  // Until every tenant was seen twice: a node claims a tenant (one Redis read) at its first request, and
  // a slow start (JIT, tokenizer) can leave tenants unseen after a timed warm-up, so their claims
  // landed in the measured rounds.
  for (const s of setups) {
    let sent = 0;
    while (sent < 2 * TENANTS) sent += (await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: WARMUP_S, firstKey: sent })).requests.total;
  }
  const results = new Map<string, SetupResult>(
    setups.map((s) => [
      s.name,
      { setup: s.name, mode: s.mode, nodes: s.nodes, rps: [], p50: [], p99: [], p999: [], percentiles: {}, served: 0, non2xx: 0, errors: 0, seconds: 0, redisCalls: {}, redisCpuS: 0, gatewayCpuS: 0, routerCpuS: 0, gatewayCpuUs: [], routerCpuUs: [] },
    ]),
  );
  const rounds = new Map<string, { rps: number; percentiles: Percentiles }[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of setups) {
      if (s.redis !== undefined) await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: REWARM_S });
      const before = { calls: await s.redis?.commandCalls(), redisCpu: (await s.redis?.cpuSeconds()) ?? 0, gw: cpuOf(s.gateways), router: cpuOf([s.router]) };
      const r = await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: DURATION_S });
      const after = { calls: await s.redis?.commandCalls(), redisCpu: (await s.redis?.cpuSeconds()) ?? 0, gw: cpuOf(s.gateways), router: cpuOf([s.router]) };
      const row = results.get(s.name) as SetupResult;
      row.rps.push(r.requests.average);
      row.p50.push(r.latency.p50);
      row.p99.push(r.latency.p99);
      row.p999.push(r.latency.p99_9);
      row.served += r['2xx'];
      row.non2xx += r.non2xx;
      row.errors += r.errors;
      row.seconds += r.duration;
      row.redisCpuS += after.redisCpu - before.redisCpu;
      row.gatewayCpuS += after.gw - before.gw;
      row.routerCpuS += after.router - before.router;
      row.gatewayCpuUs.push(((after.gw - before.gw) * 1e6) / Math.max(1, r['2xx']));
      row.routerCpuUs.push(((after.router - before.router) * 1e6) / Math.max(1, r['2xx']));
      if (before.calls !== undefined && after.calls !== undefined) {
        for (const [cmd, calls] of commandDelta(before.calls, after.calls)) if (cmd !== 'info') row.redisCalls[cmd] = (row.redisCalls[cmd] ?? 0) + calls;
      }
      const percentiles = Object.fromEntries(PERCENTILE_FIELDS.map(([field, p]) => [String(p), r.latency[field]]));
      rounds.set(s.name, [...(rounds.get(s.name) ?? []), { rps: r.requests.average, percentiles }]);
      log(`round ${round + 1}/${ROUNDS} ${s.name.padEnd(34)} ${r.requests.average.toFixed(0)} req/s p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms CPU µs/request ${(row.gatewayCpuUs.at(-1) ?? NaN).toFixed(1)} + router ${(row.routerCpuUs.at(-1) ?? NaN).toFixed(1)} non-2xx ${r.non2xx} errors ${r.errors}`);
    }
  }
  // Why a node may claim tenants it did not hold (a Redis read each): its router routed around a member.
  for (const s of setups) {
    const lines = s.router?.output().split('\n') ?? [];
    const count = (msg: string): number => lines.filter((l) => l.includes(msg)).length;
    if (s.router !== undefined) log(`${s.name}: router marked a member suspect ${count('member suspect')} times, retried ${count('member unreachable')} requests on the next member`);
    const messages = new Map<string, number>();
    for (const g of s.redis === undefined ? [] : s.gateways) {
      for (const l of g.output().split('\n')) {
        const msg = /"msg":"([^"]*)"/.exec(l)?.[1];
        if (msg !== undefined) messages.set(msg, (messages.get(msg) ?? 0) + 1);
      }
    }
    if (messages.size > 0) log(`${s.name}: node warnings ${JSON.stringify(Object.fromEntries(messages))}`);
  }
  for (const [name, rs] of rounds) {
    const byRps = [...rs].sort((a, b) => a.rps - b.rps);
    (results.get(name) as SetupResult).percentiles = (byRps[Math.floor((byRps.length - 1) / 2)] as { percentiles: Percentiles }).percentiles;
  }
  return [...results.values()];
}

/** Figures of one setup in the latency phase, one entry a round (latencies in µs). */
interface LatencyResult {
  readonly setup: string;
  readonly mode: SetupMode;
  readonly nodes: number;
  readonly rps: number[];
  readonly p50Us: number[];
  readonly p99Us: number[];
  readonly p999Us: number[];
  failures: number;
}

/** One connection, one request at a time: direct, the reference and 1 node + router (sharded), interleaved over the rounds. */
async function latency(setups: readonly Setup[]): Promise<LatencyResult[]> {
  const list = setups.filter((s) => s.mode === 'direct' || s.mode === 'reference' || isPath(s));
  const body = chatBody(PROMPT_TOKENS);
  log(`latency: ${list.length} setups, 1 connection; warm-up until every tenant was sent 2 requests, then ${ROUNDS} rounds × ${LATENCY_S} s`);
  for (const s of list) {
    let sent = 0;
    while (sent < 2 * TENANTS) {
      const r = await runClosedLoop({ url: s.url, body, keys, durationS: 1, firstKey: sent });
      sent += r.requests + r.failures;
    }
  }
  const results = list.map((s): LatencyResult => ({ setup: s.name, mode: s.mode, nodes: s.nodes, rps: [], p50Us: [], p99Us: [], p999Us: [], failures: 0 }));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, s] of list.entries()) {
      await runClosedLoop({ url: s.url, body, keys, durationS: REWARM_S });
      const r = await runClosedLoop({ url: s.url, body, keys, durationS: LATENCY_S });
      const row = results[i] as LatencyResult;
      row.rps.push(r.requests / r.seconds);
      row.p50Us.push(r.latencyUs.p50);
      row.p99Us.push(r.latencyUs.p99);
      row.p999Us.push(r.latencyUs.p999);
      row.failures += r.failures;
      log(`latency round ${round + 1}/${ROUNDS} ${s.name.padEnd(34)} ${(r.requests / r.seconds).toFixed(0)} req/s p50 ${r.latencyUs.p50} µs p99 ${r.latencyUs.p99} µs p99.9 ${r.latencyUs.p999} µs failures ${r.failures}`);
    }
  }
  return results;
}

/** Which streams target: the simulator, the bare pass-through, or router → node. */
type StreamRole = 'direct' | 'bare' | 'path';

/**
 * One streams target's figures: RSS of its processes before its first stream, every measured pass
 * (one a round) and, for each, the lowest RSS of each process from the phase's start to the pass's end.
 */
interface StreamResult {
  readonly target: string;
  readonly role: StreamRole;
  readonly idleRssKiB: Record<string, number>;
  readonly rounds: StreamPass[];
  readonly floorRssKiB: Record<string, number>[];
}

/** The streams phase: its own streaming simulator, the bare pass-through and a 1-node cluster in front of it. */
async function streams(): Promise<StreamResult[]> {
  const group = groups.streams;
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await group.cli('simulator-streams', ['simulate', '--port', String(simPort), '--ttft-ms', '0', '--tps', String(STREAM_TPS)], `${simUrl}/sim/stats`);
  const bare = await startBareProxy(group, 'bare-streams', simUrl, 'stream');
  // The deployment's pool left at its default (no bound): what users run.
  const cluster = await startBenchCluster(group, { tag: 'streams', nodes: 1, mode: 'sharded', config: unlimitedConfig(simUrl), env: simEnv });
  const targets: (Target & { role: StreamRole })[] = [
    { name: 'simulator direct', role: 'direct', url: simUrl, procs: {} },
    { name: 'bare stream pass-through', role: 'bare', url: bare.url, procs: { proxy: bare.child } },
    { name: '1 node + router', role: 'path', url: cluster.url, procs: { router: cluster.router, node: cluster.nodeChildren[0] as Child } },
  ];
  const results = targets.map((t): StreamResult => ({ target: t.name, role: t.role, idleRssKiB: rssByRole(t.procs), rounds: [], floorRssKiB: [] }));
  // A freshly started router or node holds start-up garbage (tens of MiB) that only the first load
  // lets V8 release, so its RSS before its first stream can exceed its peak with a few hundred open:
  // the base of "KiB per open stream" is the lowest RSS seen so far, sampled every 100 ms.
  const floors = results.map((r) => ({ ...r.idleRssKiB }));
  const sampleFloors = (): void => {
    for (const [i, t] of targets.entries()) {
      const floor = floors[i] as Record<string, number>;
      for (const [role, kib] of Object.entries(rssByRole(t.procs))) floor[role] = Math.min(floor[role] ?? Infinity, kib);
    }
  };
  const floorTimer = setInterval(sampleFloors, 100);
  const agents = targets.map(() => streamAgent(STREAMS));
  const load = { keys, streams: STREAMS, tokens: STREAM_TOKENS, rampS: STREAM_RAMP_S };
  log(`streams: ${targets.length} targets; ${ROUNDS} rounds of ${STREAMS} streams of ${STREAM_TOKENS} tokens at ${STREAM_TPS} tokens/s over a ${STREAM_RAMP_S} s ramp, each after a warm-up pass`);
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < targets.length; k++) {
        const i = (k + round) % targets.length;
        const t = targets[i] as (typeof targets)[number];
        const agent = agents[i] as (typeof agents)[number];
        const warmBad = await warmStreams(agent, { url: t.url, keys, streams: STREAMS, rampS: STREAM_WARM_RAMP_S }, STREAM_TPS);
        const pass = await measureStreams(agent, t, load);
        sampleFloors();
        (results[i] as StreamResult).rounds.push(pass);
        (results[i] as StreamResult).floorRssKiB.push({ ...floors[i] });
        const perEvent = Object.entries(pass.cpuSeconds).map(([role, cpu]) => `${role} ${((cpu * 1e6) / Math.max(1, pass.events)).toFixed(1)}`).join(', ');
        log(`streams round ${round + 1}/${ROUNDS} ${t.name.padEnd(26)} ${JSON.stringify(pass.statuses)} complete ${pass.complete}/${pass.streams} (warm-up: ${warmBad} not 200), headers p50 ${pass.headersMs.p50.toFixed(1)} p99 ${pass.headersMs.p99.toFixed(1)} ms, gap p50 ${pass.gapMs.p50.toFixed(1)} p99 ${pass.gapMs.p99.toFixed(1)} ms, CPU µs/event ${perEvent}${pass.errors.length > 0 ? `, errors: ${pass.errors.join(' | ')}` : ''}`);
      }
    }
  } finally {
    clearInterval(floorTimer);
    await Promise.all(agents.map((a) => a.destroy()));
    await group.stopAll();
  }
  return results;
}

/** One accuracy workload: a trace at a speed, with its own tenants. */
interface Workload {
  readonly name: string;
  readonly trace: 'conv' | 'code';
  readonly speed: number;
  readonly rows: readonly TraceRow[];
  readonly keys: readonly string[];
  readonly labels: ReadonlyMap<string, string>;
  /** Tokens per minute of every tenant of the workload. */
  readonly limitTokens: number;
}

/** The accuracy of one system on one workload. */
interface AccuracyRun {
  readonly system: string;
  readonly workload: string;
  readonly limitTokens: number;
  readonly rows: number;
  readonly result: AccuracyResult;
}

/** The accuracy phase's results: every run, and the simulator 429s of each system. */
interface AccuracyPhase {
  readonly rule: string;
  readonly limits: Readonly<Record<string, number>>;
  readonly runs: readonly AccuracyRun[];
  readonly simulator429: Readonly<Record<string, number>>;
}

async function workloads(): Promise<Workload[]> {
  const out: Workload[] = [];
  for (const trace of ['conv', 'code'] as const) {
    const file = fileURLToPath(new URL(`cluster/traces/azure-llm-2023-${trace}.csv.gz`, root));
    const base = await readTrace(file, { toMs: ACCURACY_S * 1_000 });
    const perMinute = base.reduce((sum, r) => sum + r.promptTokens + r.completionTokens, 0) / (ACCURACY_S / 60);
    const limitTokens = Math.round((perMinute * LIMIT_FRACTION) / 1_000) * 1_000;
    for (const speed of [1, 3]) {
      const name = `${trace} ${speed}×`;
      const keys = Array.from({ length: ACC_TENANTS }, (_, i) => `acc-${trace}-${speed}x-key-${i}`);
      const labels = new Map(keys.map((k, i) => [k, `${trace}${speed}x-t${i}`]));
      out.push({ name, trace, speed, rows: speed === 1 ? base : await readTrace(file, { toMs: ACCURACY_S * 1_000 * speed }), keys, labels, limitTokens });
    }
  }
  return out;
}

async function accuracy(): Promise<AccuracyPhase> {
  const wls = await workloads();
  const quota = wls.reduce((sum, w) => sum + w.limitTokens * ACC_TENANTS, 0);
  const group = groups.accuracy;
  const sims = new Map<string, string>();
  for (const system of ['sharded', 'central', 'reference']) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    await group.cli(`simulator-${system}`, ['simulate', '--port', String(port), '--ttft-ms', '0', '--tpm', String(quota)], `${url}/sim/stats`);
    sims.set(system, url);
  }
  const tenants = wls.flatMap((w) =>
    w.keys.map((key) => ({ id: w.labels.get(key) as string, keys: [key], limits: [{ tokens: w.limitTokens, window: '1m', algorithm: 'sliding_window' }, { concurrent: 256 }] })),
  );
  const configFor = (simUrl: string): Record<string, unknown> => ({
    tenants,
    models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_ACC_KEY' }],
  });
  const targets = new Map<string, string>();
  for (const mode of ['sharded', 'central'] as const) {
    const c = await startBenchCluster(group, { tag: `acc-${mode}`, nodes: 3, mode, config: configFor(sims.get(mode) as string), env: { BENCH_ACC_KEY: `acc-${mode}-upstream-key` } });
    targets.set(mode, c.url);
  }
  const ref = await startReference(group, 'acc-reference', sims.get('reference') as string, {
    upstreamKey: 'acc-reference-upstream-key',
    tenants: wls.flatMap((w) => w.keys.map((key) => ({ id: w.labels.get(key) as string, key, tokensPerMinute: w.limitTokens }))),
  });
  targets.set('reference', ref.url);
  const rule = new ZipfAssigner(wls[0]?.keys ?? ['x'], { s: ZIPF_S, seed: ZIPF_SEED }).rule;
  log(`accuracy: ${wls.length} workloads × ${targets.size} systems at once for ${ACCURACY_S} s; limits ${wls.map((w) => `${w.name} ${w.limitTokens} tokens/min`).join(', ')}; simulators' TPM quota ${quota}; tenants: ${rule}`);
  const dir = join(tmpdir(), `quotaring-bench-records-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  temporary.push(dir);
  const sims429Before = new Map<string, number>();
  for (const [system, url] of sims) sims429Before.set(system, await simulatorRateLimited(url));
  try {
    const jobs = [...targets].flatMap(([system, target]) =>
      wls.map(async (w): Promise<AccuracyRun> => {
        const out = join(dir, `${system}-${w.trace}-${w.speed}x.jsonl`);
        await runReplay({ rows: w.rows, target, keys: w.keys, labels: w.labels, speed: w.speed, concurrency: 256, zipf: ZIPF_S, seed: ZIPF_SEED, model: MODEL, out, progress: false });
        const records = readFileSync(out, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as ReplayRecord);
        const limits = new Map<string, TenantLimits>([...w.labels.values()].map((label) => [label, { tokens: w.limitTokens }]));
        const result = accuracyOf(records, limits, { windowMs: WINDOW_MS, toleranceMs: TOLERANCE_MS, durationMs: ACCURACY_S * 1_000 });
        return { system, workload: w.name, limitTokens: w.limitTokens, rows: w.rows.length, result };
      }),
    );
    const runs = await Promise.all(jobs);
    const simulator429: Record<string, number> = {};
    for (const [system, url] of sims) simulator429[system] = (await simulatorRateLimited(url)) - (sims429Before.get(system) ?? 0);
    return { rule, limits: Object.fromEntries(wls.map((w) => [w.name, w.limitTokens])), runs, simulator429 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await group.stopAll();
  }
}

const fmt0 = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
const fmt1 = (x: number): string => (Number.isFinite(x) ? (Math.round(x * 10) / 10).toString() : '—');
const pct = (x: number | null): string => (x === null || !Number.isFinite(x) ? '—' : `${(x * 100).toFixed(2)}%`);
const signed = (x: number): string => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${fmt1(x)}` : '—');

/** Derived per-request figures of a setup. */
function perRequest(r: SetupResult): { commands: number; scripts: number; redisCpuUs: number; gatewayCpuUs: number; routerCpuUs: number } {
  const served = Math.max(1, r.served);
  const commands = Object.values(r.redisCalls).reduce((a, b) => a + b, 0);
  const scripts = (r.redisCalls['evalsha'] ?? 0) + (r.redisCalls['eval'] ?? 0);
  return { commands: commands / served, scripts: scripts / served, redisCpuUs: (r.redisCpuS / served) * 1e6, gatewayCpuUs: (r.gatewayCpuS / served) * 1e6, routerCpuUs: (r.routerCpuS / served) * 1e6 };
}

function throughputMarkdown(results: readonly SetupResult[]): string[] {
  const direct = results.find((r) => r.mode === 'direct');
  const d = direct === undefined ? { p50: NaN, p99: NaN, p999: NaN } : { p50: median(direct.p50), p99: median(direct.p99), p999: median(direct.p999) };
  const lines = [
    `### Throughput and latency at ${CONNECTIONS} connections — ${ROUNDS} rounds × ${DURATION_S} s interleaved, ${TENANTS} tenants, ${PROMPT_TOKENS}-token prompts, simulator \`--ttft-ms 0\` (medians over rounds; latencies in autocannon's whole ms)`,
    '',
    '| setup | req/s | p50 ms | p99 ms | p99.9 ms | added p50 / p99 / p99.9 ms | Redis commands / request | Lua script calls / request | Redis CPU µs / request | proxy CPU µs / request | node CPU µs / request | router CPU µs / request | non-2xx + errors |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const p = perRequest(r);
    const quotaring = r.mode === 'sharded' || r.mode === 'central';
    const added = r.mode === 'direct' ? '—' : `${signed(median(r.p50) - d.p50)} / ${signed(median(r.p99) - d.p99)} / ${signed(median(r.p999) - d.p999)}`;
    const redis = r.mode === 'direct' || r.mode === 'bare' ? ['—', '—', '—'] : [p.commands.toFixed(4), p.scripts.toFixed(3), fmt1(p.redisCpuUs)];
    const cpu = [r.mode === 'bare' || r.mode === 'reference' ? fmt1(p.gatewayCpuUs) : '—', quotaring ? fmt1(p.gatewayCpuUs) : '—', quotaring ? fmt1(p.routerCpuUs) : '—'];
    lines.push(`| ${r.setup} | ${fmt0(median(r.rps))} | ${fmt1(median(r.p50))} | ${fmt1(median(r.p99))} | ${fmt1(median(r.p999))} | ${added} | ${redis.join(' | ')} | ${cpu.join(' | ')} | ${r.non2xx + r.errors} |`);
  }
  const ratio = [1, 2, 3].map((n) => {
    const s = results.find((r) => r.mode === 'sharded' && r.nodes === n);
    const c = results.find((r) => r.mode === 'central' && r.nodes === n);
    return s === undefined || c === undefined ? '—' : `${(median(s.rps) / median(c.rps)).toFixed(2)}×`;
  });
  lines.push('', `Sharded / central req/s with 1, 2, 3 nodes: ${ratio.join(', ')} (target ≥ 1.5×). CPU per request: total over the rounds / requests served; the ratios of issue 16 (last table) are medians of the per-round ratios.`);
  lines.push(
    '',
    'One 2-core machine runs the load generator, the simulator, every Redis, the routers and the nodes: more nodes add processes competing for the same two cores, so the node counts show the cost of each design on shared CPU, not how it scales on separate machines — the ceilings below do that with the measured CPU per request.',
  );
  return lines;
}

const ms = (us: number): string => (Number.isFinite(us) ? (us / 1_000).toFixed(2) : '—');
const signedMs = (us: number): string => (Number.isFinite(us) ? `${us >= 0 ? '+' : ''}${ms(us)}` : '—');
const times = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(2)}×` : '—');

function latencyMarkdown(results: readonly LatencyResult[]): string[] {
  const direct = results.find((r) => r.mode === 'direct');
  const lines = [
    `### Added latency at one connection — ${ROUNDS} rounds × ${LATENCY_S} s interleaved, one request at a time (closed loop, undici), latencies in µs (HDR histogram); added = median over rounds of (setup − direct)`,
    '',
    '| setup | req/s | p50 / p99 / p99.9 ms | added p50 / p99 / p99.9 ms | non-2xx + errors |',
    '|---|---|---|---|---|',
  ];
  for (const r of results) {
    const added = r === direct ? '—' : [pairedDifference(r.p50Us, direct?.p50Us), pairedDifference(r.p99Us, direct?.p99Us), pairedDifference(r.p999Us, direct?.p999Us)].map(signedMs).join(' / ');
    lines.push(`| ${r.setup} | ${fmt0(median(r.rps))} | ${ms(median(r.p50Us))} / ${ms(median(r.p99Us))} / ${ms(median(r.p999Us))} | ${added} | ${r.failures} |`);
  }
  return lines;
}

/** Per-round figures of a streams target: CPU µs per event and KiB per open stream of `role`. */
const perEvent = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p) => ((p.cpuSeconds[role] ?? NaN) * 1e6) / p.events) ?? [];
/** KiB per open stream: the slope of RSS over open streams during the ramp (see `StreamPass.rssSlopeKiB`). */
const kibPerStream = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p) => p.rssSlopeKiB[role] ?? NaN) ?? [];
/** An upper bound of it: (peak RSS − the lowest RSS since the phase began) / streams, which also counts the process's fixed growth under load. */
const kibPerStreamUpper = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p, i) => ((p.rssPeakKiB[role] ?? NaN) - (r.floorRssKiB[i]?.[role] ?? NaN)) / p.streams) ?? [];
const roundsOf = (r: StreamResult | undefined, f: (p: StreamPass) => number): number[] => r?.rounds.map(f) ?? [];

function streamsMarkdown(results: readonly StreamResult[]): string[] {
  const direct = results.find((r) => r.role === 'direct');
  const lines = [
    `### Streams — ${STREAMS} concurrent streams of ${STREAM_TOKENS} tokens at ${STREAM_TPS} tokens/s, opened over ${STREAM_RAMP_S} s; ${ROUNDS} interleaved rounds (medians), each pass after an unmeasured one that opens the connections`,
    '',
    'CPU per event: CPU of the process during the pass / SSE events the client received. KiB per open stream: the least-squares slope of the process\'s RSS (sampled every 100 ms) over the number of streams open, during the ramp up to the peak: what one more open stream costs, while what the process grows by under any load (its young generation, compiled code) falls into the intercept; in brackets the upper bound (peak RSS during the pass − the lowest RSS of the process from the phase\'s start to the pass\'s end) / streams. Added gap: median over rounds of (gap through the target − direct\'s), the gap being the time between consecutive events of a stream (0 for events that arrive in one chunk).',
    '',
    '| target | statuses (all rounds) | complete | events/s | time to headers p50 / p99 ms | gap p50 / p99 ms | added gap p50 / p99 ms | proxy CPU µs / event | router CPU µs / event | node CPU µs / event | proxy KiB / stream | router KiB / stream | node KiB / stream |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const statuses: Record<string, number> = {};
    for (const p of r.rounds) for (const [st, n] of Object.entries(p.statuses)) statuses[st] = (statuses[st] ?? 0) + n;
    const complete = r.rounds.reduce((sum, p) => sum + p.complete, 0);
    const total = r.rounds.reduce((sum, p) => sum + p.streams, 0);
    const gap = (f: (p: StreamPass) => number): number => median(roundsOf(r, f));
    const added = r === direct ? '—' : [(p: StreamPass): number => p.gapMs.p50, (p: StreamPass): number => p.gapMs.p99].map((f) => signed(pairedDifference(roundsOf(r, f), roundsOf(direct, f)))).join(' / ');
    const cell = (xs: number[]): string => (xs.length === 0 ? '—' : fmt1(median(xs)));
    const roles = ['proxy', 'router', 'node'];
    lines.push(
      `| ${r.target} | ${Object.entries(statuses).map(([st, n]) => `${n} × ${st}`).join(', ')} | ${complete} / ${total} | ${fmt0(median(roundsOf(r, (p) => p.events / p.seconds)))} | ${fmt1(gap((p) => p.headersMs.p50))} / ${fmt1(gap((p) => p.headersMs.p99))} | ${fmt1(gap((p) => p.gapMs.p50))} / ${fmt1(gap((p) => p.gapMs.p99))} | ${added} | ${roles.map((role) => (role in r.idleRssKiB ? cell(perEvent(r, role)) : '—')).join(' | ')} | ${roles.map((role) => (role in r.idleRssKiB ? `${cell(kibPerStream(r, role))} (${cell(kibPerStreamUpper(r, role))})` : '—')).join(' | ')} |`,
    );
  }
  return lines;
}

/** One of issue 16's targets: what it asks, its value in this run, and whether it is met (null: not measured here). */
interface TargetCheck {
  readonly target: string;
  readonly measured: string;
  readonly met: boolean | null;
}

/** Issue 16's targets that `npm run bench` measures, from the three first phases (a skipped phase gives "not run"). */
function targetChecks(tp: readonly SetupResult[], lat: readonly LatencyResult[], st: readonly StreamResult[]): TargetCheck[] {
  const bare = tp.find((r) => r.mode === 'bare');
  const path = tp.find(isPath);
  const ref = tp.find((r) => r.mode === 'reference');
  const direct = tp.find((r) => r.mode === 'direct');
  const check = (target: string, value: number, show: (x: number) => string, ok: (x: number) => boolean | null, detail = ''): TargetCheck =>
    Number.isFinite(value) ? { target, measured: `${show(value)}${detail}`, met: ok(value) } : { target, measured: 'not run', met: null };
  const latDirect = lat.find((r) => r.mode === 'direct');
  const latPath = lat.find(isPath);
  const sBare = st.find((r) => r.role === 'bare');
  const sPath = st.find((r) => r.role === 'path');
  const sDirect = st.find((r) => r.role === 'direct');
  const us = (xs: number[]): string => (xs.length === 0 ? '' : fmt1(median(xs)));
  const fiveXx = sPath?.rounds.reduce((sum, p) => sum + Object.entries(p.statuses).filter(([code]) => Number(code) >= 500 || code === '0').reduce((a, [, n]) => a + n, 0), 0) ?? NaN;
  return [
    check('Router CPU per request ≤ the bare proxy\'s (router / bare)', pairedRatio(path?.routerCpuUs, bare?.gatewayCpuUs), times, (x) => x <= 1, ` (${us(path?.routerCpuUs ?? [])} vs ${us(bare?.gatewayCpuUs ?? [])} µs)`),
    check('Node CPU per request vs the bare proxy\'s (node / bare; no target: the node\'s is ≥ 0.8× the bare proxy\'s req/s alone, `npm run bench:node`)', pairedRatio(path?.gatewayCpuUs, bare?.gatewayCpuUs), times, () => null, ` (${us(path?.gatewayCpuUs ?? [])} vs ${us(bare?.gatewayCpuUs ?? [])} µs)`),
    check('Path users run (1 node + router) req/s ≥ 1.2× the reference\'s', pairedRatio(path?.rps, ref?.rps), times, (x) => x >= 1.2),
    check('Path users run req/s ≥ 0.33× direct', pairedRatio(path?.rps, direct?.rps), times, (x) => x >= 0.33),
    check('Added latency at one connection, p50 ≤ 0.5 ms', pairedDifference(latPath?.p50Us, latDirect?.p50Us) / 1_000, (x) => `${x.toFixed(2)} ms`, (x) => x <= 0.5),
    check('Added latency at one connection, p99 ≤ 1.5 ms', pairedDifference(latPath?.p99Us, latDirect?.p99Us) / 1_000, (x) => `${x.toFixed(2)} ms`, (x) => x <= 1.5),
    check('Router CPU per streamed event ≤ a bare stream pass-through\'s', pairedRatio(perEvent(sPath, 'router'), perEvent(sBare, 'proxy')), times, (x) => x <= 1, ` (${us(perEvent(sPath, 'router'))} vs ${us(perEvent(sBare, 'proxy'))} µs)`),
    check('Node CPU per streamed event ≤ 1.2× a bare stream pass-through\'s', pairedRatio(perEvent(sPath, 'node'), perEvent(sBare, 'proxy')), times, (x) => x <= 1.2, ` (${us(perEvent(sPath, 'node'))} vs ${us(perEvent(sBare, 'proxy'))} µs)`),
    check(`Streams through router → node: no 5xx (${STREAMS} streams here; the target is at 5,000: \`npm run bench:streams\`)`, fiveXx, (x) => `${fmt0(x)} 5xx or connection errors`, (x) => x === 0),
    check(`Streams: time to headers p99 within 2× direct's (${STREAMS} streams)`, pairedRatio(roundsOf(sPath, (p) => p.headersMs.p99), roundsOf(sDirect, (p) => p.headersMs.p99)), times, (x) => x <= 2),
    check(`RSS per open stream ≤ 32 KB (31.25 KiB), router (slope of RSS over open streams, ${STREAMS} streams)`, median(kibPerStream(sPath, 'router')), (x) => `${fmt1(x)} KiB`, (x) => x <= 31.25, ` (upper bound ${us(kibPerStreamUpper(sPath, 'router'))} KiB)`),
    check(`RSS per open stream ≤ 32 KB (31.25 KiB), node (slope of RSS over open streams, ${STREAMS} streams)`, median(kibPerStream(sPath, 'node')), (x) => `${fmt1(x)} KiB`, (x) => x <= 31.25, ` (upper bound ${us(kibPerStreamUpper(sPath, 'node'))} KiB)`),
  ];
}

function targetsMarkdown(checks: readonly TargetCheck[]): string[] {
  return [
    '### Targets of issue 16 (this run; ratios are medians of the per-round ratios, differences of the per-round differences)',
    '',
    '| target | measured | met |',
    '|---|---|---|',
    ...checks.map((c) => `| ${c.target} | ${c.measured} | ${c.met === null ? '—' : c.met ? 'met' : 'not met'} |`),
    '',
    'Not measured by `npm run bench`: the node alone at ≥ 0.8× the bare proxy\'s req/s (`npm run bench:node`), 5,000 concurrent streams (`npm run bench:streams`), the limiter at ≤ 2 µs per acquire + settle + release at 100k tenants (bench/limiter.ts).',
  ];
}

function ceilingsMarkdown(results: readonly SetupResult[]): string[] {
  const pick = (mode: SetupMode): SetupResult | undefined => results.filter((r) => r.mode === mode).sort((a, b) => b.nodes - a.nodes)[0];
  const lines = ['### Projected ceilings (from the CPU per request measured above, largest cluster of each mode)', ''];
  const s = pick('sharded');
  const c = pick('central');
  const ref = pick('reference');
  lines.push(
    'A Redis server executes commands on one core, so a design whose every request runs Redis work saturates one Redis at R = 1 / (Redis CPU seconds per request); a node saturates its core at 1 / (gateway CPU seconds per request), so N nodes on N cores serve N / c_node.',
    '',
    '| design | Redis CPU µs / request (c_redis) | one Redis saturates at (1 / c_redis) | gateway CPU µs / request (c_node) | one node core saturates at (1 / c_node) | ceiling with N nodes on N cores |',
    '|---|---|---|---|---|---|',
  );
  for (const [name, r] of [['sharded', s], ['central', c], ['reference (one proxy)', ref]] as const) {
    if (r === undefined) continue;
    const p = perRequest(r);
    const redisMax = 1e6 / p.redisCpuUs;
    const nodeMax = 1e6 / p.gatewayCpuUs;
    const ceiling = name === 'sharded' ? `N × ${fmt0(nodeMax)} req/s (Redis is not on the request path: it reaches ${fmt0(redisMax)} req/s only at N ≈ ${fmt0(redisMax / nodeMax)})` : `min(N × ${fmt0(nodeMax)}, ${fmt0(redisMax)}) req/s: capped by Redis from N ≈ ${fmt1(redisMax / nodeMax)}`;
    lines.push(`| ${name} | ${fmt1(p.redisCpuUs)} | ${fmt0(redisMax)} req/s | ${fmt1(p.gatewayCpuUs)} | ${fmt0(nodeMax)} req/s | ${ceiling} |`);
  }
  lines.push('', 'Routers add their own CPU per request (column above) and scale out the same way (they keep no state).');
  return lines;
}

function accuracyMarkdown(phase: AccuracyPhase): string[] {
  const lines = [
    `### Accuracy on the Azure traces — ${ACCURACY_S} s of replay per workload, all at once; tenants: ${phase.rule}`,
    '',
    `Limits (sliding window, tokens per minute, every tenant): ${Object.entries(phase.limits).map(([w, l]) => `${w} ${fmt0(l)}`).join(', ')} — a tenth of the trace's mean demand per minute at 1×. **Over-admission**: the largest admitted/limit − 1 over tenants and 60 s windows (shortened by ${TOLERANCE_MS} ms for send-vs-decision time). **Utilisation**: at each 429, the tenant's admitted tokens in the 60 s before it over its limit — how full the window was when the limiter said no (an exact limiter refuses only when the request does not fit, so this is above 1 − request/limit). Aligned minutes: admitted/limit over whole clock minutes whose demand is ≥ 1.1 × the limit, which for bursty traffic under a sliding window also counts minutes whose capacity was spent by a burst at the end of the minute before.`,
    '',
    '| system | workload | rows | admitted | over-admission | worst window | utilisation at 429s: mean / median / p5 (429s) | aligned minutes: mean (min; minutes) | client 429s | other non-2xx |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const run of phase.runs) {
    const r = run.result;
    const u = r.utilisation.tokens;
    const f = r.atRefusal.tokens;
    const at = r.overAdmissionAt === null ? '—' : `${r.overAdmissionAt.tenant} @ ${fmt1(r.overAdmissionAt.windowStartMs / 1_000)} s`;
    const other = Object.entries(r.clients.otherByStatus).map(([s, n]) => `${s}: ${n}`).join(', ') || '0';
    lines.push(
      `| ${run.system} | ${run.workload} | ${fmt0(run.rows)} | ${fmt0(r.clients.admitted)} | ${pct(r.overAdmission)} | ${at} | ${pct(f.mean)} / ${pct(f.median)} / ${pct(f.p5)} (${f.refusals}) | ${pct(u.mean)} (${pct(u.min)}; ${u.saturatedWindows}) | ${r.clients.status429} | ${other}${r.clients.network > 0 ? `, network ${r.clients.network}` : ''} |`,
    );
  }
  lines.push('', `429s sent by the simulators (per system, all four workloads): ${Object.entries(phase.simulator429).map(([s, n]) => `${s} ${n}`).join(', ')}; every other 429 a client saw came from the limiter in front.`);
  for (const system of ['sharded', 'central']) {
    const runs = phase.runs.filter((r) => r.system === system);
    const over = Math.max(...runs.map((r) => r.result.overAdmission ?? -1));
    const util = Math.min(...runs.map((r) => r.result.atRefusal.tokens.mean ?? 1));
    lines.push(`${system}: worst over-admission ${pct(over)} (target ≤ 0.5%), lowest mean utilisation at 429s ${pct(util)} (target ≥ 95%), simulator 429s ${phase.simulator429[system] ?? '—'} (target 0).`);
  }
  return lines;
}

try {
  const t0 = performance.now();
  const date = new Date().toISOString();
  const dir = fileURLToPath(new URL(`bench/results/${date.slice(0, 10)}/`, root));
  mkdirSync(dir, { recursive: true });
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await groups.base.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  let results: SetupResult[] = [];
  let lat: LatencyResult[] = [];
  if (!SKIP.has('throughput') || !SKIP.has('latency')) {
    const setups = await startSetups(simUrl, !SKIP.has('throughput'));
    if (!SKIP.has('throughput')) results = await throughput(setups);
    if (!SKIP.has('latency')) lat = await latency(setups);
    await groups.throughput.stopAll();
  }
  const st = SKIP.has('streams') ? [] : await streams();
  const acc = SKIP.has('accuracy') ? undefined : await accuracy();
  const checks = targetChecks(results, lat, st);
  await stopAll();
  const elapsedS = (performance.now() - t0) / 1_000;
  const charts: string[] = [];
  if (results.length > 0) {
    writeFileSync(`${dir}throughput.svg`, await throughputChart(results.map((r) => ({ setup: r.setup, mode: r.mode, nodes: r.mode === 'reference' || r.mode === 'bare' ? 0 : r.nodes, rps: median(r.rps) })), 'Requests per second by node count and mode (one 2-core machine)'));
    const cdf = results.filter((r) => r.mode === 'direct' || r.mode === 'reference' || r.nodes === 1);
    writeFileSync(
      `${dir}latency-cdf.svg`,
      await latencyCdfChart(cdf.map((r) => ({ name: r.setup, points: Object.entries(r.percentiles).map(([p, ms]) => ({ percentile: Number(p), ms })) })), `Latency CDF, ${CONNECTIONS} connections (1 node per mode)`),
    );
    charts.push('![req/s by node count and mode](throughput.svg)', '', '![latency CDF by mode](latency-cdf.svg)', '');
  }
  if (acc !== undefined) {
    const rows = acc.runs
      .filter((r) => r.workload.endsWith('3×'))
      .flatMap((run) => {
        const top = new Set(Array.from({ length: 3 }, (_, i) => `${run.workload.replace(' ', '').replace('×', 'x')}-t${i}`));
        return run.result.windows.filter((w) => top.has(w.tenant)).map((w) => ({ panel: `${run.workload} ${run.system}`, tenant: w.tenant, minute: w.window, admittedTokens: w.admittedTokens, limitTokens: w.tokensLimit ?? run.limitTokens }));
      });
    writeFileSync(`${dir}tenant-minutes.svg`, await tenantMinuteChart(rows, 'Admitted tokens per tenant per minute against the limit (3 busiest tenants, 3× speed)'));
    charts.push('![admitted tokens per tenant per minute against the limit](tenant-minutes.svg)', '');
  }
  const md = [
    `## Sharded vs central — ${date.slice(0, 10)}, ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown CPU'}), Node ${process.version}, \`npm run bench\` in ${fmt0(elapsedS)} s`,
    '',
    ...(results.length > 0 ? [...throughputMarkdown(results), '', ...ceilingsMarkdown(results), ''] : []),
    ...(lat.length > 0 ? [...latencyMarkdown(lat), ''] : []),
    ...(st.length > 0 ? [...streamsMarkdown(st), ''] : []),
    ...(acc === undefined ? [] : [...accuracyMarkdown(acc), '']),
    ...charts,
    ...targetsMarkdown(checks),
  ].join('\n');
  const json = {
    date,
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? null, node: process.version },
    settings: { rounds: ROUNDS, durationS: DURATION_S, warmupS: WARMUP_S, rewarmS: REWARM_S, connections: CONNECTIONS, tenants: TENANTS, promptTokens: PROMPT_TOKENS, accuracyS: ACCURACY_S, accuracyTenants: ACC_TENANTS, zipf: ZIPF_S, seed: ZIPF_SEED, limitFraction: LIMIT_FRACTION, toleranceMs: TOLERANCE_MS, latencyS: LATENCY_S, streams: STREAMS, streamTokens: STREAM_TOKENS, streamTps: STREAM_TPS, streamRampS: STREAM_RAMP_S, streamWarmRampS: STREAM_WARM_RAMP_S, skip: [...SKIP] },
    elapsedS,
    throughput: results.map((r) => ({ ...r, medianRps: median(r.rps), medianP50: median(r.p50), medianP99: median(r.p99), medianP999: median(r.p999), perRequest: perRequest(r) })),
    latency: lat,
    streams: st.map((r) => ({ ...r, cpuUsPerEvent: Object.fromEntries(Object.keys(r.idleRssKiB).map((role) => [role, perEvent(r, role)])), kibPerStream: Object.fromEntries(Object.keys(r.idleRssKiB).map((role) => [role, kibPerStream(r, role)])), kibPerStreamUpper: Object.fromEntries(Object.keys(r.idleRssKiB).map((role) => [role, kibPerStreamUpper(r, role)])) })),
    accuracy: acc ?? null,
    targets: checks,
  };
  writeFileSync(`${dir}results.json`, JSON.stringify(json, null, 2) + '\n');
  writeFileSync(`${dir}summary.md`, md + '\n');
  process.stdout.write(md + '\n');
  log(`wrote ${dir}results.json, summary.md and the charts`);
} catch (err) {
  log(`bench failed: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
} finally {
  await stopAll();
}
