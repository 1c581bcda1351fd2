/**
 * `npm run bench`: what sharding buys over a central store, and how the path users run compares with
 * a bare proxy (issue 16's targets), measured end to end on this machine in one run (about 13
 * minutes; every process it starts is stopped at the end, on error and on Ctrl-C).
 *
 * 1. Throughput — the simulator called directly, the bare fastify + undici proxy (bench/lib/bare-proxy.ts:
 *    no limits, the floor of proxying), the outside reference (rate-limiter-flexible's
 *    RateLimiterRedis in a proxy, bench/compare/reference-limiter.ts), and quotaring with 1, 2 and 3 nodes
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
 *    (bench/lib/stream-load.ts), against the simulator directly, the bare proxy in pass-through mode and
 *    router → node (1 node, the deployment's default pool); each measured pass follows an unmeasured
 *    one that opens the connections; targets interleave (order rotated) over the rounds. Per target:
 *    CPU µs per streamed event (SSE `data:` line received) of each process, KiB of RSS per open
 *    stream of each process (the slope of RSS over the streams open during the ramp; (peak − lowest
 *    RSS since the phase began) / streams as its upper bound), time to headers p50 / p99, and the
 *    gap between consecutive events of a stream p50 / p99 minus direct's.
 *
 * One file per phase: compare-throughput.ts, compare-latency.ts, compare-streams.ts,
 * compare-accuracy.ts; what they share (knobs, setups, formats) in compare-setup.ts; issue 16's
 * targets table in compare-targets.ts.
 * 4. Accuracy — both Azure traces (cluster/traces), each at 1× and 3× speed for the same wall-clock
 *    time, replayed at once against a 3-node sharded cluster, a 3-node central cluster and the
 *    reference, each in front of its own simulator whose per-key TPM quota is the sum of the
 *    tenants' limits. Tenants: 8 per workload, drawn by a seeded Zipf rule on the row index;
 *    every tenant gets the same sliding-window token limit, a tenth of the trace's average demand
 *    per minute, so the top tenants ask several times their limit. Over-admission, utilisation and
 *    429s come from the replay records (bench/compare/accuracy-metrics.ts).
 *
 * summary.md ends with issue 16's targets: each one, its value in this run, met or not.
 * Writes bench/results/<date>/results.json (every per-round figure), summary.md and the charts
 * throughput.svg, latency-cdf.svg, tenant-minutes.svg, and prints the Markdown. Environment:
 * BENCH_ROUNDS (3, every phase), BENCH_DURATION (6 s), BENCH_CONNECTIONS (64), BENCH_TENANTS (1,000),
 * BENCH_LATENCY_DURATION (3 s), BENCH_STREAMS (500), BENCH_STREAM_TPS (20), BENCH_STREAM_TOKENS (200),
 * BENCH_STREAM_RAMP (5 s), BENCH_ACCURACY_S (240 s of replay), BENCH_SKIP (comma list of
 * `throughput`, `latency`, `streams`, `accuracy`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { latencyCdfChart, tenantMinuteChart, throughputChart } from '../lib/charts.ts';
import { freePort } from '../lib/cluster-processes.ts';
import { median } from '../lib/load.ts';
import { accuracy, accuracyMarkdown } from './compare-accuracy.ts';
import { latency, latencyMarkdown } from './compare-latency.ts';
import type { LatencyResult } from './compare-latency.ts';
import {
  ACCURACY_S, ACC_TENANTS, CONNECTIONS, DURATION_S, LATENCY_S, LIMIT_FRACTION, PROMPT_TOKENS, REWARM_S, ROUNDS, SKIP, STREAMS, STREAM_RAMP_S, STREAM_TOKENS, STREAM_TPS, STREAM_WARM_RAMP_S,
  TENANTS, TOLERANCE_MS, WARMUP_S, ZIPF_S, ZIPF_SEED, fmt0, groups, log, root, startSetups, stopAll,
} from './compare-setup.ts';
import type { SetupResult } from './compare-setup.ts';
import { kibPerStream, kibPerStreamUpper, perEvent, streams, streamsMarkdown } from './compare-streams.ts';
import { targetChecks, targetsMarkdown } from './compare-targets.ts';
import { ceilingsMarkdown, perRequest, throughput, throughputMarkdown } from './compare-throughput.ts';

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
