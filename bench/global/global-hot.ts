/**
 * The hot-tenant part of `npm run bench:global` (issue 4, "Benchmark": Redis commands per request
 * and limit accuracy for a hot tenant as the lease size varies). bench/global/global.ts starts the nodes and
 * Redis and writes the results; this file holds the tenant, its open-loop load and its two tables.
 *
 * The tenant: `hot`, spread over the 3 nodes (`spread: 3`), limits {requests 3,000/min, tokens
 * 600,000/min}, defined on each node's `CapLeases` exactly as src/gateway/spread.ts `group()` does
 * (group `tenant:hot@gpt-4o`, buckets `tenant:hot:requests:3000/60000` and
 * `tenant:hot:tokens:600000/60000`, share 3). Every request costs 1 request and 250 tokens, so the
 * tokens limit binds: 10,000 tokens/s = 40 requests/s (the requests limit would allow 50/s).
 *
 * The load is open-loop, as clients of a hot tenant are: each node receives requests on a fixed
 * schedule (nodes offset by a third of the interval), whatever happened to the earlier ones; each
 * request is decided the way the gateway decides it (src/gateway/exchange.ts: `take`, then
 * `takeAfterRenewals`), and a refusal is final (the client got a 429). At 5× the limit (200
 * requests/s offered) the full buckets drain in 600,000 / (50,000 − 10,000) = 15 s; from then on
 * the tenant is at its limit. Accuracy = admitted / allowance, allowance = capacity + refill rate ×
 * (last admission − first request), per bucket; admitted above it is over-admission (a defect).
 */
import { bucketSpec } from '../../src/gateway/spread.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CapBucketSpec, CapLeases } from '../../src/globalcap/cap-leases.ts';
import type { GuardStats } from '../../src/redis/guard.ts';
import { commandDelta } from '../lib/cluster-processes.ts';
import type { BenchRedis } from '../lib/cluster-processes.ts';

/** CapLeasesOptions.blockMs's default (500 since commit e9ccd7c; 250 before), marked in the tables. */
export const DEFAULT_BLOCK_MS = 500;
/** Nodes the tenant is spread over (the benchmark's three nodes). */
export const HOT_SPREAD = 3;
export const HOT_TENANT = 'hot';
export const HOT_MODEL = 'gpt-4o';
/** The group name src/gateway/spread.ts gives the tenant's requests for HOT_MODEL. */
export const HOT_GROUP = `tenant:${HOT_TENANT}@${HOT_MODEL}`;
export const HOT_LIMITS = { requests: 3_000, tokens: 600_000, windowMs: 60_000 } as const;
/** What every request of the hot tenant takes. */
export const HOT_COST = { requests: 1, tokens: 250 } as const;
/** Requests per second the binding limit admits: min(50 by requests, 40 by tokens) = 40. */
export const HOT_LIMIT_RPS = Math.min(
  (HOT_LIMITS.requests * 1000) / HOT_LIMITS.windowMs / HOT_COST.requests,
  (HOT_LIMITS.tokens * 1000) / HOT_LIMITS.windowMs / HOT_COST.tokens,
);

/**
 * Limits of the hot tenant in the decision-latency runs: far above what the closed-loop load can
 * take in a run, so every decision is a lease (or fallback) decision, never a refusal by the limit
 * (at 5× its real limits the tenant would spend its window in the 2 s before Redis is cut, and its
 * fallback share, net of that usage, would admit nothing).
 */
export const HOT_LATENCY_LIMITS = { requests: 3_000_000, tokens: 600_000_000, windowMs: 60_000 } as const;
/** The group of the latency runs (another model: other buckets than HOT_GROUP's). */
export const HOT_LATENCY_GROUP = `tenant:${HOT_TENANT}-latency@${HOT_MODEL}`;

/** The tenant's buckets, named as src/gateway/spread.ts names them (config order: requests, tokens). */
export function hotBuckets(limits: { readonly requests: number; readonly tokens: number; readonly windowMs: number } = HOT_LIMITS, tenant = HOT_TENANT): CapBucketSpec[] {
  return [{ requests: limits.requests, window: limits.windowMs }, { tokens: limits.tokens, window: limits.windowMs }].map(bucketSpec(tenant));
}

/** Defines the hot tenant's group on a node's leases, shared by HOT_SPREAD nodes. */
export function defineHot(leases: CapLeases): void {
  leases.define(HOT_GROUP, { buckets: hotBuckets(), share: () => HOT_SPREAD });
  leases.define(HOT_LATENCY_GROUP, { buckets: hotBuckets(HOT_LATENCY_LIMITS, `${HOT_TENANT}-latency`), share: () => HOT_SPREAD });
}

/** One node of the benchmark, as bench/global/global.ts makes it. */
export interface HotNode {
  readonly leases: CapLeases;
  readonly guard: { readonly stats: GuardStats };
}

/** What one node's open-loop schedule did. */
export interface PacedCounts {
  /** Requests offered (arrivals of the schedule). */
  attempted: number;
  admitted: number;
  /** Admitted after awaiting at least one renewal (`takeAfterRenewals`). */
  admittedAfterWait: number;
  refused: number;
}

/** Options of {@link paced}. */
export interface PacedOptions {
  readonly leases: CapLeases;
  readonly perSecond: number;
  /** `performance.now()` of the first arrival, ms. */
  readonly startAt: number;
  /** No arrival at or after this time, ms. */
  readonly stopAt: number;
  /** Called for each admitted request with `performance.now()`, ms. */
  readonly onAdmit: (atMs: number) => void;
}

/**
 * Offers requests at `perSecond` from `startAt` to `stopAt` on a fixed schedule (late arrivals are
 * sent at once, none is skipped), each decided like the gateway decides it; resolves once every
 * request is decided. Never rejects unless `take` throws (a bug).
 */
export async function paced(o: PacedOptions): Promise<PacedCounts> {
  const every = 1000 / o.perSecond;
  const counts: PacedCounts = { attempted: 0, admitted: 0, admittedAfterWait: 0, refused: 0 };
  const pending: Promise<void>[] = [];
  for (let i = 0; ; i++) {
    const due = o.startAt + i * every;
    if (due >= o.stopAt) break;
    const wait = due - performance.now();
    if (wait >= 1) await sleep(wait);
    counts.attempted++;
    const first = o.leases.take(HOT_GROUP, HOT_COST);
    if (first.ok) {
      counts.admitted++;
      o.onAdmit(performance.now());
      continue;
    }
    pending.push(
      o.leases.takeAfterRenewals(HOT_GROUP, HOT_COST, first).then((r) => {
        if (!r.ok) {
          counts.refused++;
          return;
        }
        counts.admitted++;
        counts.admittedAfterWait++;
        o.onAdmit(performance.now());
      }),
    );
  }
  await Promise.all(pending);
  return counts;
}

/** Redis commands (INFO commandstats delta, the benchmark's INFO left out) over a span of a run. */
export interface RedisPerRequest {
  /** EVAL + EVALSHA (one round trip each). */
  scriptCalls: number;
  /** Every command, including those run inside the scripts. */
  commands: number;
  scriptCallsPerAttempted: number;
  scriptCallsPerAdmitted: number;
  commandsPerAttempted: number;
  commandsPerAdmitted: number;
}

function perRequest(delta: ReadonlyMap<string, number>, attempted: number, admitted: number): RedisPerRequest {
  const scriptCalls = (delta.get('eval') ?? 0) + (delta.get('evalsha') ?? 0);
  const commands = [...delta.values()].reduce((a, b) => a + b, 0);
  return {
    scriptCalls,
    commands,
    scriptCallsPerAttempted: scriptCalls / attempted,
    scriptCallsPerAdmitted: scriptCalls / admitted,
    commandsPerAttempted: commands / attempted,
    commandsPerAdmitted: commands / admitted,
  };
}

/** Admitted units of one bucket against its allowance. */
export interface BucketAccuracy {
  kind: 'requests' | 'tokens';
  admitted: number;
  /** capacity + refill rate × (last admission − first request), floored. */
  allowance: number;
  admittedOfAllowance: number;
  /** admitted − allowance when positive, else 0: must be 0. */
  overAdmission: number;
}

/** One hot-tenant run: one blockMs, one demand. */
export interface HotRunResult {
  blockMs: number;
  /** Offered load as a multiple of the binding limit (40 requests/s). */
  demand: number;
  offeredPerS: number;
  elapsedS: number;
  counts: PacedCounts;
  admittedByNode: number[];
  /** Admitted / offered. */
  utilisation: number;
  buckets: BucketAccuracy[];
  redis: RedisPerRequest;
  redisCommands: Record<string, number>;
  /** From `atLimitFromS` to the end, when the run lasts past the drain of the full bucket. */
  atLimit?: {
    fromS: number;
    seconds: number;
    attempted: number;
    admitted: number;
    /** Admitted tokens per second over the span. */
    admittedTokensPerS: number;
    /** That rate divided by the refill rate (10,000/s): above 1 by at most heldAtStartTokens / seconds / refill when Redis was dry at the start. */
    admittedRateOfRefill: number;
    /** Tokens the nodes held leased and unspent when the span began (spent within it, granted before it). */
    heldAtStartTokens: number;
    redis: RedisPerRequest;
  };
  /** Unspent lease balance the nodes held at the end (returned by close), per bucket kind. */
  heldAtEnd: { requests: number; tokens: number };
  guard: GuardStats;
}

/** Options of {@link hotRun}. */
export interface HotRunOptions {
  readonly redis: BenchRedis;
  readonly nodes: readonly HotNode[];
  readonly blockMs: number;
  readonly demand: number;
  readonly seconds: number;
}

/** Seconds for the full tokens bucket to drain at `demand` × the limit (Infinity at ≤ 1×). */
export function drainSeconds(demand: number): number {
  if (demand <= 1) return Number.POSITIVE_INFINITY;
  const rate = (HOT_LIMITS.tokens * 1000) / HOT_LIMITS.windowMs;
  return HOT_LIMITS.tokens / ((demand - 1) * rate);
}

/**
 * Runs the open-loop load on `nodes` (the tenant defined on each, fresh bucket keys) and measures
 * Redis commands and accuracy. The caller closes the nodes afterwards.
 */
export async function hotRun(o: HotRunOptions): Promise<HotRunResult> {
  const offered = o.demand * HOT_LIMIT_RPS;
  const perNode = offered / o.nodes.length;
  const every = 1000 / perNode;
  const fromS = drainSeconds(o.demand) + 2;
  const hasAtLimit = fromS <= o.seconds - 4;
  const before = await o.redis.commandCalls();
  const start = performance.now() + 5;
  const stopAt = start + o.seconds * 1000;
  const limitFrom = start + fromS * 1000;
  let lastAdmit = start;
  const byNode = o.nodes.map(() => 0);
  let atLimitAdmitted = 0;
  let atLimitAttempted = 0;
  let atLimitBefore: Promise<Map<string, number>> | undefined;
  let heldAtLimitFrom = 0;
  const heldTokens = (): number => o.nodes.reduce((sum, n) => sum + Math.max(0, n.leases.view(HOT_GROUP).tokens?.balance ?? 0), 0);
  const timer = hasAtLimit
    ? setTimeout(() => {
        heldAtLimitFrom = heldTokens();
        atLimitBefore = o.redis.commandCalls();
      }, limitFrom - performance.now())
    : undefined;
  const counts = await Promise.all(
    o.nodes.map((n, i) =>
      paced({
        leases: n.leases,
        perSecond: perNode,
        startAt: start + (i * every) / o.nodes.length,
        stopAt,
        onAdmit: (at) => {
          byNode[i] = (byNode[i] ?? 0) + 1;
          if (at > lastAdmit) lastAdmit = at;
          if (at >= limitFrom) atLimitAdmitted++;
        },
      }),
    ),
  );
  const end = performance.now();
  clearTimeout(timer);
  const heldAtEnd = { requests: 0, tokens: 0 };
  for (const n of o.nodes) {
    const v = n.leases.view(HOT_GROUP);
    heldAtEnd.requests += Math.max(0, v.requests?.balance ?? 0);
    heldAtEnd.tokens += Math.max(0, v.tokens?.balance ?? 0);
  }
  // Renewals still in flight are part of this run's commands.
  await Promise.all(o.nodes.map((n) => n.leases.whenRenewed(HOT_GROUP)));
  const after = await o.redis.commandCalls();
  const total: PacedCounts = { attempted: 0, admitted: 0, admittedAfterWait: 0, refused: 0 };
  for (const c of counts) for (const k of Object.keys(total) as (keyof PacedCounts)[]) total[k] += c[k];
  if (hasAtLimit) {
    // Arrivals at or after limitFrom, from the schedule (every node's arrivals are known).
    o.nodes.forEach((_, i) => {
      const first = start + (i * every) / o.nodes.length;
      const skipped = Math.max(0, Math.ceil((limitFrom - first) / every));
      atLimitAttempted += Math.max(0, (counts[i]?.attempted ?? 0) - skipped);
    });
  }
  const delta = commandDelta(before, after);
  delta.delete('info');
  const elapsedS = (lastAdmit - start) / 1000;
  const buckets = (['requests', 'tokens'] as const).map((kind): BucketAccuracy => {
    const admitted = total.admitted * HOT_COST[kind];
    const allowance = Math.floor(HOT_LIMITS[kind] + ((HOT_LIMITS[kind] * 1000) / HOT_LIMITS.windowMs) * elapsedS);
    return { kind, admitted, allowance, admittedOfAllowance: admitted / allowance, overAdmission: Math.max(0, admitted - allowance) };
  });
  let atLimit: HotRunResult['atLimit'];
  const snapshot = atLimitBefore === undefined ? undefined : await atLimitBefore;
  if (hasAtLimit && snapshot !== undefined) {
    const d = commandDelta(snapshot, after);
    d.delete('info');
    const seconds = (end - limitFrom) / 1000;
    const refill = (HOT_LIMITS.tokens * 1000) / HOT_LIMITS.windowMs;
    atLimit = {
      fromS,
      seconds,
      attempted: atLimitAttempted,
      admitted: atLimitAdmitted,
      admittedTokensPerS: (atLimitAdmitted * HOT_COST.tokens) / seconds,
      admittedRateOfRefill: (atLimitAdmitted * HOT_COST.tokens) / seconds / refill,
      heldAtStartTokens: heldAtLimitFrom,
      redis: perRequest(d, atLimitAttempted, atLimitAdmitted),
    };
  }
  const guard = { calls: 0, ok: 0, timeouts: 0, errors: 0, noscript: 0, rejectedOpen: 0, opened: 0, closed: 0 };
  for (const n of o.nodes) for (const [k, v] of Object.entries(n.guard.stats)) guard[k as keyof GuardStats] += v;
  return {
    blockMs: o.blockMs,
    demand: o.demand,
    offeredPerS: offered,
    elapsedS,
    counts: total,
    admittedByNode: byNode,
    utilisation: total.admitted / total.attempted,
    buckets,
    redis: perRequest(delta, total.attempted, total.admitted),
    redisCommands: Object.fromEntries(delta),
    ...(atLimit === undefined ? {} : { atLimit }),
    heldAtEnd,
    guard,
  };
}

/** Decision latency figures of one Redis condition, as bench/global/global.ts measures them (µs). */
export interface HotLatencyFigures {
  readonly scenario: string;
  readonly takeP50Us: number;
  readonly takeP99Us: number;
  readonly requestP50Us: number;
  readonly requestP99Us: number;
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;
const r3 = (x: number): string => (Number.isFinite(x) ? x.toFixed(3) : '—');
const us = (v: number): string => (Number.isNaN(v) ? '—' : v < 10 ? v.toFixed(2) : Math.round(v).toLocaleString('en-US'));

/** Over-admission found in any run, as sentences (empty when none). */
export function overAdmissionDefects(runs: readonly HotRunResult[]): string[] {
  return runs.flatMap((r) =>
    r.buckets
      .filter((b) => b.overAdmission > 0)
      .map((b) => `DEFECT: blockMs ${r.blockMs}, ${r.demand}× demand: ${int(b.admitted)} ${b.kind} admitted > allowance ${int(b.allowance)} (${pct(b.admittedOfAllowance)}, ${int(b.overAdmission)} over)`),
  );
}

/**
 * Sections 3 and 4 of global.md (the hot tenant under 5× and 1× demand), the latency section
 * (`latencyTable`, rendered by bench/global/global.ts) and the reading paragraph.
 */
export function hotMarkdown(opts: {
  readonly over: readonly HotRunResult[];
  readonly flat: readonly HotRunResult[];
  readonly overSeconds: number;
  readonly flatSeconds: number;
  readonly latencyTitle: string;
  readonly latencyTable: readonly string[];
  readonly latency: readonly HotLatencyFigures[];
}): string[] {
  const { over, flat } = opts;
  const from = drainSeconds(5) + 2;
  const defects = overAdmissionDefects([...over, ...flat]);
  const lines = [
    `## 3. Hot tenant at 5× its limit: Redis commands per request and accuracy vs blockMs (${opts.overSeconds} s each, fresh buckets)`,
    '',
    `Tenant \`${HOT_TENANT}\` spread over ${HOT_SPREAD} nodes (\`spread: ${HOT_SPREAD}\`), limits {requests ${int(HOT_LIMITS.requests)}/min, tokens ${int(HOT_LIMITS.tokens)}/min} leased from`,
    `the global cap as src/gateway/spread.ts defines them (group \`${HOT_GROUP}\`, share ${HOT_SPREAD}); every request costs ${HOT_COST.requests} request and`,
    `${HOT_COST.tokens} tokens, so tokens bind at ${HOT_LIMIT_RPS} requests/s. Open-loop load: each node receives ${r3((5 * HOT_LIMIT_RPS) / HOT_SPREAD).replace(/\.?0+$/, '')} requests/s on a fixed schedule`,
    `(${5 * HOT_LIMIT_RPS}/s in all, 5× the limit), decided as the gateway does (\`take\`, then \`takeAfterRenewals\`); a refusal is final.`,
    `Buckets start full, so the first ~${drainSeconds(5).toFixed(0)} s drain them; "at the limit" = from ${from.toFixed(0)} s to the end.`,
    'Allowance = capacity + refill × (last admission − first request), per limit; over-admission = admitted − allowance when',
    'positive. Script calls = EVAL + EVALSHA; all commands = `INFO commandstats` delta (also the commands the scripts run).',
    'Per request: divided by requests offered / by requests admitted. At the limit, the nodes also spend the tokens they',
    'held leased when the span began (granted before it), so its admitted rate may exceed the refill by up to that',
    'balance / span; the whole-run allowance is the bound that must hold.',
    '',
    '| blockMs | offered | admitted | refused | tokens admitted / allowance | requests admitted / allowance | over-admission (tokens / requests) | at the limit: admitted tokens/s (refill 10,000) = % of refill; leased tokens held at its start | script calls per offered / admitted request | all commands per offered / admitted | at the limit: script calls per offered / admitted | at the limit: all commands per offered / admitted | guard timeouts |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...over.map((r) => {
      const [req, tok] = r.buckets as [BucketAccuracy, BucketAccuracy];
      const a = r.atLimit;
      return `| ${r.blockMs}${r.blockMs === DEFAULT_BLOCK_MS ? ' (default)' : ''} | ${int(r.counts.attempted)} | ${int(r.counts.admitted)} | ${int(r.counts.refused)} | ${int(tok.admitted)} / ${int(tok.allowance)} = ${pct(tok.admittedOfAllowance)} | ${int(req.admitted)} / ${int(req.allowance)} = ${pct(req.admittedOfAllowance)} | ${int(tok.overAdmission)} / ${int(req.overAdmission)} | ${a === undefined ? '—' : `${int(a.admittedTokensPerS)} = ${pct(a.admittedRateOfRefill)}; ${int(a.heldAtStartTokens)}`} | ${r3(r.redis.scriptCallsPerAttempted)} / ${r3(r.redis.scriptCallsPerAdmitted)} | ${r3(r.redis.commandsPerAttempted)} / ${r3(r.redis.commandsPerAdmitted)} | ${a === undefined ? '—' : `${r3(a.redis.scriptCallsPerAttempted)} / ${r3(a.redis.scriptCallsPerAdmitted)}`} | ${a === undefined ? '—' : `${r3(a.redis.commandsPerAttempted)} / ${r3(a.redis.commandsPerAdmitted)}`} | ${r.guard.timeouts} |`;
    }),
    '',
    `## 4. Hot tenant at 1× its limit (${HOT_LIMIT_RPS} requests/s offered, ${opts.flatSeconds} s each, fresh buckets)`,
    '',
    'Demand equal to the refill rate on full buckets: the limit is never reached, so every request should be admitted.',
    '',
    '| blockMs | offered | admitted | utilisation (admitted / offered) | refused | admitted after a renewal wait | script calls | per request | script calls per second | all commands | per request |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...flat.map((r) => {
      return `| ${r.blockMs}${r.blockMs === DEFAULT_BLOCK_MS ? ' (default)' : ''} | ${int(r.counts.attempted)} | ${int(r.counts.admitted)} | ${pct(r.utilisation)} | ${int(r.counts.refused)} | ${int(r.counts.admittedAfterWait)} | ${int(r.redis.scriptCalls)} | ${r3(r.redis.scriptCallsPerAttempted)} | ${(r.redis.scriptCalls / opts.flatSeconds).toFixed(1)} | ${int(r.redis.commands)} | ${r3(r.redis.commandsPerAttempted)} |`;
    }),
    '',
    opts.latencyTitle,
    '',
    ...opts.latencyTable,
    '',
    '### Reading',
    '',
    reading(opts),
    '',
    ...(defects.length > 0 ? [...defects.map((d) => `- **${d}**`), ''] : []),
  ];
  return lines;
}

/** Refill of one of the tenant's buckets, units/s. */
const refillPerS = (kind: 'requests' | 'tokens'): number => (HOT_LIMITS[kind] * 1000) / HOT_LIMITS.windowMs;
/** The smallest block CapLeases asks for (100 ms of the bucket's refill, its minBlockMs default), units. */
const minBlock = (kind: 'requests' | 'tokens'): number => Math.max(1, Math.ceil(refillPerS(kind) / 10));
/** One node's spend at 1× demand, units/s. */
const nodeRate = (kind: 'requests' | 'tokens'): number => (HOT_LIMIT_RPS * HOT_COST[kind]) / HOT_SPREAD;

/** The reading paragraph: every figure in it comes from this run. */
function reading(opts: Parameters<typeof hotMarkdown>[0]): string {
  const { over, flat, latency } = opts;
  const tokAcc = over.map((r) => (r.buckets[1] as BucketAccuracy).admittedOfAllowance);
  const overTotal = [...over, ...flat].reduce((s, r) => s + r.buckets.reduce((t, b) => t + b.overAdmission, 0), 0);
  const atLimit = over.filter((r) => r.atLimit !== undefined);
  const guardTimeouts = [...over, ...flat].reduce((n, r) => n + r.guard.timeouts, 0);
  const range = (xs: readonly number[], f: (x: number) => string): string => {
    if (xs.length === 0) return '—';
    const lo = Math.min(...xs);
    const hi = Math.max(...xs);
    return lo === hi ? f(lo) : `${f(lo)}–${f(hi)}`;
  };
  const byBlock = (r: HotRunResult): string => `${r3(r.atLimit?.redis.scriptCallsPerAdmitted ?? Number.NaN)} at ${r.blockMs} ms`;
  const lat = (s: string): HotLatencyFigures | undefined => latency.find((l) => l.scenario === s);
  const latText = ['healthy', 'slow', 'down']
    .map((s) => {
      const l = lat(s);
      return l === undefined ? undefined : `${s} ${us(l.takeP50Us)} / ${us(l.takeP99Us)} µs (whole request p99 ${us(l.requestP99Us)} µs)`;
    })
    .filter((x) => x !== undefined)
    .join(', ');
  return [
    `At 5× demand the hot tenant was admitted ${range(tokAcc, pct)} of its tokens allowance over the whole runs across blockMs ${over.map((r) => r.blockMs).join(', ')},`,
    overTotal === 0
      ? 'and over-admission was 0 in every run (both limits, 5× and 1×).'
      : `and over-admission was NOT 0: ${int(overTotal)} units in all (see the defects below).`,
    atLimit.length > 0
      ? `Once the buckets were dry, the admitted rate was ${range(atLimit.map((r) => r.atLimit?.admittedRateOfRefill ?? 0), pct)} of the refill rate (the nodes entered that span holding ${range(atLimit.map((r) => r.atLimit?.heldAtStartTokens ?? 0), int)} leased tokens), and Redis saw ${atLimit.map(byBlock).join(', ')} script calls per admitted request (${range(atLimit.map((r) => r.atLimit?.redis.scriptCallsPerAttempted ?? 0), r3)} per offered request; all commands ${range(atLimit.map((r) => r.atLimit?.redis.commandsPerAdmitted ?? 0), r3)} per admitted).`
      : '',
    `Over whole 5× runs (drain included) it was ${range(over.map((r) => r.redis.scriptCallsPerAdmitted), r3)} script calls per admitted request.`,
    flat.length > 0
      ? `Below the limit (1× demand) utilisation was ${range(flat.map((r) => r.utilisation), pct)} with ${range(flat.map((r) => r.redis.scriptCallsPerAttempted), r3)} script calls per request (${flat.map((r) => `${r3(r.redis.scriptCallsPerAttempted)} at ${r.blockMs} ms`).join(', ')}); a block is never smaller than 100 ms of the cluster-wide refill (minBlockMs default), i.e. ${int(minBlock('tokens'))} tokens and ${int(minBlock('requests'))} requests here, while a node's own spend over blockMs at 1× is ${int(nodeRate('tokens') / 10)} tokens and ${(nodeRate('requests') / 10).toFixed(1)} requests per 100 ms, so every blockMs below ${int(Math.min(...(['tokens', 'requests'] as const).map((k) => (1000 * minBlock(k)) / nodeRate(k))))} ms asks for the same block at this rate.`
      : '',
    latText === '' ? '' : `Decision latency of the hot tenant's take() p50 / p99 (blockMs 250): ${latText}.`,
    guardTimeouts > 0
      ? `The guards timed out ${guardTimeouts} time(s) (15 ms) in the 5× and 1× runs; one failed call puts a node in fallback for a second, serving from its local share (capacity / ${HOT_SPREAD} less its known usage).`
      : 'No guard call timed out in the 5× and 1× runs.',
    ...latency.filter((l) => Number.isNaN(l.requestP50Us)).map((l) => `The ${l.scenario} latency run timed no request: every node was still sleeping out an earlier refusal's wait when the run ended.`),
  ]
    .filter((s) => s !== '')
    .join(' ');
}
