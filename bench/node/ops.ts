/**
 * `node --import tsx bench/node/ops.ts`: what operations cost per request on a node, in µs (medians of
 * 5 runs of 200,000 requests each):
 * - metrics: one admitted decision, one upstream status and one settlement into prom-client
 *   (what every admitted request records; 100 tenants, 1 model, 1 deployment);
 * - a log line: the request's info line through pino to /dev/null (what `log_level: info` adds);
 * - a refused request's record at `log_level: warn`: its decision counted, the line skipped;
 * - a scrape: `GET /metrics` rendering of that registry (per scrape, not per request).
 * Prints one JSON line, then a table.
 */
import { openSync } from 'node:fs';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { NodeMetrics } from '../../src/ops/metrics.ts';
import { NodeActivity, newTrail } from '../../src/ops/node-activity.ts';
import { median } from '../lib/load.ts';

const N = 200_000;
const RUNS = 5;
const TENANTS = Array.from({ length: 100 }, (_, i) => `t${i}`);

/** µs per call of `fn(i)` over N calls. */
function time(fn: (i: number) => void): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < N; i++) fn(i);
  return Number(process.hrtime.bigint() - start) / 1_000 / N;
}

const activity = new NodeActivity(new NodeMetrics(), () => true);
const devNull = pino.destination({ fd: openSync('/dev/null', 'w'), sync: false });
const info = pino({ level: 'info' }, devNull) as unknown as FastifyBaseLogger;
const warn = pino({ level: 'warn' }, devNull) as unknown as FastifyBaseLogger;

/** An admitted, settled request's trail. */
function trail(i: number) {
  const t = newTrail(TENANTS[i % TENANTS.length] as string, 'interactive', 'gpt-4o-mini', 1_200);
  t.result = 'admitted';
  t.deployment = 'sim';
  t.used = 260;
  return t;
}

const results: Record<string, number[]> = { metrics: [], logLine: [], refusedAtWarn: [], scrapeMs: [] };
for (let run = 0; run < RUNS + 1; run++) {
  const metrics = time((i) => {
    const t = trail(i);
    activity.decided(t);
    activity.upstream('sim', 200);
    activity.metrics.settled(t.model, t.reserved, 260);
  });
  const logLine = time((i) => activity.finished({ ...trail(i), result: 'limited' as const, limitKind: 'requests' as const }, 200, 1.5, info));
  const skipped = time((i) => activity.finished({ ...trail(i), result: 'limited' as const, limitKind: 'requests' as const }, 200, 1.5, warn));
  const scrapeStart = performance.now();
  await activity.metrics.registry.metrics();
  const scrape = performance.now() - scrapeStart;
  if (run === 0) continue; // warm-up
  results.metrics?.push(metrics);
  // Both calls count the refused decision; the difference is the line itself.
  results.logLine?.push(logLine - skipped);
  results.refusedAtWarn?.push(skipped);
  results.scrapeMs?.push(scrape);
}
const out = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, Math.round(median(v) * 100) / 100]));
process.stdout.write(`${JSON.stringify(out)}\n`);
process.stdout.write(
  [
    `Operations cost per request (median of ${RUNS} runs × ${N.toLocaleString('en-US')} requests):`,
    `  metrics (decision + upstream + settlement)  ${out.metrics} µs`,
    `  info log line (pino to /dev/null)           ${out.logLine} µs`,
    `  refused request recorded, line skipped      ${out.refusedAtWarn} µs`,
    `  /metrics scrape                             ${out.scrapeMs} ms per scrape`,
  ].join('\n') + '\n',
);
