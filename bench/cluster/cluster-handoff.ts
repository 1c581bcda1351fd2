/**
 * Handoff when a node joins a cluster with 10,000 active tenants: Redis, three nodes and a router;
 * every tenant sends one request; then a fourth node starts and, as soon as the router's ring
 * includes it, the first request of every tenant that moved to it is sent at a steady rate,
 * interleaved with as many first-after-join requests of tenants that did not move.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { chatBody, MODEL, percentile, sendPaced, statusCounts } from '../lib/load.ts';
import { BENCH_SIGNER, CLI, freePort, waitUntil, writeConfig } from '../lib/cluster-processes.ts';
import type { ProcessGroup } from '../lib/cluster-processes.ts';

/** Options of {@link runHandoff}. */
export interface HandoffOptions {
  readonly group: ProcessGroup;
  /** The provider simulator every node calls. */
  readonly simUrl: string;
  /** @default 10_000 */
  readonly tenants?: number;
  /** Seconds over which every tenant sends its one activating request. @default 4 */
  readonly activateS?: number;
  /** Requests a second after the join (moved and not-moved together). @default 1_000 */
  readonly ratePerS?: number;
  /** Prompt tokens of every request. @default 200 */
  readonly promptTokens?: number;
  /** Progress lines. */
  readonly log: (line: string) => void;
}

/** Latency of the first request after the join of one group of tenants, ms. */
export interface FirstRequestLatency {
  readonly requests: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Status counts (`"0"`: connection error). */
  readonly statuses: Record<string, number>;
}

/** First-request latencies of requests sent in `[fromMs, toMs)` after the router showed the new ring. */
export interface LatencyBySendTime {
  readonly fromMs: number;
  /** Infinity for the last bucket (written as null in JSON). */
  readonly toMs: number;
  readonly moved: FirstRequestLatency;
  readonly notMoved: FirstRequestLatency;
}

/** Pause after the activation: a checkpoint period and some, so every tenant is claimed and checkpointed. */
const SETTLE_MS = 1_500;

/** Bucket edges (ms after the ring was seen) of {@link HandoffResult.bySendTime}. */
const SEND_TIME_EDGES = [0, 100, 250, 500, 1_000, Infinity];

/** Handoff counters of one node (`GET /_quotaring/v1/handoff`). */
export interface NodeHandoffStats {
  readonly node: string;
  readonly ring: string | null;
  readonly claimed: number;
  readonly stats: Record<string, number> | null;
}

/** What {@link runHandoff} measured. */
export interface HandoffResult {
  readonly tenants: number;
  readonly activation: { readonly seconds: number; readonly statuses: Record<string, number> };
  /** Pause between the activation and spawning the fourth node, ms. */
  readonly settleMs: number;
  /** Tenants claimed by the three nodes right before the join. */
  readonly claimedBeforeJoin: number;
  /** Tenants whose owner is the new node under the 4-member ring (computed with createRing). */
  readonly moved: number;
  /** Moved tenants whose owner under the 3-member ring was each old node. */
  readonly movedFrom: Record<string, number>;
  /** Tenants whose owner changed to a node other than the new one (0 for a consistent ring). */
  readonly movedElsewhere: number;
  /** From spawning the fourth node to the router's /readyz showing the 4-member ring, ms. */
  readonly joinToRouterRingMs: number;
  readonly ratePerS: number;
  /** Largest delay of a request against its schedule, ms (the sender's own lag). */
  readonly maxSendLagMs: number;
  readonly movedFirst: FirstRequestLatency;
  readonly notMovedFirst: FirstRequestLatency;
  /** The same split by when the request left (ms after the router showed the new ring). */
  readonly bySendTime: LatencyBySendTime[];
  /** Every node's counters after the run (old owners first, the new node last). */
  readonly nodes: NodeHandoffStats[];
}

function latencyOf(timed: readonly { status: number; latencyMs: number }[]): FirstRequestLatency {
  const ms = timed.map((t) => t.latencyMs);
  return {
    requests: timed.length,
    p50Ms: percentile(ms, 50),
    p99Ms: percentile(ms, 99),
    maxMs: percentile(ms, 100),
    statuses: statusCounts(timed),
  };
}

async function getJson<T>(url: string): Promise<T> {
  // Internal routes answer only calls signed with the cluster secret.
  const headers = new URL(url).pathname.startsWith('/_quotaring/') ? BENCH_SIGNER.signInternal('GET', url, {}) : {};
  const res = await request(url, { headers, headersTimeout: 5_000, bodyTimeout: 5_000 });
  if (res.statusCode !== 200) {
    await res.body.dump();
    throw new Error(`${url} answered ${res.statusCode}`);
  }
  return (await res.body.json()) as T;
}

/** A deterministic shuffle (mulberry32 seeded Fisher-Yates), so runs send in the same order. */
function shuffled<T>(xs: readonly T[], seed: number): T[] {
  let a = seed >>> 0;
  const random = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

/**
 * Runs the join scenario on its own Redis (cluster `bench-handoff`, `handoff.checkpoint` and
 * `wait_ms` at their defaults). Limits (100,000 requests/1m, 1,000,000 tokens/1m) never refuse;
 * `server.sweep_interval` is 10 min so no tenant's state is swept as idle before the join (with
 * the default 10 s sweep, token buckets that refilled would be dropped and there would be nothing to
 * hand off). Processes are left in `group`; the caller stops them.
 * @throws Error when a process does not start or the router never shows the 4-member ring.
 */
export async function runHandoff(opts: HandoffOptions): Promise<HandoffResult> {
  const { group, log } = opts;
  const tenants = opts.tenants ?? 10_000;
  const activateS = opts.activateS ?? 4;
  const ratePerS = opts.ratePerS ?? 1_000;
  const body = chatBody(opts.promptTokens ?? 200);
  const redis = await group.redis('redis-handoff');
  const keyOf = (i: number): string => `bench-handoff-key-${i}`;
  const config = writeConfig({
    server: { log_level: 'warn', sweep_interval: '10m' },
    cluster: { name: 'bench-handoff', redis: { url: redis.url } },
    tenants: Array.from({ length: tenants }, (_, i) => ({
      id: `h${i}`,
      keys: [keyOf(i)],
      limits: [
        { requests: 100_000, window: '1m' },
        { tokens: 1_000_000, window: '1m' },
      ],
    })),
    models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: opts.simUrl, api_key_env: 'BENCH_SIM_KEY' }],
  });
  const env = { BENCH_SIM_KEY: 'bench-sim-key' };
  const members: Member[] = [];
  for (let n = 1; n <= 4; n++) members.push({ id: `node-${n}`, url: `http://127.0.0.1:${await freePort()}` });
  const portOf = (m: Member): string => new URL(m.url).port;
  const old = members.slice(0, 3);
  const joiner = members[3] as Member;

  const started = performance.now();
  await Promise.all(old.map((m) => group.cli(`handoff ${m.id}`, ['node', '--config', config, '--id', m.id, '--port', portOf(m)], `${m.url}/readyz`, env)));
  const routerUrl = `http://127.0.0.1:${await freePort()}`;
  await group.cli('handoff router', ['router', '--config', config, '--port', new URL(routerUrl).port], `${routerUrl}/readyz`, env);
  const ring3 = createRing(old);
  const ring4 = createRing(members);
  const routerRing = async (): Promise<string> => (await getJson<{ ring?: string }>(`${routerUrl}/readyz`)).ring ?? '';
  await waitUntil('the router to show 3 members', async () => (await routerRing()) === ring3.version);
  log(`handoff: 3 nodes + router up in ${((performance.now() - started) / 1_000).toFixed(1)} s; activating ${tenants} tenants over ${activateS} s`);

  const all = Array.from({ length: tenants }, (_, i) => i);
  const activation = await sendPaced(routerUrl, all, keyOf, body, tenants / activateS);
  const activationStatuses = statusCounts(activation);
  await sleep(SETTLE_MS);
  const before = await Promise.all(old.map((m) => getJson<NodeHandoffStats>(`${m.url}/_quotaring/v1/handoff`)));
  const claimedBeforeJoin = before.reduce((sum, s) => sum + s.claimed, 0);

  const moved: number[] = [];
  const notMoved: number[] = [];
  const movedFrom: Record<string, number> = {};
  let movedElsewhere = 0;
  for (const i of all) {
    const was = ring3.owner(`h${i}`)?.id ?? '';
    const now = ring4.owner(`h${i}`)?.id ?? '';
    if (now === joiner.id && was !== joiner.id) {
      moved.push(i);
      movedFrom[was] = (movedFrom[was] ?? 0) + 1;
    } else if (now !== was) movedElsewhere++;
    else notMoved.push(i);
  }
  const controls = shuffled(notMoved, 7).slice(0, moved.length);
  const sendOrder = shuffled([...moved.map((i) => ({ i, moved: true })), ...controls.map((i) => ({ i, moved: false }))], 11);
  log(`handoff: ${claimedBeforeJoin} tenants claimed (activation ${JSON.stringify(activationStatuses)}); starting ${joiner.id}, ${moved.length} tenants will move to it`);

  const joinAt = performance.now();
  const joining = group.spawn(`handoff ${joiner.id}`, process.execPath, [CLI, 'node', '--config', config, '--id', joiner.id, '--port', portOf(joiner)], env);
  try {
    await waitUntil(
      `the router to show the 4-member ring ${ring4.version}`,
      async () => {
        if (joining.proc.exitCode !== null) throw new Error(`${joiner.id} exited with ${joining.proc.exitCode}`);
        try {
          return (await routerRing()) === ring4.version;
        } catch {
          return false;
        }
      },
      30_000,
      5,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${joining.output().slice(-4_000)}`);
  }
  const joinToRouterRingMs = performance.now() - joinAt;
  const timed = await sendPaced(routerUrl, sendOrder, (x) => keyOf(x.i), body, ratePerS);
  await sleep(300);
  const nodes = await Promise.all(members.map((m) => getJson<NodeHandoffStats>(`${m.url}/_quotaring/v1/handoff`)));
  return {
    tenants,
    activation: { seconds: activateS, statuses: activationStatuses },
    settleMs: SETTLE_MS,
    claimedBeforeJoin,
    moved: moved.length,
    movedFrom,
    movedElsewhere,
    joinToRouterRingMs,
    ratePerS,
    maxSendLagMs: percentile(
      timed.map((t) => t.lagMs),
      100,
    ),
    movedFirst: latencyOf(timed.filter((t) => t.item.moved)),
    notMovedFirst: latencyOf(timed.filter((t) => !t.item.moved)),
    bySendTime: SEND_TIME_EDGES.slice(0, -1).map((fromMs, k) => {
      const toMs = SEND_TIME_EDGES[k + 1] as number;
      const inBucket = timed.filter((t) => t.sentAtMs >= fromMs && t.sentAtMs < toMs);
      return { fromMs, toMs, moved: latencyOf(inBucket.filter((t) => t.item.moved)), notMoved: latencyOf(inBucket.filter((t) => !t.item.moved)) };
    }),
    nodes,
  };
}
