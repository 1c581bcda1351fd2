/**
 * `npm run bench:fair-share` (issue 28's benchmark row): fair share of a deployment quota against
 * first come, first served on the same load, and what fair share costs on the request path.
 *
 * 1. Fairness and utilisation (bench/fairshare/fair-load.ts): n nodes (default 3) and a router; per
 *    round a fair-shared deployment and the same deployment without fair share get the same load at
 *    the same time (A 5× the quota, B and C 10% each, D 30% in bursts); per tenant x = what the
 *    provider received from it / its max-min fair share of its demand, Jain's index over the four x,
 *    utilisation = what the provider received / quota × headroom.
 * 2. Request-path cost (bench/fairshare/fair-cost.ts): one node, a fair-shared and a plain
 *    deployment with a quota never reached, interleaved rounds: req/s at saturation, node CPU µs per
 *    request, one-request-at-a-time latency; ratios fair / fcfs as medians of per-round ratios.
 *
 * Figures are medians over rounds. Writes bench/results/<date>/fair-share.{json,md} and
 * bench/results/fair-share.json (the latest full run; `--quick` writes fair-share-quick.*), prints
 * the Markdown. Every process is stopped at the end, on error and on Ctrl-C.
 *
 * `--cost-only`: the request-path cost alone (writes fair-share-cost.*; with BENCH_FAIR_COST_ROUNDS for
 * a longer look on a noisy machine). `--quick`: 1 fairness round of 35 s and 2 cost rounds of 3 s + 2 s (about 1.5 minutes with the
 * build); default: 3 rounds of 75 s and 5 cost rounds of 8 s + 3 s (about 6 minutes). Environment:
 * BENCH_FAIR_NODES (3), BENCH_FAIR_ROUNDS, BENCH_FAIR_SECONDS, BENCH_FAIR_COST_ROUNDS; BENCH_PROFILE=<folder>:
 * the cost node writes a CPU profile there (summarise with bench/lib/profile-top.ts).
 */
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { median, writeResults } from '../lib/load.ts';
import { ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import { CONNECTIONS, runCost } from './fair-cost.ts';
import type { CostResult } from './fair-cost.ts';
import { CAP_PER_S, dBursts, HEADROOM, LETTERS, MODES, QUOTA_TPM, RATE, runFairness, TOKENS, WARM_S } from './fair-load.ts';
import type { Mode, ModeRound } from './fair-load.ts';

const QUICK = process.argv.includes('--quick');
/** Only the request-path cost (a longer look at it on a noisy machine): no fairness rounds. */
const COST_ONLY = process.argv.includes('--cost-only');
const env = (name: string, quick: number, full: number): number => Number(process.env[name] ?? (QUICK ? quick : full));
const NODES = env('BENCH_FAIR_NODES', 3, 3);
const ROUNDS = COST_ONLY ? 0 : env('BENCH_FAIR_ROUNDS', 1, 3);
const RUN_S = env('BENCH_FAIR_SECONDS', 35, 75);
const COST_ROUNDS = env('BENCH_FAIR_COST_ROUNDS', 2, 5);
const SATURATION_S = QUICK ? 3 : 8;
const SINGLE_S = QUICK ? 2 : 3;
/** Hard bound of the whole run: past it everything is stopped and the run fails. */
const WATCHDOG_MS = (ROUNDS * (RUN_S + 15) + COST_ROUNDS * 2 * (SATURATION_S + SINGLE_S + 2) + 90) * 1_000;
const PROFILE = process.env['BENCH_PROFILE'];
const profiled = (): Record<string, string> => (PROFILE === undefined ? {} : { NODE_OPTIONS: `--import=${fileURLToPath(new URL('../lib/cpu-profile.mjs', import.meta.url))}`, QUOTARING_CPU_PROFILE_DIR: PROFILE });
const log = (line: string): void => void process.stderr.write(`${line}\n`);

const fairGroup = new ProcessGroup();
const costGroup = new ProcessGroup();
const stopAll = async (): Promise<void> => {
  await Promise.all([fairGroup.stopAll(), costGroup.stopAll()]);
};
stopOnSignals(stopAll);
const watchdog = setTimeout(() => {
  log(`bench:fair-share took over ${WATCHDOG_MS / 1000} s: stopping`);
  void stopAll().then(() => process.exit(1));
}, WATCHDOG_MS);
watchdog.unref();

/** Medians over rounds of one mode's figures. */
interface ModeSummary {
  readonly mode: Mode;
  readonly normalised: Record<string, number>;
  readonly jain: number;
  readonly utilisationOfCap: number;
  readonly utilisationOfQuota: number;
  readonly most60sTokens: number;
  readonly provider429: number;
  readonly odd: number;
  /** Gateway refusals by tenant and error code, summed over rounds. */
  readonly refusals: Record<string, Record<string, number>>;
  /** Sent and admitted (counted time) by tenant, summed over rounds. */
  readonly sent: Record<string, number>;
  readonly admitted: Record<string, number>;
  readonly fair: Record<string, number>;
}

function summarise(rounds: readonly ModeRound[], mode: Mode): ModeSummary {
  const mine = rounds.filter((r) => r.mode === mode);
  const by = <T>(f: (l: (typeof LETTERS)[number]) => T): Record<string, T> => Object.fromEntries(LETTERS.map((l) => [l, f(l)]));
  const sum = (f: (r: ModeRound) => number): number => mine.reduce((s, r) => s + f(r), 0);
  return {
    mode,
    normalised: by((l) => median(mine.map((r) => r.tenants[l].normalised))),
    jain: median(mine.map((r) => r.jain)),
    utilisationOfCap: median(mine.map((r) => r.utilisationOfCap)),
    utilisationOfQuota: median(mine.map((r) => r.utilisationOfQuota)),
    most60sTokens: Math.max(...mine.map((r) => r.most60sTokens)),
    provider429: sum((r) => r.provider429),
    odd: sum((r) => r.odd),
    refusals: by((l) => {
      const out: Record<string, number> = {};
      for (const r of mine) for (const [code, n] of Object.entries(r.tenants[l].refusals)) out[code] = (out[code] ?? 0) + n;
      return out;
    }),
    sent: by((l) => sum((r) => r.tenants[l].sent)),
    admitted: by((l) => sum((r) => r.tenants[l].admitted)),
    fair: by((l) => sum((r) => r.tenants[l].fair)),
  };
}

const f2 = (x: number): string => x.toFixed(2);
const f3 = (x: number): string => x.toFixed(3);
const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
const int = (x: number): string => Math.round(x).toLocaleString('en-US');
const NAMES: Record<Mode, string> = { fair: 'fair share on', fcfs: 'first come, first served' };

function markdown(date: string, summaries: readonly ModeSummary[], rounds: readonly ModeRound[], cost: CostResult, load: readonly number[], totalS: number): string {
  const [fair, fcfs] = summaries as [ModeSummary, ModeSummary];
  const perRound = (mode: Mode, f: (r: ModeRound) => string): string =>
    rounds
      .filter((r) => r.mode === mode)
      .map(f)
      .join(', ');
  const m = cost.medians;
  const head = [
    `# bench:fair-share — ${date}${QUICK ? ' (--quick)' : ''}${COST_ONLY ? ' (--cost-only)' : ''}`,
    '',
    `Whole run ${Math.round(totalS)} s on ${cpus().length} cores (load average ${load.map((l) => l.toFixed(2)).join(' / ')} at the start); every figure is the median over rounds.`,
    '',
  ];
  const fairness = [
    `## Fairness and utilisation (${ROUNDS} round${ROUNDS === 1 ? '' : 's'} × ${RUN_S} s, ${NODES} nodes + router)`,
    '',
    `Two deployments per round, \`tpm: ${int(QUOTA_TPM)}\`, headroom ${HEADROOM}, \`sliding_window\`, one with \`fair_share: { reserve: 0.5 }\`, one without; the same load on both at once:`,
    `A ${RATE.A.toFixed(1)} requests/s (5× the quota), B and C ${RATE.B.toFixed(1)} (10%), D ${RATE.D.toFixed(1)} (30%) in bursts ${dBursts(RUN_S)
      .map(([a, b]) => `${a}–${b} s`)
      .join(', ')}; ${int(TOKENS)} tokens a request.`,
    `Counted at the provider (the simulator's arrival log) from ${WARM_S} s to ${RUN_S} s: x = admitted / fair share (max-min water-fill of ${CAP_PER_S.toFixed(1)} requests/s,`,
    "quota × headroom, over who asks in each second); Jain's index J = (Σx)² / (n·Σx²) over A–D; utilisation = admitted / (quota × headroom).",
    '',
    "| deployment | x A | x B | x C | x D | Jain's index | utilisation (of quota × headroom) | of the quota | most tokens in any 60 s at the provider | provider 429s |",
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...summaries.map(
      (s) =>
        `| ${NAMES[s.mode]} | ${LETTERS.map((l) => f2(s.normalised[l] ?? Number.NaN)).join(' | ')} | **${f3(s.jain)}** | **${pct(s.utilisationOfCap)}** | ${pct(s.utilisationOfQuota)} | ${int(s.most60sTokens)} of ${int(QUOTA_TPM)} | ${s.provider429} |`,
    ),
    '',
    `Per round, Jain's index: fair share ${perRound('fair', (r) => f3(r.jain))}; first come, first served ${perRound('fcfs', (r) => f3(r.jain))}. Utilisation: ${perRound('fair', (r) => pct(r.utilisationOfCap))} vs ${perRound('fcfs', (r) => pct(r.utilisationOfCap))}.`,
    '',
    '| deployment | tenant | sent (whole rounds) | admitted (counted time) | fair share (counted time) | gateway refusals by code |',
    '|---|---|---:|---:|---:|---|',
    ...[fair, fcfs].flatMap((s) =>
      LETTERS.map(
        (l) =>
          `| ${NAMES[s.mode]} | ${l} | ${int(s.sent[l] ?? 0)} | ${int(s.admitted[l] ?? 0)} | ${(s.fair[l] ?? 0).toFixed(1)} | ${
            Object.entries(s.refusals[l] ?? {})
              .map(([c, n]) => `${c} ${n}`)
              .join(', ') || '—'
          } |`,
      ),
    ),
    '',
    `Answers neither 200 nor 429 (or failed): fair ${fair.odd}, first come ${fcfs.odd}.`,
    '',
  ];
  const costLines = [
    `## Request-path cost (${cost.rounds} interleaved rounds: ${cost.saturationS} s at saturation, ${CONNECTIONS} connections, then ${cost.singleS} s one request at a time)`,
    '',
    'One node (Redis membership and the demand exchange running, no router), a simulator answering at once, 100 tenants, 200-token prompts;',
    'two deployments with a quota never reached (`tpm` 10⁹), one with `fair_share: true`. Ratios: medians of per-round ratios.',
    '',
    '| deployment | req/s | node CPU µs/request | p50 ms at saturation | one at a time p50 µs | p99 µs | non-2xx |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...MODES.map((k) => `| ${NAMES[k]} | ${int(m[k].rps)} | ${m[k].cpuUs.toFixed(0)} | ${m[k].p50Ms} | ${int(m[k].singleP50Us)} | ${int(m[k].singleP99Us)} | ${cost.series[k].non2xx} |`),
    `| **fair / first come** | **${f3(cost.ratio.rps)}** | **${f3(cost.ratio.cpuUs)}** | | **${f3(cost.ratio.singleP50Us)}** | ${f3(cost.ratio.singleP99Us)} | |`,
    '',
    `Per round req/s: fair ${cost.series.fair.rps.map((x) => x.toFixed(0)).join(', ')}; first come ${cost.series.fcfs.rps.map((x) => x.toFixed(0)).join(', ')}.`,
  ];
  return [...head, ...(COST_ONLY ? [] : fairness), ...costLines].join('\n');
}

async function main(): Promise<void> {
  const began = performance.now();
  const load = loadavg();
  const date = new Date().toISOString();
  const rounds = COST_ONLY ? [] : await runFairness({ group: fairGroup, nodes: NODES, rounds: ROUNDS, runS: RUN_S, log });
  await fairGroup.stopAll();
  log(`request-path cost: ${COST_ROUNDS} rounds...`);
  const cost = await runCost({ group: costGroup, rounds: COST_ROUNDS, saturationS: SATURATION_S, singleS: SINGLE_S, log, env: profiled() });
  await costGroup.stopAll();
  const summaries = MODES.map((mode) => summarise(rounds, mode));
  const totalS = (performance.now() - began) / 1_000;
  const md = markdown(date.slice(0, 10), summaries, rounds, cost, load, totalS);
  const json = {
    date,
    quick: QUICK,
    command: `npm run bench:fair-share${QUICK || COST_ONLY ? ` --${QUICK ? ' --quick' : ''}${COST_ONLY ? ' --cost-only' : ''}` : ''}`,
    machine: { cores: cpus().length, loadAverageAtStart: load },
    settings: { nodes: NODES, rounds: ROUNDS, runSeconds: RUN_S, warmSeconds: WARM_S, quotaTpm: QUOTA_TPM, headroom: HEADROOM, tokensPerRequest: TOKENS, ratesPerS: RATE, dBursts: dBursts(RUN_S), costRounds: COST_ROUNDS, saturationSeconds: SATURATION_S, singleSeconds: SINGLE_S, connections: CONNECTIONS },
    totalSeconds: totalS,
    fairness: { summaries, rounds },
    cost,
  };
  const name = `fair-share${QUICK ? '-quick' : ''}${COST_ONLY ? '-cost' : ''}`;
  writeResults(name, date, json, md);
  writeFileSync(fileURLToPath(new URL(`../results/${name}.json`, import.meta.url)), JSON.stringify(json, null, 2) + '\n');
}

try {
  await main();
} finally {
  await stopAll();
  clearTimeout(watchdog);
}
