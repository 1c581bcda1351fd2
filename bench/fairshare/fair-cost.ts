/**
 * The request-path half of `npm run bench:fair-share`: what fair share costs a node per request.
 *
 * One node (its own Redis, membership and the demand exchange running; no router: the load goes to
 * the node) in front of a simulator answering at once, two deployments that differ only in
 * `fair_share` (`cost-fair`: `true`; `cost-fcfs`: off), each with a quota far above the load
 * (`tpm` 10⁹, token bucket), so no request is refused and the cost is the share's bookkeeping and
 * its check, not refusals. 100 tenants, 200-token prompts (estimated), 16 tokens out.
 *
 * Per round, for each deployment in turn (the order alternating round by round): req/s at
 * saturation (autocannon, `CONNECTIONS` connections) with the node's CPU µs per request
 * (/proc/<pid>/stat), then the latency of one request at a time over one connection (µs, p50 and
 * p99). Ratios fair / fcfs are medians of the per-round ratios (drift between rounds cancels).
 * With `env` holding a CPU profiler's preload, the node writes one profile of both deployments'
 * load: what the fair-shared one adds is the self time of `src/fairshare/` and its callers there.
 */
import { chatBody, median, pairedRatio, runAutocannon, runClosedLoop } from '../lib/load.ts';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort, processCpuSeconds } from '../lib/cluster-processes.ts';
import type { ProcessGroup } from '../lib/cluster-processes.ts';
import { MODES } from './fair-load.ts';
import type { Mode } from './fair-load.ts';

const TENANTS = 100;
export const CONNECTIONS = 64;
/** A quota no load here comes near, tokens a minute. */
const QUOTA_TPM = 1_000_000_000;

/** Figures of one deployment, one value per round. */
export interface CostSeries {
  readonly mode: Mode;
  readonly rps: number[];
  /** The node's CPU time per request served, µs. */
  readonly cpuUs: number[];
  /** autocannon's p50 at saturation, ms (whole ms). */
  readonly p50Ms: number[];
  /** One request at a time over one connection, µs. */
  readonly singleP50Us: number[];
  readonly singleP99Us: number[];
  /** Answers other than 2xx, and errors, summed over rounds. */
  non2xx: number;
}

/** The result: each mode's series and medians, and the fair / fcfs ratios (medians of per-round ratios). */
export interface CostResult {
  readonly rounds: number;
  readonly saturationS: number;
  readonly singleS: number;
  readonly series: Readonly<Record<Mode, CostSeries>>;
  readonly medians: Readonly<Record<Mode, { rps: number; cpuUs: number; p50Ms: number; singleP50Us: number; singleP99Us: number }>>;
  readonly ratio: { rps: number; cpuUs: number; singleP50Us: number; singleP99Us: number };
}

/** Options of {@link runCost}. */
export interface CostOptions {
  readonly group: ProcessGroup;
  readonly rounds: number;
  /** Seconds of each saturation run. */
  readonly saturationS: number;
  /** Seconds of each one-connection run. */
  readonly singleS: number;
  readonly log: (line: string) => void;
  /** Extra environment of the node (a CPU profiler's, `BENCH_PROFILE`). */
  readonly env?: Readonly<Record<string, string>>;
}

/** Starts the simulator and the node in `group`, runs the interleaved rounds; the processes are left to the caller's group. */
export async function runCost(o: CostOptions): Promise<CostResult> {
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await o.group.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  const keys = Array.from({ length: TENANTS }, (_, i) => `bench-fair-cost-key-${i}`);
  const cluster = await startBenchCluster(o.group, {
    tag: 'fair-cost',
    nodes: 1,
    mode: 'sharded',
    env: { SIM_KEY_COST: 'sim-key-cost', ...o.env },
    config: {
      tenants: keys.map((key, i) => ({ id: `t${i}`, keys: [key], limits: [] })),
      models: MODES.map((m) => ({ name: `m-cost-${m}`, encoding: 'o200k_base', estimator: 'estimate', deployments: [`cost-${m}`] })),
      deployments: MODES.map((m) => ({
        name: `cost-${m}`,
        provider: 'openai',
        base_url: simUrl,
        api_key_env: 'SIM_KEY_COST',
        quota: { tpm: QUOTA_TPM },
        ...(m === 'fair' ? { fair_share: true } : {}),
      })),
    },
  });
  const node = cluster.nodeChildren[0];
  if (node === undefined) throw new Error('the cost cluster has no node');
  const url = cluster.nodeUrls[0] as string;
  const base = JSON.parse(chatBody(200)) as Record<string, unknown>;
  const body = (m: Mode): string => JSON.stringify({ ...base, model: `m-cost-${m}` });
  const empty = (mode: Mode): CostSeries => ({ mode, rps: [], cpuUs: [], p50Ms: [], singleP50Us: [], singleP99Us: [], non2xx: 0 });
  const series: Record<Mode, CostSeries> = { fair: empty('fair'), fcfs: empty('fcfs') };
  // Warm-up (JIT, pools, the first leases and exchanges), not measured: as long as a measured run
  // (with 2 s, the first measured run, always the fair-shared one, was the slowest in two runs of three).
  for (const m of MODES) await runAutocannon({ url, bodies: [body(m)], keys, connections: CONNECTIONS, durationS: o.saturationS });
  for (let round = 0; round < o.rounds; round++) {
    const order = round % 2 === 0 ? MODES : [...MODES].reverse();
    for (const m of order) {
      const s = series[m];
      const cpu0 = processCpuSeconds(node.proc.pid);
      const r = await runAutocannon({ url, bodies: [body(m)], keys, connections: CONNECTIONS, durationS: o.saturationS, firstKey: round * 7 });
      const cpuUs = ((processCpuSeconds(node.proc.pid) - cpu0) * 1e6) / Math.max(1, r.requests.total);
      const single = await runClosedLoop({ url, body: body(m), keys, durationS: o.singleS });
      s.rps.push(r.requests.average);
      s.cpuUs.push(cpuUs);
      s.p50Ms.push(r.latency.p50);
      s.singleP50Us.push(single.latencyUs.p50);
      s.singleP99Us.push(single.latencyUs.p99);
      s.non2xx += r.non2xx + r.errors + single.failures;
      o.log(`  cost round ${round + 1}/${o.rounds} ${m}: ${r.requests.average.toFixed(0)} req/s, ${cpuUs.toFixed(0)} µs CPU/request, p50 ${r.latency.p50} ms; one at a time p50 ${single.latencyUs.p50} µs p99 ${single.latencyUs.p99} µs; non-2xx ${r.non2xx + r.errors + single.failures}`);
    }
  }
  const medians = Object.fromEntries(
    MODES.map((m) => {
      const s = series[m];
      return [m, { rps: median(s.rps), cpuUs: median(s.cpuUs), p50Ms: median(s.p50Ms), singleP50Us: median(s.singleP50Us), singleP99Us: median(s.singleP99Us) }];
    }),
  ) as CostResult['medians'];
  const f = series.fair;
  const c = series.fcfs;
  return {
    rounds: o.rounds,
    saturationS: o.saturationS,
    singleS: o.singleS,
    series,
    medians,
    ratio: { rps: pairedRatio(f.rps, c.rps), cpuUs: pairedRatio(f.cpuUs, c.cpuUs), singleP50Us: pairedRatio(f.singleP50Us, c.singleP50Us), singleP99Us: pairedRatio(f.singleP99Us, c.singleP99Us) },
  };
}
