/**
 * `npm run bench:router`: the router's own CPU beside a bare fastify + undici proxy, in one run.
 *
 * 1. Requests — the bare proxy (bench/lib/bare-proxy.ts) in front of the simulator, and router → node
 *    (a 1-node sharded cluster with its own redis-server) in front of the same simulator; autocannon,
 *    fixed connections, 200-token prompts, the simulator answering at once. Per target: req/s, and the
 *    CPU per request of each process (`/proc/<pid>/stat`): the bare proxy, the router, the node.
 * 2. Streams — the same targets in front of a simulator streaming `STREAM_TPS` tokens a second
 *    (the bare proxy in pass-through mode: the upstream body piped to the client), `STREAMS`
 *    concurrent streams held for the whole run; CPU per streamed event (SSE `data:` line received by
 *    the client) of each process.
 *
 * Targets interleave within each round (the order rotates round by round); figures are medians over
 * rounds and ratios medians of the per-round ratios, so machine drift between rounds cancels.
 * With BENCH_BASELINE=<a built checkout of another revision>, its router runs as one more target in
 * front of the same node (`router @ baseline`), for a before/after in one run.
 * Writes bench/results/<date>/router.{json,md} and prints the Markdown.
 * BENCH_PROFILE=<folder>: routers and nodes write CPU profiles there (summarise with bench/lib/profile-top.ts).
 * Environment: BENCH_ROUNDS (3), BENCH_DURATION (6 s), BENCH_CONNECTIONS (64), BENCH_TENANTS (1,000),
 * BENCH_STREAMS (200), BENCH_STREAM_TPS (50), BENCH_STREAM_TOKENS (100), BENCH_SKIP (`requests`, `streams`).
 */
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import type { BenchCluster } from '../lib/bench-cluster.ts';
import { freePort, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { Child } from '../lib/cluster-processes.ts';
import { chatBody, median, MODEL, pairedRatio, runAutocannon, writeResults } from '../lib/load.ts';
import { cpuByRole, startBareProxy } from '../lib/targets.ts';
import type { Target } from '../lib/targets.ts';

const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 3);
const DURATION_S = Number(process.env['BENCH_DURATION'] ?? 6);
const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 64);
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 1_000);
const STREAMS = Number(process.env['BENCH_STREAMS'] ?? 200);
const STREAM_TPS = Number(process.env['BENCH_STREAM_TPS'] ?? 50);
const STREAM_TOKENS = Number(process.env['BENCH_STREAM_TOKENS'] ?? 100);
const BASELINE = process.env['BENCH_BASELINE'];
/** A folder: the routers and nodes run with `--cpu-prof` and write their profiles there (figures then include the profiler's cost). */
const PROFILE = process.env['BENCH_PROFILE'];
const SKIP = new Set((process.env['BENCH_SKIP'] ?? '').split(',').filter((s) => s !== ''));
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

const group = new ProcessGroup();
stopOnSignals(() => group.stopAll());

/** One target's figures over the rounds; `cpuUs[role]` per request (or per event), one entry a round. */
interface Row {
  readonly target: string;
  readonly rate: number[];
  readonly cpuUs: Record<string, number[]>;
  readonly p50: number[];
  readonly p99: number[];
  failures: number;
}

const keys = Array.from({ length: TENANTS }, (_, i) => `bench-router-key-${i}`);
const clusterConfig = (simUrl: string): Record<string, unknown> => ({
  tenants: keys.map((key, i) => ({ id: `t${i}`, keys: [key], limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 100_000 }] })),
  models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
  deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY', connections: Math.max(128, STREAMS * 2) }],
});

/** The simulator, a bare proxy in front of it, a 1-node cluster, and the baseline router if any. */
async function targets(tag: string, simArgs: readonly string[], bareMode: 'buffer' | 'stream'): Promise<Target[]> {
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await group.cli(`simulator-${tag}`, ['simulate', '--port', String(simPort), '--ttft-ms', '0', ...simArgs], `${simUrl}/sim/stats`);
  const bare = await startBareProxy(group, `bare-${tag}`, simUrl, bareMode, profiled());
  const cluster: BenchCluster = await startBenchCluster(group, { tag, nodes: 1, mode: 'sharded', config: clusterConfig(simUrl), env: { BENCH_SIM_KEY: 'bench-sim-key', ...profiled() } });
  log(`${tag}: bare proxy pid ${bare.child.proc.pid ?? '?'}, router pid ${cluster.router.proc.pid ?? '?'}, node pid ${cluster.nodeChildren[0]?.proc.pid ?? '?'}`);
  const node = cluster.nodeChildren[0] as Child;
  const out: Target[] = [
    { name: bareMode === 'buffer' ? 'bare proxy' : 'bare stream pass-through', url: bare.url, procs: { proxy: bare.child } },
    { name: 'router → node', url: cluster.url, procs: { router: cluster.router, node } },
  ];
  if (BASELINE !== undefined) {
    const port = await freePort();
    const config = /--config\s+(\S+)/.exec(cluster.router.proc.spawnargs.join(' '))?.[1] ?? '';
    const base = await group.start(`router-${tag}@baseline`, process.execPath, [`${BASELINE}/dist/src/cli.js`, 'router', '--config', config, '--port', String(port)], `http://127.0.0.1:${port}/readyz`, { BENCH_SIM_KEY: 'bench-sim-key', ...profiled() });
    out.push({ name: 'router @ baseline → node', url: `http://127.0.0.1:${port}`, procs: { router: base, node } });
  }
  return out;
}

const profiled = (): Record<string, string> => (PROFILE === undefined ? {} : { NODE_OPTIONS: `--import=${fileURLToPath(new URL('../lib/cpu-profile.mjs', import.meta.url))}`, QUOTARING_CPU_PROFILE_DIR: PROFILE });

/**
 * Runs `rounds` rounds over `list` (order rotated each round); `run` loads one target for
 * DURATION_S and returns what it served (requests or events) and its latencies.
 */
async function measure(list: readonly Target[], run: (t: Target) => Promise<{ served: number; seconds: number; p50: number; p99: number; failures: number }>, unit: string): Promise<Row[]> {
  const rows = new Map<string, Row>(list.map((t) => [t.name, { target: t.name, rate: [], cpuUs: {}, p50: [], p99: [], failures: 0 }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < list.length; i++) {
      const t = list[(i + round) % list.length] as Target;
      const before = cpuByRole(t.procs);
      const r = await run(t);
      const after = cpuByRole(t.procs);
      const row = rows.get(t.name) as Row;
      row.rate.push(r.served / r.seconds);
      row.p50.push(r.p50);
      row.p99.push(r.p99);
      row.failures += r.failures;
      const cpu: string[] = [];
      for (const role of Object.keys(t.procs)) {
        const us = (((after[role] ?? NaN) - (before[role] ?? NaN)) * 1e6) / Math.max(1, r.served);
        (row.cpuUs[role] ??= []).push(us);
        cpu.push(`${role} ${us.toFixed(1)} µs`);
      }
      log(`round ${round + 1}/${ROUNDS} ${t.name.padEnd(26)} ${(r.served / r.seconds).toFixed(0)} ${unit}/s CPU/${unit}: ${cpu.join(', ')} p50 ${r.p50} ms p99 ${r.p99} ms failures ${r.failures}`);
    }
  }
  return [...rows.values()];
}

async function requestsPhase(): Promise<Row[]> {
  const list = await targets('req', [], 'buffer');
  const body = chatBody(200);
  for (const t of list) {
    let sent = 0;
    while (sent < 2 * TENANTS) sent += (await runAutocannon({ url: t.url, bodies: [body], keys, connections: CONNECTIONS, durationS: 2, firstKey: sent })).requests.total;
  }
  log(`requests: ${list.length} targets warm; ${ROUNDS} rounds × ${DURATION_S} s, ${CONNECTIONS} connections`);
  return measure(list, async (t) => {
    const r = await runAutocannon({ url: t.url, bodies: [body], keys, connections: CONNECTIONS, durationS: DURATION_S });
    return { served: r['2xx'], seconds: r.duration, p50: r.latency.p50, p99: r.latency.p99, failures: r.non2xx + r.errors };
  }, 'request');
}

/** Holds `STREAMS` streams open against `url` for `seconds`; counts the SSE events received and the time to headers. */
async function streamLoad(url: string, seconds: number): Promise<{ served: number; seconds: number; p50: number; p99: number; failures: number }> {
  const agent = new Agent({ connections: STREAMS, keepAliveTimeout: 30_000 });
  const base = JSON.parse(chatBody(50)) as Record<string, unknown>;
  const body = JSON.stringify({ ...base, max_tokens: STREAM_TOKENS, stream: true });
  const deadline = performance.now() + seconds * 1_000;
  const ttfb: number[] = [];
  let events = 0;
  let failures = 0;
  let k = 0;
  const start = performance.now();
  const loop = async (): Promise<void> => {
    while (performance.now() < deadline) {
      const t0 = performance.now();
      try {
        const res = await request(`${url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[k++ % keys.length]}` },
          body,
        });
        ttfb.push(performance.now() - t0);
        if (res.statusCode !== 200) failures++;
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          for (let at = chunk.indexOf('data:'); at !== -1; at = chunk.indexOf('data:', at + 5)) events++;
        }
      } catch {
        failures++;
      }
    }
  };
  await Promise.all(Array.from({ length: STREAMS }, loop));
  const elapsed = (performance.now() - start) / 1_000;
  await agent.close();
  ttfb.sort((a, b) => a - b);
  const at = (p: number): number => Math.round((ttfb[Math.min(ttfb.length - 1, Math.floor((p / 100) * ttfb.length))] ?? NaN) * 10) / 10;
  return { served: events, seconds: elapsed, p50: at(50), p99: at(99), failures };
}

async function streamsPhase(): Promise<Row[]> {
  const list = await targets('stream', ['--tps', String(STREAM_TPS)], 'stream');
  for (const t of list) await streamLoad(t.url, 2);
  log(`streams: ${list.length} targets warm; ${ROUNDS} rounds × ${DURATION_S} s, ${STREAMS} concurrent streams of ${STREAM_TOKENS} tokens at ${STREAM_TPS} tokens/s`);
  return measure(list, (t) => streamLoad(t.url, DURATION_S), 'event');
}

function table(rows: readonly Row[], unit: string, bareName: string, what: string): string[] {
  const bare = rows.find((r) => r.target === bareName);
  const cell = (r: Row, role: string): string => (r.cpuUs[role] === undefined ? '—' : median(r.cpuUs[role] as number[]).toFixed(1));
  const lines = [
    `| target | ${unit}s/s | p50 / p99 ms (${what}) | proxy CPU µs/${unit} | router CPU µs/${unit} | node CPU µs/${unit} | router CPU / bare proxy CPU | failures |`,
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const ratio = r.cpuUs['router'] === undefined ? '—' : `${pairedRatio(r.cpuUs['router'], bare?.cpuUs['proxy']).toFixed(2)}×`;
    lines.push(`| ${r.target} | ${median(r.rate).toFixed(0)} | ${median(r.p50)} / ${median(r.p99)} | ${cell(r, 'proxy')} | ${cell(r, 'router')} | ${cell(r, 'node')} | ${ratio} | ${r.failures} |`);
  }
  return lines;
}

try {
  const date = new Date().toISOString();
  const requests = SKIP.has('requests') ? [] : await requestsPhase();
  await group.stopAll();
  const streams = SKIP.has('streams') ? [] : await streamsPhase();
  await group.stopAll();
  const md = [
    `## Router vs bare proxy — ${date.slice(0, 10)}, ${cpus().length} cores, Node ${process.version}; ${ROUNDS} interleaved rounds × ${DURATION_S} s, medians${BASELINE === undefined ? '' : `; baseline router: ${BASELINE}`}`,
    '',
    ...(requests.length === 0 ? [] : [`Requests: ${CONNECTIONS} connections, ${TENANTS} tenants, 200-token prompts, simulator answering at once.`, '', ...table(requests, 'request', 'bare proxy', 'latency'), '']),
    ...(streams.length === 0 ? [] : [`Streams: ${STREAMS} concurrent, ${STREAM_TOKENS} tokens each at ${STREAM_TPS} tokens/s; CPU per SSE event received.`, '', ...table(streams, 'event', 'bare stream pass-through', 'time to headers'), '']),
  ].join('\n');
  writeResults('router', date, { date, settings: { rounds: ROUNDS, durationS: DURATION_S, connections: CONNECTIONS, tenants: TENANTS, streams: STREAMS, streamTps: STREAM_TPS, streamTokens: STREAM_TOKENS, baseline: BASELINE ?? null }, requests, streams }, md);
} catch (err) {
  log(`bench failed: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
} finally {
  await group.stopAll();
}
