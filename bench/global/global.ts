/**
 * `npm run bench:global`: the global cap's leases (issue 4, "Benchmark"), deployment quotas and a
 * hot tenant, in one process against a real `redis-server` started on a free port, in about 5.5
 * minutes (the bound asked is 6).
 *
 * Three `CapLeases` (three nodes, one ioredis connection and one `RedisGuard` each, as
 * `quotasFromConfig` wires a node) share one deployment {tpm 600,000, rpm 60,000, headroom 0.9}: a
 * cap of 540,000 tokens a minute (9,000 tokens/s) and 54,000 requests. Each node takes 1,000-token
 * requests as fast as the cap allows (bench/global/global-drive.ts, the gateway's way of waiting for a
 * renewal).
 *
 * 1. Redis script calls and commands per admitted take (`INFO commandstats` deltas, the benchmark's INFO left out)
 *    and accuracy (admitted tokens vs the cap's allowance 540,000 + 9,000/s × elapsed) for
 *    blockMs 50, 100, 250, 500 (the default) and 1,000 ms, each on fresh bucket keys.
 * 2. Decision latency of `take()` and of a whole request (take, renewal waits, take again) with
 *    Redis healthy, slow (a TCP proxy delaying each chunk sent to Redis by 1 ms), frozen (the proxy
 *    drops all bytes: the guard's 15 ms timeout) and down (the proxy closes every connection and
 *    refuses new ones); frozen and down start healthy and are timed from the cut on.
 * 3. A hot tenant spread over the three nodes (bench/global/global-hot.ts: requests 3,000/min and tokens
 *    600,000/min leased through `CapLeases.define`, 250-token requests, so 40 requests/s), offered
 *    5× its limit open-loop: Redis commands per offered and per admitted request, and accuracy
 *    (admitted / (capacity + refill × elapsed), over-admission must be 0), for each blockMs.
 * 4. The same tenant offered 1× its limit (never reached): utilisation and Redis commands per request.
 * 5. The hot tenant's decision latency (the machinery of 2, closed loop on its group) with Redis
 *    healthy, slow and down.
 *
 * Writes bench/results/<date>/global.{json,md} and prints the Markdown. redis-server and the proxy
 * are stopped at the end, on error and on Ctrl-C. Environment: BENCH_GLOBAL_SECONDS (15, per
 * blockMs; 20 before the hot tenant was added), BENCH_GLOBAL_LATENCY_SECONDS (12, per scenario),
 * BENCH_GLOBAL_CUT_SECONDS (2, healthy time before frozen/down), BENCH_GLOBAL_BLOCKS (comma list of
 * blockMs), BENCH_GLOBAL_HOT_SECONDS (25, per blockMs at 5×: the full buckets drain in 15 s),
 * BENCH_GLOBAL_HOT_FLAT_SECONDS (8, per blockMs at 1×).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { systemClock } from '../../src/clock.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { redisForDecisions } from '../../src/redis/connection.ts';
import { RedisGuard, guardedCall } from '../../src/redis/guard.ts';
import type { GuardStats } from '../../src/redis/guard.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import { commandDelta, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { BenchRedis } from '../lib/cluster-processes.ts';
import { drive, latencySink, summarize } from './global-drive.ts';
import type { DriveCounts, LatencySink, LatencySummary } from './global-drive.ts';
import { DEFAULT_BLOCK_MS, defineHot, HOT_COST, HOT_GROUP, HOT_LATENCY_GROUP, HOT_LATENCY_LIMITS, hotMarkdown, hotRun, HOT_LIMITS, overAdmissionDefects } from './global-hot.ts';
import type { HotRunResult } from './global-hot.ts';
import { ChunkDelayProxy } from './global-proxy.ts';

const ACC_S = Number(process.env['BENCH_GLOBAL_SECONDS'] ?? 15);
const LAT_S = Number(process.env['BENCH_GLOBAL_LATENCY_SECONDS'] ?? 12);
const CUT_S = Number(process.env['BENCH_GLOBAL_CUT_SECONDS'] ?? 2);
const BLOCKS = (process.env['BENCH_GLOBAL_BLOCKS'] ?? '50,100,250,500,1000').split(',').map(Number);
const HOT_S = Number(process.env['BENCH_GLOBAL_HOT_SECONDS'] ?? 25);
const FLAT_S = Number(process.env['BENCH_GLOBAL_HOT_FLAT_SECONDS'] ?? 8);
/** Scenarios of the hot tenant's decision latency. */
const HOT_SCENARIOS = ['healthy', 'slow', 'down'] as const;
/** Hard bound of the whole run, ms: past it everything is stopped and the run fails. */
const WATCHDOG_MS = Math.max(240_000, (BLOCKS.length * (ACC_S + HOT_S + FLAT_S) + (4 + HOT_SCENARIOS.length) * LAT_S + 90) * 1000);
const NODES = 3;
const DEPLOYMENT = 'gpt';
const QUOTA = { tpm: 600_000, rpm: 60_000, headroom: 0.9 } as const;
const CAP_TOKENS = 540_000;
const RATE_TOKENS_PER_S = 9_000;
const TAKE = { requests: 1, tokens: 1_000 } as const;
/** Delay the slow proxy adds to each chunk sent to Redis, ms. */
const SLOW_MS = 1;
const root = new URL('../../', import.meta.url);
const log = (line: string): void => void process.stderr.write(`${line}\n`);

const group = new ProcessGroup();
const proxies: ChunkDelayProxy[] = [];
const stopAll = async (): Promise<void> => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
  await group.stopAll();
};
stopOnSignals(stopAll);
const watchdog = setTimeout(() => {
  log(`bench:global took over ${WATCHDOG_MS / 1000} s: stopping`);
  void stopAll().then(() => process.exit(1));
}, WATCHDOG_MS);
watchdog.unref();

/** One node: its connection, guard and leases. */
interface Node {
  readonly redis: Redis;
  readonly guard: RedisGuard;
  readonly leases: CapLeases;
}

/**
 * Three nodes on `url` (each with its own connection and guard), connected before returning: with
 * the deployment's quota, or (`hot`) with the hot tenant's group only.
 */
async function startNodes(url: string, cluster: string, blockMs: number, hot = false): Promise<Node[]> {
  return Promise.all(
    Array.from({ length: NODES }, async () => {
      const redis = redisForDecisions(url);
      if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve));
      const scripts = defineCapScripts(redis);
      // Warm-up: both scripts once on a throw-away key (EVAL and the first calls' JIT happen here, not
      // in the first 15 ms-guarded lease; a timed-out first lease would put the node in fallback).
      const warm = { capacity: 1, ratePerSec: 1, ttlMs: 1_000 };
      await scripts.tokenBucket(`qr:${cluster}:warmup`, { ...warm, cost: 0 });
      await scripts.lease(`qr:${cluster}:warmup`, { ...warm, want: 1, min: 1 });
      const guard = new RedisGuard({ clock: systemClock });
      const leases = new CapLeases({
        cluster,
        deployments: hot ? {} : { [DEPLOYMENT]: QUOTA },
        scripts,
        clock: systemClock,
        call: guardedCall(guard),
        liveNodes: () => NODES,
        blockMs,
      });
      if (hot) defineHot(leases);
      return { redis, guard, leases };
    }),
  );
}

async function stopNodes(nodes: readonly Node[]): Promise<void> {
  await Promise.all(nodes.map((n) => n.leases.close()));
  for (const n of nodes) n.redis.disconnect();
}

/** Guard counters summed over the nodes. */
function guardTotals(nodes: readonly Node[]): GuardStats {
  const sum = { calls: 0, ok: 0, timeouts: 0, errors: 0, noscript: 0, rejectedOpen: 0, opened: 0, closed: 0 };
  for (const n of nodes) for (const [k, v] of Object.entries(n.guard.stats)) sum[k as keyof GuardStats] += v;
  return sum;
}

function sumCounts(counts: readonly DriveCounts[]): DriveCounts {
  const total: DriveCounts = { takeCalls: 0, requests: 0, admitted: 0, admittedAfterWait: 0, refused: 0 };
  for (const c of counts) for (const k of Object.keys(total) as (keyof DriveCounts)[]) total[k] += c[k];
  return total;
}

/** Accuracy and Redis commands for one blockMs. */
interface AccuracyResult {
  blockMs: number;
  elapsedS: number;
  admittedTokens: number;
  admittedByNode: number[];
  allowanceTokens: number;
  admittedOfAllowance: number;
  overAdmissionTokens: number;
  /** Admitted tokens/s over the second half of the run (the bucket refills 9,000/s). */
  secondHalfTokensPerS: number;
  /** Redis commands per admitted take over the second half of the run (steady state at the cap). */
  secondHalfCommandsPerAdmittedTake: number;
  /** Script calls (EVAL + EVALSHA: one round trip each) during the run. */
  scriptCalls: number;
  scriptCallsPerAdmittedTake: number;
  scriptCallsPerTakeCall: number;
  /** Script calls per admitted take over the second half of the run. */
  secondHalfScriptCallsPerAdmittedTake: number;
  requests: DriveCounts;
  redisCommands: Record<string, number>;
  redisCommandsTotal: number;
  commandsPerAdmittedTake: number;
  commandsPerTakeCall: number;
  /** Unspent, unexpired lease balance the nodes held when the run stopped (returned by close), tokens. */
  heldAtEndTokens: number;
  guard: GuardStats;
}

async function accuracyRun(redis: BenchRedis, blockMs: number): Promise<AccuracyResult> {
  const nodes = await startNodes(redis.url, `bench-global-b${blockMs}`, blockMs);
  const before = await redis.commandCalls();
  const start = performance.now();
  const stopAt = start + ACC_S * 1000;
  const half = start + (ACC_S * 1000) / 2;
  let secondHalf = 0;
  const byNode = [0, 0, 0];
  let atHalf: Promise<Map<string, number>> | undefined;
  const halfTimer = setTimeout(() => (atHalf = redis.commandCalls()), (ACC_S * 1000) / 2);
  const counts = await Promise.all(
    nodes.map((n, i) =>
      drive({
        leases: n.leases,
        group: DEPLOYMENT,
        cost: TAKE,
        stopAt,
        sink: () => undefined,
        onAdmit: (at) => {
          byNode[i] = (byNode[i] ?? 0) + TAKE.tokens;
          if (at >= half) secondHalf += TAKE.tokens;
        },
      }),
    ),
  );
  const end = performance.now();
  clearTimeout(halfTimer);
  const half0 = atHalf === undefined ? undefined : await atHalf;
  const held = nodes.reduce((s, n) => s + Math.max(0, n.leases.view(DEPLOYMENT).tokens?.balance ?? 0), 0);
  // Renewals still in flight are part of this run's commands.
  await Promise.all(nodes.map((n) => n.leases.whenRenewed(DEPLOYMENT)));
  const after = await redis.commandCalls();
  const guard = guardTotals(nodes);
  await stopNodes(nodes);
  const delta = commandDelta(before, after);
  delta.delete('info');
  const halfDelta = half0 === undefined ? new Map<string, number>() : commandDelta(half0, after);
  halfDelta.delete('info');
  const halfCommands = [...halfDelta.values()].reduce((a, b) => a + b, 0);
  const scripts = (m: ReadonlyMap<string, number>): number => (m.get('eval') ?? 0) + (m.get('evalsha') ?? 0);
  const commandsTotal = [...delta.values()].reduce((a, b) => a + b, 0);
  const requests = sumCounts(counts);
  const admittedTokens = requests.admitted * TAKE.tokens;
  const elapsedS = (end - start) / 1000;
  const allowance = CAP_TOKENS + RATE_TOKENS_PER_S * elapsedS;
  return {
    blockMs,
    elapsedS,
    admittedTokens,
    admittedByNode: byNode,
    allowanceTokens: Math.round(allowance),
    admittedOfAllowance: admittedTokens / allowance,
    overAdmissionTokens: Math.max(0, Math.round(admittedTokens - allowance)),
    secondHalfTokensPerS: secondHalf / ((end - half) / 1000),
    secondHalfCommandsPerAdmittedTake: halfCommands / (secondHalf / TAKE.tokens),
    scriptCalls: scripts(delta),
    scriptCallsPerAdmittedTake: scripts(delta) / requests.admitted,
    scriptCallsPerTakeCall: scripts(delta) / requests.takeCalls,
    secondHalfScriptCallsPerAdmittedTake: scripts(halfDelta) / (secondHalf / TAKE.tokens),
    requests,
    redisCommands: Object.fromEntries(delta),
    redisCommandsTotal: commandsTotal,
    commandsPerAdmittedTake: commandsTotal / requests.admitted,
    commandsPerTakeCall: commandsTotal / requests.takeCalls,
    heldAtEndTokens: held,
    guard,
  };
}

type Scenario = 'healthy' | 'slow' | 'frozen' | 'down';

/** Decision latency in one Redis condition. */
interface LatencyResult {
  /** The deployment's quota, or the hot tenant's group. */
  target: 'deployment' | 'hot';
  scenario: Scenario;
  /** What the condition is, in words. */
  condition: string;
  /** Seconds timed (from the cut for frozen/down). */
  timedS: number;
  take: LatencySummary;
  takeSendingCall: LatencySummary;
  request: LatencySummary;
  admittedRequest: LatencySummary;
  /** Counts of the timed requests only. */
  requests: { requests: number; admitted: number; admittedAfterWait: number; refused: number };
  admittedTokensWholeRun: number;
  inFallbackAtEnd: number;
  guard: GuardStats;
}

async function latencyRun(redis: BenchRedis, scenario: Scenario, target: { host: string; port: number }, hot = false): Promise<LatencyResult> {
  let proxy: ChunkDelayProxy | undefined;
  let url = redis.url;
  if (scenario !== 'healthy') {
    proxy = await ChunkDelayProxy.start(target, scenario === 'slow' ? SLOW_MS : 0);
    proxies.push(proxy);
    url = proxy.url;
  }
  const nodes = await startNodes(url, `bench-global-lat-${hot ? 'hot-' : ''}${scenario}`, 250, hot);
  const group = hot ? HOT_LATENCY_GROUP : DEPLOYMENT;
  const cost = hot ? HOT_COST : TAKE;
  const cut = scenario === 'frozen' || scenario === 'down';
  const start = performance.now();
  const stopAt = start + LAT_S * 1000;
  let sink: LatencySink | undefined = cut ? undefined : latencySink();
  let timedFrom = start;
  const timed = { requests: 0, admitted: 0, admittedAfterWait: 0, refused: 0 };
  let admittedTokens = 0;
  const cutTimer = cut
    ? setTimeout(() => {
        timedFrom = performance.now();
        if (scenario === 'frozen') proxy?.freeze();
        else void proxy?.down();
        sink = latencySink();
      }, CUT_S * 1000)
    : undefined;
  await Promise.all(
    nodes.map((n) =>
      drive({
        leases: n.leases,
        group,
        cost,
        stopAt,
        sink: () => sink,
        callsSent: () => n.guard.stats.calls,
        onAdmit: () => (admittedTokens += cost.tokens),
      }),
    ),
  );
  clearTimeout(cutTimer);
  const end = performance.now();
  const s = sink ?? latencySink();
  timed.requests = s.request.totalCount;
  timed.admitted = s.admitted.totalCount;
  timed.refused = timed.requests - timed.admitted;
  timed.admittedAfterWait = s.admittedAfterWait;
  const guard = guardTotals(nodes);
  const inFallback = nodes.filter((n) => n.leases.inFallback).length;
  // Closing returns balances: bounded by the guard when Redis is gone.
  await stopNodes(nodes);
  if (proxy !== undefined) await proxy.close();
  const conditions: Record<Scenario, string> = {
    healthy: 'direct connection to redis-server',
    slow: `proxy delaying each chunk sent to Redis by ${SLOW_MS} ms`,
    frozen: `proxy dropping every byte after ${CUT_S} s healthy (connections open, like SIGSTOP)`,
    down: `proxy closing every connection and refusing new ones after ${CUT_S} s healthy`,
  };
  return {
    target: hot ? 'hot' : 'deployment',
    scenario,
    condition: conditions[scenario],
    timedS: (end - timedFrom) / 1000,
    take: summarize(s.take),
    takeSendingCall: summarize(s.takeSendingCall),
    request: summarize(s.request),
    admittedRequest: summarize(s.admitted),
    requests: timed,
    admittedTokensWholeRun: admittedTokens,
    inFallbackAtEnd: inFallback,
    guard,
  };
}

/** Median PING round trip through `url`, µs (200 sequential PINGs after 20 unmeasured). */
async function pingRttUs(url: string): Promise<number> {
  const client = new Redis(url, { maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  try {
    for (let i = 0; i < 20; i++) await client.ping();
    const rtts: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t0 = process.hrtime.bigint();
      await client.ping();
      rtts.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    rtts.sort((a, b) => a - b);
    return rtts[Math.floor(rtts.length / 2)] ?? Number.NaN;
  } finally {
    client.disconnect();
  }
}

function us(v: number): string {
  if (Number.isNaN(v)) return '—';
  return v < 10 ? v.toFixed(2) : v < 1000 ? v.toFixed(0) : Math.round(v).toLocaleString('en-US');
}

function pct(x: number): string {
  return `${(100 * x).toFixed(1)}%`;
}

function int(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** The rows of a decision-latency table (header included). */
function latencyTable(lat: readonly LatencyResult[]): string[] {
  return [
    '| Redis | take() p50 / p99 / p99.9 / max (µs) | take() that started a renewal (a guard call): count, p50 / p99 (µs) | request p50 / p99 / p99.9 / max (µs) | admitted request p50 / p99 / p99.9 (µs) | requests timed | admitted (after a renewal wait) | refused | guard ok / timeouts / errors / open | nodes in fallback at end |',
    '|---|---|---|---|---|---:|---:|---:|---|---:|',
    ...lat.map((r) => {
      const t = r.take;
      const q = r.request;
      const a = r.admittedRequest;
      const g = r.guard;
      return `| ${r.scenario}: ${r.condition} | ${us(t.p50Us)} / ${us(t.p99Us)} / ${us(t.p999Us)} / ${us(t.maxUs)} | ${r.takeSendingCall.count}: ${us(r.takeSendingCall.p50Us)} / ${us(r.takeSendingCall.p99Us)} | ${us(q.p50Us)} / ${us(q.p99Us)} / ${us(q.p999Us)} / ${us(q.maxUs)} | ${us(a.p50Us)} / ${us(a.p99Us)} / ${us(a.p999Us)} | ${int(r.requests.requests)} | ${int(r.requests.admitted)} (${int(r.requests.admittedAfterWait)}) | ${int(r.requests.refused)} | ${g.ok} / ${g.timeouts} / ${g.errors} / ${g.rejectedOpen} | ${r.inFallbackAtEnd} of ${NODES} |`;
    }),
  ];
}

/** Everything measured, for the Markdown and JSON results. */
interface Results {
  readonly accuracy: readonly AccuracyResult[];
  readonly latency: readonly LatencyResult[];
  readonly hotOver: readonly HotRunResult[];
  readonly hotFlat: readonly HotRunResult[];
  readonly hotLatency: readonly LatencyResult[];
}

function markdown(date: string, res: Results, rtt: { direct: number; slow: number }, load: number[], totalS: number): string {
  const acc = res.accuracy;
  const lat = res.latency;
  const lines = [
    `# bench:global — ${date}`,
    '',
    `Whole run: ${Math.round(totalS)} s. Sections 1–2: the deployment quota cap; 3–5: a hot tenant (\`spread: ${NODES}\`). ${NODES} \`CapLeases\` in one process (one ioredis`,
    'connection and one `RedisGuard` each, 15 ms timeout), one deployment {tpm 600,000, rpm 60,000, headroom 0.9}:',
    'cap 540,000 tokens (refill 9,000/s) and 54,000 requests; every request takes 1,000 tokens and 1 request, as fast',
    'as the cap allows (a take refused with wait ≤ 20 ms awaits the renewal in flight and takes again, up to 3 times).',
    `Machine: ${cpus().length} cores shared with other work, load average ${load.map((l) => l.toFixed(2)).join(' / ')} at the start.`,
    '',
    `## 1. Redis commands per take and accuracy vs blockMs (${ACC_S} s each, fresh buckets${ACC_S === 20 ? '' : '; 20 s before the hot tenant was added, shortened to keep the run under 6 minutes'})`,
    '',
    'Allowance = 540,000 + 9,000/s × elapsed. Script calls = EVAL + EVALSHA (one round trip each); all commands =',
    '`INFO commandstats` delta, which also counts the TIME/HMGET/HSET/PEXPIRE run inside the scripts (the benchmark\'s',
    'INFO left out). Per take() call: a request that waited for a renewal calls take() up to 4 times.',
    '',
    '| blockMs | admitted tokens | allowance | admitted / allowance | over-admission | 2nd-half rate (tokens/s, cap 9,000) | script calls | per admitted take | 2nd half: per admitted take | per take() call | all commands | per admitted take | 2nd half: per admitted take | guard timeouts | held at end |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...acc.map(
      (r) =>
        `| ${r.blockMs}${r.blockMs === DEFAULT_BLOCK_MS ? ' (default)' : ''} | ${int(r.admittedTokens)} | ${int(r.allowanceTokens)} | ${pct(r.admittedOfAllowance)} | ${int(r.overAdmissionTokens)} | ${int(r.secondHalfTokensPerS)} | ${int(r.scriptCalls)} | ${r.scriptCallsPerAdmittedTake.toFixed(3)} | ${r.secondHalfScriptCallsPerAdmittedTake.toFixed(3)} | ${r.scriptCallsPerTakeCall.toFixed(3)} | ${int(r.redisCommandsTotal)} | ${r.commandsPerAdmittedTake.toFixed(3)} | ${r.secondHalfCommandsPerAdmittedTake.toFixed(3)} | ${r.guard.timeouts} | ${int(r.heldAtEndTokens)} |`,
    ),
    '',
    `## 2. Decision latency (blockMs 250, ${LAT_S} s per scenario; frozen/down timed from the cut at ${CUT_S} s)`,
    '',
    `PING round trip (median): direct ${us(rtt.direct)} µs, through the slow proxy ${us(rtt.slow)} µs.`,
    '',
    ...latencyTable(lat),
    '',
    'In brackets: admitted requests that awaited at least one renewal. Timer: `process.hrtime.bigint()` around each call',
    '(its own cost, about 0.1 µs, is included).',
    '',
    ...hotMarkdown({
      over: res.hotOver,
      flat: res.hotFlat,
      overSeconds: HOT_S,
      flatSeconds: FLAT_S,
      latencyTitle: [
        `## 5. Hot tenant's decision latency (blockMs 250, ${LAT_S} s per scenario; down timed from the cut at ${CUT_S} s)`,
        '',
        `The machinery of section 2 on a hot tenant's group: each node takes ${HOT_COST.tokens}-token requests as fast as it can (closed loop),`,
        `with limits far above what that load takes (${HOT_LATENCY_LIMITS.requests.toLocaleString('en-US')} requests and ${HOT_LATENCY_LIMITS.tokens.toLocaleString('en-US')} tokens a minute),`,
        'so every decision is a lease or fallback decision, never a refusal by the limit.',
      ].join('\n'),
      latencyTable: latencyTable(res.hotLatency),
      latency: res.hotLatency.map((r) => ({ scenario: r.scenario, takeP50Us: r.take.p50Us, takeP99Us: r.take.p99Us, requestP50Us: r.request.p50Us, requestP99Us: r.request.p99Us })),
    }),
  ];
  return lines.join('\n');
}

/** One hot-tenant run on three fresh nodes (fresh bucket keys), closed afterwards. */
async function hotAccuracyRun(redis: BenchRedis, blockMs: number, demand: number, seconds: number): Promise<HotRunResult> {
  const nodes = await startNodes(redis.url, `bench-global-hot-x${demand}-b${blockMs}`, blockMs, true);
  try {
    return await hotRun({ redis, nodes, blockMs, demand, seconds });
  } finally {
    await stopNodes(nodes);
  }
}

/** The hot tenant at 5× its limit for one blockMs, logged. */
async function hotRun5(redis: BenchRedis, blockMs: number): Promise<HotRunResult> {
  const r = await hotAccuracyRun(redis, blockMs, 5, HOT_S);
  const tok = r.buckets[1];
  log(`  tokens admitted ${int(tok?.admitted ?? 0)} of ${int(tok?.allowance ?? 0)} (${pct(tok?.admittedOfAllowance ?? 0)}), ${r.redis.scriptCallsPerAdmitted.toFixed(3)} script calls per admitted request`);
  return r;
}

async function main(): Promise<void> {
  const began = performance.now();
  const load = loadavg();
  const date = new Date().toISOString().slice(0, 10);
  const redis = await group.redis('redis-global');
  const target = { host: '127.0.0.1', port: Number(new URL(redis.url).port) };
  const accuracy: AccuracyResult[] = [];
  for (const blockMs of BLOCKS) {
    log(`accuracy and Redis commands, blockMs ${blockMs}, ${ACC_S} s...`);
    const r = await accuracyRun(redis, blockMs);
    log(`  admitted ${int(r.admittedTokens)} of ${int(r.allowanceTokens)} (${pct(r.admittedOfAllowance)}), ${r.scriptCallsPerAdmittedTake.toFixed(3)} script calls per admitted take`);
    accuracy.push(r);
  }
  const slowProxy = await ChunkDelayProxy.start(target, SLOW_MS);
  proxies.push(slowProxy);
  const rtt = { direct: await pingRttUs(redis.url), slow: await pingRttUs(slowProxy.url) };
  await slowProxy.close();
  const latency: LatencyResult[] = [];
  for (const scenario of ['healthy', 'slow', 'frozen', 'down'] as const) {
    log(`decision latency, Redis ${scenario}, ${LAT_S} s...`);
    const r = await latencyRun(redis, scenario, target);
    log(`  take() p99 ${us(r.take.p99Us)} µs, request p99 ${us(r.request.p99Us)} µs, ${r.requests.admitted} admitted of ${r.requests.requests}`);
    latency.push(r);
  }
  const hotOver: HotRunResult[] = [];
  for (const blockMs of BLOCKS) {
    log(`hot tenant at 5× its limit, blockMs ${blockMs}, ${HOT_S} s...`);
    const r = await hotRun5(redis, blockMs);
    hotOver.push(r);
  }
  const hotFlat: HotRunResult[] = [];
  for (const blockMs of BLOCKS) {
    log(`hot tenant at 1× its limit, blockMs ${blockMs}, ${FLAT_S} s...`);
    const r = await hotAccuracyRun(redis, blockMs, 1, FLAT_S);
    log(`  utilisation ${pct(r.utilisation)}, ${r.redis.scriptCallsPerAttempted.toFixed(3)} script calls per request`);
    hotFlat.push(r);
  }
  const hotLatency: LatencyResult[] = [];
  for (const scenario of HOT_SCENARIOS) {
    log(`hot tenant decision latency, Redis ${scenario}, ${LAT_S} s...`);
    const r = await latencyRun(redis, scenario, target, true);
    log(`  take() p50 / p99 ${us(r.take.p50Us)} / ${us(r.take.p99Us)} µs, request p99 ${us(r.request.p99Us)} µs, ${r.requests.admitted} admitted of ${r.requests.requests}`);
    hotLatency.push(r);
  }
  for (const d of overAdmissionDefects([...hotOver, ...hotFlat])) log(d);
  const results: Results = { accuracy, latency, hotOver, hotFlat, hotLatency };
  const totalS = (performance.now() - began) / 1000;
  const md = markdown(date, results, rtt, load, totalS);
  const dir = fileURLToPath(new URL(`bench/results/${date}/`, root));
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}global.md`, md);
  writeFileSync(
    `${dir}global.json`,
    JSON.stringify(
      {
        date: new Date().toISOString(),
        machine: { cores: cpus().length, loadAverageAtStart: load },
        settings: {
          nodes: NODES,
          quota: QUOTA,
          capTokens: CAP_TOKENS,
          refillTokensPerS: RATE_TOKENS_PER_S,
          take: TAKE,
          accuracySeconds: ACC_S,
          latencySeconds: LAT_S,
          cutSeconds: CUT_S,
          slowDelayMs: SLOW_MS,
          hot: { group: HOT_GROUP, limits: HOT_LIMITS, latencyLimits: HOT_LATENCY_LIMITS, cost: HOT_COST, overSeconds: HOT_S, flatSeconds: FLAT_S },
        },
        totalSeconds: totalS,
        pingRttUs: rtt,
        accuracy,
        latency,
        hotOver,
        hotFlat,
        hotLatency,
      },
      null,
      2,
    ),
  );
  process.stdout.write(`${md}\n`);
}

try {
  await main();
} finally {
  await stopAll();
  clearTimeout(watchdog);
}
