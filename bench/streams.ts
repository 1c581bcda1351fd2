/**
 * `npm run bench:streams`: thousands of concurrent streams (issue 16).
 *
 * The provider simulator streams at `BENCH_STREAM_TPS` tokens a second; in front of it, 1-node
 * clusters (node + router + their own redis-server, bench/bench-cluster.ts), one per upstream pool
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
 *   pass (sampled every 100 ms): (peak − idle) / streams, KiB per open stream per process.
 *
 * Writes bench/results/<date>/streams.{json,md} and prints the Markdown. Every process is stopped
 * at the end, on error and on Ctrl-C.
 * BENCH_PROFILE=<folder>: routers and nodes write CPU profiles there (summarise with bench/profile-top.ts).
 * Environment: BENCH_STREAMS (5,000), BENCH_STREAM_TOKENS (200), BENCH_STREAM_TPS (20),
 * BENCH_STREAM_RAMP (5 s), BENCH_POOLS (`128,default`), BENCH_TENANTS (100), BENCH_SKIP_DIRECT (1: no direct pass).
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Agent } from 'undici';
import { startBenchCluster } from './bench-cluster.ts';
import { freePort, processCpuSeconds, processRssKiB, ProcessGroup, stopOnSignals } from './cluster-processes.ts';
import type { Child } from './cluster-processes.ts';
import { chatBody, percentile, statusCounts, writeResults } from './load.ts';

const STREAMS = Number(process.env['BENCH_STREAMS'] ?? 5_000);
const TOKENS = Number(process.env['BENCH_STREAM_TOKENS'] ?? 200);
const TPS = Number(process.env['BENCH_STREAM_TPS'] ?? 20);
const RAMP_S = Number(process.env['BENCH_STREAM_RAMP'] ?? 5);
const POOLS = (process.env['BENCH_POOLS'] ?? '128,default').split(',').filter((s) => s !== '');
/** Tokens of a warm-up stream: it lasts the ramp and 1 s more, so that all overlap (a connection each). */
const WARM_TOKENS = Math.max(2, Math.ceil(TPS * (RAMP_S + 1)));
const TENANTS = Number(process.env['BENCH_TENANTS'] ?? 100);
const SKIP_DIRECT = process.env['BENCH_SKIP_DIRECT'] === '1';
/** A folder: the routers and nodes run with `--cpu-prof` and write their profiles there. */
const PROFILE = process.env['BENCH_PROFILE'];
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

const group = new ProcessGroup();
stopOnSignals(() => group.stopAll());

const keys = Array.from({ length: TENANTS }, (_, i) => `bench-streams-key-${i}`);
/** One content token of an OpenAI chat stream (the first event's `"role"` delta does not match). */
const TOKEN_EVENT = Buffer.from('"delta":{"content":');

/** A measured target and the processes whose memory it costs, by role. */
interface Target {
  readonly name: string;
  /** The deployment's `connections` (`default (no bound)`: left out), '—' for direct. */
  readonly pool: string;
  readonly url: string;
  readonly procs: Readonly<Record<string, Child>>;
}

/** One stream's outcome. */
interface Stream {
  status: number;
  tokens: number;
  /** Body chunks received: fewer than the tokens when a late hop sends several events at once. */
  chunks: number;
  headersMs: number;
  durationMs: number;
  error?: string;
}

/** Figures of one target. */
interface Result {
  readonly target: string;
  readonly pool: string;
  readonly streams: number;
  readonly statuses: Record<string, number>;
  /** Streams with status 200 and exactly TOKENS content tokens. */
  readonly complete: number;
  /** Most streams open at once (headers received, end not yet). */
  readonly peakOpen: number;
  readonly headersMs: { readonly p50: number; readonly p99: number };
  readonly durationS: { readonly p50: number; readonly p99: number };
  /** Median body chunks per stream (TOKENS + 2 or so when every event arrives alone). */
  readonly chunksP50: number;
  /** RSS per process, KiB: before the target's first stream and the peak of the measured pass. */
  readonly rssKiB: Record<string, { readonly idle: number; readonly peak: number }>;
  /** (peak − idle) / streams per process, KiB. */
  readonly kibPerStream: Record<string, number>;
  /** CPU of each process (and of this client) during the measured pass, in cores (CPU s / wall s). */
  readonly cpuCores: Record<string, number>;
  /** Up to 5 distinct client-side errors and non-200 bodies. */
  readonly errors: string[];
  readonly seconds: number;
}

/** Counts TOKEN_EVENT in `chunk`, including one that straddles `prev`'s tail and `chunk`'s head. */
function countTokens(prevTail: Buffer, chunk: Buffer): number {
  let n = 0;
  for (let at = chunk.indexOf(TOKEN_EVENT); at !== -1; at = chunk.indexOf(TOKEN_EVENT, at + TOKEN_EVENT.length)) n++;
  if (prevTail.length > 0) {
    const seam = Buffer.concat([prevTail, chunk.subarray(0, TOKEN_EVENT.length - 1)]);
    if (seam.indexOf(TOKEN_EVENT) !== -1) n++;
  }
  return n;
}

/**
 * Opens `n` streams of `tokens` tokens against `url` through `agent`, stream i at start + i·rampS/n,
 * and reads each to its end; `onOpen(+1 / -1)` as each stream gets its headers and ends.
 */
async function openStreams(agent: Agent, url: string, n: number, tokens: number, rampS: number, onOpen: (delta: number) => void): Promise<Stream[]> {
  const base = JSON.parse(chatBody(50)) as Record<string, unknown>;
  const body = JSON.stringify({ ...base, max_tokens: tokens, stream: true });
  const start = performance.now();
  const one = async (i: number): Promise<Stream> => {
    const wait = start + (i * rampS * 1_000) / n - performance.now();
    if (wait > 1) await sleep(wait);
    const s: Stream = { status: 0, tokens: 0, chunks: 0, headersMs: Number.NaN, durationMs: Number.NaN };
    const t0 = performance.now();
    let t1 = 0;
    let open = false;
    let tail: Buffer = Buffer.alloc(0);
    let errorBody = '';
    // undici's dispatch handler (as src/router/relay.ts): no Readable per response, so this client
    // costs little of the two cores the router and the node need.
    await new Promise<void>((resolve) => {
      const done = (err?: Error): void => {
        if (open) onOpen(-1);
        open = false;
        if (err !== undefined) s.error = err.message;
        else if (s.status !== 200) s.error = `${s.status}: ${errorBody.slice(0, 300)}`;
        else s.durationMs = performance.now() - t1;
        resolve();
      };
      agent.dispatch(
        { origin: url, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[i % keys.length] ?? ''}` }, body },
        {
          onConnect: () => {},
          onHeaders: (statusCode: number) => {
            t1 = performance.now();
            s.headersMs = t1 - t0;
            s.status = statusCode;
            if (statusCode === 200) {
              open = true;
              onOpen(1);
            }
            return true;
          },
          onData: (chunk: Buffer) => {
            if (s.status !== 200) {
              if (errorBody.length < 300) errorBody += chunk.toString();
              return true;
            }
            s.chunks++;
            s.tokens += countTokens(tail, chunk);
            tail = chunk.subarray(Math.max(0, chunk.length - (TOKEN_EVENT.length - 1)));
            return true;
          },
          onComplete: () => done(),
          onError: (err: Error) => done(err),
        },
      );
    });
    return s;
  };
  return Promise.all(Array.from({ length: n }, (_, i) => one(i)));
}

const cpuOf = (t: Target): Record<string, number> => ({ ...Object.fromEntries(Object.entries(t.procs).map(([role, c]) => [role, processCpuSeconds(c.proc.pid)])), client: processCpuSeconds(process.pid) });
const rssOf = (t: Target): Record<string, number> => Object.fromEntries(Object.entries(t.procs).map(([role, c]) => [role, processRssKiB(c.proc.pid)]));

/** Warm-up pass, then the measured pass of STREAMS streams against `t`, RSS sampled every 100 ms. */
async function measure(t: Target): Promise<Result> {
  const agent = new Agent({ connections: STREAMS, keepAliveTimeout: 120_000, headersTimeout: 900_000, bodyTimeout: 120_000 });
  try {
    const idle = rssOf(t);
    // The same ramp, streams that all overlap: the pass opens a connection per stream on each hop.
    const warm = await openStreams(agent, t.url, STREAMS, WARM_TOKENS, RAMP_S, () => {});
    const warmBad = warm.filter((s) => s.status !== 200).length;
    log(`${t.name} (pool ${t.pool}): warm-up ${STREAMS} streams of ${WARM_TOKENS} tokens, ${warmBad} not 200`);
    await sleep(500);
    const peak: Record<string, number> = { ...idle };
    const sample = (): void => {
      for (const [role, kib] of Object.entries(rssOf(t))) peak[role] = Math.max(peak[role] ?? 0, kib);
    };
    const timer = setInterval(sample, 100);
    let open = 0;
    let peakOpen = 0;
    const cpuBefore = cpuOf(t);
    const started = performance.now();
    const streams = await openStreams(agent, t.url, STREAMS, TOKENS, RAMP_S, (d) => {
      open += d;
      peakOpen = Math.max(peakOpen, open);
    });
    clearInterval(timer);
    sample();
    const seconds = (performance.now() - started) / 1_000;
    const cpuAfter = cpuOf(t);
    const cpuCores = Object.fromEntries(Object.keys(cpuAfter).map((role) => [role, ((cpuAfter[role] ?? NaN) - (cpuBefore[role] ?? NaN)) / seconds]));
    const headers = streams.map((s) => s.headersMs).filter((x) => Number.isFinite(x));
    const durations = streams.map((s) => s.durationMs / 1_000).filter((x) => Number.isFinite(x));
    const rssKiB: Record<string, { idle: number; peak: number }> = {};
    const kibPerStream: Record<string, number> = {};
    for (const role of Object.keys(t.procs)) {
      rssKiB[role] = { idle: idle[role] ?? Number.NaN, peak: peak[role] ?? Number.NaN };
      kibPerStream[role] = ((peak[role] ?? Number.NaN) - (idle[role] ?? Number.NaN)) / STREAMS;
    }
    return {
      target: t.name,
      pool: t.pool,
      streams: STREAMS,
      statuses: statusCounts(streams),
      complete: streams.filter((s) => s.status === 200 && s.tokens === TOKENS).length,
      peakOpen,
      headersMs: { p50: percentile(headers, 50), p99: percentile(headers, 99) },
      durationS: { p50: percentile(durations, 50), p99: percentile(durations, 99) },
      chunksP50: percentile(streams.filter((s) => s.status === 200).map((s) => s.chunks), 50),
      rssKiB,
      kibPerStream,
      cpuCores,
      errors: [...new Set(streams.flatMap((s) => (s.error === undefined ? [] : [s.error])))].slice(0, 5),
      seconds,
    };
  } finally {
    await agent.destroy();
  }
}

const profiled = (): Record<string, string> => (PROFILE === undefined ? {} : { NODE_OPTIONS: `--import=${fileURLToPath(new URL('cpu-profile.mjs', import.meta.url))}`, QUOTARING_CPU_PROFILE_DIR: PROFILE });

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
    '| target | upstream pool | statuses | complete | peak open | time to headers p50 / p99 ms | p99 vs direct | stream duration p50 / p99 s | chunks per stream p50 | router KiB/stream | node KiB/stream | router RSS MiB idle → peak | node RSS MiB idle → peak | CPU cores (pass average) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const statuses = Object.entries(r.statuses).map(([s, n]) => `${n} × ${s}`).join(', ');
    const vs = direct === undefined || r === direct ? '—' : `${(r.headersMs.p99 / direct.headersMs.p99).toFixed(2)}×`;
    lines.push(
      `| ${r.target} | ${r.pool} | ${statuses} | ${r.complete} / ${r.streams} | ${r.peakOpen} | ${fmtMs(r.headersMs.p50)} / ${fmtMs(r.headersMs.p99)} | ${vs} | ${r.durationS.p50.toFixed(1)} / ${r.durationS.p99.toFixed(1)} | ${r.chunksP50} | ${fmtKiB(r.kibPerStream['router'])} | ${fmtKiB(r.kibPerStream['node'])} | ${fmtMiB(r.rssKiB['router'])} | ${fmtMiB(r.rssKiB['node'])} | ${Object.entries(r.cpuCores).map(([role, c]) => `${role} ${c.toFixed(2)}`).join(', ')} |`,
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
    `${STREAMS} concurrent streams of ${TOKENS} tokens at ${TPS} tokens/s (the simulator), opened over ${RAMP_S} s from one undici Agent after a warm-up pass that opens the connections; ${TENANTS} tenants, no limit refusing; "complete" = status 200 and exactly ${TOKENS} content tokens; KiB per stream = (peak RSS − RSS before the first stream) / ${STREAMS}.`,
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
