/**
 * `npm run bench:catalogue`: the tenant catalogue at a million tenants (issue 24's targets), in one
 * bounded run against a real PostgreSQL (test/helpers/postgres.ts) and real processes.
 *
 * 1. Seed: CATALOGUE_TENANTS tenants on 3 plans, one issued key each, straight into the store's
 *    tables (`INSERT … SELECT FROM generate_series`, hashes in SQL: bench/catalogue/catalogue-seed.ts), and a
 *    100-tenant catalogue in another schema as the baseline; 1,000 keys of the big one kept in the clear.
 * 2. Start: per catalogue, one node (`node-1` of a static 2-member cluster whose `node-2` never
 *    runs: it owns about half the tenants) and one router, started one at a time. Time from spawn
 *    to `/readyz` 200; VmRSS after ready + CATALOGUE_SETTLE_S (no request served yet), minus the
 *    same process's with the 100-tenant catalogue, per tenant (node) and per key (router). Then, as
 *    diagnostics, the same after a full GC forced through the inspector (bench/catalogue/catalogue-inspect.ts:
 *    children start with `--inspect-port=0`, which opens nothing until SIGUSR1).
 * 3. Propagation: CATALOGUE_CHANGES tenants created with a key through the big router's admin API
 *    (tenants node-1 owns), one at a time; per change, time from the write sent until the new key
 *    answers 200 through the router, directly at the node, and until the node's admin API shows the
 *    version; the CPU the router and node used meanwhile, the local copies they rewrote, and how
 *    long they stay busy after the last change (waited for, ≤ 60 s, before the throughput rounds).
 * 4. Unknown keys (run before 3, before any write, so PostgreSQL's counters see only the followers' reads):
 *    autocannon against the big router for CATALOGUE_FLOOD_S with random keys (random `qr_` ids,
 *    real ids with a wrong secret, keys of another form): every answer 401, and PostgreSQL's
 *    counters (commits in this database, scans of the `rows` table) beside their rate in an idle
 *    window just before, each window padded for the statistics' reporting delay (≤ 10 s).
 * 5. Throughput: router → node → simulator (answering at once), big vs 100-tenant catalogue,
 *    interleaved rounds (order rotating), the same number of keys of tenants node-1 owns; the
 *    median of the per-round ratios.
 *
 * Writes bench/results/catalogue/results.{json,md} (results-<n>[-profiled].{json,md} for another tenant count or a profiled run)
 * and prints the Markdown. Every child and PostgreSQL are stopped on exit, on error, on Ctrl-C and
 * after CATALOGUE_DEADLINE_S.
 * Environment: CATALOGUE_TENANTS (1,000,000), CATALOGUE_BASELINE_TENANTS (100), CATALOGUE_SAMPLE
 * (1,000), CATALOGUE_SETTLE_S (3), CATALOGUE_CHANGES (200), CATALOGUE_FLOOD_S (10),
 * CATALOGUE_ROUNDS (5), CATALOGUE_ROUND_S (4), CATALOGUE_CONNECTIONS (32), CATALOGUE_DEADLINE_S
 * (600), CATALOGUE_PROFILE (1: CPU profiles of the big router and node during the changes, and of
 * their start (started once more under `--cpu-prof` after the run); heap snapshots summed by kind of
 * object up to 250,000 tenants; files in bench/results/catalogue/raw/, top functions in the report).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, watch, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, totalmem } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';
import { Pool, request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import { startPostgres } from '../../test/helpers/postgres.ts';
import type { RunningPostgres } from '../../test/helpers/postgres.ts';
import { PLANS, pgCounters, postmasterOf, seedCatalogue } from './catalogue-seed.ts';
import type { PgCounters, SampleKey, Seeded } from './catalogue-seed.ts';
import { Inspector, perTenant, summarizeSnapshot } from './catalogue-inspect.ts';
import type { HeapSummary } from './catalogue-inspect.ts';
import { CLI, freePort, processCpuSeconds, processRssKiB, ProcessGroup, stopOnSignals, writeConfig } from '../lib/cluster-processes.ts';
import type { Child } from '../lib/cluster-processes.ts';
import { chatBody, median, MODEL, pairedRatio, percentile, runAutocannon } from '../lib/load.ts';

const env = process.env;
const num = (name: string, fallback: number): number => {
  const v = env[name];
  const n = v === undefined || v === '' ? fallback : Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}: a number ≥ 0 (got ${v ?? ''})`);
  return n;
};
const TENANTS = num('CATALOGUE_TENANTS', 1_000_000);
const BASELINE_TENANTS = num('CATALOGUE_BASELINE_TENANTS', 100);
const SAMPLE = num('CATALOGUE_SAMPLE', 1_000);
const SETTLE_S = num('CATALOGUE_SETTLE_S', 3);
const CHANGES = num('CATALOGUE_CHANGES', 200);
const FLOOD_S = num('CATALOGUE_FLOOD_S', 10);
const ROUNDS = num('CATALOGUE_ROUNDS', 5);
const ROUND_S = num('CATALOGUE_ROUND_S', 4);
const CONNECTIONS = num('CATALOGUE_CONNECTIONS', 32);
const DEADLINE_S = num('CATALOGUE_DEADLINE_S', 600);
const PROFILE = env['CATALOGUE_PROFILE'] === '1';
/** Heap snapshots (CATALOGUE_PROFILE=1) only up to this many tenants: a larger one is too big to parse as one string. */
const HEAP_SNAPSHOT_MAX = 250_000;
/** Longest delay of PostgreSQL's cumulative statistics (an idle backend's flush, PGSTAT_IDLE_INTERVAL 10 s), plus a margin. */
const PG_STATS_LAG_S = 11;

/** Targets of issue 24. */
const GOAL = { readyS: 10, bytesPerEntry: 400, propagationP99Ms: 1_000, pgPerRequest: 0.001, throughputRatio: 0.95 } as const;

const ADMIN_TOKEN = `bench-admin-${randomBytes(12).toString('hex')}`;
const SIM_KEY = 'bench-sim-key';
const SALT = randomBytes(9).toString('base64url');
const RESULTS = fileURLToPath(new URL('../results/catalogue/', import.meta.url));
const RAW = join(RESULTS, 'raw');
const started = performance.now();
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} +${((performance.now() - started) / 1_000).toFixed(1).padStart(5)}s ${line}\n`);

// ---------------------------------------------------------------------------------------------
// Processes and cleanup

const group = new ProcessGroup();
let postgres: RunningPostgres | undefined;
let postmaster: { pid: number; dataDir: string } | undefined;
let cleaning: Promise<void> | undefined;
const cleanup = (): Promise<void> =>
  (cleaning ??= (async () => {
    await group.stopAll();
    await postgres?.stop();
    postmaster = undefined;
  })());
stopOnSignals(cleanup);
// Last resort on a crash: the group SIGKILLs its children itself; PostgreSQL is ours to kill.
process.once('exit', () => {
  if (postmaster === undefined) return;
  try {
    process.kill(postmaster.pid, 'SIGKILL');
  } catch {
    // gone already
  }
  const dir = dirname(postmaster.dataDir);
  if (/quotaring-pg-/.test(dir)) rmSync(dir, { recursive: true, force: true });
});
const watchdog = setTimeout(() => {
  log(`deadline: ${DEADLINE_S} s passed; stopping every process`);
  void cleanup().finally(() => process.exit(1));
}, DEADLINE_S * 1_000);

/** VmHWM (peak RSS) of a live process, KiB. */
function peakRssKiB(pid: number | undefined): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return Number(m?.[1] ?? NaN);
  } catch {
    return Number.NaN;
  }
}

/** One started router or node, and what its start cost. */
interface Started {
  readonly role: 'router' | 'node';
  readonly catalogue: 'big' | 'small';
  readonly child: Child;
  readonly url: string;
  readonly adminUrl: string;
  /** Spawn → `/readyz` 200, ms. */
  readonly readyMs: number;
  /** VmRSS after ready + settle, KiB; its peak (VmHWM) by then. */
  readonly rssKiB: number;
  readonly peakKiB: number;
  /** V8 heap used and external memory after the settle (the process's /metrics), bytes. */
  readonly heapUsed: number;
  readonly external: number;
  /** The same after a forced full garbage collection (inspector, once the figures above were read) + 1 s: what of it is live. */
  readonly rssAfterGcKiB: number;
  readonly heapAfterGc: number;
  /** Heap snapshot (CATALOGUE_PROFILE=1, at most HEAP_SNAPSHOT_MAX tenants) summed by kind of object. */
  heap?: HeapSummary;
  /** The process's local copy of the catalogue (`catalogue-copy-<process>.ndjson` in server.state_dir), and its size when the figures were read (0: not written yet). */
  readonly copyPath: string;
  readonly copyBytesAtSettle: number;
  /** Catalogue size the process reports (admin `GET /admin/v1/catalogue`). */
  readonly tenants: number;
  readonly keys: number;
  readonly cpuS: number;
}

const adminHeaders = { authorization: `Bearer ${ADMIN_TOKEN}` };

async function json<T>(url: string, init: { method?: 'GET' | 'POST'; body?: unknown } = {}): Promise<{ status: number; body: T }> {
  const res = await request(url, {
    method: init.method ?? 'GET',
    headers: { ...adminHeaders, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  return { status: res.statusCode, body: (await res.body.json()) as T };
}

/** Reads one gauge of a Prometheus text exposition. */
async function metric(url: string, name: string): Promise<number> {
  try {
    const res = await request(`${url}/metrics`);
    const text = await res.body.text();
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
    return Number(m?.[1] ?? NaN);
  } catch {
    return Number.NaN;
  }
}

/** Seconds spent in garbage collection so far (prom-client's `nodejs_gc_duration_seconds_sum`, every kind). */
async function gcSeconds(url: string): Promise<number> {
  try {
    const res = await request(`${url}/metrics`);
    const text = await res.body.text();
    let total = 0;
    for (const m of text.matchAll(/^nodejs_gc_duration_seconds_sum(?:\{[^}]*\})? ([0-9.e+-]+)$/gm)) total += Number(m[1]);
    return total;
  } catch {
    return Number.NaN;
  }
}

/**
 * Spawns a router or node, polls `/readyz` every 10 ms until 200 (timing it from spawn), waits
 * SETTLE_S, then reads its memory and catalogue size.
 */
async function startTimed(role: 'router' | 'node', catalogue: 'big' | 'small', config: string, port: number, adminPort: number, extraArgs: readonly string[] = [], nodeArgs: readonly string[] = []): Promise<Started> {
  const url = `http://127.0.0.1:${port}`;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const args = role === 'node' ? ['node', '--config', config, '--id', 'node-1', '--port', String(port), '--admin-port', String(adminPort)] : ['router', '--config', config, '--port', String(port), '--admin-port', String(adminPort)];
  const name = `${role}-${catalogue}`;
  const t0 = performance.now();
  // --inspect-port=0 opens nothing: SIGUSR1 opens the inspector once the figures are read (catalogue-inspect.ts).
  const child = group.spawn(name, process.execPath, ['--inspect-port=0', ...nodeArgs, CLI, ...args, ...extraArgs], { QUOTARING_CATALOGUE_URL: (postgres as RunningPostgres).url, QUOTARING_ADMIN_TOKEN: ADMIN_TOKEN, BENCH_SIM_KEY: SIM_KEY });
  for (;;) {
    if (child.proc.exitCode !== null) throw new Error(`${name} exited with ${child.proc.exitCode}:\n${child.output().slice(-4_000)}`);
    if (performance.now() - t0 > 60_000) throw new Error(`${name}: no /readyz 200 within 60 s:\n${child.output().slice(-4_000)}`);
    try {
      const res = await request(`${url}/readyz`, { headersTimeout: 1_000, bodyTimeout: 1_000 });
      await res.body.dump();
      if (res.statusCode === 200) break;
    } catch {
      // not listening yet
    }
    await sleep(10);
  }
  const readyMs = performance.now() - t0;
  await sleep(SETTLE_S * 1_000);
  const pid = child.proc.pid;
  const rssKiB = processRssKiB(pid);
  const peakKiB = peakRssKiB(pid);
  const heapUsed = await metric(url, 'nodejs_heap_size_used_bytes');
  const external = await metric(url, 'nodejs_external_memory_bytes');
  const status = await json<{ tenants: number; keys: number; version: number }>(`${adminUrl}/admin/v1/catalogue`);
  const cpuS = processCpuSeconds(pid);
  const copyPath = join(dirname(config), 'state', `catalogue-copy-${role === 'node' ? 'node-1' : `router-${port}`}.ndjson`);
  const copyBytesAtSettle = existsSync(copyPath) ? statSync(copyPath).size : 0;
  // Diagnostics, after the figures: what is live (a full GC), and by kind of object (a heap snapshot).
  const inspector = await Inspector.open(child);
  let heap: HeapSummary | undefined;
  let rssAfterGcKiB = Number.NaN;
  let heapAfterGc = Number.NaN;
  try {
    await inspector.collectGarbage();
    await sleep(1_000);
    rssAfterGcKiB = processRssKiB(pid);
    heapAfterGc = await metric(url, 'nodejs_heap_size_used_bytes');
    if (PROFILE && Math.max(TENANTS, 0) <= HEAP_SNAPSHOT_MAX) {
      mkdirSync(RAW, { recursive: true });
      const file = join(RAW, `${name}.heapsnapshot`);
      await inspector.snapshot(file);
      heap = summarizeSnapshot(readFileSync(file, 'utf8'));
    }
  } finally {
    inspector.close();
  }
  const s: Started = { role, catalogue, child, url, adminUrl, readyMs, rssKiB, peakKiB, heapUsed, external, rssAfterGcKiB, heapAfterGc, ...(heap === undefined ? {} : { heap }), copyPath, copyBytesAtSettle, tenants: status.body.tenants, keys: status.body.keys, cpuS };
  log(`${name}: ready in ${(readyMs / 1_000).toFixed(2)} s; after ${SETTLE_S} s: VmRSS ${(rssKiB / 1024).toFixed(0)} MiB (peak ${(peakKiB / 1024).toFixed(0)} MiB), heap used ${(heapUsed / 2 ** 20).toFixed(0)} MiB; after a full GC: VmRSS ${(rssAfterGcKiB / 1024).toFixed(0)} MiB, heap used ${(heapAfterGc / 2 ** 20).toFixed(0)} MiB; local copy at settle: ${(copyBytesAtSettle / 2 ** 20).toFixed(0)} MiB; catalogue ${s.tenants} tenants, ${s.keys} keys; CPU ${cpuS.toFixed(1)} s`);
  return s;
}

/** A config for one catalogue schema: node-1 on `nodePort`, node-2 (never started) on `absentPort`. */
function configFor(schema: string, simUrl: string, nodePort: number, absentPort: number): string {
  return writeConfig({
    server: { log_level: 'warn' },
    catalogue: { store: 'postgres', schema },
    // Limits no benchmark load reaches: every sample request is admitted.
    plans: PLANS.map((name, i) => ({ name, limits: [{ requests: 1_000_000_000 * (i + 1), window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 100_000 }] })),
    tenants: [],
    cluster: { members: [{ id: 'node-1', url: `http://127.0.0.1:${nodePort}` }, { id: 'node-2', url: `http://127.0.0.1:${absentPort}` }] },
    models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY', connections: 256 }],
  });
}

/** The ring every process of a config builds (ids node-1, node-2): node-1 owns a tenant when it is its owner. */
const ring = createRing([{ id: 'node-1', url: 'http://127.0.0.1:1' }, { id: 'node-2', url: 'http://127.0.0.1:2' }]);
const ownedByNode1 = (tenant: string): boolean => ring.owner(tenant)?.id === 'node-1';

// ---------------------------------------------------------------------------------------------
// 3. Propagation

interface Change {
  readonly tenant: string;
  readonly version: number;
  /** Write sent → admin answer, ms. */
  readonly writeMs: number;
  /** Write sent → the key's first 200 through the router / at the node; → the node's admin version ≥ the write's. */
  readonly routerMs: number;
  readonly nodeMs: number;
  readonly nodeVersionMs: number;
  /** Answers other than 200 seen before the first 200, by status. */
  readonly before: Record<string, number>;
}

/** What the propagation phase cost the router and the node besides the changes' own requests. */
interface PropagationCost {
  readonly seconds: number;
  /** CPU seconds used during the phase. */
  readonly routerCpuS: number;
  readonly nodeCpuS: number;
  /** Local copies of the catalogue written (renamed into place) during the phase and until idle. */
  readonly routerCopies: number;
  readonly nodeCopies: number;
  /** Cores each used while idle, before the phase. */
  readonly idleCores: readonly number[];
  /** After the last change: seconds until both are back to their idle rate + 5 % of a core over 1 s (NaN: not within 60 s). */
  readonly busyAfterS: number;
  /** Top self-time functions during the phase (CATALOGUE_PROFILE=1). */
  readonly profiles: Record<string, string>;
}

/** CPU used by each of `pids` over `ms`, in cores. */
async function cpuRate(pids: readonly (number | undefined)[], ms: number): Promise<number[]> {
  const before = pids.map((p) => processCpuSeconds(p));
  await sleep(ms);
  return pids.map((p, i) => (processCpuSeconds(p) - (before[i] as number)) / (ms / 1_000));
}

/** Seconds until every process of `pids` uses at most its `idle` rate + 5 % of a core over 1 s; NaN after `maxS`. */
async function untilIdle(pids: readonly (number | undefined)[], idle: readonly number[], maxS: number): Promise<number> {
  const t0 = performance.now();
  while (performance.now() - t0 < maxS * 1_000) {
    const rate = await cpuRate(pids, 1_000);
    if (rate.every((r, i) => r <= (idle[i] as number) + 0.05)) return (performance.now() - t0) / 1_000 - 1;
  }
  return Number.NaN;
}

/** Counts the local copies renamed into place at `path` while `fn` runs. */
async function countingCopies<T>(paths: readonly string[], fn: () => Promise<T>): Promise<{ result: T; copies: number[] }> {
  const copies = paths.map(() => 0);
  const watchers = paths.map((p, i) => watch(dirname(p), (_event, file) => {
    if (file === basename(p)) copies[i] = (copies[i] as number) + 1;
  }));
  try {
    return { result: await fn(), copies };
  } finally {
    for (const w of watchers) w.close();
  }
}

async function propagationPhase(router: Started, node: Started, runId: string, warm: readonly string[]): Promise<{ changes: Change[]; cost: PropagationCost }> {
  const pids = [router.child.proc.pid, node.child.proc.pid];
  const idleCores = await cpuRate(pids, 2_000);
  const inspectors = PROFILE ? await Promise.all([Inspector.open(router.child), Inspector.open(node.child)]) : [];
  for (const i of inspectors) await i.startProfile(500);
  const cpu0 = pids.map((p) => processCpuSeconds(p));
  const t0 = performance.now();
  const { result, copies } = await countingCopies([router.copyPath, node.copyPath], async () => {
    const changes = await propagation(router, node, runId, warm);
    const busyAfterS = await untilIdle(pids, idleCores, 60);
    return { changes, busyAfterS };
  });
  const seconds = (performance.now() - t0) / 1_000;
  const cpu1 = pids.map((p) => processCpuSeconds(p));
  const profiles: Record<string, string> = {};
  for (const [i, role] of ['router', 'node'].entries()) {
    const inspector = inspectors[i];
    if (inspector === undefined) continue;
    const file = join(RAW, `propagation-${role}.cpuprofile`);
    mkdirSync(RAW, { recursive: true });
    writeFileSync(file, JSON.stringify(await inspector.stopProfile()));
    inspector.close();
    profiles[role] = topFunctions(file);
    log(`${role} CPU profile during propagation: ${file}\n${profiles[role]}`);
  }
  return {
    changes: result.changes,
    cost: { seconds, routerCpuS: (cpu1[0] as number) - (cpu0[0] as number), nodeCpuS: (cpu1[1] as number) - (cpu0[1] as number), routerCopies: copies[0] as number, nodeCopies: copies[1] as number, idleCores, busyAfterS: result.busyAfterS, profiles },
  };
}

/** The self-time part of bench/lib/profile-top.ts's summary of a .cpuprofile. */
function topFunctions(file: string, top = 25): string {
  const text = execFileSync(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('../lib/profile-top.ts', import.meta.url)), file, String(top)], { encoding: 'utf8' });
  return text.split(/^inclusive/m)[0] ?? text;
}

async function propagation(router: Started, node: Started, runId: string, warm: readonly string[]): Promise<Change[]> {
  const body = chatBody(20);
  const routerPool = new Pool(router.url, { connections: 4, keepAliveTimeout: 30_000 });
  const nodePool = new Pool(node.url, { connections: 4, keepAliveTimeout: 30_000 });
  const out: Change[] = [];
  // Warm both paths first (connections, JIT, the node's first decisions): the first change would pay for them.
  for (const k of warm) {
    for (const p of [routerPool, nodePool]) {
      const res = await p.request({ path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${k}` }, body });
      await res.body.dump();
    }
  }
  const ids: string[] = [];
  for (let i = 0; ids.length < CHANGES; i++) if (ownedByNode1(`new-${runId}-${i}`)) ids.push(`new-${runId}-${i}`);
  const until200 = async (p: Pool, key: string, t0: number, seen: Record<string, number>): Promise<number> => {
    for (;;) {
      const res = await p.request({ path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body });
      await res.body.dump();
      if (res.statusCode === 200) return performance.now() - t0;
      seen[String(res.statusCode)] = (seen[String(res.statusCode)] ?? 0) + 1;
      if (performance.now() - t0 > 10_000) return Number.NaN;
      await sleep(1);
    }
  };
  const untilVersion = async (version: number, t0: number): Promise<number> => {
    for (;;) {
      const s = await json<{ version: number }>(`${node.adminUrl}/admin/v1/catalogue`);
      if (s.body.version >= version) return performance.now() - t0;
      if (performance.now() - t0 > 10_000) return Number.NaN;
      await sleep(1);
    }
  };
  try {
    for (const [i, id] of ids.entries()) {
      const t0 = performance.now();
      const res = await json<{ tenant?: { version: number }; key?: { key: string } }>(`${router.adminUrl}/admin/v1/catalogue/tenants`, { method: 'POST', body: { id, plan: PLANS[i % PLANS.length], issue_key: true } });
      const writeMs = performance.now() - t0;
      const key = res.body.key?.key;
      const version = res.body.tenant?.version;
      if (res.status !== 201 || key === undefined || version === undefined) throw new Error(`create tenant ${id}: ${res.status} ${JSON.stringify(res.body)}`);
      const before: Record<string, number> = {};
      const [routerMs, nodeMs, nodeVersionMs] = await Promise.all([until200(routerPool, key, t0, before), until200(nodePool, key, t0, before), untilVersion(version, t0)]);
      out.push({ tenant: id, version, writeMs, routerMs, nodeMs, nodeVersionMs, before });
    }
  } finally {
    await routerPool.close();
    await nodePool.close();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// 4. Unknown keys

interface Flood {
  readonly requests: number;
  readonly seconds: number;
  readonly statuses: Record<string, number>;
  readonly errors: number;
  readonly routerCpuUsPerRequest: number;
  readonly idle: { readonly seconds: number; readonly xactCommit: number; readonly rowsScans: number; readonly logScans: number };
  readonly during: { readonly seconds: number; readonly xactCommit: number; readonly rowsScans: number; readonly rowsTuplesRead: number; readonly logScans: number };
  /** Transactions committed during the flood window beyond the idle rate, per request. */
  readonly xactPerRequest: number;
  readonly rowsScansPerRequest: number;
}

/** `n` keys no one was issued: a third random `qr_<id>_<secret>`, a third real ids with a wrong secret, a third of another form. */
function unknownKeys(n: number, sample: readonly SampleKey[]): string[] {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const id = (): string => Array.from(randomBytes(16), (b) => alphabet[b % 36]).join('');
  return Array.from({ length: n }, (_, i) => {
    const secret = randomBytes(32).toString('base64url');
    if (i % 3 === 0) return `qr_${id()}_${secret}`;
    if (i % 3 === 1) return `qr_${(sample[i % sample.length] as SampleKey).keyId}_${secret}`;
    return `sk-${randomBytes(24).toString('base64url')}`;
  });
}

async function flood(router: Started, sample: readonly SampleKey[], pgc: pg.Client, schema: string): Promise<Flood> {
  const keys = unknownKeys(60_000, sample);
  const body = chatBody(20);
  const idleS = Math.max(3, FLOOD_S / 2);
  // An idle backend reports its counters up to 10 s late (PGSTAT_IDLE_INTERVAL): let earlier work's in first.
  await sleep(PG_STATS_LAG_S * 1_000);
  const c0 = await pgCounters(pgc, schema);
  await sleep(idleS * 1_000);
  const c1 = await pgCounters(pgc, schema);
  const cpu0 = processCpuSeconds(router.child.proc.pid);
  let i = 0;
  const r = await autocannon({
    url: `${router.url}/v1/chat/completions`,
    connections: CONNECTIONS,
    duration: FLOOD_S,
    requests: [{ method: 'POST', setupRequest: (req) => ({ ...req, headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[i++ % keys.length] as string}` }, body }) }],
  });
  const cpu1 = processCpuSeconds(router.child.proc.pid);
  // Let any work the flood caused be reported (see above).
  await sleep(PG_STATS_LAG_S * 1_000);
  const c2 = await pgCounters(pgc, schema);
  const statuses: Record<string, number> = {};
  for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) statuses[code] = s.count ?? 0;
  const requests = Object.values(statuses).reduce((a, b) => a + b, 0);
  const rate = (k: keyof PgCounters, a: PgCounters, b: PgCounters): number => (b[k] - a[k]) / ((b.atMs - a.atMs) / 1_000);
  const duringS = (c2.atMs - c1.atMs) / 1_000;
  const excess = (k: 'xactCommit' | 'rowsScans'): number => c2[k] - c1[k] - rate(k, c0, c1) * duringS;
  return {
    requests,
    seconds: r.duration,
    statuses,
    errors: r.errors + r.timeouts,
    routerCpuUsPerRequest: ((cpu1 - cpu0) * 1e6) / Math.max(1, requests),
    idle: { seconds: (c1.atMs - c0.atMs) / 1_000, xactCommit: c1.xactCommit - c0.xactCommit, rowsScans: c1.rowsScans - c0.rowsScans, logScans: c1.logScans - c0.logScans },
    during: { seconds: duringS, xactCommit: c2.xactCommit - c1.xactCommit, rowsScans: c2.rowsScans - c1.rowsScans, rowsTuplesRead: c2.rowsTuplesRead - c1.rowsTuplesRead, logScans: c2.logScans - c1.logScans },
    xactPerRequest: excess('xactCommit') / Math.max(1, requests),
    rowsScansPerRequest: excess('rowsScans') / Math.max(1, requests),
  };
}

// ---------------------------------------------------------------------------------------------
// 5. Throughput

interface ThroughputRow {
  readonly target: string;
  readonly keys: number;
  readonly rate: number[];
  readonly p50: number[];
  readonly p99: number[];
  readonly cpuUs: { router: number[]; node: number[] };
  /** Garbage collection per request, µs (part of the CPU above). */
  readonly gcUs: { router: number[]; node: number[] };
  failures: number;
}

async function throughput(targets: readonly { name: string; router: Started; node: Started; keys: readonly string[] }[], profiles: Record<string, string>): Promise<ThroughputRow[]> {
  const body = chatBody(200);
  for (const t of targets) await runAutocannon({ url: t.router.url, bodies: [body], keys: t.keys, connections: CONNECTIONS, durationS: 2 });
  // CATALOGUE_PROFILE=1: every process of both sides profiled over the rounds (the same cost on each side).
  const profiled = PROFILE ? targets.flatMap((t) => [t.router, t.node]) : [];
  const inspectors = await Promise.all(profiled.map((p) => Inspector.open(p.child)));
  for (const i of inspectors) await i.startProfile(500);
  const rows = targets.map((t) => ({ target: t.name, keys: t.keys.length, rate: [] as number[], p50: [] as number[], p99: [] as number[], cpuUs: { router: [] as number[], node: [] as number[] }, gcUs: { router: [] as number[], node: [] as number[] }, failures: 0 }));
  for (let round = 0; round < ROUNDS; round++) {
    for (let j = 0; j < targets.length; j++) {
      const k = (j + round) % targets.length;
      const t = targets[k] as (typeof targets)[number];
      const row = rows[k] as ThroughputRow;
      const rp = t.router.child.proc.pid;
      const np = t.node.child.proc.pid;
      const [g0, h0] = await Promise.all([gcSeconds(t.router.url), gcSeconds(t.node.url)]);
      const [r0, n0] = [processCpuSeconds(rp), processCpuSeconds(np)];
      const r = await runAutocannon({ url: t.router.url, bodies: [body], keys: t.keys, connections: CONNECTIONS, durationS: ROUND_S });
      const [r1, n1] = [processCpuSeconds(rp), processCpuSeconds(np)];
      const [g1, h1] = await Promise.all([gcSeconds(t.router.url), gcSeconds(t.node.url)]);
      row.gcUs.router.push(((g1 - g0) * 1e6) / Math.max(1, r['2xx']));
      row.gcUs.node.push(((h1 - h0) * 1e6) / Math.max(1, r['2xx']));
      row.rate.push(r['2xx'] / r.duration);
      row.p50.push(r.latency.p50);
      row.p99.push(r.latency.p99);
      row.cpuUs.router.push(((r1 - r0) * 1e6) / Math.max(1, r['2xx']));
      row.cpuUs.node.push(((n1 - n0) * 1e6) / Math.max(1, r['2xx']));
      row.failures += r.non2xx + r.errors;
      log(`throughput round ${round + 1}/${ROUNDS} ${t.name.padEnd(22)} ${(r['2xx'] / r.duration).toFixed(0)} req/s, p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms, CPU/request router ${(row.cpuUs.router.at(-1) ?? NaN).toFixed(0)} µs (GC ${(row.gcUs.router.at(-1) ?? NaN).toFixed(0)}) node ${(row.cpuUs.node.at(-1) ?? NaN).toFixed(0)} µs (GC ${(row.gcUs.node.at(-1) ?? NaN).toFixed(0)}), failures ${r.non2xx + r.errors}`);
    }
  }
  for (const [i, inspector] of inspectors.entries()) {
    const p = profiled[i] as Started;
    const file = join(RAW, `throughput-${p.role}-${p.catalogue}.cpuprofile`);
    mkdirSync(RAW, { recursive: true });
    writeFileSync(file, JSON.stringify(await inspector.stopProfile()));
    inspector.close();
    profiles[`${p.role}, ${p.catalogue === 'big' ? fmt(TENANTS) : fmt(BASELINE_TENANTS)}-tenant catalogue`] = topFunctions(file, 15);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Profiles (CATALOGUE_PROFILE=1)

/** Starts the big router and node again under `--cpu-prof`, stops each once ready; the top self-time functions of each start. */
async function profileStarts(simUrl: string): Promise<Record<string, string>> {
  mkdirSync(RAW, { recursive: true });
  const out: Record<string, string> = {};
  for (const role of ['router', 'node'] as const) {
    const dir = join(RAW, `start-${role}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    // A config of its own: no local copy from the first start (the same cold start from PostgreSQL).
    const port = await freePort();
    const config = configFor('big', simUrl, port, await freePort());
    const s = await startTimed(role, 'big', config, port, await freePort(), [], ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-interval', '500']);
    await s.child.stop();
    const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
    if (file === undefined) continue;
    out[role] = topFunctions(join(dir, file));
    log(`${role} start profile: ${join(dir, file)}\n${out[role]}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Report

const fmt = (x: number, digits = 0): string => (Number.isFinite(x) ? x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) : 'n/a');
const met = (ok: boolean): string => (ok ? 'met' : '**not met**');

function machine(): Record<string, unknown> {
  let uptime = '';
  try {
    uptime = execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    uptime = `load average ${loadavg().map((l) => l.toFixed(2)).join(', ')}`;
  }
  return { uptime, loadavg: loadavg(), cores: cpus().length, cpu: cpus()[0]?.model ?? '', memGiB: totalmem() / 2 ** 30, freeGiB: freemem() / 2 ** 30 };
}

async function main(): Promise<void> {
  const date = new Date().toISOString();
  const machineBefore = machine();
  log(`machine: ${String(machineBefore['uptime'])}; ${cpus().length} cores; tenants ${TENANTS}, baseline ${BASELINE_TENANTS}`);
  if (BASELINE_TENANTS >= TENANTS) throw new Error('CATALOGUE_BASELINE_TENANTS must be below CATALOGUE_TENANTS');

  postgres = await startPostgres();
  const pgc = new pg.Client({ connectionString: postgres.url });
  await pgc.connect();
  postmaster = await postmasterOf(pgc);
  const pgVersion = (await pgc.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '';
  log(`PostgreSQL ${pgVersion} on port ${postgres.port} (postmaster pid ${postmaster.pid})`);

  // 1. Seed.
  const big: Seeded = await seedCatalogue(postgres.url, 'big', TENANTS, SAMPLE, SALT);
  log(`seeded ${fmt(big.tenants)} tenants + keys (${fmt(big.rows)} rows, versions ${big.firstVersion}..${big.lastVersion}) in ${big.insertS.toFixed(1)} s, VACUUM ANALYZE ${big.vacuumS.toFixed(1)} s, ${fmt(big.bytes / 2 ** 20)} MiB; ${big.hashesVerified} sample hashes = keyHash`);
  const small: Seeded = await seedCatalogue(postgres.url, 'small', BASELINE_TENANTS, BASELINE_TENANTS, SALT);
  log(`seeded the baseline: ${small.tenants} tenants`);

  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await group.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  const [nodeBigPort, nodeSmallPort, absentBig, absentSmall] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  const bigConfig = configFor('big', simUrl, nodeBigPort, absentBig);
  const smallConfig = configFor('small', simUrl, nodeSmallPort, absentSmall);

  // 2. Start, one process at a time.
  const nodeBig = await startTimed('node', 'big', bigConfig, nodeBigPort, await freePort());
  const routerBig = await startTimed('router', 'big', bigConfig, await freePort(), await freePort());
  const nodeSmall = await startTimed('node', 'small', smallConfig, nodeSmallPort, await freePort());
  const routerSmall = await startTimed('router', 'small', smallConfig, await freePort(), await freePort());
  const perEntry = (a: Started, b: Started): number => ((a.rssKiB - b.rssKiB) * 1024) / (a.keys - b.keys);
  const routerBytes = perEntry(routerBig, routerSmall);
  const nodeBytes = ((nodeBig.rssKiB - nodeSmall.rssKiB) * 1024) / (nodeBig.tenants - nodeSmall.tenants);
  const heapPerEntry = (a: Started, b: Started): number => (a.heapUsed - b.heapUsed) / (a.tenants - b.tenants);
  const liveRss = (a: Started, b: Started): number => ((a.rssAfterGcKiB - b.rssAfterGcKiB) * 1024) / (a.tenants - b.tenants);
  const liveHeap = (a: Started, b: Started): number => (a.heapAfterGc - b.heapAfterGc) / (a.tenants - b.tenants);
  const perTenantBytes = {
    router: { rss: routerBytes, heap: heapPerEntry(routerBig, routerSmall), rssAfterGc: liveRss(routerBig, routerSmall), heapAfterGc: liveHeap(routerBig, routerSmall) },
    node: { rss: nodeBytes, heap: heapPerEntry(nodeBig, nodeSmall), rssAfterGc: liveRss(nodeBig, nodeSmall), heapAfterGc: liveHeap(nodeBig, nodeSmall) },
  };
  log(`per catalogued tenant + key: ${JSON.stringify(perTenantBytes, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v) : v))}`);
  const heapKinds = (a: Started, b: Started): { kind: string; bytes: number; objects: number }[] => (a.heap === undefined || b.heap === undefined ? [] : perTenant(a.heap, b.heap, a.tenants - b.tenants, 15));
  const heapByKind = { router: heapKinds(routerBig, routerSmall), node: heapKinds(nodeBig, nodeSmall) };

  // 4. Unknown keys (before any write since the starts: PostgreSQL's counters see reads only).
  const fl = await flood(routerBig, big.sample, pgc, 'big');
  const all401 = fl.requests > 0 && fl.statuses['401'] === fl.requests && fl.errors === 0;
  log(`unknown-key flood: ${fmt(fl.requests)} requests in ${fl.seconds} s (${fmt(fl.requests / fl.seconds)}/s), statuses ${JSON.stringify(fl.statuses)}, errors ${fl.errors}; PostgreSQL: ${fl.during.xactCommit} commits in ${fl.during.seconds.toFixed(1)} s vs ${fl.idle.xactCommit} in ${fl.idle.seconds.toFixed(1)} s idle → ${fl.xactPerRequest.toExponential(2)}/request; rows-table scans ${fl.during.rowsScans} (idle ${fl.idle.rowsScans})`);

  // 3. Propagation.
  const { changes, cost } = await propagationPhase(routerBig, nodeBig, randomBytes(3).toString('hex'), big.sample.filter((k) => ownedByNode1(k.tenant)).slice(0, 100).map((k) => k.key));
  log(`propagation cost: ${cost.seconds.toFixed(1)} s; CPU router ${cost.routerCpuS.toFixed(1)} s, node ${cost.nodeCpuS.toFixed(1)} s; local copies written: router ${cost.routerCopies}, node ${cost.nodeCopies}; busy ${cost.busyAfterS.toFixed(1)} s after the last change`);
  const pct = (xs: number[], p: number): number => percentile(xs.filter((x) => Number.isFinite(x)), p);
  const lost = changes.filter((c) => !Number.isFinite(c.routerMs) || !Number.isFinite(c.nodeMs)).length;
  const prop = {
    changes: changes.length,
    notWithin10s: lost,
    writeMs: { p50: pct(changes.map((c) => c.writeMs), 50), p99: pct(changes.map((c) => c.writeMs), 99) },
    routerMs: { p50: pct(changes.map((c) => c.routerMs), 50), p99: pct(changes.map((c) => c.routerMs), 99), max: pct(changes.map((c) => c.routerMs), 100) },
    nodeMs: { p50: pct(changes.map((c) => c.nodeMs), 50), p99: pct(changes.map((c) => c.nodeMs), 99), max: pct(changes.map((c) => c.nodeMs), 100) },
    nodeVersionMs: { p50: pct(changes.map((c) => c.nodeVersionMs), 50), p99: pct(changes.map((c) => c.nodeVersionMs), 99) },
    beforeFirst200: changes.reduce<Record<string, number>>((acc, c) => {
      for (const [k, v] of Object.entries(c.before)) acc[k] = (acc[k] ?? 0) + v;
      return acc;
    }, {}),
  };
  log(`propagation of ${changes.length} changes: write p50 ${prop.writeMs.p50.toFixed(1)} ms; key 200 through the router p50 ${prop.routerMs.p50.toFixed(1)} / p99 ${prop.routerMs.p99.toFixed(1)} ms, at the node p50 ${prop.nodeMs.p50.toFixed(1)} / p99 ${prop.nodeMs.p99.toFixed(1)} ms; non-200 before: ${JSON.stringify(prop.beforeFirst200)}`);

  // 5. Throughput.
  const bigKeys = big.sample.filter((k) => ownedByNode1(k.tenant)).map((k) => k.key);
  const smallKeys = small.sample.filter((k) => ownedByNode1(k.tenant)).map((k) => k.key);
  const keyCount = Math.min(bigKeys.length, smallKeys.length);
  const throughputProfiles: Record<string, string> = {};
  const tput = await throughput([
    { name: `${fmt(TENANTS)}-tenant catalogue`, router: routerBig, node: nodeBig, keys: bigKeys.slice(0, keyCount) },
    { name: `${fmt(BASELINE_TENANTS)}-tenant catalogue`, router: routerSmall, node: nodeSmall, keys: smallKeys.slice(0, keyCount) },
  ], throughputProfiles);
  const ratio = pairedRatio(tput[0]?.rate, tput[1]?.rate);
  const cpuRatio = { router: pairedRatio(tput[0]?.cpuUs.router, tput[1]?.cpuUs.router), node: pairedRatio(tput[0]?.cpuUs.node, tput[1]?.cpuUs.node) };
  const endRss = { routerBig: processRssKiB(routerBig.child.proc.pid), nodeBig: processRssKiB(nodeBig.child.proc.pid), routerSmall: processRssKiB(routerSmall.child.proc.pid), nodeSmall: processRssKiB(nodeSmall.child.proc.pid) };
  await group.stopAll();

  const profiles = PROFILE ? await profileStarts(simUrl) : {};
  await pgc.end();
  const machineAfter = machine();

  // Report.
  const started4 = [nodeBig, routerBig, nodeSmall, routerSmall];
  const targetRows: string[][] = [
    ['1', `seed ${fmt(TENANTS)} tenants + keys into PostgreSQL`, `${big.insertS.toFixed(1)} s insert + ${big.vacuumS.toFixed(1)} s VACUUM ANALYZE (${fmt(big.bytes / 2 ** 20)} MiB); ${big.hashesVerified}/${big.sample.length} SQL hashes = keyHash`, 'fast', '—'],
    ['2', 'router: spawn → /readyz 200', `${(routerBig.readyMs / 1_000).toFixed(2)} s (${fmt(routerBig.keys)} keys)`, `≤ ${GOAL.readyS} s`, met(routerBig.readyMs <= GOAL.readyS * 1_000)],
    ['2', 'node: spawn → /readyz 200', `${(nodeBig.readyMs / 1_000).toFixed(2)} s (${fmt(nodeBig.tenants)} tenants)`, `≤ ${GOAL.readyS} s`, met(nodeBig.readyMs <= GOAL.readyS * 1_000)],
    ['2', 'router RSS per catalogued key', `${fmt(routerBytes)} B (${fmt(routerBig.rssKiB / 1024)} − ${fmt(routerSmall.rssKiB / 1024)} MiB)`, `≤ ${GOAL.bytesPerEntry} B`, met(routerBytes <= GOAL.bytesPerEntry)],
    ['2', 'node RSS per tenant, before any request (owns none yet)', `${fmt(nodeBytes)} B (${fmt(nodeBig.rssKiB / 1024)} − ${fmt(nodeSmall.rssKiB / 1024)} MiB)`, `≤ ${GOAL.bytesPerEntry} B`, met(nodeBytes <= GOAL.bytesPerEntry)],
    ['3', `change → key answers 200 through the router (${changes.length} changes)`, `p50 ${prop.routerMs.p50.toFixed(1)} ms, p99 ${prop.routerMs.p99.toFixed(1)} ms`, `p99 ≤ ${GOAL.propagationP99Ms} ms`, met(lost === 0 && prop.routerMs.p99 <= GOAL.propagationP99Ms)],
    ['3', 'change → key answers 200 at the node directly', `p50 ${prop.nodeMs.p50.toFixed(1)} ms, p99 ${prop.nodeMs.p99.toFixed(1)} ms`, `p99 ≤ ${GOAL.propagationP99Ms} ms`, met(lost === 0 && prop.nodeMs.p99 <= GOAL.propagationP99Ms)],
    ['4', `unknown-key flood (${fmt(fl.requests)} requests, ${fmt(fl.requests / fl.seconds)}/s): answers`, Object.entries(fl.statuses).map(([k, v]) => `${k}: ${fmt(v)}`).join(', ') + (fl.errors > 0 ? `, errors ${fl.errors}` : ''), 'all 401', met(all401)],
    ['4', 'PostgreSQL commits per unknown-key request beyond the idle rate (the followers\' polls); catalogue rows read', `${fl.xactPerRequest.toExponential(1)} (${fl.during.xactCommit} commits in ${fl.during.seconds.toFixed(1)} s vs ${(fl.idle.xactCommit / fl.idle.seconds).toFixed(1)}/s idle); \`rows\` scans ${fl.during.rowsScans}`, `~0 (≤ ${GOAL.pgPerRequest}; 0 scans)`, met(Math.max(0, fl.xactPerRequest) <= GOAL.pgPerRequest && fl.during.rowsScans === 0)],
    ['5', 'throughput router → node, big / baseline catalogue', `${ratio.toFixed(3)}× (${fmt(median(tput[0]?.rate ?? []))} vs ${fmt(median(tput[1]?.rate ?? []))} req/s)`, `≈ 1.0 (≥ ${GOAL.throughputRatio})`, met(ratio >= GOAL.throughputRatio)],
  ];
  const md = [
    `## Tenant catalogue at ${fmt(TENANTS)} tenants — ${date.slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `${cpus().length} cores (${String(machineBefore['cpu'])}), ${fmt(totalmem() / 2 ** 30)} GiB, Node ${process.version}, PostgreSQL ${pgVersion} (local, fsync off). Load before: \`${String(machineBefore['uptime'])}\`; after: \`${String(machineAfter['uptime'])}\`. Total ${((performance.now() - started) / 1_000).toFixed(0)} s. Command: \`${TENANTS === 1_000_000 ? '' : `CATALOGUE_TENANTS=${TENANTS} `}npm run bench:catalogue\`.`,
    '',
    '| # | what | measured | target | |',
    '|---|---|---|---|---|',
    ...targetRows.map((r) => `| ${r.join(' | ')} |`),
    '',
    `Processes (node-1 of a static 2-member cluster whose node-2 never runs; started one at a time; memory after ready + ${SETTLE_S} s, before any request):`,
    '',
    '| process | catalogue | ready s | CPU s to ready + settle | VmRSS MiB | peak MiB | V8 heap used MiB | external MiB | after a full GC: VmRSS / heap used MiB | tenants / keys held |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...started4.map((s) => `| ${s.role} | ${s.catalogue === 'big' ? fmt(TENANTS) : fmt(BASELINE_TENANTS)} | ${(s.readyMs / 1_000).toFixed(2)} | ${s.cpuS.toFixed(1)} | ${fmt(s.rssKiB / 1024, 1)} | ${fmt(s.peakKiB / 1024, 1)} | ${fmt(s.heapUsed / 2 ** 20, 1)} | ${fmt(s.external / 2 ** 20, 1)} | ${fmt(s.rssAfterGcKiB / 1024, 1)} / ${fmt(s.heapAfterGc / 2 ** 20, 1)} | ${fmt(s.tenants)} / ${fmt(s.keys)} |`),
    '',
    `Per catalogued tenant (with its key), big − baseline: router VmRSS ${fmt(perTenantBytes.router.rss)} B, V8 heap used ${fmt(perTenantBytes.router.heap)} B; after a full GC VmRSS ${fmt(perTenantBytes.router.rssAfterGc)} B, heap ${fmt(perTenantBytes.router.heapAfterGc)} B. Node: VmRSS ${fmt(perTenantBytes.node.rss)} B, heap ${fmt(perTenantBytes.node.heap)} B; after a full GC VmRSS ${fmt(perTenantBytes.node.rssAfterGc)} B, heap ${fmt(perTenantBytes.node.heapAfterGc)} B.`,
    ...(['router', 'node'] as const).flatMap((role) =>
      heapByKind[role].length === 0
        ? []
        : ['', `Heap snapshot of the ${role} after a full GC, big − baseline per tenant, by kind of object (self sizes):`, '', '| kind | bytes / tenant | objects / tenant |', '|---|---|---|', ...heapByKind[role].map((h) => `| ${h.kind.replace(/\|/g, '\\|')} | ${h.bytes.toFixed(1)} | ${h.objects.toFixed(2)} |`)],
    ),
    '',
    `Propagation (${changes.length} tenants created with a key through the router's admin API, one at a time; from the write sent): admin answer p50 ${prop.writeMs.p50.toFixed(1)} / p99 ${prop.writeMs.p99.toFixed(1)} ms; key 200 through the router p50 ${prop.routerMs.p50.toFixed(1)} / p99 ${prop.routerMs.p99.toFixed(1)} / max ${prop.routerMs.max.toFixed(1)} ms; at the node p50 ${prop.nodeMs.p50.toFixed(1)} / p99 ${prop.nodeMs.p99.toFixed(1)} / max ${prop.nodeMs.max.toFixed(1)} ms; node admin version caught up p50 ${prop.nodeVersionMs.p50.toFixed(1)} / p99 ${prop.nodeVersionMs.p99.toFixed(1)} ms; answers before the first 200: ${JSON.stringify(prop.beforeFirst200)}; not within 10 s: ${lost}. The phase took ${cost.seconds.toFixed(1)} s (until idle): CPU router ${cost.routerCpuS.toFixed(1)} s, node ${cost.nodeCpuS.toFixed(1)} s; local copies of the catalogue rewritten: router ${cost.routerCopies}, node ${cost.nodeCopies}; busy ${cost.busyAfterS.toFixed(1)} s after the last change (until back to their idle CPU, ${cost.idleCores.map((c) => `${(c * 100).toFixed(1)} %`).join(' / ')} of a core, + 5 %).`,
    ...Object.entries(cost.profiles).flatMap(([role, top]) => ['', `CPU profile of the ${role} during the changes (bench/results/catalogue/raw/propagation-${role}.cpuprofile):`, '', '```', top.trim(), '```']),
    '',
    `Unknown keys: ${CONNECTIONS} connections, ${FLOOD_S} s; router CPU ${fl.routerCpuUsPerRequest.toFixed(1)} µs/request. PostgreSQL commits: idle ${fl.idle.xactCommit} in ${fl.idle.seconds.toFixed(1)} s, flood window ${fl.during.xactCommit} in ${fl.during.seconds.toFixed(1)} s; \`big.rows\` scans idle ${fl.idle.rowsScans} / flood ${fl.during.rowsScans} (tuples read ${fl.during.rowsTuplesRead}); \`big.log\` scans idle ${fl.idle.logScans} / flood ${fl.during.logScans} (the followers' version checks).`,
    '',
    `Throughput: ${ROUNDS} interleaved rounds × ${ROUND_S} s, ${CONNECTIONS} connections, 200-token prompts, ${keyCount} keys of tenants node-1 owns on each side, simulator answering at once; medians.`,
    '',
    '| catalogue | req/s (each round) | median req/s | p50 / p99 ms | router CPU µs/req (of it GC) | node CPU µs/req (of it GC) | failures |',
    '|---|---|---|---|---|---|---|',
    ...tput.map((r) => `| ${r.target} | ${r.rate.map((x) => x.toFixed(0)).join(', ')} | ${fmt(median(r.rate))} | ${median(r.p50)} / ${median(r.p99)} | ${median(r.cpuUs.router).toFixed(0)} (${median(r.gcUs.router).toFixed(0)}) | ${median(r.cpuUs.node).toFixed(0)} (${median(r.gcUs.node).toFixed(0)}) | ${r.failures} |`),
    '',
    `Paired over rounds, big / baseline: req/s ${ratio.toFixed(3)}×; CPU per request router ${cpuRatio.router.toFixed(2)}×, node ${cpuRatio.node.toFixed(2)}× (CPU per request is less sensitive than req/s to other load on the machine).`,
    '',
    ...Object.entries(throughputProfiles).flatMap(([what, top]) => ['', `CPU profile of the ${what} over the throughput rounds:`, '', '```', top.trim(), '```']),
    '',
    `RSS at the end (after the load), MiB: router ${fmt(endRss.routerBig / 1024)} / ${fmt(endRss.routerSmall / 1024)}, node ${fmt(endRss.nodeBig / 1024)} / ${fmt(endRss.nodeSmall / 1024)} (big / baseline).`,
    ...Object.entries(profiles).flatMap(([role, top]) => ['', `CPU profile of the ${role}'s start (bench/results/catalogue/raw/start-${role}/):`, '', '```', top.trim(), '```']),
  ].join('\n');
  const results = {
    date,
    settings: { tenants: TENANTS, baselineTenants: BASELINE_TENANTS, sample: SAMPLE, settleS: SETTLE_S, changes: CHANGES, floodS: FLOOD_S, rounds: ROUNDS, roundS: ROUND_S, connections: CONNECTIONS },
    goals: GOAL,
    machine: { before: machineBefore, after: machineAfter, node: process.version, postgres: pgVersion },
    seed: { big: { ...big, sample: undefined }, small: { ...small, sample: undefined } },
    processes: started4.map(({ child: _c, url: _u, adminUrl: _a, heap: _h, ...s }) => s),
    bytesPerTenant: perTenantBytes,
    heapByKind,
    propagation: { ...prop, cost: { ...cost, profiles: undefined }, changes },
    flood: fl,
    throughput: { ratio, cpuRatio, keys: keyCount, rows: tput },
    endRssKiB: endRss,
    targets: targetRows.map(([n, what, measured, target, ok]) => ({ n, what, measured, target, met: ok === 'met' })),
    totalS: (performance.now() - started) / 1_000,
  };
  mkdirSync(RESULTS, { recursive: true });
  // results.{json,md}: the default run; another tenant count or a profiled run (whose figures include the profiler's cost) beside it.
  const name = `results${TENANTS === 1_000_000 ? '' : `-${TENANTS}`}${PROFILE ? '-profiled' : ''}`;
  writeFileSync(join(RESULTS, `${name}.json`), JSON.stringify(results, null, 2) + '\n');
  writeFileSync(join(RESULTS, `${name}.md`), md + '\n');
  process.stdout.write(md + '\n');
}

try {
  await main();
} catch (err) {
  log(`bench failed: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
