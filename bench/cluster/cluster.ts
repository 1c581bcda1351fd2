/**
 * `npm run bench:cluster`: the cluster on this machine, in about 3-4 minutes.
 *
 * 1. Throughput and added latency: the provider simulator called directly, then 1, 2 and 3 nodes
 *    behind one router (Redis membership, one redis-server per cluster), same load (autocannon,
 *    fixed connections, 200-token prompts, 1,000 tenants, limits that never refuse). All setups run
 *    at once (idle ones only heartbeat) so rounds interleave them; figures are medians over rounds,
 *    added latency = setup median − direct median.
 * 2. Redis commands per request in steady state: `INFO commandstats` of each cluster's Redis before
 *    and after each of its measured runs (the benchmark's own INFO calls left out).
 * 3. Handoff when a fourth node joins 10,000 active tenants (bench/cluster/cluster-handoff.ts), 3 runs on
 *    fresh clusters (one join's p99 on a shared 2-core machine is fragile).
 *
 * Writes bench/results/<date>/cluster.{json,md} and prints the Markdown (sharded vs central is
 * `npm run bench`, bench/compare/compare.ts). Every process is stopped at
 * the end, on error and on Ctrl-C. Environment: BENCH_ROUNDS (3), BENCH_DURATION (6 s),
 * BENCH_CONNECTIONS (64), BENCH_TENANTS (1,000), BENCH_HANDOFF_TENANTS (10,000),
 * BENCH_HANDOFF_RATE (1,000 req/s), BENCH_HANDOFF_RUNS (3), BENCH_SKIP (comma list of `throughput`, `handoff`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { runHandoff } from './cluster-handoff.ts';
import type { FirstRequestLatency, HandoffResult, NodeHandoffStats } from './cluster-handoff.ts';
import { chatBody, median, MODEL, runAutocannon } from '../lib/load.ts';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { commandDelta, freePort, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { BenchRedis } from '../lib/cluster-processes.ts';

const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
const DURATION_S = Number(process.env['BENCH_DURATION'] ?? 6);
const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 64);
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 1_000);
const HANDOFF_TENANTS = Number(process.env['BENCH_HANDOFF_TENANTS'] ?? 10_000);
const HANDOFF_RATE = Number(process.env['BENCH_HANDOFF_RATE'] ?? 1_000);
const HANDOFF_RUNS = Number(process.env['BENCH_HANDOFF_RUNS'] ?? 3);
const SKIP = new Set((process.env['BENCH_SKIP'] ?? '').split(',').filter((s) => s !== ''));
const PROMPT_TOKENS = 200;
const WARMUP_S = 2;
/** Unmeasured load on a cluster right before each of its measured runs, s. */
const REWARM_S = 1;
const root = new URL('../../', import.meta.url);
const log = (line: string): void => void process.stderr.write(`${line}\n`);

/** One measured setup: the simulator directly, or a router in front of n nodes. */
interface Setup {
  readonly name: string;
  readonly nodes: number;
  readonly url: string;
  readonly redis?: BenchRedis;
}

/** Per-setup figures over the rounds. */
interface SetupResult {
  setup: string;
  nodes: number;
  rps: number[];
  p50: number[];
  p99: number[];
  served: number;
  non2xx: number;
  errors: number;
  seconds: number;
  redisCalls: Record<string, number>;
}

const groups = { base: new ProcessGroup(), throughput: new ProcessGroup(), handoff: new ProcessGroup() };
const stopAll = async (): Promise<void> => {
  await Promise.all([groups.throughput.stopAll(), groups.handoff.stopAll()]);
  await groups.base.stopAll();
};
stopOnSignals(stopAll);

const keys = Array.from({ length: TENANTS }, (_, i) => `bench-cluster-key-${i}`);
const body = chatBody(PROMPT_TOKENS);
const env = { BENCH_SIM_KEY: 'bench-sim-key' };

/** Redis, n nodes and a router for `bench-<n>`, with limits that never refuse. */
async function startCluster(n: number, simUrl: string): Promise<Setup> {
  const cluster = await startBenchCluster(groups.throughput, {
    tag: `${n}`,
    nodes: n,
    mode: 'sharded',
    env,
    config: {
      tenants: keys.map((key, i) => ({
        id: `t${i}`,
        keys: [key],
        limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 10_000 }],
      })),
      models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
    },
  });
  return { name: cluster.name, nodes: n, url: cluster.url, redis: cluster.redis };
}

function fmt(ms: number): string {
  return Number.isInteger(ms) ? String(ms) : ms.toFixed(1);
}

/** One decimal; '—' for NaN (no request). */
function fmt1(ms: number): string {
  return Number.isNaN(ms) ? '—' : fmt(Math.round(ms * 10) / 10);
}

function signed(ms: number): string {
  return `${ms >= 0 ? '+' : ''}${fmt(ms)}`;
}

async function throughput(simUrl: string): Promise<SetupResult[]> {
  const setups: Setup[] = [{ name: 'simulator direct', nodes: 0, url: simUrl }];
  for (const n of [1, 2, 3]) setups.push(await startCluster(n, simUrl));
  log(`throughput: ${setups.length} setups up; warm-up ${WARMUP_S} s each`);
  for (const s of setups) await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: WARMUP_S });
  const results = new Map<string, SetupResult>(
    setups.map((s) => [s.name, { setup: s.name, nodes: s.nodes, rps: [], p50: [], p99: [], served: 0, non2xx: 0, errors: 0, seconds: 0, redisCalls: {} }]),
  );
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of setups) {
      // Re-warm (not measured): the tenants of this setup sat idle while the others ran, so the
      // nodes' idle sweep dropped them; re-claiming them (one GET each) is not steady state.
      if (s.redis !== undefined) await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: REWARM_S });
      const before = await s.redis?.commandCalls();
      const r = await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: DURATION_S });
      const after = await s.redis?.commandCalls();
      const row = results.get(s.name) as SetupResult;
      row.rps.push(r.requests.average);
      row.p50.push(r.latency.p50);
      row.p99.push(r.latency.p99);
      row.served += r['2xx'];
      row.non2xx += r.non2xx;
      row.errors += r.errors;
      row.seconds += r.duration;
      if (before !== undefined && after !== undefined) {
        for (const [cmd, calls] of commandDelta(before, after)) if (cmd !== 'info') row.redisCalls[cmd] = (row.redisCalls[cmd] ?? 0) + calls;
      }
      log(`round ${round + 1}/${ROUNDS} ${s.name.padEnd(18)} ${r.requests.average.toFixed(0)} req/s p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms non-2xx ${r.non2xx} errors ${r.errors}`);
    }
  }
  await groups.throughput.stopAll();
  return [...results.values()];
}

function throughputMarkdown(results: readonly SetupResult[]): string[] {
  const direct = results.find((r) => r.nodes === 0);
  const d50 = direct === undefined ? Number.NaN : median(direct.p50);
  const d99 = direct === undefined ? Number.NaN : median(direct.p99);
  const lines = [
    `### Throughput and added latency — ${ROUNDS} rounds × ${DURATION_S} s interleaved, ${CONNECTIONS} connections, ${TENANTS} tenants, ${PROMPT_TOKENS}-token prompts, simulator \`--ttft-ms 0\` (medians over rounds)`,
    '',
    '| setup | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | non-2xx + errors |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const p50 = median(r.p50);
    const p99 = median(r.p99);
    const added = r.nodes === 0 ? ['—', '—'] : [signed(p50 - d50), signed(p99 - d99)];
    lines.push(`| ${r.setup} | ${median(r.rps).toFixed(0)} | ${fmt(p50)} | ${fmt(p99)} | ${added[0]} | ${added[1]} | ${r.non2xx + r.errors} |`);
  }
  lines.push(
    '',
    'One 2-core machine: the load generator (autocannon, in this process), the simulator, Redis, the router and every node share the same two cores, so more nodes compete for the same CPU and add a hop of work each request; these figures show the cost of the extra hop and of the processes, not how a cluster scales on separate machines.',
  );
  return lines;
}

function redisMarkdown(results: readonly SetupResult[]): string[] {
  const clusters = results.filter((r) => r.nodes > 0);
  const commands = [...new Set(clusters.flatMap((r) => Object.keys(r.redisCalls)))].sort();
  const lines = [
    '### Redis commands in steady state (`INFO commandstats` before and after each measured run, summed over rounds; the benchmark\'s INFO calls left out)',
    '',
    `| setup | requests served | seconds | ${commands.join(' | ')} | total | per request | per second |`,
    `|---|---|---|${commands.map(() => '---|').join('')}---|---|---|`,
  ];
  for (const r of clusters) {
    const total = Object.values(r.redisCalls).reduce((a, b) => a + b, 0);
    lines.push(
      `| ${r.setup} | ${r.served} | ${r.seconds.toFixed(0)} | ${commands.map((c) => String(r.redisCalls[c] ?? 0)).join(' | ')} | ${total} | ${(total / Math.max(1, r.served)).toFixed(5)} | ${(total / Math.max(1, r.seconds)).toFixed(1)} |`,
    );
  }
  return lines;
}

/** Old owners' largest `lastHandoffMs`, their `handedOff` sum, and the new node's `loaded`/`waited`/`timedOut`. */
function counters(h: HandoffResult): { lastHandoffMs: number; handedOff: number; loaded: number; waited: number; timedOut: number } {
  const stat = (n: NodeHandoffStats | undefined, k: string): number => n?.stats?.[k] ?? Number.NaN;
  const oldNodes = h.nodes.slice(0, -1);
  const joiner = h.nodes[h.nodes.length - 1];
  return {
    lastHandoffMs: Math.max(...oldNodes.map((n) => stat(n, 'lastHandoffMs'))),
    handedOff: oldNodes.reduce((sum, n) => sum + stat(n, 'handedOff'), 0),
    loaded: stat(joiner, 'loaded'),
    waited: stat(joiner, 'waited'),
    timedOut: stat(joiner, 'timedOut'),
  };
}

function handoffMarkdown(runs: readonly HandoffResult[]): string[] {
  const first = runs[0];
  if (first === undefined) return [];
  const movedP99 = median(runs.map((h) => h.movedFirst.p99Ms));
  // Details of the run whose moved-tenant p99 is the median (the lower middle one for an even count).
  const byP99 = [...runs].sort((a, b) => a.movedFirst.p99Ms - b.movedFirst.p99Ms);
  const mid = byP99[Math.floor((byP99.length - 1) / 2)] as HandoffResult;
  const midRun = runs.indexOf(mid) + 1;
  const cells = (l: FirstRequestLatency): string => `${l.requests} | ${fmt1(l.p50Ms)} | ${fmt1(l.p99Ms)} | ${fmt1(l.maxMs)}`;
  const stat = (n: NodeHandoffStats | undefined, k: string): string => String(n?.stats?.[k] ?? '—');
  const joiner = mid.nodes[mid.nodes.length - 1];
  return [
    `### Handoff: a 4th node joins 3 nodes + router with ${first.tenants} active tenants (\`handoff.checkpoint\` 1 s and \`wait_ms\` 250 ms, defaults) — ${runs.length} run${runs.length === 1 ? '' : 's'}, each on a fresh cluster`,
    '',
    `Each run: every tenant sends one request over ${first.activation.seconds} s; ${first.settleMs / 1_000} s later the 4th node is spawned; as soon as the router's \`/readyz\` shows the 4-member ring (computed with \`createRing\`), the first request of every moved tenant and of as many not-moved tenants are sent interleaved at ${first.ratePerS} req/s. Latency: from sending to the end of the response body, through the router.`,
    '',
    '| run | claimed at join | moved | ring seen after spawn ms | moved p50 ms | moved p99 ms | moved max ms | not-moved p50 ms | not-moved p99 ms | not-moved max ms | old owners: max lastHandoffMs | handedOff | new node: loaded | waited | timedOut | non-200 | sender lag max ms |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...runs.map((h, i) => {
      const c = counters(h);
      const non200 = [h.movedFirst, h.notMovedFirst, { statuses: h.activation.statuses }].reduce(
        (sum, l) => sum + Object.entries(l.statuses).reduce((n, [status, count]) => n + (status === '200' ? 0 : count), 0),
        0,
      );
      return `| ${i + 1} | ${h.claimedBeforeJoin} | ${h.moved} | ${fmt1(h.joinToRouterRingMs)} | ${fmt1(h.movedFirst.p50Ms)} | **${fmt1(h.movedFirst.p99Ms)}** | ${fmt1(h.movedFirst.maxMs)} | ${fmt1(h.notMovedFirst.p50Ms)} | ${fmt1(h.notMovedFirst.p99Ms)} | ${fmt1(h.notMovedFirst.maxMs)} | ${c.lastHandoffMs} | ${c.handedOff} | ${c.loaded} | ${c.waited} | ${c.timedOut} | ${non200} | ${fmt1(h.maxSendLagMs)} |`;
    }),
    '',
    `Target: p99 of moved tenants' first request ≤ 250 ms — median over runs ${fmt1(movedP99)} ms: ${movedP99 <= 250 ? 'met' : 'NOT met'} (${runs.filter((h) => h.movedFirst.p99Ms <= 250).length} of ${runs.length} runs within it).`,
    '',
    `Run ${midRun} (median moved p99) by when the request left, ms after the router showed the new ring:`,
    '',
    '| sent | moved: n | p50 ms | p99 ms | max ms | not moved: n | p50 ms | p99 ms | max ms |',
    '|---|---|---|---|---|---|---|---|---|',
    ...mid.bySendTime.map((b) => `| ${b.fromMs}–${Number.isFinite(b.toMs) ? `${b.toMs} ms` : '…'} | ${cells(b.moved)} | ${cells(b.notMoved)} |`),
    '',
    `Run ${midRun} node counters after the run (moved from ${Object.entries(mid.movedFrom).map(([id, n]) => `${id} ${n}`).join(', ')}; moved between old nodes: ${mid.movedElsewhere}):`,
    '',
    '| node | claimed after | handedOff | lastHandoffMs | loaded | waited | timedOut | checkpointed | forwarded | lost |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...mid.nodes.map(
      (n) =>
        `| ${n.node}${n === joiner ? ' (new)' : ''} | ${n.claimed} | ${stat(n, 'handedOff')} | ${stat(n, 'lastHandoffMs')} | ${stat(n, 'loaded')} | ${stat(n, 'waited')} | ${stat(n, 'timedOut')} | ${stat(n, 'checkpointed')} | ${stat(n, 'forwarded')} | ${stat(n, 'lost')} |`,
    ),
  ];
}

try {
  const t0 = performance.now();
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await groups.base.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  const results = SKIP.has('throughput') ? [] : await throughput(simUrl);
  const handoffs: HandoffResult[] = [];
  for (let run = 0; run < (SKIP.has('handoff') ? 0 : HANDOFF_RUNS); run++) {
    const h = await runHandoff({ group: groups.handoff, simUrl, tenants: HANDOFF_TENANTS, ratePerS: HANDOFF_RATE, promptTokens: PROMPT_TOKENS, log });
    handoffs.push(h);
    await groups.handoff.stopAll();
    log(`handoff run ${run + 1}/${HANDOFF_RUNS}: ${h.moved} moved, first request p50/p99 ${fmt1(h.movedFirst.p50Ms)}/${fmt1(h.movedFirst.p99Ms)} ms (not moved ${fmt1(h.notMovedFirst.p50Ms)}/${fmt1(h.notMovedFirst.p99Ms)} ms)`);
  }
  await stopAll();
  const elapsedS = (performance.now() - t0) / 1_000;
  const date = new Date().toISOString();
  const md = [
    `## Cluster benchmark — ${date.slice(0, 10)}, ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown CPU'}), Node ${process.version}, ${elapsedS.toFixed(0)} s`,
    '',
    ...(results.length > 0 ? [...throughputMarkdown(results), '', ...redisMarkdown(results), ''] : []),
    ...handoffMarkdown(handoffs),
  ].join('\n');
  const dir = fileURLToPath(new URL(`bench/results/${date.slice(0, 10)}/`, root));
  mkdirSync(dir, { recursive: true });
  const json = {
    date,
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? null, node: process.version },
    settings: { rounds: ROUNDS, durationS: DURATION_S, warmupS: WARMUP_S, rewarmS: REWARM_S, connections: CONNECTIONS, tenants: TENANTS, promptTokens: PROMPT_TOKENS, handoffTenants: HANDOFF_TENANTS, handoffRatePerS: HANDOFF_RATE, handoffRuns: HANDOFF_RUNS },
    elapsedS,
    throughput: results.map((r) => ({ ...r, medianRps: median(r.rps), medianP50: median(r.p50), medianP99: median(r.p99) })),
    handoff: handoffs,
  };
  writeFileSync(`${dir}cluster.json`, JSON.stringify(json, null, 2) + '\n');
  writeFileSync(`${dir}cluster.md`, md + '\n');
  process.stdout.write(md + '\n');
} catch (err) {
  log(`bench:cluster failed: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
} finally {
  await stopAll();
}
