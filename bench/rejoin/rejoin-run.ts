/**
 * One run of `npm run bench:rejoin`: Redis membership (heartbeat 1 s, dead_after 3 s, handoff at its
 * defaults), three nodes and a router on a fresh `redis-server`, the simulator shared by the runs,
 * tenants sent their requests at a multiple of their limit through the router (open loop, see
 * `tenant-load.ts`), optionally two busy loops on the machine, then one membership event:
 *
 * - `sigkill`: node-3 SIGKILLed; once the router's ring has dropped it, restarted with the same id,
 *   port and state directory;
 * - `sigterm`: node-3 stopped gracefully (SIGTERM: handoff, leave, exit); once it exited and the
 *   router's ring has dropped it, restarted with the same id, port and state directory;
 * - `new-node`: node-4, never seen before, joins.
 *
 * From the (re)spawn it measures: when the process first answers `/healthz` (listening), its own
 * `/readyz` 200, and the router's `/healthz` `ring` equal to the ring version of the final members
 * (ring member); and, for the tenants the joining node owns in the final ring, the requests sent in
 * `[spawn, spawn + windowS]`. The output of every process is kept in files for the timeline.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { request } from 'undici';
import { createRing, ringVersion } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { startBusyLoops } from '../lib/busy-loops.ts';
import type { BusyLoops } from '../lib/busy-loops.ts';
import { answers200, BENCH_SIGNER, CLI, freePort, waitUntil, writeConfig } from '../lib/cluster-processes.ts';
import type { Child, ProcessGroup } from '../lib/cluster-processes.ts';
import { MODEL, percentile } from '../lib/load.ts';
import { busyShare, captureOutput, cpuTicks, loadAverage1m, mainThreadSched, readLogLines, treeCpu } from '../lib/process-timeline.ts';
import type { LogLine, SchedTimes } from '../lib/process-timeline.ts';
import { arrivalsByUser, fetchArrivals, tokenBucketExcess, worstWindow } from './provider-windows.ts';
import { epochNow, startTenantLoad } from './tenant-load.ts';
import type { LoadTenant, SentRequest } from './tenant-load.ts';

/** The membership event of a run. */
export type Scenario = 'sigkill' | 'sigterm' | 'new-node';

/** Options of {@link runRejoin}. */
export interface RejoinRunOptions {
  readonly scenario: Scenario;
  /** Two busy loops run from before the load starts until the window ends. */
  readonly busy: boolean;
  /** A fresh group for this run's processes (stopped by the caller, also on error). */
  readonly group: ProcessGroup;
  readonly simUrl: string;
  /** Folder of this run's process logs (exists). */
  readonly logDir: string;
  readonly tenants: number;
  /** Requests limit of every tenant: `requests` per `windowS`. */
  readonly limit: { readonly requests: number; readonly windowS: number };
  /** Load per tenant as a multiple of its limit. */
  readonly overLimit: number;
  /** Load before the event, s. */
  readonly warmS: number;
  /** Length of the measured window after the spawn, s. */
  readonly windowS: number;
  /** Where the caller keeps the busy loops so that Ctrl-C stops them too. */
  readonly onBusy?: (loops: BusyLoops | undefined) => void;
  readonly log: (line: string) => void;
}

/** Latency (ms) and status counts of a set of requests. */
export interface LatencySummary {
  readonly requests: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** `"200"`, `"429"`, … (0: connection error or timeout), and `"503 node_starting"` style keys for non-429 errors naming an `x-quotaring-error`. */
  readonly statuses: Record<string, number>;
}

/** The slowest requests of the measured set, for the diagnosis. */
export interface SlowRequest {
  readonly tenant: string;
  /** Sent this long after the spawn, ms. */
  readonly sentAfterSpawnMs: number;
  readonly latencyMs: number;
  readonly status: number;
  readonly error: string | null;
}

/** Admission at the provider, per tenant, over the whole run (see `provider-windows.ts`). */
export interface ProviderWindows {
  /** The requests limit: a token bucket of `limit` refilled over `windowS`. */
  readonly limit: number;
  readonly windowS: number;
  /** The bucket's bound over one window: limit + limit (refill over the window). */
  readonly windowBound: number;
  /** The most arrivals of one tenant in a window of `windowS`: of the joining node's tenants, of all. */
  readonly joinerWorstWindow: number;
  readonly allWorstWindow: number;
  /** The largest excess over the bucket's bound (capacity + refill × d) in any interval: of the joining node's tenants, of all (≤ 0: within). */
  readonly joinerExcess: number;
  readonly allExcess: number;
  /** Tenants with an excess of at least one request: of the joining node's, of all. */
  readonly joinerOver: number;
  readonly allOver: number;
  readonly joinerTenants: number;
  /** The tenant of the largest excess, its interval (ms after the spawn), arrivals and bound there. */
  readonly worst: { readonly tenant: string; readonly fromMs: number; readonly toMs: number; readonly admitted: number; readonly bound: number };
  /** Arrivals the simulator's log dropped (0: complete). */
  readonly evicted: number;
}

/** What {@link runRejoin} measured. */
export interface RejoinRunResult {
  readonly scenario: Scenario;
  readonly busy: boolean;
  readonly joiner: string;
  /** Kill/stop → the router's ring without node-3, ms (undefined for `new-node`). */
  readonly dropMs: number | undefined;
  /** SIGTERM → process exit, ms (`sigterm` only). */
  readonly exitMs: number | undefined;
  /** Spawn → the process answers `/healthz`, ms. */
  readonly listeningMs: number;
  /** Spawn → its `/readyz` 200, ms. */
  readonly readyMs: number;
  /** Spawn → the router's ring is that of the final members, ms. */
  readonly ringMemberMs: number;
  /** The joining process's main thread at ring member: ms on a CPU, ms waiting for one. */
  readonly schedAtRing: SchedTimes;
  /** The same at its `/readyz` 200. */
  readonly schedAtReady: SchedTimes;
  /** Tenants the joining node owns in the final ring. */
  readonly joinerTenants: readonly string[];
  /** Their requests sent in `[spawn, spawn + windowS]`. */
  readonly window: LatencySummary;
  /** Those sent before the router's ring included the joining node, and after. */
  readonly beforeRing: LatencySummary;
  readonly afterRing: LatencySummary;
  /** Requests of the other tenants in the same window. */
  readonly others: LatencySummary;
  /** Largest latency per second of send time after the spawn (joiner's tenants), ms; index = second. */
  readonly maxBySecond: readonly number[];
  readonly slowest: readonly SlowRequest[];
  /** Largest lag of the load generator against its schedule in the window, ms. */
  readonly maxLagMs: number;
  /**
   * The machine's CPU over `[spawn, spawn + windowS]`, as shares of all cores' time (0-1): busy in
   * all; used by this benchmark's processes (cluster, simulator, load generator); by the busy loops;
   * by other processes of the machine (busy − the two, e.g. other people's tests).
   */
  readonly cpu: { readonly busy: number; readonly bench: number; readonly busyLoops: number; readonly outside: number };
  /** The 1-minute load average at the spawn. */
  readonly loadAverage: number;
  /** `node -e "await import(<gateway start module>)"` at the window's end: wall ms to the import done, and CPU ms of that process. */
  readonly importProbe: { readonly wallMs: number; readonly cpuMs: number };
  /** `GET /_quotaring/v1/handoff` of the joining node after the window. */
  readonly joinerHandoff: Record<string, unknown> | null;
  /** Node-side `ms` of the joining node's `request` log lines for its tenants in the window: p99 and max. */
  readonly nodeSideMs: { readonly p99: number; readonly max: number; readonly lines: number };
  /** Router-side `ms` of its `request` lines for the joining node's tenants in the window: p99 and max. */
  readonly routerSideMs: { readonly p99: number; readonly max: number; readonly lines: number };
  /** Undefined when the simulator has no `GET /sim/arrivals`. */
  readonly provider: ProviderWindows | undefined;
  /** Epoch ms of the spawn (the zero of the timeline). */
  readonly spawnAt: number;
  /** Epoch ms of the SIGKILL / SIGTERM (the spawn for `new-node`). */
  readonly eventAt: number;
  /** Log lines of each process (node-3 before the restart is `node-3 (old)`). */
  readonly logs: readonly { readonly name: string; readonly lines: readonly LogLine[] }[];
}

/** Router's ring version from `/healthz` ('' when it does not answer). */
async function routerRing(routerUrl: string): Promise<string> {
  try {
    const res = await request(`${routerUrl}/healthz`, { headersTimeout: 2_000, bodyTimeout: 2_000 });
    return ((await res.body.json()) as { ring?: string }).ring ?? '';
  } catch {
    return '';
  }
}

async function getSigned(url: string): Promise<Record<string, unknown> | null> {
  try {
    const res = await request(url, { headers: BENCH_SIGNER.signInternal('GET', url, {}), headersTimeout: 5_000, bodyTimeout: 5_000 });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return null;
    }
    return (await res.body.json()) as Record<string, unknown>;
  } catch {
    return null;
  }
}

function summarize(rs: readonly SentRequest[]): LatencySummary {
  const ms = rs.map((r) => r.latencyMs);
  const statuses: Record<string, number> = {};
  for (const r of rs) {
    const k = r.status === 200 || r.status === 429 || r.error === null ? String(r.status) : `${r.status} ${r.error}`;
    statuses[k] = (statuses[k] ?? 0) + 1;
  }
  return { requests: rs.length, p50Ms: percentile(ms, 50), p99Ms: percentile(ms, 99), maxMs: percentile(ms, 100), statuses };
}

const execFileP = promisify(execFile);

/** Imports the node's start module in a fresh `node` and reports its wall and CPU time (module loading alone, no config). */
async function importProbe(): Promise<{ wallMs: number; cpuMs: number }> {
  const start = new URL('../../dist/src/gateway/start.js', import.meta.url).href;
  const script = `await import(${JSON.stringify(start)}); const u = process.cpuUsage(); console.log(JSON.stringify({ wallMs: performance.now(), cpuMs: (u.user + u.system) / 1000 }));`;
  try {
    const { stdout } = await execFileP(process.execPath, ['--input-type=module', '-e', script], { timeout: 60_000 });
    return JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as { wallMs: number; cpuMs: number };
  } catch {
    return { wallMs: Number.NaN, cpuMs: Number.NaN };
  }
}

/** Node-side or router-side `ms` of `request` lines for `tenants` logged in `[from, to]`. */
function requestLineMs(lines: readonly LogLine[], tenants: ReadonlySet<string>, from: number, to: number): { p99: number; max: number; lines: number } {
  const ms = lines
    .filter((l) => l.msg === 'request' && l.time >= from && l.time <= to && tenants.has(String(l.fields['tenant'])) && typeof l.fields['ms'] === 'number')
    .map((l) => l.fields['ms'] as number);
  return { p99: percentile(ms, 99), max: percentile(ms, 100), lines: ms.length };
}

/**
 * Runs one scenario; see the module comment. Every process is in `opts.group`; the busy loops are
 * always stopped before it returns or throws.
 * @throws Error when a process does not start, or the router never shows the expected ring.
 */
export async function runRejoin(opts: RejoinRunOptions): Promise<RejoinRunResult> {
  const { group, log, scenario } = opts;
  const tag = `${scenario}${opts.busy ? '-busy' : ''}`;
  const redis = await group.redis(`redis-${tag}`);
  const tenants: LoadTenant[] = Array.from({ length: opts.tenants }, (_, i) => ({ id: `r${i}`, key: `bench-rejoin-key-${i}` }));
  const config = writeConfig({
    server: { log_level: 'info' },
    cluster: { name: `bench-rejoin-${tag}`, redis: { url: redis.url } },
    tenants: tenants.map((t) => ({ id: t.id, keys: [t.key], limits: [{ requests: opts.limit.requests, window: `${opts.limit.windowS}s` }] })),
    models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: opts.simUrl, api_key_env: 'BENCH_SIM_KEY' }],
  });
  const env = { BENCH_SIM_KEY: 'bench-sim-key' };
  const members: Member[] = [];
  for (let n = 1; n <= 4; n++) members.push({ id: `node-${n}`, url: `http://127.0.0.1:${await freePort()}` });
  const m = (i: number): Member => members[i] as Member;
  const logFiles: { name: string; file: string; closed: Promise<void> }[] = [];
  const spawnNode = (member: Member, logName: string): Child => {
    const child = group.spawn(`${tag} ${member.id}`, process.execPath, [CLI, 'node', '--config', config, '--id', member.id, '--port', new URL(member.url).port], env);
    const file = join(opts.logDir, `${logName.replace(/[^a-z0-9-]+/gi, '_')}.log`);
    logFiles.push({ name: logName, file, closed: captureOutput(child, file) });
    return child;
  };
  const waitAnswers = async (child: Child, url: string, timeoutMs: number): Promise<void> => {
    try {
      await waitUntil(`${child.name} at ${url}`, async () => {
        if (child.proc.exitCode !== null) throw new Error(`${child.name} exited with ${child.proc.exitCode}`);
        return answers200(url);
      }, timeoutMs);
    } catch (err) {
      throw new Error(`${(err as Error).message}:\n${child.output().slice(-4_000)}`);
    }
  };

  // The cluster, on an idle machine (the busy loops start after it is up).
  const nodes = [spawnNode(m(0), 'node-1'), spawnNode(m(1), 'node-2'), spawnNode(m(2), scenario === 'new-node' ? 'node-3' : 'node-3 (old)')];
  await Promise.all(nodes.map((c, i) => waitAnswers(c, `${m(i).url}/readyz`, 30_000)));
  const routerUrl = `http://127.0.0.1:${await freePort()}`;
  const router = group.spawn(`${tag} router`, process.execPath, [CLI, 'router', '--config', config, '--port', new URL(routerUrl).port], env);
  const routerFile = join(opts.logDir, 'router.log');
  logFiles.push({ name: 'router', file: routerFile, closed: captureOutput(router, routerFile) });
  await waitAnswers(router, `${routerUrl}/readyz`, 30_000);
  const three = members.slice(0, 3);
  await waitUntil('the router to show node-1..3', async () => (await routerRing(routerUrl)) === ringVersion(three), 20_000);

  const runStart = epochNow();
  let busy: BusyLoops | undefined;
  let load: ReturnType<typeof startTenantLoad> | undefined;
  try {
    if (opts.busy) {
      busy = startBusyLoops(group, 2);
      opts.onBusy?.(busy);
    }
    load = startTenantLoad({ url: routerUrl, tenants, perTenantPerS: (opts.overLimit * opts.limit.requests) / opts.limit.windowS });
    log(`${tag}: cluster up, load on (${opts.tenants} tenants × ${((opts.overLimit * opts.limit.requests) / opts.limit.windowS).toFixed(1)} req/s)${opts.busy ? ', 2 busy loops' : ''}; warming ${opts.warmS} s`);
    await sleep(opts.warmS * 1_000);

    // The event.
    let dropMs: number | undefined;
    let eventAt: number | undefined;
    let exitMs: number | undefined;
    const old = nodes[2] as Child;
    const two = members.slice(0, 2);
    if (scenario !== 'new-node') {
      const exited = new Promise<void>((resolve) => {
        if (old.proc.exitCode !== null || old.proc.signalCode !== null) resolve();
        else old.proc.once('exit', () => resolve());
      });
      const at = performance.now();
      eventAt = epochNow();
      old.proc.kill(scenario === 'sigkill' ? 'SIGKILL' : 'SIGTERM');
      const dropped = waitUntil('the router to drop node-3', async () => (await routerRing(routerUrl)) === ringVersion(two), 30_000, 20).then(() => {
        dropMs = performance.now() - at;
      });
      await exited;
      exitMs = performance.now() - at;
      await dropped;
      log(`${tag}: node-3 ${scenario === 'sigkill' ? 'killed' : 'stopped'}: exited after ${exitMs.toFixed(0)} ms, out of the router's ring after ${(dropMs ?? Number.NaN).toFixed(0)} ms`);
    }

    const joiner = scenario === 'new-node' ? m(3) : m(2);
    const final = scenario === 'new-node' ? members : three;
    const finalVersion = ringVersion(final);
    const ticksBefore = cpuTicks();
    const treeBefore = treeCpu(process.pid, busy?.pids ?? []);
    const loadAverage = loadAverage1m();
    const spawnAt = epochNow();
    const child = spawnNode(joiner, joiner.id);
    let listeningAt: number | undefined;
    let readyAt: number | undefined;
    let ringAt: number | undefined;
    let schedAtReady: SchedTimes = { runMs: Number.NaN, waitMs: Number.NaN };
    let schedAtRing: SchedTimes = { runMs: Number.NaN, waitMs: Number.NaN };
    const deadline = performance.now() + 60_000;
    while (readyAt === undefined || ringAt === undefined) {
      if (child.proc.exitCode !== null) throw new Error(`${joiner.id} exited with ${child.proc.exitCode}:\n${child.output().slice(-4_000)}`);
      if (performance.now() > deadline) throw new Error(`${joiner.id}: not ready or not in the router's ring 60 s after its spawn:\n${child.output().slice(-4_000)}`);
      const [ring, ready, listening] = await Promise.all([
        ringAt === undefined ? routerRing(routerUrl) : Promise.resolve(finalVersion),
        readyAt === undefined ? answers200(`${joiner.url}/readyz`) : Promise.resolve(true),
        listeningAt === undefined ? answers200(`${joiner.url}/healthz`) : Promise.resolve(true),
      ]);
      const now = epochNow();
      if (listeningAt === undefined && listening) listeningAt = now;
      if (readyAt === undefined && ready) {
        readyAt = now;
        schedAtReady = mainThreadSched(child.proc.pid);
      }
      if (ringAt === undefined && ring === finalVersion) {
        ringAt = now;
        schedAtRing = mainThreadSched(child.proc.pid);
      }
      await sleep(20);
    }
    listeningAt ??= readyAt;
    log(`${tag}: ${joiner.id} listening after ${(listeningAt - spawnAt).toFixed(0)} ms, ready after ${(readyAt - spawnAt).toFixed(0)} ms, in the router's ring after ${(ringAt - spawnAt).toFixed(0)} ms`);
    const windowEnd = spawnAt + opts.windowS * 1_000;
    await sleep(Math.max(0, windowEnd - epochNow()));
    const ticksAfter = cpuTicks();
    const treeAfter = treeCpu(process.pid, busy?.pids ?? []);
    // /proc/stat counts ticks of 10 ms (USER_HZ 100) summed over the cores.
    const allMs = (ticksAfter.total - ticksBefore.total) * 10;
    const benchShare = (treeAfter.treeMs - treeBefore.treeMs) / allMs;
    const loopShare = (treeAfter.apartMs - treeBefore.apartMs) / allMs;
    const busyAll = busyShare(ticksBefore, ticksAfter);
    const cpu = { busy: busyAll, bench: benchShare, busyLoops: loopShare, outside: Math.max(0, busyAll - benchShare - loopShare) };
    const probe = await importProbe();
    const sent = await load.stop();
    await busy?.stop();
    opts.onBusy?.(undefined);

    const joinerHandoff = await getSigned(`${joiner.url}/_quotaring/v1/handoff`);
    const arrivals = await fetchArrivals(opts.simUrl, runStart - 1_000);
    await group.stopAll();
    await Promise.all(logFiles.map((f) => f.closed));

    // The measured requests.
    const ring = createRing(final);
    const owned = tenants.filter((t) => ring.owner(t.id)?.id === joiner.id).map((t) => t.id);
    const ownedSet = new Set(owned);
    const inWindow = sent.filter((r) => r.sentAt >= spawnAt && r.sentAt <= windowEnd);
    const mine = inWindow.filter((r) => ownedSet.has((tenants[r.tenant] as LoadTenant).id));
    const others = inWindow.filter((r) => !ownedSet.has((tenants[r.tenant] as LoadTenant).id));
    const maxBySecond: number[] = [];
    for (const r of mine) {
      const s = Math.floor((r.sentAt - spawnAt) / 1_000);
      maxBySecond[s] = Math.max(maxBySecond[s] ?? 0, r.latencyMs);
    }
    const slowest = [...mine]
      .sort((a, b) => b.latencyMs - a.latencyMs)
      .slice(0, 8)
      .map((r) => ({ tenant: (tenants[r.tenant] as LoadTenant).id, sentAfterSpawnMs: r.sentAt - spawnAt, latencyMs: r.latencyMs, status: r.status, error: r.error }));

    const logs = logFiles.map((f) => ({ name: f.name, lines: readLogLines(f.file) }));
    const linesOf = (name: string): LogLine[] => [...(logs.find((l) => l.name === name)?.lines ?? [])];
    let provider: ProviderWindows | undefined;
    if (arrivals !== undefined) {
      const by = arrivalsByUser(arrivals);
      const windowMs = opts.limit.windowS * 1_000;
      const refillPerS = opts.limit.requests / opts.limit.windowS;
      let worst = { tenant: '', excess: -Infinity, a: Number.NaN, b: Number.NaN, admitted: 0, bound: 0 };
      const acc = { joinerWorstWindow: 0, allWorstWindow: 0, joinerExcess: -Infinity, allExcess: -Infinity, joinerOver: 0, allOver: 0 };
      for (const t of tenants) {
        const times = by.get(t.id) ?? [];
        const count = worstWindow(times, windowMs).count;
        const w = tokenBucketExcess(times, opts.limit.requests, refillPerS);
        const mineToo = ownedSet.has(t.id);
        acc.allWorstWindow = Math.max(acc.allWorstWindow, count);
        acc.allExcess = Math.max(acc.allExcess, w.excess);
        if (w.excess >= 1) acc.allOver++;
        if (mineToo) {
          acc.joinerWorstWindow = Math.max(acc.joinerWorstWindow, count);
          acc.joinerExcess = Math.max(acc.joinerExcess, w.excess);
          if (w.excess >= 1) acc.joinerOver++;
        }
        if (w.excess > worst.excess) worst = { tenant: t.id, ...w };
      }
      provider = {
        limit: opts.limit.requests,
        windowS: opts.limit.windowS,
        windowBound: opts.limit.requests + refillPerS * opts.limit.windowS,
        ...acc,
        joinerTenants: owned.length,
        worst: { tenant: worst.tenant, fromMs: worst.a - spawnAt, toMs: worst.b - spawnAt, admitted: worst.admitted, bound: worst.bound },
        evicted: arrivals.evicted,
      };
    }
    return {
      scenario,
      busy: opts.busy,
      joiner: joiner.id,
      dropMs,
      exitMs: scenario === 'sigterm' ? exitMs : undefined,
      listeningMs: listeningAt - spawnAt,
      readyMs: readyAt - spawnAt,
      ringMemberMs: ringAt - spawnAt,
      schedAtRing,
      schedAtReady,
      joinerTenants: owned,
      window: summarize(mine),
      beforeRing: summarize(mine.filter((r) => r.sentAt < (ringAt as number))),
      afterRing: summarize(mine.filter((r) => r.sentAt >= (ringAt as number))),
      others: summarize(others),
      maxBySecond: Array.from({ length: opts.windowS }, (_, s) => maxBySecond[s] ?? Number.NaN),
      slowest,
      maxLagMs: percentile(
        inWindow.map((r) => r.lagMs),
        100,
      ),
      cpu,
      loadAverage,
      importProbe: probe,
      joinerHandoff,
      nodeSideMs: requestLineMs(linesOf(joiner.id), ownedSet, spawnAt, windowEnd + 60_000),
      routerSideMs: requestLineMs(linesOf('router'), ownedSet, spawnAt, windowEnd + 60_000),
      provider,
      spawnAt,
      eventAt: eventAt ?? spawnAt,
      logs,
    };
  } finally {
    await busy?.stop();
    opts.onBusy?.(undefined);
    await load?.stop();
  }
}
