/** `npm run bench`: issue 16's targets, each with its value in this run and whether it is met, from the first three phases. */
import { median, pairedDifference, pairedRatio } from '../lib/load.ts';
import { STREAMS, fmt0, fmt1, isPath, times } from './compare-setup.ts';
import type { SetupResult } from './compare-setup.ts';
import type { LatencyResult } from './compare-latency.ts';
import { kibPerStream, kibPerStreamUpper, perEvent, roundsOf } from './compare-streams.ts';
import type { StreamResult } from './compare-streams.ts';

/** One of issue 16's targets: what it asks, its value in this run, and whether it is met (null: not measured here). */
export interface TargetCheck {
  readonly target: string;
  readonly measured: string;
  readonly met: boolean | null;
}

/** Issue 16's targets that `npm run bench` measures, from the three first phases (a skipped phase gives "not run"). */
export function targetChecks(tp: readonly SetupResult[], lat: readonly LatencyResult[], st: readonly StreamResult[]): TargetCheck[] {
  const bare = tp.find((r) => r.mode === 'bare');
  const path = tp.find(isPath);
  const ref = tp.find((r) => r.mode === 'reference');
  const direct = tp.find((r) => r.mode === 'direct');
  const check = (target: string, value: number, show: (x: number) => string, ok: (x: number) => boolean | null, detail = ''): TargetCheck =>
    Number.isFinite(value) ? { target, measured: `${show(value)}${detail}`, met: ok(value) } : { target, measured: 'not run', met: null };
  const latDirect = lat.find((r) => r.mode === 'direct');
  const latPath = lat.find(isPath);
  const sBare = st.find((r) => r.role === 'bare');
  const sPath = st.find((r) => r.role === 'path');
  const sDirect = st.find((r) => r.role === 'direct');
  const us = (xs: number[]): string => (xs.length === 0 ? '' : fmt1(median(xs)));
  const fiveXx = sPath?.rounds.reduce((sum, p) => sum + Object.entries(p.statuses).filter(([code]) => Number(code) >= 500 || code === '0').reduce((a, [, n]) => a + n, 0), 0) ?? NaN;
  return [
    check('Router CPU per request ≤ the bare proxy\'s (router / bare)', pairedRatio(path?.routerCpuUs, bare?.gatewayCpuUs), times, (x) => x <= 1, ` (${us(path?.routerCpuUs ?? [])} vs ${us(bare?.gatewayCpuUs ?? [])} µs)`),
    check('Node CPU per request vs the bare proxy\'s (node / bare; no target: the node\'s is ≥ 0.8× the bare proxy\'s req/s alone, `npm run bench:node`)', pairedRatio(path?.gatewayCpuUs, bare?.gatewayCpuUs), times, () => null, ` (${us(path?.gatewayCpuUs ?? [])} vs ${us(bare?.gatewayCpuUs ?? [])} µs)`),
    check('Path users run (1 node + router) req/s ≥ 1.2× the reference\'s', pairedRatio(path?.rps, ref?.rps), times, (x) => x >= 1.2),
    check('Path users run req/s ≥ 0.33× direct', pairedRatio(path?.rps, direct?.rps), times, (x) => x >= 0.33),
    check('Added latency at one connection, p50 ≤ 0.5 ms', pairedDifference(latPath?.p50Us, latDirect?.p50Us) / 1_000, (x) => `${x.toFixed(2)} ms`, (x) => x <= 0.5),
    check('Added latency at one connection, p99 ≤ 1.5 ms', pairedDifference(latPath?.p99Us, latDirect?.p99Us) / 1_000, (x) => `${x.toFixed(2)} ms`, (x) => x <= 1.5),
    check('Router CPU per streamed event ≤ a bare stream pass-through\'s', pairedRatio(perEvent(sPath, 'router'), perEvent(sBare, 'proxy')), times, (x) => x <= 1, ` (${us(perEvent(sPath, 'router'))} vs ${us(perEvent(sBare, 'proxy'))} µs)`),
    check('Node CPU per streamed event ≤ 1.2× a bare stream pass-through\'s', pairedRatio(perEvent(sPath, 'node'), perEvent(sBare, 'proxy')), times, (x) => x <= 1.2, ` (${us(perEvent(sPath, 'node'))} vs ${us(perEvent(sBare, 'proxy'))} µs)`),
    check(`Streams through router → node: no 5xx (${STREAMS} streams here; the target is at 5,000: \`npm run bench:streams\`)`, fiveXx, (x) => `${fmt0(x)} 5xx or connection errors`, (x) => x === 0),
    check(`Streams: time to headers p99 within 2× direct's (${STREAMS} streams)`, pairedRatio(roundsOf(sPath, (p) => p.headersMs.p99), roundsOf(sDirect, (p) => p.headersMs.p99)), times, (x) => x <= 2),
    check(`RSS per open stream ≤ 32 KB (31.25 KiB), router (slope of RSS over open streams, ${STREAMS} streams)`, median(kibPerStream(sPath, 'router')), (x) => `${fmt1(x)} KiB`, (x) => x <= 31.25, ` (upper bound ${us(kibPerStreamUpper(sPath, 'router'))} KiB)`),
    check(`RSS per open stream ≤ 32 KB (31.25 KiB), node (slope of RSS over open streams, ${STREAMS} streams)`, median(kibPerStream(sPath, 'node')), (x) => `${fmt1(x)} KiB`, (x) => x <= 31.25, ` (upper bound ${us(kibPerStreamUpper(sPath, 'node'))} KiB)`),
  ];
}

/** The targets table that ends summary.md (Markdown lines). */
export function targetsMarkdown(checks: readonly TargetCheck[]): string[] {
  return [
    '### Targets of issue 16 (this run; ratios are medians of the per-round ratios, differences of the per-round differences)',
    '',
    '| target | measured | met |',
    '|---|---|---|',
    ...checks.map((c) => `| ${c.target} | ${c.measured} | ${c.met === null ? '—' : c.met ? 'met' : 'not met'} |`),
    '',
    'Not measured by `npm run bench`: the node alone at ≥ 0.8× the bare proxy\'s req/s (`npm run bench:node`), 5,000 concurrent streams (`npm run bench:streams`), the limiter at ≤ 2 µs per acquire + settle + release at 100k tenants (bench/micro/limiter.ts).',
  ];
}
