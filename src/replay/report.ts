/**
 * What a replay measured: one record per request, and the report built from them — outcomes, the
 * upstream 429s the simulator counted, and per tenant per minute the admitted tokens and requests
 * against the limits the gateway announced in its `x-ratelimit-limit-*` headers.
 *
 * Every admitted request counts at its DECISION time — when it was sent plus the time it waited in
 * its tenant's queue (`x-quotaring-queued-ms`) — not at its send time: a batch request queued for
 * 50 s is admitted in the next minute, and filing it under the minute it was sent made an exact
 * limiter look 50% over its limit.
 */

/** Rate-limit headers of a response (OpenAI names), as numbers; null when absent or not a number. */
export interface RateLimitSnapshot {
  /** `x-ratelimit-limit-tokens`. */
  readonly limitTokens: number | null;
  /** `x-ratelimit-remaining-tokens`. */
  readonly remainingTokens: number | null;
  /** `x-ratelimit-limit-requests`. */
  readonly limitRequests: number | null;
  /** `x-ratelimit-remaining-requests`. */
  readonly remainingRequests: number | null;
}

/** Token usage reported in the response body (`usage`). */
export interface UsageSnapshot {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
}

/** One replayed request (a line of the JSONL output). */
export interface ReplayRecord {
  /** Position in the replay (0-based). */
  readonly i: number;
  /** Index of the row in the trace (0-based, header excluded). */
  readonly row: number;
  /** Tenant API key the request was sent with. */
  readonly tenant: string;
  /** Trace time of the row, ms from the first replayed row (not compressed by speed). */
  readonly atMs: number;
  /** When the request was sent, ms from the replay start (the schedule is `atMs / speed`). */
  readonly sentMs: number;
  /** `x-quotaring-queued-ms`: how long the gateway held it in its tenant's queue; null when it did not. */
  readonly queuedMs?: number | null;
  /**
   * When the gateway decided, ms from the replay start: `sentMs + queuedMs` (the network's few ms
   * aside). Absent in records of older versions: `sentMs`.
   */
  readonly decidedMs?: number;
  /** HTTP status; 0 when no response came (connection error, abort). */
  readonly status: number;
  /** ms from send to the end of the response body. */
  readonly latencyMs: number;
  /** Prompt tokens sent (the trace's, raised to the chat overhead when smaller). */
  readonly promptTokens: number;
  /** Completion tokens of the trace row (asked of the simulator by `x-sim-output-tokens`). */
  readonly completionTokens: number;
  /** `promptTokens + max_tokens`: what a provider-faithful gateway reserves at admission. */
  readonly reservedTokens: number;
  /** `usage` of the response; null when the response had none. */
  readonly usage: UsageSnapshot | null;
  /** Rate-limit headers of the response. */
  readonly headers: RateLimitSnapshot;
  /** `retry-after-ms`, else `retry-after` × 1000; null when absent. */
  readonly retryAfterMs: number | null;
  /** `x-quotaring-error`, else the body's `error.code` / `error.type`, else `network:<code>` / `aborted`; null on success. */
  readonly errorCode: string | null;
  /** True when the response carried `x-quotaring-error`: the gateway itself refused or failed it. */
  readonly gatewayError: boolean;
}

/** Admission against the announced limits for one tenant in one minute of the replay. */
export interface MinuteReport {
  readonly tenant: string;
  /** Minute of the replay clock in which the requests were decided: `floor(decidedMs / 60000)`. */
  readonly minute: number;
  /** Sum of `usage.totalTokens` of admitted (2xx) requests decided in the minute. */
  readonly admittedTokens: number;
  /** Last `x-ratelimit-limit-tokens` seen for the tenant up to the end of the minute; null if never. */
  readonly tokensLimit: number | null;
  /** `admittedTokens / tokensLimit`; null without a limit. */
  readonly tokensRatio: number | null;
  /** Admitted (2xx) requests decided in the minute. */
  readonly admittedRequests: number;
  /** Last `x-ratelimit-limit-requests` seen for the tenant up to the end of the minute; null if never. */
  readonly requestsLimit: number | null;
  /** `admittedRequests / requestsLimit`; null without a limit. */
  readonly requestsRatio: number | null;
}

/** Outcome counts of one tenant. */
export interface TenantReport {
  readonly tenant: string;
  readonly sent: number;
  readonly admitted: number;
  readonly limited: number;
  readonly otherErrors: number;
  /** Sum of `usage.totalTokens` over admitted requests. */
  readonly admittedTokens: number;
}

/** Facts about the run that the records do not carry. */
export interface ReplayRunInfo {
  /** Tenant assignment rule, e.g. `zipf(s=1.1, seed=42) over 5 tenants`. */
  readonly rule: string;
  /** Time compression (1 = real time). */
  readonly speed: number;
  /** Rows selected from the trace. */
  readonly rows: number;
  /** Wall time of the run, ms. */
  readonly durationMs: number;
  /** Simulator `rateLimited` after − before (includes any other client of that simulator meanwhile); null when no simulator was given. */
  readonly upstream429: number | null;
  /** Rows whose prompt was below the chat overhead and was sent larger. */
  readonly promptRaised: number;
  /** True when the run was stopped by its AbortSignal. */
  readonly aborted: boolean;
  /** Problems that did not stop the run (e.g. simulator stats unreadable afterwards). */
  readonly warnings: readonly string[];
}

/** The replay report (also the `--json` output). */
export interface ReplayReport extends ReplayRunInfo {
  /** Requests sent (records). */
  readonly sent: number;
  /** 2xx responses. */
  readonly admitted: number;
  /** 429 refused by the gateway (carrying `x-quotaring-error` with a limit code). */
  readonly limited: number;
  /** `limited` split by code (`rate_limit_exceeded`, `request_too_large`). */
  readonly limitedByCode: Readonly<Record<string, number>>;
  /** Everything else: other statuses (including 429 without our code) and requests with no response. */
  readonly otherErrors: number;
  /** `otherErrors` split by `status:errorCode`. */
  readonly otherByKind: Readonly<Record<string, number>>;
  /** Largest `sentMs - atMs / speed`: how far behind schedule the replayer fell, ms. */
  readonly maxLagMs: number;
  /** Latency percentiles of admitted requests, ms (null when none). */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number } | null;
  readonly tenants: readonly TenantReport[];
  /** One entry per tenant and minute with at least one request, ordered by tenant then minute. */
  readonly minutes: readonly MinuteReport[];
  /**
   * Largest `admitted / limit − 1` over tenants, both kinds (tokens, requests) and every SLIDING
   * window of {@link SLIDING_WINDOW_MS} (shortened by {@link WINDOW_TOLERANCE_MS}) starting at an
   * admitted request's decision time, as the benchmark measures it; 0 when never over. Exact for a
   * sliding-window limit of a minute: an exact limiter shows 0. A token bucket (capacity L, refill L
   * a minute) admits by design up to 2L in such a window: see {@link overBucketAllowance}.
   */
  readonly overAdmission: number;
  /** Where the over-admission was found (the window's start on the replay clock); null when 0. */
  readonly overAdmissionAt: { readonly tenant: string; readonly kind: 'tokens' | 'requests'; readonly windowStartMs: number } | null;
  /**
   * The same windows against a token bucket's allowance, capacity + a window of refill = 2 × the
   * limit: what neither algorithm may exceed. An exact limiter shows 0 whatever its algorithm.
   */
  readonly overBucketAllowance: number;
}

/** Length of the windows over-admission is measured on: the demo's and the benchmark's limits are per minute. */
export const SLIDING_WINDOW_MS = 60_000;
/** Shortening of each window for the gap between a response's headers and the gateway's decision, ms (as the benchmark). */
export const WINDOW_TOLERANCE_MS = 20;

/** When the gateway decided on `r` (see {@link ReplayRecord.decidedMs}). */
export function decidedAt(r: ReplayRecord): number {
  return r.decidedMs ?? r.sentMs + (r.queuedMs ?? 0);
}

/** Codes the gateway puts in `x-quotaring-error` on its own 429s. */
const LIMIT_CODES = new Set(['rate_limit_exceeded', 'request_too_large']);

/**
 * True when the record is a 429 refused by the gateway itself: `x-quotaring-error` present with a
 * limit code. A provider 429 passed through (same body code, no such header) is not.
 */
export function isLimited(r: ReplayRecord): boolean {
  return r.status === 429 && r.gatewayError && r.errorCode !== null && LIMIT_CODES.has(r.errorCode);
}

/** True when the record is admitted (any 2xx). */
export function isAdmitted(r: ReplayRecord): boolean {
  return r.status >= 200 && r.status < 300;
}

function percentile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

function bump(map: Record<string, number>, key: string): void {
  map[key] = (map[key] ?? 0) + 1;
}

interface MinuteAcc {
  admittedTokens: number;
  admittedRequests: number;
  tokensLimit: number | null;
  requestsLimit: number | null;
}

/**
 * Builds the report from the records of a run (pure; records in any order).
 * @param records one per request sent.
 * @param info facts about the run.
 */
export function buildReport(records: readonly ReplayRecord[], info: ReplayRunInfo): ReplayReport {
  const sorted = [...records].sort((a, b) => a.sentMs - b.sentMs || a.i - b.i);
  const limitedByCode: Record<string, number> = {};
  const otherByKind: Record<string, number> = {};
  const tenants = new Map<string, { sent: number; admitted: number; limited: number; otherErrors: number; admittedTokens: number }>();
  const perMinute = new Map<string, Map<number, MinuteAcc>>();
  /** Admitted records per tenant, for the sliding windows. */
  const admittedOf = new Map<string, ReplayRecord[]>();
  /** Last limit each tenant announced, per kind (in send order). */
  const limitsOf = new Map<string, { tokens: number | null; requests: number | null }>();
  const latencies: number[] = [];
  let admitted = 0;
  let limited = 0;
  let otherErrors = 0;
  let maxLagMs = 0;

  for (const r of sorted) {
    maxLagMs = Math.max(maxLagMs, r.sentMs - r.atMs / info.speed);
    let t = tenants.get(r.tenant);
    if (t === undefined) tenants.set(r.tenant, (t = { sent: 0, admitted: 0, limited: 0, otherErrors: 0, admittedTokens: 0 }));
    let minutes = perMinute.get(r.tenant);
    if (minutes === undefined) perMinute.set(r.tenant, (minutes = new Map()));
    const minute = Math.floor(decidedAt(r) / 60_000);
    const limits = limitsOf.get(r.tenant) ?? { tokens: null, requests: null };
    limitsOf.set(r.tenant, limits);
    if (r.headers.limitTokens !== null) limits.tokens = r.headers.limitTokens;
    if (r.headers.limitRequests !== null) limits.requests = r.headers.limitRequests;
    let m = minutes.get(minute);
    if (m === undefined) minutes.set(minute, (m = { admittedTokens: 0, admittedRequests: 0, tokensLimit: null, requestsLimit: null }));
    if (r.headers.limitTokens !== null) m.tokensLimit = r.headers.limitTokens;
    if (r.headers.limitRequests !== null) m.requestsLimit = r.headers.limitRequests;
    t.sent++;
    if (isAdmitted(r)) {
      admitted++;
      t.admitted++;
      const tokens = r.usage?.totalTokens ?? 0;
      t.admittedTokens += tokens;
      m.admittedTokens += tokens;
      m.admittedRequests++;
      latencies.push(r.latencyMs);
      const list = admittedOf.get(r.tenant) ?? [];
      admittedOf.set(r.tenant, list);
      list.push(r);
    } else if (isLimited(r)) {
      limited++;
      t.limited++;
      bump(limitedByCode, r.errorCode as string);
    } else {
      otherErrors++;
      t.otherErrors++;
      bump(otherByKind, `${r.status}:${r.errorCode ?? 'none'}`);
    }
  }

  const minuteReports: MinuteReport[] = [];
  const tenantNames = [...perMinute.keys()].sort();
  for (const tenant of tenantNames) {
    const minutes = perMinute.get(tenant) as Map<number, MinuteAcc>;
    let tokensLimit: number | null = null;
    let requestsLimit: number | null = null;
    for (const minute of [...minutes.keys()].sort((a, b) => a - b)) {
      const m = minutes.get(minute) as MinuteAcc;
      tokensLimit = m.tokensLimit ?? tokensLimit;
      requestsLimit = m.requestsLimit ?? requestsLimit;
      const tokensRatio = tokensLimit !== null && tokensLimit > 0 ? m.admittedTokens / tokensLimit : null;
      const requestsRatio = requestsLimit !== null && requestsLimit > 0 ? m.admittedRequests / requestsLimit : null;
      minuteReports.push({ tenant, minute, admittedTokens: m.admittedTokens, tokensLimit, tokensRatio, admittedRequests: m.admittedRequests, requestsLimit, requestsRatio });
    }
  }

  let overAdmission = 0;
  let overBucketAllowance = 0;
  let overAdmissionAt: ReplayReport['overAdmissionAt'] = null;
  for (const tenant of tenantNames) {
    const admittedRecords = (admittedOf.get(tenant) ?? []).sort((a, b) => decidedAt(a) - decidedAt(b));
    const limits = limitsOf.get(tenant) ?? { tokens: null, requests: null };
    for (const kind of ['tokens', 'requests'] as const) {
      const limit = limits[kind];
      if (limit === null || limit <= 0) continue;
      const worst = worstWindow(admittedRecords, kind === 'tokens' ? (r) => r.usage?.totalTokens ?? 0 : () => 1, SLIDING_WINDOW_MS - WINDOW_TOLERANCE_MS);
      if (worst === null) continue;
      if (worst.sum / limit - 1 > overAdmission) {
        overAdmission = worst.sum / limit - 1;
        overAdmissionAt = { tenant, kind, windowStartMs: worst.windowStartMs };
      }
      overBucketAllowance = Math.max(overBucketAllowance, worst.sum / (2 * limit) - 1);
    }
  }

  latencies.sort((a, b) => a - b);
  return {
    ...info,
    sent: records.length,
    admitted,
    limited,
    limitedByCode,
    otherErrors,
    otherByKind,
    maxLagMs,
    latencyMs: latencies.length === 0 ? null : { p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), max: latencies.at(-1) as number },
    tenants: tenantNames.map((tenant) => ({ tenant, ...(tenants.get(tenant) as Omit<TenantReport, 'tenant'>) })),
    minutes: minuteReports,
    overAdmission,
    overAdmissionAt,
    overBucketAllowance,
  };
}

/**
 * The heaviest window [t, t + spanMs) starting at a record's decision time: its sum of `weight`.
 * @param sorted records by decision time.
 */
function worstWindow(sorted: readonly ReplayRecord[], weight: (r: ReplayRecord) => number, spanMs: number): { sum: number; windowStartMs: number } | null {
  let best: { sum: number; windowStartMs: number } | null = null;
  let end = 0;
  let sum = 0;
  for (let start = 0; start < sorted.length; start++) {
    const from = decidedAt(sorted[start] as ReplayRecord);
    while (end < sorted.length && decidedAt(sorted[end] as ReplayRecord) < from + spanMs) sum += weight(sorted[end++] as ReplayRecord);
    if (best === null || sum > best.sum) best = { sum, windowStartMs: from };
    sum -= weight(sorted[start] as ReplayRecord);
  }
  return best;
}

function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (cells: readonly string[]) => cells.map((cell, c) => (c === 0 ? cell.padEnd(widths[c] as number) : cell.padStart(widths[c] as number))).join('  ');
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

const int = (n: number): string => n.toLocaleString('en-US');
const pct = (ratio: number | null): string => (ratio === null ? '-' : `${(ratio * 100).toFixed(1)}%`);
const orDash = (n: number | null): string => (n === null ? '-' : int(n));

/** The report as readable text: totals, per tenant, per tenant per minute, over-admission. */
export function formatReport(report: ReplayReport): string {
  const out: string[] = [];
  out.push(`replay: ${int(report.sent)} of ${int(report.rows)} rows sent at speed ${report.speed} in ${(report.durationMs / 1000).toFixed(1)} s${report.aborted ? ' (aborted)' : ''}`);
  out.push(`tenants: ${report.rule}`);
  const limitedDetail = Object.entries(report.limitedByCode).map(([k, v]) => `${k} ${int(v)}`).join(', ');
  const otherDetail = Object.entries(report.otherByKind).map(([k, v]) => `${k} ${int(v)}`).join(', ');
  out.push(`admitted ${int(report.admitted)}, limited ${int(report.limited)}${limitedDetail === '' ? '' : ` (${limitedDetail})`}, other errors ${int(report.otherErrors)}${otherDetail === '' ? '' : ` (${otherDetail})`}`);
  out.push(`upstream 429s (simulator): ${report.upstream429 === null ? 'not measured (no --simulator)' : int(report.upstream429)}`);
  if (report.latencyMs !== null) out.push(`latency of admitted: p50 ${report.latencyMs.p50.toFixed(1)} ms, p99 ${report.latencyMs.p99.toFixed(1)} ms, max ${report.latencyMs.max.toFixed(1)} ms`);
  out.push(`max lag behind schedule: ${report.maxLagMs.toFixed(1)} ms; prompts raised to the chat overhead: ${int(report.promptRaised)}`);
  out.push('');
  out.push(table(['tenant', 'sent', 'admitted', 'limited', 'other', 'admitted tokens'], report.tenants.map((t) => [t.tenant, int(t.sent), int(t.admitted), int(t.limited), int(t.otherErrors), int(t.admittedTokens)])));
  out.push('');
  out.push(table(
    ['tenant', 'minute', 'tokens', 'tokens limit', 'of limit', 'requests', 'requests limit', 'of limit'],
    report.minutes.map((m) => [m.tenant, String(m.minute), int(m.admittedTokens), orDash(m.tokensLimit), pct(m.tokensRatio), int(m.admittedRequests), orDash(m.requestsLimit), pct(m.requestsRatio)]),
  ));
  out.push('');
  const at = report.overAdmissionAt;
  out.push('minutes and windows count each admitted request when the gateway decided it (sent + queued), not when it was sent');
  out.push(`over-admission, worst sliding ${SLIDING_WINDOW_MS / 1_000} s window against the limit: ${pct(report.overAdmission)}${at === null ? '' : ` (${at.kind} of ${at.tenant}, window from ${(at.windowStartMs / 1_000).toFixed(1)} s)`}`);
  out.push(`  exact for sliding_window limits; a token bucket may admit up to 2 × its limit in a window by design (capacity + a window of refill)`);
  out.push(`over-admission against a token bucket's allowance (2 × the limit per window): ${pct(report.overBucketAllowance)}`);
  for (const w of report.warnings) out.push(`warning: ${w}`);
  return out.join('\n');
}
