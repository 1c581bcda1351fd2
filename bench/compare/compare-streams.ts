/** `npm run bench`, phase 3: concurrent streams against direct, a bare pass-through and router → node, and its Markdown. */
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort } from '../lib/cluster-processes.ts';
import type { Child } from '../lib/cluster-processes.ts';
import { median, pairedDifference } from '../lib/load.ts';
import { measureStreams, streamAgent, warmStreams } from '../lib/stream-load.ts';
import type { StreamPass } from '../lib/stream-load.ts';
import { rssByRole, startBareProxy } from '../lib/targets.ts';
import type { Target } from '../lib/targets.ts';
import { ROUNDS, STREAMS, STREAM_RAMP_S, STREAM_TOKENS, STREAM_TPS, STREAM_WARM_RAMP_S, fmt0, fmt1, groups, keys, log, signed, simEnv, unlimitedConfig } from './compare-setup.ts';

/** Which streams target: the simulator, the bare pass-through, or router → node. */
export type StreamRole = 'direct' | 'bare' | 'path';

/**
 * One streams target's figures: RSS of its processes before its first stream, every measured pass
 * (one a round) and, for each, the lowest RSS of each process from the phase's start to the pass's end.
 */
export interface StreamResult {
  readonly target: string;
  readonly role: StreamRole;
  readonly idleRssKiB: Record<string, number>;
  readonly rounds: StreamPass[];
  readonly floorRssKiB: Record<string, number>[];
}

/** The streams phase: its own streaming simulator, the bare pass-through and a 1-node cluster in front of it. */
export async function streams(): Promise<StreamResult[]> {
  const group = groups.streams;
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await group.cli('simulator-streams', ['simulate', '--port', String(simPort), '--ttft-ms', '0', '--tps', String(STREAM_TPS)], `${simUrl}/sim/stats`);
  const bare = await startBareProxy(group, 'bare-streams', simUrl, 'stream');
  // The deployment's pool left at its default (no bound): what users run.
  const cluster = await startBenchCluster(group, { tag: 'streams', nodes: 1, mode: 'sharded', config: unlimitedConfig(simUrl), env: simEnv });
  const targets: (Target & { role: StreamRole })[] = [
    { name: 'simulator direct', role: 'direct', url: simUrl, procs: {} },
    { name: 'bare stream pass-through', role: 'bare', url: bare.url, procs: { proxy: bare.child } },
    { name: '1 node + router', role: 'path', url: cluster.url, procs: { router: cluster.router, node: cluster.nodeChildren[0] as Child } },
  ];
  const results = targets.map((t): StreamResult => ({ target: t.name, role: t.role, idleRssKiB: rssByRole(t.procs), rounds: [], floorRssKiB: [] }));
  // A freshly started router or node holds start-up garbage (tens of MiB) that only the first load
  // lets V8 release, so its RSS before its first stream can exceed its peak with a few hundred open:
  // the base of "KiB per open stream" is the lowest RSS seen so far, sampled every 100 ms.
  const floors = results.map((r) => ({ ...r.idleRssKiB }));
  const sampleFloors = (): void => {
    for (const [i, t] of targets.entries()) {
      const floor = floors[i] as Record<string, number>;
      for (const [role, kib] of Object.entries(rssByRole(t.procs))) floor[role] = Math.min(floor[role] ?? Infinity, kib);
    }
  };
  const floorTimer = setInterval(sampleFloors, 100);
  const agents = targets.map(() => streamAgent(STREAMS));
  const load = { keys, streams: STREAMS, tokens: STREAM_TOKENS, rampS: STREAM_RAMP_S };
  log(`streams: ${targets.length} targets; ${ROUNDS} rounds of ${STREAMS} streams of ${STREAM_TOKENS} tokens at ${STREAM_TPS} tokens/s over a ${STREAM_RAMP_S} s ramp, each after a warm-up pass`);
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < targets.length; k++) {
        const i = (k + round) % targets.length;
        const t = targets[i] as (typeof targets)[number];
        const agent = agents[i] as (typeof agents)[number];
        const warmBad = await warmStreams(agent, { url: t.url, keys, streams: STREAMS, rampS: STREAM_WARM_RAMP_S }, STREAM_TPS);
        const pass = await measureStreams(agent, t, load);
        sampleFloors();
        (results[i] as StreamResult).rounds.push(pass);
        (results[i] as StreamResult).floorRssKiB.push({ ...floors[i] });
        const perEvent = Object.entries(pass.cpuSeconds).map(([role, cpu]) => `${role} ${((cpu * 1e6) / Math.max(1, pass.events)).toFixed(1)}`).join(', ');
        log(`streams round ${round + 1}/${ROUNDS} ${t.name.padEnd(26)} ${JSON.stringify(pass.statuses)} complete ${pass.complete}/${pass.streams} (warm-up: ${warmBad} not 200), headers p50 ${pass.headersMs.p50.toFixed(1)} p99 ${pass.headersMs.p99.toFixed(1)} ms, gap p50 ${pass.gapMs.p50.toFixed(1)} p99 ${pass.gapMs.p99.toFixed(1)} ms, CPU µs/event ${perEvent}${pass.errors.length > 0 ? `, errors: ${pass.errors.join(' | ')}` : ''}`);
      }
    }
  } finally {
    clearInterval(floorTimer);
    await Promise.all(agents.map((a) => a.destroy()));
    await group.stopAll();
  }
  return results;
}

/** Per-round figures of a streams target: CPU µs per event and KiB per open stream of `role`. */
export const perEvent = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p) => ((p.cpuSeconds[role] ?? NaN) * 1e6) / p.events) ?? [];
/** KiB per open stream: the slope of RSS over open streams during the ramp (see `StreamPass.rssSlopeKiB`). */
export const kibPerStream = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p) => p.rssSlopeKiB[role] ?? NaN) ?? [];
/** An upper bound of it: (peak RSS − the lowest RSS since the phase began) / streams, which also counts the process's fixed growth under load. */
export const kibPerStreamUpper = (r: StreamResult | undefined, role: string): number[] => r?.rounds.map((p, i) => ((p.rssPeakKiB[role] ?? NaN) - (r.floorRssKiB[i]?.[role] ?? NaN)) / p.streams) ?? [];
/** `f` of each measured pass of `r`, one entry a round ([] without `r`). */
export const roundsOf = (r: StreamResult | undefined, f: (p: StreamPass) => number): number[] => r?.rounds.map(f) ?? [];

/** The streams section of summary.md (Markdown lines). */
export function streamsMarkdown(results: readonly StreamResult[]): string[] {
  const direct = results.find((r) => r.role === 'direct');
  const lines = [
    `### Streams — ${STREAMS} concurrent streams of ${STREAM_TOKENS} tokens at ${STREAM_TPS} tokens/s, opened over ${STREAM_RAMP_S} s; ${ROUNDS} interleaved rounds (medians), each pass after an unmeasured one that opens the connections`,
    '',
    'CPU per event: CPU of the process during the pass / SSE events the client received. KiB per open stream: the least-squares slope of the process\'s RSS (sampled every 100 ms) over the number of streams open, during the ramp up to the peak: what one more open stream costs, while what the process grows by under any load (its young generation, compiled code) falls into the intercept; in brackets the upper bound (peak RSS during the pass − the lowest RSS of the process from the phase\'s start to the pass\'s end) / streams. Added gap: median over rounds of (gap through the target − direct\'s), the gap being the time between consecutive events of a stream (0 for events that arrive in one chunk).',
    '',
    '| target | statuses (all rounds) | complete | events/s | time to headers p50 / p99 ms | gap p50 / p99 ms | added gap p50 / p99 ms | proxy CPU µs / event | router CPU µs / event | node CPU µs / event | proxy KiB / stream | router KiB / stream | node KiB / stream |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const statuses: Record<string, number> = {};
    for (const p of r.rounds) for (const [st, n] of Object.entries(p.statuses)) statuses[st] = (statuses[st] ?? 0) + n;
    const complete = r.rounds.reduce((sum, p) => sum + p.complete, 0);
    const total = r.rounds.reduce((sum, p) => sum + p.streams, 0);
    const gap = (f: (p: StreamPass) => number): number => median(roundsOf(r, f));
    const added = r === direct ? '—' : [(p: StreamPass): number => p.gapMs.p50, (p: StreamPass): number => p.gapMs.p99].map((f) => signed(pairedDifference(roundsOf(r, f), roundsOf(direct, f)))).join(' / ');
    const cell = (xs: number[]): string => (xs.length === 0 ? '—' : fmt1(median(xs)));
    const roles = ['proxy', 'router', 'node'];
    lines.push(
      `| ${r.target} | ${Object.entries(statuses).map(([st, n]) => `${n} × ${st}`).join(', ')} | ${complete} / ${total} | ${fmt0(median(roundsOf(r, (p) => p.events / p.seconds)))} | ${fmt1(gap((p) => p.headersMs.p50))} / ${fmt1(gap((p) => p.headersMs.p99))} | ${fmt1(gap((p) => p.gapMs.p50))} / ${fmt1(gap((p) => p.gapMs.p99))} | ${added} | ${roles.map((role) => (role in r.idleRssKiB ? cell(perEvent(r, role)) : '—')).join(' | ')} | ${roles.map((role) => (role in r.idleRssKiB ? `${cell(kibPerStream(r, role))} (${cell(kibPerStreamUpper(r, role))})` : '—')).join(' | ')} |`,
    );
  }
  return lines;
}
