/**
 * `npm run bench:node`: the gateway node against a bare fastify + undici proxy, side by side in one
 * run, with autocannon, the simulator answering at once. Then the limiter alone, the per-request
 * cost of metrics and log lines (bench/node/ops.ts) and token estimation. Writes bench/results/<date>/node.{json,md} and prints the Markdown table.
 *
 * Rounds interleave the targets (bare, node/estimate, node/estimate logging a line per request,
 * node/exact) so machine noise hits each alike;
 * figures are medians over rounds; ratios are medians of the per-round ratios (node / bare, and / the
 * baseline revision with BENCH_BASELINE).
 */
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type autocannon from 'autocannon';
import { parseTraceFile } from '../../src/replay/trace.ts';
import { CLI, freePort, runCli, writeConfig } from '../../test/helpers/processes.ts';
import type { Running } from '../../test/helpers/processes.ts';
import { chatBody, median, runAutocannon } from '../lib/load.ts';
import { processCpuSeconds } from '../lib/cluster-processes.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION_S = Number(process.env.BENCH_DURATION ?? 8);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const TENANTS = 100;
/**
 * A built checkout of another revision (`git worktree add /tmp/base REV && cd /tmp/base && ln -s
 * $PWD/node_modules && npx tsc -p tsconfig.build.json`): its node runs as one more target,
 * `node (estimate) @ baseline`, with the same config, to measure what a change costs in one run.
 */
const BASELINE = process.env.BENCH_BASELINE;
/** Only these targets (comma-separated names, e.g. `node (estimate),node (estimate) @ baseline`); default all. */
const ONLY = process.env.BENCH_TARGETS?.split(',').map((t) => t.trim());
const root = new URL('../../', import.meta.url);

/** An OTLP/HTTP receiver that reads and drops every export (answers 200 `{}`); closed when the bench exits. @returns its base URL. */
async function startOtlpSink(): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  server.unref();
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A chat body whose prompt is exactly `n` tokens (o200k with message overhead), 16 output tokens. */
/** Node-bench load: the shared runner with this benchmark's connections and duration. */
function load(url: string, bodies: readonly string[], keys: readonly string[], durationS = DURATION_S): Promise<autocannon.Result> {
  return runAutocannon({ url, bodies, keys, connections: CONNECTIONS, durationS });
}

/** Waits (up to 10 s) until `healthUrl` answers 200; @returns `proc` as a {@link Running} stopped by SIGTERM. */
async function whenUp(proc: ChildProcess, healthUrl: string): Promise<Running> {
  for (let t = 0; t < 200; t++) {
    try {
      if ((await fetch(healthUrl)).ok) break;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    proc,
    output: () => '',
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      return new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
    },
  };
}

async function startBare(port: number, simUrl: string): Promise<Running> {
  const file = fileURLToPath(new URL('../lib/bare-proxy.ts', import.meta.url));
  const proc = spawn(process.execPath, ['--import', 'tsx', file, String(port), simUrl], { stdio: ['ignore', 'inherit', 'inherit'] });
  return whenUp(proc, `http://127.0.0.1:${port}/healthz`);
}

/**
 * A gateway node whose stdout (its JSON log lines) goes to /dev/null, as a log shipper would take
 * it off the process: for the node at `log_level: info` (a line per request), whose output
 * `runCli` would keep in memory.
 */
async function startNodeLogging(configFile: string, port: number, env: Record<string, string>, cli = CLI): Promise<Running> {
  const devNull = openSync('/dev/null', 'w');
  const proc = spawn(process.execPath, [cli, 'node', '--config', configFile], { env: { ...process.env, ...env }, stdio: ['ignore', devNull, 'inherit'] });
  closeSync(devNull);
  return whenUp(proc, `http://127.0.0.1:${port}/readyz`);
}

/** Runs a micro-benchmark script (a path relative to this file) and returns its first JSON line and the rest as text. */
function runMicro(script: string, args: readonly string[]): { json: unknown; text: string } {
  const file = fileURLToPath(new URL(script, import.meta.url));
  const out = spawnSync(process.execPath, ['--import', 'tsx', file, ...args], { encoding: 'utf8', timeout: 240_000 });
  const lines = (out.stdout ?? '').split('\n');
  const at = lines.findIndex((l) => l.startsWith('{'));
  let json: unknown = null;
  try {
    json = at >= 0 ? JSON.parse(lines[at] ?? '') : null;
  } catch {
    json = null;
  }
  return { json, text: lines.filter((_, i) => i !== at).join('\n').trim() || `${script} failed: ${out.stderr}` };
}

/**
 * The median over rounds of `rps[i] / ref[i]`: each round's targets run back to back, so the ratio
 * within a round cancels the machine's drift between rounds (seen here: a whole round at half speed).
 * 1 without a reference.
 */
function pairedRatio(rps: readonly number[], ref: readonly number[] | undefined): number {
  if (ref === undefined) return 1;
  return median(rps.map((r, i) => r / (ref[i] ?? Number.NaN)).filter((x) => Number.isFinite(x)));
}

function percent(ratio: number | undefined): string {
  return ratio === undefined ? '—' : `${(ratio * 100).toFixed(0)}%`;
}

interface Row {
  target: string;
  prompts: string;
  rps: number[];
  /** CPU time of the target's process per request served, µs. */
  cpuUs: number[];
  p50: number[];
  p99: number[];
  non2xx: number;
  errors: number;
}

const started: Running[] = [];
const cleanup = async () => {
  await Promise.all(started.map((p) => p.stop()));
};
process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
process.once('SIGTERM', () => void cleanup().then(() => process.exit(143)));

try {
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  started.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`));
  const keys = Array.from({ length: TENANTS }, (_, i) => `bench-tenant-key-${i}`);
  const limits = [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 10_000 }];
  const ports = { bare: await freePort(), estimate: await freePort(), logged: await freePort(), exact: await freePort(), baseline: await freePort(), traced: await freePort() };
  const nodeConfig = (port: number, estimator: 'estimate' | 'exact', logLevel: 'warn' | 'info' = 'warn') =>
    writeConfig({
      server: { port, log_level: logLevel },
      tenants: keys.map((key, i) => ({ id: `t${i}`, keys: [key], limits })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator, deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
    });
  const env = { BENCH_SIM_KEY: 'bench-sim-key' };
  /** Target name → its process (for CPU time per request). */
  const procs: Record<string, Running> = {
    bare: await startBare(ports.bare, simUrl),
    'node (estimate)': await runCli(['node', '--config', nodeConfig(ports.estimate, 'estimate')], `http://127.0.0.1:${ports.estimate}/readyz`, env),
    'node (estimate, info logs)': await startNodeLogging(nodeConfig(ports.logged, 'estimate', 'info'), ports.logged, env),
    'node (exact)': await runCli(['node', '--config', nodeConfig(ports.exact, 'exact')], `http://127.0.0.1:${ports.exact}/readyz`, env),
    ...(BASELINE === undefined ? {} : { 'node (estimate) @ baseline': await startNodeLogging(nodeConfig(ports.baseline, 'estimate'), ports.baseline, env, `${BASELINE}/dist/src/cli.js`) }),
    // OpenTelemetry on, every request sampled, spans exported over OTLP/HTTP to a sink that answers 200.
    'node (estimate) traced 100%': await runCli(['node', '--config', nodeConfig(ports.traced, 'estimate')], `http://127.0.0.1:${ports.traced}/readyz`, { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: await startOtlpSink(), OTEL_TRACES_SAMPLER: 'always_on' }),
  };
  started.push(...Object.values(procs));

  const trace = parseTraceFile(fileURLToPath(new URL('cluster/traces/azure-llm-2023-conv.csv.gz', root)), { limit: 2_000 });
  const mixes = {
    '200 tokens': [chatBody(200)],
    'conv trace sizes': trace.map((r) => chatBody(r.promptTokens)),
  };
  const targets = {
    bare: `http://127.0.0.1:${ports.bare}`,
    'node (estimate)': `http://127.0.0.1:${ports.estimate}`,
    'node (estimate, info logs)': `http://127.0.0.1:${ports.logged}`,
    'node (exact)': `http://127.0.0.1:${ports.exact}`,
    ...(BASELINE === undefined ? {} : { 'node (estimate) @ baseline': `http://127.0.0.1:${ports.baseline}` }),
    'node (estimate) traced 100%': `http://127.0.0.1:${ports.traced}`,
  };
  if (ONLY !== undefined) for (const name of Object.keys(targets)) if (!ONLY.includes(name)) delete (targets as Record<string, string>)[name];
  const rows = new Map<string, Row>();
  // Warm-up (JIT, tokenizer tables, connection pools), not measured.
  for (const url of Object.values(targets)) for (const bodies of Object.values(mixes)) await load(url, bodies, keys, 2);
  const order = Object.entries(targets);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [prompts, bodies] of Object.entries(mixes)) {
      // Each round starts at the next target, so that no target always runs first (or last).
      for (let t = 0; t < order.length; t++) {
        const [target, url] = order[(t + round) % order.length] as [string, string];
        const pid = procs[target]?.proc.pid;
        const cpuBefore = processCpuSeconds(pid);
        const r = await load(url, bodies, keys);
        const cpuUs = ((processCpuSeconds(pid) - cpuBefore) * 1e6) / Math.max(1, r.requests.total);
        const key = `${target}|${prompts}`;
        const row = rows.get(key) ?? { target, prompts, rps: [], cpuUs: [], p50: [], p99: [], non2xx: 0, errors: 0 };
        row.rps.push(r.requests.average);
        row.cpuUs.push(cpuUs);
        row.p50.push(r.latency.p50);
        row.p99.push(r.latency.p99);
        row.non2xx += r.non2xx;
        row.errors += r.errors;
        rows.set(key, row);
        process.stderr.write(`round ${round + 1}/${ROUNDS} ${target.padEnd(26)} ${prompts.padEnd(17)} ${r.requests.average.toFixed(0)} req/s ${cpuUs.toFixed(0)} µs CPU/req p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms non2xx ${r.non2xx}\n`);
      }
    }
  }
  const results = [...rows.values()].map((row) => {
    const bare = rows.get(`bare|${row.prompts}`);
    const rps = median(row.rps);
    const base = rows.get(`node (estimate) @ baseline|${row.prompts}`);
    return {
      ...row,
      medianRps: rps,
      medianCpuUs: median(row.cpuUs),
      ...(base === undefined || row.target === base.target ? {} : { cpuToBaseline: pairedRatio(row.cpuUs, base.cpuUs) }),
      medianP50: median(row.p50),
      medianP99: median(row.p99),
      ratioToBare: pairedRatio(row.rps, bare?.rps),
      ...(base === undefined || row.target === base.target ? {} : { ratioToBaseline: pairedRatio(row.rps, base.rps) }),
    };
  });
  await cleanup();
  started.length = 0;
  const micro = { limiter: runMicro('../micro/limiter.ts', ['--runs', '5']), tokens: runMicro('../tokens/tokens.ts', []), ops: runMicro('./ops.ts', []) };
  const date = new Date().toISOString().slice(0, 10);
  const dir = fileURLToPath(new URL(`bench/results/${date}/`, root));
  mkdirSync(dir, { recursive: true });
  const md = [
    `Gateway node vs bare fastify+undici proxy — ${ROUNDS} rounds × ${DURATION_S} s, ${CONNECTIONS} connections, ${TENANTS} tenants, simulator answering at once (medians)${BASELINE === undefined ? '' : `; baseline: ${BASELINE}`}`,
    '',
    'Ratios are medians of per-round ratios (targets run back to back within a round).',
    '',
    `| target | prompts | req/s | CPU µs/request | p50 ms | p99 ms | vs bare |${BASELINE === undefined ? '' : ' vs baseline (req/s) | vs baseline (CPU) |'} non-2xx |`,
    `|---|---|---|---|---|---|---|${BASELINE === undefined ? '' : '---|---|'}---|`,
    ...results.map(
      (r) =>
        `| ${r.target} | ${r.prompts} | ${r.medianRps.toFixed(0)} | ${r.medianCpuUs.toFixed(0)} | ${r.medianP50} | ${r.medianP99} | ${(r.ratioToBare * 100).toFixed(0)}% |${BASELINE === undefined ? '' : ` ${percent(r.ratioToBaseline)} | ${percent(r.cpuToBaseline)} |`} ${r.non2xx + r.errors} |`,
    ),
  ].join('\n');
  const microMd = ['', '```', micro.limiter.text, micro.ops.text, micro.tokens.text, '```'].join('\n');
  writeFileSync(`${dir}node.json`, JSON.stringify({ date: new Date().toISOString(), rounds: ROUNDS, durationS: DURATION_S, connections: CONNECTIONS, results, limiter: micro.limiter.json, tokens: micro.tokens.json, ops: micro.ops.json }, null, 2));
  writeFileSync(`${dir}node.md`, md + '\n' + microMd + '\n');
  process.stdout.write(md + '\n' + microMd + '\n');
} finally {
  await cleanup();
}
