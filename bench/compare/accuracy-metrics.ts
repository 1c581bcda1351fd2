/**
 * Accuracy metrics of the comparison benchmark (issue 5): from the records of a trace replay
 * ({@link ReplayRecord}) and the tenant limits the run configured, how closely a limiter held its
 * limits — over-admission on sliding windows, utilisation of saturated windows, and what clients
 * saw (429s from the gateway and relayed from upstream, other failures).
 *
 * Every limit is a SLIDING WINDOW of `windowMs`: a limiter that is exact admits at most `limit`
 * (tokens or requests) in every window of length `windowMs`, wherever it starts.
 *
 * Definitions (all times are `sentMs`, the replay clock when the client sent the request):
 * - Admitted tokens of a record: `usage.totalTokens` of a 2xx record (`reservedTokens` when
 *   `usage` is null); admitted requests: count of 2xx records. Time of a record: `sentMs`.
 * - Over-admission of a tenant and limit kind: max over windows [t, t + windowMs − toleranceMs)
 *   starting at each admitted record's sentMs, of (admitted in window / limit) − 1. The tolerance
 *   absorbs the gap between the client's send time and the gateway's decision time (a few ms); it
 *   is reported with the result. Negative when the limit was never reached.
 * - Demand of a window: sum of `reservedTokens` (tokens) or count (requests) of ALL records sent
 *   in it, admitted or not (status 0 — network errors and aborted requests — excluded).
 * - Utilisation at refusals: for each 429 record of a tenant with a limit of the kind, sent at t,
 *   the admitted (tokens or requests) of that tenant sent in (t − (windowMs − toleranceMs), t],
 *   over the limit: how full the sliding window was when the limiter said no. An exact limiter
 *   refuses only when admitted + the request's need > limit, so this is > 1 − need/limit; a
 *   limiter that refuses early shows a low figure. A 429 counts for every kind the tenant has a
 *   limit of: meaningful when one kind binds (the benchmark limits tokens only).
 * - Utilisation of aligned minutes: aligned windows [k·windowMs, (k+1)·windowMs) for k = 0.. while
 *   (k+1)·windowMs ≤ durationMs (whole windows only); a tenant-window is saturated for a kind when
 *   its demand ≥ 1.1 × limit; utilisation of a saturated tenant-window = admitted / limit.
 * - 429s seen by clients: records with status 429, split into `gateway` (gatewayError true) and
 *   `upstream` (429 without gatewayError: relayed from the provider); other non-2xx counted by
 *   status; status 0 counted as `network`.
 *
 * The 429s the simulator sent are not in the records: they are `ReplayReport.upstream429` (the
 * simulator's `rateLimited` after − before the run).
 */
import type { ReplayRecord } from '../../src/replay/report.ts';

/** The two limit kinds measured. */
export type LimitKind = 'tokens' | 'requests';

const KINDS: readonly LimitKind[] = ['tokens', 'requests'];

/** Limits of one tenant per sliding window of `windowMs`; a kind left out is not measured for it. */
export interface TenantLimits {
  readonly tokens?: number;
  readonly requests?: number;
}

/** Options of {@link accuracyOf}. */
export interface AccuracyOptions {
  /** Length of the sliding window every limit is defined on, ms (> 0). */
  readonly windowMs: number;
  /** Shortening of the over-admission windows, ms (0 ≤ toleranceMs < windowMs). */
  readonly toleranceMs: number;
  /** Length of the run on the replay clock, ms (≥ 0): only whole aligned windows inside it count for utilisation. */
  readonly durationMs: number;
}

/** Over-admission of one tenant and one limit kind. */
export interface OverAdmissionOf {
  readonly tenant: string;
  readonly kind: LimitKind;
  readonly limit: number;
  /**
   * Max over windows [t, t + windowMs − toleranceMs) starting at each admitted record's sentMs, of
   * (admitted in window / limit) − 1; null when the tenant has no admitted record (no window).
   */
  readonly overAdmission: number | null;
  /** Admitted (tokens or requests) in that window; null with `overAdmission`. */
  readonly admittedInWindow: number | null;
  /** Start (sentMs) of the first window reaching the max; null with `overAdmission`. */
  readonly windowStartMs: number | null;
}

/** How full the sliding window was at the limiter's refusals, for one kind (see the module comment). */
export interface RefusalUtilisation {
  /** 429 records counted (of tenants with a limit of the kind). */
  readonly refusals: number;
  /** Mean, median, 5th percentile (nearest rank) and min of admitted-in-window / limit; null without refusals. */
  readonly mean: number | null;
  readonly median: number | null;
  readonly p5: number | null;
  readonly min: number | null;
}

/** Utilisation over the saturated tenant-windows of one kind. */
export interface UtilisationSummary {
  /** Tenant-windows (whole aligned windows) whose demand ≥ 1.1 × limit. */
  readonly saturatedWindows: number;
  /** Mean of admitted / limit over them; null when none is saturated. */
  readonly mean: number | null;
  /** Smallest admitted / limit; null when none is saturated. */
  readonly min: number | null;
  /** Largest admitted / limit; null when none is saturated. */
  readonly max: number | null;
  /** Σ admitted / Σ limit over them; null when none is saturated. */
  readonly aggregate: number | null;
}

/** What the clients saw. */
export interface ClientOutcomes {
  /** Records. */
  readonly sent: number;
  /** 2xx records. */
  readonly admitted: number;
  /** Records with status 429 (= gateway + upstream). */
  readonly status429: number;
  /** 429 with `gatewayError` true: refused by the gateway itself. */
  readonly gateway429: number;
  /** 429 without `gatewayError`: relayed from the provider. */
  readonly upstream429: number;
  /** Other non-2xx statuses (not 429, not 0), count by status (key: the status as a string). */
  readonly otherByStatus: Readonly<Record<string, number>>;
  /** Status 0: no response (connection error or aborted). */
  readonly network: number;
}

/** One tenant in one whole aligned window (for a chart). */
export interface WindowPoint {
  readonly tenant: string;
  /** k: the window is [k·windowMs, (k+1)·windowMs). */
  readonly window: number;
  readonly startMs: number;
  /** Admitted tokens of records sent in the window. */
  readonly admittedTokens: number;
  /** Σ reservedTokens of records sent in the window (status 0 excluded). */
  readonly demandTokens: number;
  readonly tokensLimit: number | null;
  /** 2xx records sent in the window. */
  readonly admittedRequests: number;
  /** Records sent in the window (status 0 excluded). */
  readonly demandRequests: number;
  readonly requestsLimit: number | null;
}

/** Result of {@link accuracyOf}. */
export interface AccuracyResult {
  readonly windowMs: number;
  /** The tolerance the over-admission windows were shortened by, ms. */
  readonly toleranceMs: number;
  readonly durationMs: number;
  /** Whole aligned windows in the run: floor(durationMs / windowMs). */
  readonly wholeWindows: number;
  /**
   * Max of {@link OverAdmissionOf.overAdmission} over tenants and kinds (first found in tenant
   * name order, tokens before requests); negative when no limit was reached; null when no tenant
   * with a limit had an admitted record.
   */
  readonly overAdmission: number | null;
  /** Where `overAdmission` was found; null with it. */
  readonly overAdmissionAt: { readonly tenant: string; readonly kind: LimitKind; readonly windowStartMs: number } | null;
  /** One entry per tenant of `limits` and kind it has a limit of, by tenant name then kind. */
  readonly perTenant: readonly OverAdmissionOf[];
  readonly utilisation: { readonly tokens: UtilisationSummary; readonly requests: UtilisationSummary };
  /** How full each tenant's sliding window was at the 429s it got. */
  readonly atRefusal: { readonly tokens: RefusalUtilisation; readonly requests: RefusalUtilisation };
  readonly clients: ClientOutcomes;
  /** Every tenant (of `limits` or of the records) × every whole aligned window, by tenant name then window. */
  readonly windows: readonly WindowPoint[];
}

function isAdmitted(r: ReplayRecord): boolean {
  return r.status >= 200 && r.status < 300;
}

/** Admitted tokens of a 2xx record: `usage.totalTokens`, else `reservedTokens`. */
function admittedTokensOf(r: ReplayRecord): number {
  return r.usage?.totalTokens ?? r.reservedTokens;
}

function weightOf(r: ReplayRecord, kind: LimitKind): number {
  return kind === 'tokens' ? admittedTokensOf(r) : 1;
}

/**
 * Over-admission of one tenant's admitted records (sorted by sentMs) against one limit: a
 * two-pointer sweep, O(n) after the sort; the first window reaching the max wins.
 */
function sweep(admitted: readonly ReplayRecord[], kind: LimitKind, limit: number, spanMs: number): { ratio: number; sum: number; startMs: number } | null {
  let best: { ratio: number; sum: number; startMs: number } | null = null;
  let end = 0;
  let sum = 0;
  for (let i = 0; i < admitted.length; i++) {
    const start = (admitted[i] as ReplayRecord).sentMs;
    // Invariant: sum = Σ weights of admitted[i..end); end > i after the loop (spanMs > 0).
    while (end < admitted.length && (admitted[end] as ReplayRecord).sentMs < start + spanMs) {
      sum += weightOf(admitted[end] as ReplayRecord, kind);
      end++;
    }
    // A later record sent at the same instant starts the same window with fewer records counted:
    // its ratio is never larger, so the first record of such a run gives the window (strict >).
    const ratio = sum / limit - 1;
    if (best === null || ratio > best.ratio) best = { ratio, sum, startMs: start };
    sum -= weightOf(admitted[i] as ReplayRecord, kind);
  }
  return best;
}

/** Ratios at refusals of one tenant: admitted (sorted by sentMs) in (t − spanMs, t] / limit for each refusal time t. */
function ratiosAtRefusals(admitted: readonly ReplayRecord[], refusedAt: readonly number[], kind: LimitKind, limit: number, spanMs: number): number[] {
  // prefix[j] = Σ weights of admitted[0..j).
  const prefix = [0];
  for (const r of admitted) prefix.push((prefix[prefix.length - 1] as number) + weightOf(r, kind));
  /** Index of the first admitted record with sentMs > x. */
  const after = (x: number): number => {
    let lo = 0;
    let hi = admitted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((admitted[mid] as ReplayRecord).sentMs > x) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  return refusedAt.map((t) => ((prefix[after(t)] as number) - (prefix[after(t - spanMs)] as number)) / limit);
}

function refusalSummary(ratios: number[]): RefusalUtilisation {
  if (ratios.length === 0) return { refusals: 0, mean: null, median: null, p5: null, min: null };
  const sorted = [...ratios].sort((a, b) => a - b);
  const rank = (p: number): number => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] as number;
  return { refusals: sorted.length, mean: sorted.reduce((a, b) => a + b, 0) / sorted.length, median: rank(50), p5: rank(5), min: sorted[0] as number };
}

function summarise(ratios: readonly number[], admittedSum: number, limitSum: number): UtilisationSummary {
  if (ratios.length === 0) return { saturatedWindows: 0, mean: null, min: null, max: null, aggregate: null };
  return {
    saturatedWindows: ratios.length,
    mean: ratios.reduce((a, b) => a + b, 0) / ratios.length,
    min: ratios.reduce((a, b) => Math.min(a, b)),
    max: ratios.reduce((a, b) => Math.max(a, b)),
    aggregate: admittedSum / limitSum,
  };
}

/**
 * Accuracy of a run (pure; records in any order). See the module comment for the definitions.
 * @param records one per request the replay sent.
 * @param limits per tenant label (`ReplayRecord.tenant`): its limits per sliding window of `windowMs`.
 * @param opts window length, tolerance and run duration, ms.
 * @throws RangeError when windowMs ≤ 0, toleranceMs < 0 or ≥ windowMs, durationMs < 0, or a limit ≤ 0
 *   (or any of them not a finite number).
 */
export function accuracyOf(records: readonly ReplayRecord[], limits: ReadonlyMap<string, TenantLimits>, opts: AccuracyOptions): AccuracyResult {
  const { windowMs, toleranceMs, durationMs } = opts;
  if (!Number.isFinite(windowMs) || windowMs <= 0) throw new RangeError(`windowMs must be > 0 (got ${windowMs})`);
  if (!Number.isFinite(toleranceMs) || toleranceMs < 0 || toleranceMs >= windowMs) throw new RangeError(`toleranceMs must be in [0, windowMs) (got ${toleranceMs} with windowMs ${windowMs})`);
  if (!Number.isFinite(durationMs) || durationMs < 0) throw new RangeError(`durationMs must be >= 0 (got ${durationMs})`);
  for (const [tenant, l] of limits) {
    for (const kind of KINDS) {
      const v = l[kind];
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new RangeError(`${kind} limit of ${tenant} must be > 0 (got ${v})`);
    }
  }

  // Outcomes seen by clients, and records per tenant.
  let admittedCount = 0;
  let gateway429 = 0;
  let upstream429 = 0;
  let network = 0;
  const otherByStatus: Record<string, number> = {};
  const byTenant = new Map<string, ReplayRecord[]>();
  for (const r of records) {
    if (isAdmitted(r)) admittedCount++;
    else if (r.status === 429) {
      if (r.gatewayError) gateway429++;
      else upstream429++;
    } else if (r.status === 0) network++;
    else otherByStatus[String(r.status)] = (otherByStatus[String(r.status)] ?? 0) + 1;
    let list = byTenant.get(r.tenant);
    if (list === undefined) byTenant.set(r.tenant, (list = []));
    list.push(r);
  }

  // Over-admission on sliding windows shortened by the tolerance.
  const spanMs = windowMs - toleranceMs;
  const perTenant: OverAdmissionOf[] = [];
  const refusalRatios: Record<LimitKind, number[]> = { tokens: [], requests: [] };
  let overAdmission: number | null = null;
  let overAdmissionAt: AccuracyResult['overAdmissionAt'] = null;
  for (const tenant of [...limits.keys()].sort()) {
    const l = limits.get(tenant) as TenantLimits;
    const admitted = (byTenant.get(tenant) ?? []).filter(isAdmitted).sort((a, b) => a.sentMs - b.sentMs || a.i - b.i);
    for (const kind of KINDS) {
      const limit = l[kind];
      if (limit === undefined) continue;
      const best = sweep(admitted, kind, limit, spanMs);
      const refusedAt = (byTenant.get(tenant) ?? []).filter((r) => r.status === 429).map((r) => r.sentMs);
      refusalRatios[kind].push(...ratiosAtRefusals(admitted, refusedAt, kind, limit, spanMs));
      perTenant.push({ tenant, kind, limit, overAdmission: best?.ratio ?? null, admittedInWindow: best?.sum ?? null, windowStartMs: best?.startMs ?? null });
      if (best !== null && (overAdmission === null || best.ratio > overAdmission)) {
        overAdmission = best.ratio;
        overAdmissionAt = { tenant, kind, windowStartMs: best.startMs };
      }
    }
  }

  // Aligned whole windows: admitted and demand per tenant, utilisation of the saturated ones.
  let wholeWindows = Math.floor(durationMs / windowMs);
  // The definition, not the float division, decides: k counts while (k + 1)·windowMs ≤ durationMs.
  while ((wholeWindows + 1) * windowMs <= durationMs) wholeWindows++;
  while (wholeWindows > 0 && wholeWindows * windowMs > durationMs) wholeWindows--;
  const windows: WindowPoint[] = [];
  const sat = { tokens: { ratios: [] as number[], admitted: 0, limit: 0 }, requests: { ratios: [] as number[], admitted: 0, limit: 0 } };
  const tenants = [...new Set([...limits.keys(), ...byTenant.keys()])].sort();
  for (const tenant of tenants) {
    const acc = Array.from({ length: wholeWindows }, () => ({ admittedTokens: 0, demandTokens: 0, admittedRequests: 0, demandRequests: 0 }));
    for (const r of byTenant.get(tenant) ?? []) {
      if (r.status === 0) continue;
      const k = Math.floor(r.sentMs / windowMs);
      const w = acc[k];
      if (w === undefined) continue; // in the partial last window, or after the run
      w.demandTokens += r.reservedTokens;
      w.demandRequests++;
      if (isAdmitted(r)) {
        w.admittedTokens += admittedTokensOf(r);
        w.admittedRequests++;
      }
    }
    const l = limits.get(tenant);
    const tokensLimit = l?.tokens ?? null;
    const requestsLimit = l?.requests ?? null;
    acc.forEach((w, k) => {
      windows.push({ tenant, window: k, startMs: k * windowMs, ...w, tokensLimit, requestsLimit });
      for (const [kind, limit, demand, admitted] of [
        ['tokens', tokensLimit, w.demandTokens, w.admittedTokens],
        ['requests', requestsLimit, w.demandRequests, w.admittedRequests],
      ] as const) {
        // demand ≥ 1.1 × limit, as 10·demand ≥ 11·limit: exact for integers (1.1 × 200 is 220.00000000000003 in floats).
        if (limit === null || 10 * demand < 11 * limit) continue;
        sat[kind].ratios.push(admitted / limit);
        sat[kind].admitted += admitted;
        sat[kind].limit += limit;
      }
    });
  }

  return {
    windowMs,
    toleranceMs,
    durationMs,
    wholeWindows,
    overAdmission,
    overAdmissionAt,
    perTenant,
    utilisation: {
      tokens: summarise(sat.tokens.ratios, sat.tokens.admitted, sat.tokens.limit),
      requests: summarise(sat.requests.ratios, sat.requests.admitted, sat.requests.limit),
    },
    atRefusal: { tokens: refusalSummary(refusalRatios.tokens), requests: refusalSummary(refusalRatios.requests) },
    clients: { sent: records.length, admitted: admittedCount, status429: gateway429 + upstream429, gateway429, upstream429, otherByStatus, network },
    windows,
  };
}
