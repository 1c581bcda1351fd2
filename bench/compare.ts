/**
 * `npm run bench`: what sharding buys over a central store, measured end to end on this machine in
 * one run (about 10 minutes; every process it starts is stopped at the end, on error and on Ctrl-C).
 *
 * 1. Throughput and added latency — the simulator called directly, the outside reference
 *    (rate-limiter-flexible's RateLimiterRedis in a proxy, bench/reference-limiter.ts), and quotaring
 *    with 1, 2 and 3 nodes behind a router in each mode (`sharded`, `central`), each cluster with its
 *    own redis-server. Same load for all (autocannon, fixed connections, 200-token prompts, 1,000
 *    tenants, limits that never refuse, the simulator answering at once); setups interleave round by
 *    round; figures are medians over rounds. Per setup: Redis commands (`INFO commandstats`, script
 *    internals included) and Redis CPU (`INFO cpu`) per request, and the CPU of the gateway processes
 *    (nodes; the reference proxy) and of the router per request (`/proc/<pid>/stat`), from which the
 *    projected ceiling of each design is computed.
 * 2. Accuracy — both Azure traces (cluster/traces), each at 1× and 3× speed for the same wall-clock
 *    time, replayed at once against a 3-node sharded cluster, a 3-node central cluster and the
 *    reference, each in front of its own simulator whose per-key TPM quota is the sum of the
 *    tenants' limits. Tenants: 8 per workload, drawn by a seeded Zipf rule on the row index;
 *    every tenant gets the same sliding-window token limit, a tenth of the trace's average demand
 *    per minute, so the top tenants ask several times their limit. Over-admission, utilisation and
 *    429s come from the replay records (bench/accuracy-metrics.ts).
 *
 * Writes bench/results/<date>/results.json, summary.md and the charts throughput.svg,
 * latency-cdf.svg, tenant-minutes.svg, and prints the Markdown. Environment: BENCH_ROUNDS (3),
 * BENCH_DURATION (6 s), BENCH_CONNECTIONS (64), BENCH_TENANTS (1,000), BENCH_ACCURACY_S (240 s of
 * replay), BENCH_SKIP (comma list of `throughput`, `accuracy`).
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
import { chatBody, median, MODEL, runAutocannon } from './load.ts';

const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
const DURATION_S = Number(process.env['BENCH_DURATION'] ?? 6);
const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 64);
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 1_000);
const ACCURACY_S = Number(process.env['BENCH_ACCURACY_S'] ?? 240);
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

const groups = { base: new ProcessGroup(), throughput: new ProcessGroup(), accuracy: new ProcessGroup() };
const stopAll = async (): Promise<void> => {
  await Promise.all([groups.throughput.stopAll(), groups.accuracy.stopAll()]);
  await groups.base.stopAll();
};
stopOnSignals(stopAll);
/** Temporary files and folders of this run, removed when the process exits (also after Ctrl-C). */
const temporary: string[] = [];
process.once('exit', () => {
  for (const path of temporary) rmSync(path, { recursive: true, force: true });
});

/** How a setup decides: no limiter (direct), the outside reference, or quotaring in a mode. */
type SetupMode = 'direct' | 'reference' | BenchMode;

/** One measured setup of the throughput phase. */
interface Setup {
  readonly name: string;
  readonly mode: SetupMode;
  /** Gateway processes: quotaring nodes, 1 for the reference, 0 direct. */
  readonly nodes: number;
  readonly url: string;
  readonly redis?: BenchRedis;
  /** Processes that decide and proxy (quotaring nodes, the reference proxy). */
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

async function throughput(simUrl: string): Promise<SetupResult[]> {
  const keys = Array.from({ length: TENANTS }, (_, i) => `bench-compare-key-${i}`);
  const body = chatBody(PROMPT_TOKENS);
  const env = { BENCH_SIM_KEY: 'bench-sim-key' };
  const config = {
    tenants: keys.map((key, i) => unlimited(i, key)),
    models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
  };
  const ref = await startReference(groups.throughput, 'reference', simUrl, {
    upstreamKey: 'bench-sim-key',
    tenants: keys.map((key, i) => ({ id: `t${i}`, key, requestsPerMinute: 1_000_000_000, tokensPerMinute: 1_000_000_000_000 })),
  });
  const setups: Setup[] = [
    { name: 'simulator direct', mode: 'direct', nodes: 0, url: simUrl, gateways: [] },
    { name: 'reference (rate-limiter-flexible)', mode: 'reference', nodes: 1, url: ref.url, redis: ref.redis, gateways: [ref.child] },
  ];
  for (const mode of ['sharded', 'central'] as const) {
    for (const n of [1, 2, 3]) {
      const c = await startBenchCluster(groups.throughput, { tag: `${mode}-${n}`, nodes: n, mode, config, env });
      setups.push({ name: c.name, mode, nodes: n, url: c.url, redis: c.redis, gateways: c.nodeChildren, router: c.router });
    }
  }
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
      { setup: s.name, mode: s.mode, nodes: s.nodes, rps: [], p50: [], p99: [], p999: [], percentiles: {}, served: 0, non2xx: 0, errors: 0, seconds: 0, redisCalls: {}, redisCpuS: 0, gatewayCpuS: 0, routerCpuS: 0 },
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
      if (before.calls !== undefined && after.calls !== undefined) {
        for (const [cmd, calls] of commandDelta(before.calls, after.calls)) if (cmd !== 'info') row.redisCalls[cmd] = (row.redisCalls[cmd] ?? 0) + calls;
      }
      const percentiles = Object.fromEntries(PERCENTILE_FIELDS.map(([field, p]) => [String(p), r.latency[field]]));
      rounds.set(s.name, [...(rounds.get(s.name) ?? []), { rps: r.requests.average, percentiles }]);
      log(`round ${round + 1}/${ROUNDS} ${s.name.padEnd(34)} ${r.requests.average.toFixed(0)} req/s p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms non-2xx ${r.non2xx} errors ${r.errors}`);
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
  await groups.throughput.stopAll();
  return [...results.values()];
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
    `### Throughput and added latency — ${ROUNDS} rounds × ${DURATION_S} s interleaved, ${CONNECTIONS} connections, ${TENANTS} tenants, ${PROMPT_TOKENS}-token prompts, simulator \`--ttft-ms 0\` (medians over rounds)`,
    '',
    '| setup | req/s | p50 ms | p99 ms | p99.9 ms | added p50 / p99 / p99.9 ms | Redis commands / request | Lua script calls / request | Redis CPU µs / request | gateway CPU µs / request | router CPU µs / request | non-2xx + errors |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const p = perRequest(r);
    const added = r.mode === 'direct' ? '—' : `${signed(median(r.p50) - d.p50)} / ${signed(median(r.p99) - d.p99)} / ${signed(median(r.p999) - d.p999)}`;
    const redis = r.mode === 'direct' ? ['—', '—', '—'] : [p.commands.toFixed(4), p.scripts.toFixed(3), fmt1(p.redisCpuUs)];
    lines.push(
      `| ${r.setup} | ${fmt0(median(r.rps))} | ${fmt1(median(r.p50))} | ${fmt1(median(r.p99))} | ${fmt1(median(r.p999))} | ${added} | ${redis.join(' | ')} | ${r.mode === 'direct' ? '—' : fmt1(p.gatewayCpuUs)} | ${r.mode === 'sharded' || r.mode === 'central' ? fmt1(p.routerCpuUs) : '—'} | ${r.non2xx + r.errors} |`,
    );
  }
  const ratio = [1, 2, 3].map((n) => {
    const s = results.find((r) => r.mode === 'sharded' && r.nodes === n);
    const c = results.find((r) => r.mode === 'central' && r.nodes === n);
    return s === undefined || c === undefined ? '—' : `${(median(s.rps) / median(c.rps)).toFixed(2)}×`;
  });
  lines.push('', `Sharded / central req/s with 1, 2, 3 nodes: ${ratio.join(', ')} (target ≥ 1.5×).`);
  lines.push(
    '',
    'One 2-core machine runs the load generator, the simulator, every Redis, the routers and the nodes: more nodes add processes competing for the same two cores, so the node counts show the cost of each design on shared CPU, not how it scales on separate machines — the ceilings below do that with the measured CPU per request.',
  );
  return lines;
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
  const results = SKIP.has('throughput') ? [] : await throughput(simUrl);
  const acc = SKIP.has('accuracy') ? undefined : await accuracy();
  await stopAll();
  const elapsedS = (performance.now() - t0) / 1_000;
  const charts: string[] = [];
  if (results.length > 0) {
    writeFileSync(`${dir}throughput.svg`, await throughputChart(results.map((r) => ({ setup: r.setup, mode: r.mode, nodes: r.mode === 'reference' ? 0 : r.nodes, rps: median(r.rps) })), 'Requests per second by node count and mode (one 2-core machine)'));
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
    ...(acc === undefined ? [] : [...accuracyMarkdown(acc), '']),
    ...charts,
  ].join('\n');
  const json = {
    date,
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? null, node: process.version },
    settings: { rounds: ROUNDS, durationS: DURATION_S, warmupS: WARMUP_S, rewarmS: REWARM_S, connections: CONNECTIONS, tenants: TENANTS, promptTokens: PROMPT_TOKENS, accuracyS: ACCURACY_S, accuracyTenants: ACC_TENANTS, zipf: ZIPF_S, seed: ZIPF_SEED, limitFraction: LIMIT_FRACTION, toleranceMs: TOLERANCE_MS },
    elapsedS,
    throughput: results.map((r) => ({ ...r, medianRps: median(r.rps), medianP50: median(r.p50), medianP99: median(r.p99), medianP999: median(r.p999), perRequest: perRequest(r) })),
    accuracy: acc ?? null,
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
