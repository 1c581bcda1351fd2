/**
 * `npm run bench:rejoin` (issue 25): joins and rejoins under load, on an idle machine and with two
 * busy loops keeping both cores busy, about 4 minutes.
 *
 * Each run (bench/rejoin/rejoin-run.ts) starts Redis, three nodes and a router (Redis membership, heartbeat
 * 1 s, dead_after 3 s, handoff.wait_ms 250 ms: the defaults), sends 60 tenants' requests at 3× their
 * limit (20 requests / 10 s) through the router, then: node-3 SIGKILLed and restarted with its id
 * and port once the router dropped it (`sigkill`); node-3 stopped with SIGTERM and restarted
 * (`sigterm`); a new node-4 joining (`new-node`). It measures the time from the spawn to the
 * node's own /readyz 200 and to "ring member" (the router's /healthz ring = the version of the final
 * members), the latency and statuses of the requests of the tenants the (re)joining node owns in the
 * final ring sent within 15 s of the spawn, and, from the simulator's arrival log, the busiest
 * 10-s window of every tenant at the provider against its limit.
 *
 * Writes bench/results/rejoin/results.{md,json} and prints the Markdown; the processes' logs stay
 * in a temp folder (printed). Environment: REJOIN_SCENARIOS (comma list of sigkill, sigterm,
 * new-node), REJOIN_MODES (idle,busy), REJOIN_TENANTS (60), REJOIN_OVER (3), REJOIN_WARM_S (6),
 * REJOIN_WINDOW_S (15).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import type { BusyLoops } from '../lib/busy-loops.ts';
import { timeline } from '../lib/process-timeline.ts';
import { runRejoin } from './rejoin-run.ts';
import type { LatencySummary, RejoinRunResult, Scenario } from './rejoin-run.ts';

const SCENARIOS = (process.env['REJOIN_SCENARIOS'] ?? 'sigkill,sigterm,new-node').split(',').filter((s) => s !== '') as Scenario[];
const MODES = (process.env['REJOIN_MODES'] ?? 'idle,busy').split(',').filter((s) => s !== '');
const TENANTS = Number(process.env['REJOIN_TENANTS'] ?? 60);
const OVER = Number(process.env['REJOIN_OVER'] ?? 3);
const WARM_S = Number(process.env['REJOIN_WARM_S'] ?? 6);
const WINDOW_S = Number(process.env['REJOIN_WINDOW_S'] ?? 15);
const LIMIT = { requests: 20, windowS: 10 };
/** `cluster.handoff.wait_ms` (the default): the bound the issue sets on a request's wait. */
const WAIT_MS = 250;
/** Log lines left out of the timelines (one per request). */
const SKIP = new Set(['request', 'misdirected; retrying once on the owner']);
/** Most timeline lines shown per run. */
const TIMELINE_LINES = 45;

const log = (line: string): void => void process.stderr.write(`${line}\n`);
const base = new ProcessGroup();
let current: ProcessGroup | undefined;
let busyNow: BusyLoops | undefined;
stopOnSignals(async () => {
  await busyNow?.stop();
  await current?.stopAll();
  await base.stopAll();
});

const ms = (x: number | undefined): string => (x === undefined || Number.isNaN(x) ? '—' : Math.round(x).toLocaleString('en-US'));
const scenarioName: Record<Scenario, string> = {
  sigkill: 'SIGKILL node-3, restart same id',
  sigterm: 'SIGTERM node-3, restart same id',
  'new-node': 'new node-4 joins',
};
const cores = (r: RejoinRunResult): string => (r.busy ? '2 busy loops' : 'idle');
const statuses = (s: LatencySummary): string =>
  Object.entries(s.statuses)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k}: ${n}`)
    .join(', ');
const pct = (x: number): string => (Number.isFinite(x) ? `${Math.round(x * 100)}%` : '—');
const signed = (x: number): string => (Number.isFinite(x) ? `${x > 0 ? '+' : ''}${Math.round(x * 10) / 10}` : '—');
const briefLatency = (s: LatencySummary): string => (s.requests === 0 ? '0' : `${s.requests}: p99 ${ms(s.p99Ms)} / max ${ms(s.maxMs)}`);

/** ms after the spawn of the joiner's first log line with `msg` (a prefix), or of the last line of `msg` by another process naming the final ring. */
function milestones(r: RejoinRunResult): string {
  const own = r.logs.find((l) => l.name === r.joiner)?.lines ?? [];
  const first = (prefix: string): number | undefined => own.find((l) => l.msg.startsWith(prefix))?.time;
  const finalRing = own.find((l) => l.msg === 'ring changed')?.fields['ring'];
  const handedOff = r.logs
    .filter((l) => l.name !== r.joiner && l.name !== 'router' && !l.name.endsWith('(old)'))
    .flatMap((l) => l.lines.filter((x) => x.msg === 'handed off' && x.fields['ring'] === finalRing && x.time >= r.spawnAt).map((x) => x.time));
  const rel = (t: number | undefined): string => (t === undefined ? '—' : ms(t - r.spawnAt));
  return `${rel(first('Server listening'))} / ${rel(first('ring changed'))} / ${rel(handedOff.length === 0 ? undefined : Math.max(...handedOff))}`;
}

function markdown(runs: readonly RejoinRunResult[], date: string, logDir: string): string {
  const lines = [
    `# Joins and rejoins under load (\`npm run bench:rejoin\`, ${date})`,
    '',
    `${TENANTS} tenants at ${OVER}× their limit of ${LIMIT.requests} requests / ${LIMIT.windowS} s (${((OVER * LIMIT.requests) / LIMIT.windowS).toFixed(0)} req/s each, ${((TENANTS * OVER * LIMIT.requests) / LIMIT.windowS).toFixed(0)} req/s in all, open loop, non-streaming 8-token completions) through one router to 3 nodes; Redis membership, heartbeat 1 s, dead_after 3 s, handoff.wait_ms ${WAIT_MS} ms. ${cpus().length} cores; "2 busy loops" = two \`sh -c 'while :; do :; done'\` started before the load and killed after the window. Latencies and statuses are those of the requests of the tenants the (re)joining node owns in the final ring, sent within ${WINDOW_S} s of its spawn. Ring member = the router's \`/healthz\` ring equals the version of the final members. Provider (the simulator's arrival log, whole run): requests limits are token buckets by default (capacity ${LIMIT.requests}, refilled ${LIMIT.requests / LIMIT.windowS}/s), so a ${LIMIT.windowS}-s window may hold ${LIMIT.requests * 2}; the excess is the most arrivals of one tenant over capacity + refill × d in any interval of length d (test/helpers/bounds.ts worstInterval; ≤ 0: within the bound, + n: n requests too many).`,
    '',
    '| scenario | cores | kill/stop → out of router ring ms | spawn → listening ms | spawn → /readyz 200 ms | spawn → ring member ms | requests | p50 ms | p99 ms | max ms | statuses | provider: most in a 10-s window, joiner\'s tenants / all | provider: largest excess over the bucket bound, joiner\'s / all |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs) {
    const p = r.provider;
    const prov =
      p === undefined
        ? 'no /sim/arrivals'
        : `${p.joinerWorstWindow} / ${p.allWorstWindow} (≤ ${p.windowBound}) | ${signed(p.joinerExcess)} / ${signed(p.allExcess)} (${p.joinerOver} / ${p.allOver} tenants ≥ +1)${p.evicted > 0 ? `, ${p.evicted} evicted` : ''}`;
    lines.push(
      `| ${scenarioName[r.scenario]} | ${cores(r)} | ${ms(r.dropMs)} | ${ms(r.listeningMs)} | ${ms(r.readyMs)} | ${ms(r.ringMemberMs)} | ${r.window.requests} | ${ms(r.window.p50Ms)} | ${ms(r.window.p99Ms)} | ${ms(r.window.maxMs)} | ${statuses(r.window)} | ${prov} |`,
    );
  }
  const worstP99 = Math.max(...runs.filter((r) => r.busy).map((r) => r.window.p99Ms));
  lines.push(
    '',
    runs.some((r) => r.busy)
      ? `Target: no request of a (re)joining node's tenants waits more than handoff.wait_ms (${WAIT_MS} ms). Worst p99 with both cores busy: **${ms(worstP99)} ms** (${worstP99 <= WAIT_MS ? 'met' : 'not met'}).`
      : '',
    '',
    '## Where the time goes',
    '',
    '| scenario | cores | joiner\'s log, ms after spawn: fastify listening / first ring read (ring changed) / last old owner handed off | joiner main thread, spawn → ring member: on CPU / waiting for a CPU ms | module import alone (fresh node): wall / CPU ms | sent before ring member: n: p99 / max ms | after: n: p99 / max ms | node-side max ms | router-side max ms | other tenants p99 / max ms | load generator max lag ms | CPU of both cores: busy (this bench / busy loops / other processes) | load avg | joiner handoff stats |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of runs) {
    const st = (r.joinerHandoff?.['stats'] ?? {}) as Record<string, number>;
    const hs = r.joinerHandoff === null ? '—' : `claimed ${String(r.joinerHandoff['claimed'])}, loaded ${st['loaded']}, prefetched ${st['prefetched']}, waited ${st['waited']}, timedOut ${st['timedOut']}, lateMerged ${st['lateMerged']}`;
    lines.push(
      `| ${scenarioName[r.scenario]} | ${cores(r)} | ${milestones(r)} | ${ms(r.schedAtRing.runMs)} / ${ms(r.schedAtRing.waitMs)} | ${ms(r.importProbe.wallMs)} / ${ms(r.importProbe.cpuMs)} | ${briefLatency(r.beforeRing)} | ${briefLatency(r.afterRing)} | ${ms(r.nodeSideMs.max)} | ${ms(r.routerSideMs.max)} | ${ms(r.others.p99Ms)} / ${ms(r.others.maxMs)} | ${ms(r.maxLagMs)} | ${pct(r.cpu.busy)} (${pct(r.cpu.bench)} / ${pct(r.cpu.busyLoops)} / ${pct(r.cpu.outside)}) | ${r.loadAverage.toFixed(2)} | ${hs} |`,
    );
  }
  lines.push('', 'Largest latency (ms) of the joiner\'s tenants by second of send time after the spawn:', '');
  for (const r of runs) lines.push(`- ${scenarioName[r.scenario]}, ${cores(r)}: ${r.maxBySecond.map((x) => ms(x)).join(' · ')}`);
  lines.push('', '## Timelines', '', `Log lines of every process (JSON, \`log_level: info\`; per-request lines left out), ms relative to the spawn of the (re)joining node. Full logs of this run: \`${logDir}\` (not kept).`);
  for (const r of runs) {
    const from = Math.min(r.eventAt, r.spawnAt) - 300;
    const tl = timeline(r.logs, r.spawnAt, from, r.spawnAt + WINDOW_S * 1_000, SKIP);
    const p = r.provider;
    const worst = p === undefined ? '' : ` Provider: largest excess ${signed(p.worst.admitted - p.worst.bound)} for ${p.worst.tenant}, ${p.worst.admitted} arrivals in [${ms(p.worst.fromMs)}, ${ms(p.worst.toMs)}] ms after the spawn (bound ${Math.round(p.worst.bound * 10) / 10}).`;
    lines.push('', `### ${scenarioName[r.scenario]}, ${cores(r)}`, '', `Slowest requests: ${r.slowest.map((s) => `${s.tenant} sent +${ms(s.sentAfterSpawnMs)} ms: ${ms(s.latencyMs)} ms ${s.status}${s.error === null ? '' : ` ${s.error}`}`).join('; ')}.${worst}`, '', '```');
    lines.push(...tl.slice(0, TIMELINE_LINES));
    if (tl.length > TIMELINE_LINES) lines.push(`... ${tl.length - TIMELINE_LINES} more lines`);
    lines.push('```');
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const date = new Date().toISOString();
  const logRoot = mkdtempSync(join(tmpdir(), 'quotaring-rejoin-'));
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await base.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  log(`rejoin: simulator up; logs in ${logRoot}`);
  const runs: RejoinRunResult[] = [];
  const started = performance.now();
  for (const scenario of SCENARIOS) {
    for (const mode of MODES) {
      const group = new ProcessGroup();
      current = group;
      const logDir = join(logRoot, `${scenario}-${mode}`);
      mkdirSync(logDir, { recursive: true });
      try {
        runs.push(
          await runRejoin({
            scenario,
            busy: mode === 'busy',
            group,
            simUrl,
            logDir,
            tenants: TENANTS,
            limit: LIMIT,
            overLimit: OVER,
            warmS: WARM_S,
            windowS: WINDOW_S,
            onBusy: (loops) => {
              busyNow = loops;
            },
            log,
          }),
        );
      } finally {
        await busyNow?.stop();
        await group.stopAll();
        current = undefined;
      }
    }
  }
  log(`rejoin: ${runs.length} runs in ${((performance.now() - started) / 1_000).toFixed(0)} s`);
  const md = markdown(runs, date, logRoot);
  const dir = fileURLToPath(new URL('../results/rejoin/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}results.md`, `${md}\n`);
  writeFileSync(`${dir}results.json`, `${JSON.stringify({ date, tenants: TENANTS, over: OVER, limit: LIMIT, windowS: WINDOW_S, runs: runs.map(({ logs: _logs, ...r }) => r) }, null, 2)}\n`);
  process.stdout.write(`${md}\n`);
}

main()
  .catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await busyNow?.stop();
    await current?.stopAll();
    await base.stopAll();
  });
