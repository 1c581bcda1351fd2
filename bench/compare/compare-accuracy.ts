/** `npm run bench`, phase 4: accuracy of sharded, central and the reference on the Azure traces, and its Markdown. */
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runReplay, simulatorRateLimited } from '../../src/replay/replay.ts';
import type { ReplayRecord } from '../../src/replay/report.ts';
import { ZipfAssigner } from '../../src/replay/tenants.ts';
import { readTrace } from '../../src/replay/trace.ts';
import type { TraceRow } from '../../src/replay/trace.ts';
import { accuracyOf } from './accuracy-metrics.ts';
import type { AccuracyResult, TenantLimits } from './accuracy-metrics.ts';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort } from '../lib/cluster-processes.ts';
import { MODEL } from '../lib/load.ts';
import { ACCURACY_S, ACC_TENANTS, LIMIT_FRACTION, TOLERANCE_MS, WINDOW_MS, ZIPF_S, ZIPF_SEED, fmt0, fmt1, groups, log, pct, root, startReference, temporary } from './compare-setup.ts';

/** One accuracy workload: a trace at a speed, with its own tenants. */
export interface Workload {
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
export interface AccuracyRun {
  readonly system: string;
  readonly workload: string;
  readonly limitTokens: number;
  readonly rows: number;
  readonly result: AccuracyResult;
}

/** The accuracy phase's results: every run, and the simulator 429s of each system. */
export interface AccuracyPhase {
  readonly rule: string;
  readonly limits: Readonly<Record<string, number>>;
  readonly runs: readonly AccuracyRun[];
  readonly simulator429: Readonly<Record<string, number>>;
}

/** The four workloads (each trace at 1× and 3×), their tenants and their limit (a tenth of the trace's mean tokens per minute). */
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

/** Replays every workload against a 3-node sharded cluster, a 3-node central cluster and the reference at once, each in front of its own simulator; stops them after. */
export async function accuracy(): Promise<AccuracyPhase> {
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

/** The accuracy section of summary.md (Markdown lines). */
export function accuracyMarkdown(phase: AccuracyPhase): string[] {
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
