/** `npm run bench`, phase 2: added latency at one connection (closed loop, µs), and its Markdown. */
import { chatBody, median, pairedDifference, runClosedLoop } from '../lib/load.ts';
import { LATENCY_S, PROMPT_TOKENS, REWARM_S, ROUNDS, TENANTS, fmt0, isPath, keys, log, ms, signedMs } from './compare-setup.ts';
import type { Setup, SetupMode } from './compare-setup.ts';

/** Figures of one setup in the latency phase, one entry a round (latencies in µs). */
export interface LatencyResult {
  readonly setup: string;
  readonly mode: SetupMode;
  readonly nodes: number;
  readonly rps: number[];
  readonly p50Us: number[];
  readonly p99Us: number[];
  readonly p999Us: number[];
  failures: number;
}

/** One connection, one request at a time: direct, the reference and 1 node + router (sharded), interleaved over the rounds. */
export async function latency(setups: readonly Setup[]): Promise<LatencyResult[]> {
  const list = setups.filter((s) => s.mode === 'direct' || s.mode === 'reference' || isPath(s));
  const body = chatBody(PROMPT_TOKENS);
  log(`latency: ${list.length} setups, 1 connection; warm-up until every tenant was sent 2 requests, then ${ROUNDS} rounds × ${LATENCY_S} s`);
  for (const s of list) {
    let sent = 0;
    while (sent < 2 * TENANTS) {
      const r = await runClosedLoop({ url: s.url, body, keys, durationS: 1, firstKey: sent });
      sent += r.requests + r.failures;
    }
  }
  const results = list.map((s): LatencyResult => ({ setup: s.name, mode: s.mode, nodes: s.nodes, rps: [], p50Us: [], p99Us: [], p999Us: [], failures: 0 }));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, s] of list.entries()) {
      await runClosedLoop({ url: s.url, body, keys, durationS: REWARM_S });
      const r = await runClosedLoop({ url: s.url, body, keys, durationS: LATENCY_S });
      const row = results[i] as LatencyResult;
      row.rps.push(r.requests / r.seconds);
      row.p50Us.push(r.latencyUs.p50);
      row.p99Us.push(r.latencyUs.p99);
      row.p999Us.push(r.latencyUs.p999);
      row.failures += r.failures;
      log(`latency round ${round + 1}/${ROUNDS} ${s.name.padEnd(34)} ${(r.requests / r.seconds).toFixed(0)} req/s p50 ${r.latencyUs.p50} µs p99 ${r.latencyUs.p99} µs p99.9 ${r.latencyUs.p999} µs failures ${r.failures}`);
    }
  }
  return results;
}

/** The latency section of summary.md (Markdown lines; ms from µs). */
export function latencyMarkdown(results: readonly LatencyResult[]): string[] {
  const direct = results.find((r) => r.mode === 'direct');
  const lines = [
    `### Added latency at one connection — ${ROUNDS} rounds × ${LATENCY_S} s interleaved, one request at a time (closed loop, undici), latencies in µs (HDR histogram); added = median over rounds of (setup − direct)`,
    '',
    '| setup | req/s | p50 / p99 / p99.9 ms | added p50 / p99 / p99.9 ms | non-2xx + errors |',
    '|---|---|---|---|---|',
  ];
  for (const r of results) {
    const added = r === direct ? '—' : [pairedDifference(r.p50Us, direct?.p50Us), pairedDifference(r.p99Us, direct?.p99Us), pairedDifference(r.p999Us, direct?.p999Us)].map(signedMs).join(' / ');
    lines.push(`| ${r.setup} | ${fmt0(median(r.rps))} | ${ms(median(r.p50Us))} / ${ms(median(r.p99Us))} / ${ms(median(r.p999Us))} | ${added} | ${r.failures} |`);
  }
  return lines;
}
