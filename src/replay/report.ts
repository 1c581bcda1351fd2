/**
 * What a replay measured: one record per request, and the report built from them — outcomes, the
 * upstream 429s the simulator counted, and per tenant per minute the admitted tokens and requests
 * against the limits the gateway announced in its `x-ratelimit-limit-*` headers.
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
  /** Minute of the replay clock: `floor(sentMs / 60000)`. */
  readonly minute: number;
  /** Sum of `usage.totalTokens` of admitted (2xx) requests sent in the minute. */
  readonly admittedTokens: number;
  /** Last `x-ratelimit-limit-tokens` seen for the tenant up to the end of the minute; null if never. */
  readonly tokensLimit: number | null;
  /** `admittedTokens / tokensLimit`; null without a limit. */
  readonly tokensRatio: number | null;
  /** Admitted (2xx) requests sent in the minute. */
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
   * Largest `admitted / limit − 1` over tenants, minutes and both kinds (tokens, requests); 0 when
   * never over. Minutes are fixed 60 s windows of the replay clock, so this compares against the
   * limit as a per-minute quota: a token bucket of capacity L refilling L per minute may by design
   * admit up to 2L in one fixed minute.
   */
  readonly overAdmission: number;
  /** Where the over-admission was found; null when 0. */
  readonly overAdmissionAt: { readonly tenant: string; readonly minute: number; readonly kind: 'tokens' | 'requests' } | null;
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
    const minute = Math.floor(r.sentMs / 60_000);
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
  let overAdmission = 0;
  let overAdmissionAt: ReplayReport['overAdmissionAt'] = null;
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
      for (const [kind, ratio] of [['tokens', tokensRatio], ['requests', requestsRatio]] as const) {
        if (ratio !== null && ratio - 1 > overAdmission) {
          overAdmission = ratio - 1;
          overAdmissionAt = { tenant, minute, kind };
        }
      }
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
  };
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
  out.push(`over-admission: ${pct(report.overAdmission)}${at === null ? '' : ` (${at.kind} of ${at.tenant} in minute ${at.minute})`}`);
  for (const w of report.warnings) out.push(`warning: ${w}`);
  return out.join('\n');
}
