/**
 * Provider-style rate-limit headers, shared by the gateway (tenant-scoped) and the simulator
 * (provider quota).
 * - OpenAI ("Rate limits" guide, "Rate limits in headers"): `x-ratelimit-limit-requests|tokens`,
 *   `x-ratelimit-remaining-*`, `x-ratelimit-reset-*` = time until the limit is back to its initial
 *   state as a Go duration (`1s`, `6m0s`, `1.574s`, `20ms`); on 429 also `retry-after` (s) and
 *   `retry-after-ms`.
 * - Anthropic ("Rate limits", "Response headers"): `anthropic-ratelimit-requests|tokens-limit|
 *   remaining|reset`, reset as an RFC 3339 time when the limit is fully replenished; `retry-after` (s).
 */
import type { LimitState } from '../limiter/types.ts';
import { formatMicros } from '../pricing/usd.ts';

/** Header name → value. */
export type HeaderMap = Record<string, string>;

/**
 * A duration as Go's `time.Duration.String()` prints it, at ms resolution: `0s`, `20ms`, `1.574s`,
 * `59s`, `6m0s`, `1h0m0s`. @param ms rounded up to a whole ms; negative reads as 0.
 */
export function formatGoDuration(ms: number): string {
  const t = Math.ceil(ms);
  if (!(t > 0)) return '0s';
  if (t < 1000) return `${t}ms`;
  const h = Math.floor(t / 3_600_000);
  const m = Math.floor((t % 3_600_000) / 60_000);
  const restMs = t % 60_000;
  const whole = Math.floor(restMs / 1000);
  const frac = restMs % 1000;
  const s = frac === 0 ? String(whole) : `${whole}.${String(frac).padStart(3, '0').replace(/0+$/, '')}`;
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

/**
 * RFC 3339 UTC time (whole seconds, rounded up) of `nowMs + ms`, e.g. `2023-11-14T22:14:21Z`.
 * @param nowMs ms since the epoch; @param ms ms from now.
 */
export function rfc3339After(nowMs: number, ms: number): string {
  const at = Math.ceil((nowMs + Math.max(0, ms)) / 1000) * 1000;
  return new Date(at).toISOString().replace('.000Z', 'Z');
}

/** The binding (least remaining) limit of a kind, or undefined when there is none. */
export function binding(limits: readonly LimitState[], kind: 'requests' | 'tokens' | 'concurrent'): LimitState | undefined {
  let best: LimitState | undefined;
  for (const l of limits) {
    if (l.kind === kind && (best === undefined || l.remaining < best.remaining)) best = l;
  }
  return best;
}

/**
 * OpenAI's `x-ratelimit-*` headers: for requests and for tokens, the limit with the least remaining.
 * Kinds without a limit are left out.
 */
export function openAIRateLimitHeaders(limits: readonly LimitState[]): HeaderMap {
  const headers: HeaderMap = {};
  const requests = binding(limits, 'requests');
  if (requests !== undefined) {
    headers['x-ratelimit-limit-requests'] = String(requests.limit);
    headers['x-ratelimit-remaining-requests'] = String(requests.remaining);
    headers['x-ratelimit-reset-requests'] = formatGoDuration(requests.resetMs);
  }
  const tokens = binding(limits, 'tokens');
  if (tokens !== undefined) {
    headers['x-ratelimit-limit-tokens'] = String(tokens.limit);
    headers['x-ratelimit-remaining-tokens'] = String(tokens.remaining);
    headers['x-ratelimit-reset-tokens'] = formatGoDuration(tokens.resetMs);
  }
  return headers;
}

/** Anthropic's `anthropic-ratelimit-*` headers of the binding limits. @param nowMs ms since the epoch. */
export function anthropicRateLimitHeaders(limits: readonly LimitState[], nowMs: number): HeaderMap {
  const headers: HeaderMap = {};
  for (const kind of ['requests', 'tokens'] as const) {
    const l = binding(limits, kind);
    if (l === undefined) continue;
    headers[`anthropic-ratelimit-${kind}-limit`] = String(l.limit);
    headers[`anthropic-ratelimit-${kind}-remaining`] = String(l.remaining);
    headers[`anthropic-ratelimit-${kind}-reset`] = rfc3339After(nowMs, l.resetMs);
  }
  return headers;
}

/** The binding budget (a `cost` limit with the least micro-dollars left), or undefined when none applies. */
export function bindingBudget(limits: readonly LimitState[]): LimitState | undefined {
  let best: LimitState | undefined;
  for (const l of limits) if (l.kind === 'cost' && (best === undefined || l.remaining < best.remaining)) best = l;
  return best;
}

/**
 * When budget `b` renews, RFC 3339 UTC: its period's end (`resetAt`) when the state carries it,
 * else `nowMs + resetMs` rounded up to the second.
 * @param nowMs ms since the epoch, when the reply is rendered.
 */
export function budgetRenewal(b: LimitState, nowMs: number): string {
  return b.resetAt === undefined ? rfc3339After(nowMs, b.resetMs) : rfc3339After(b.resetAt, 0);
}

/**
 * quotaring's budget headers, on every reply of a tenant or key with a cost limit (the binding one:
 * least left): `x-quotaring-budget` (its name, e.g. `cost/month`, `cost/1d#ci`),
 * `x-quotaring-budget-limit-usd` and `x-quotaring-budget-remaining-usd` (decimal US dollars, six
 * places; remaining after this request's reservation, rounded down), `x-quotaring-budget-reset`
 * (RFC 3339 UTC time when the period ends and the budget renews). Empty when no budget applies.
 * @param nowMs ms since the epoch.
 */
export function budgetHeaders(limits: readonly LimitState[], nowMs: number): HeaderMap {
  const b = bindingBudget(limits);
  if (b === undefined) return {};
  return {
    'x-quotaring-budget': b.name,
    'x-quotaring-budget-limit-usd': formatMicros(b.limit),
    'x-quotaring-budget-remaining-usd': formatMicros(b.remaining),
    'x-quotaring-budget-reset': budgetRenewal(b, nowMs),
  };
}

/**
 * Headers of a 429: `retry-after` in whole seconds (rounded up, at least 1) and, unless `withMs` is
 * false, `retry-after-ms` (exact, rounded up). @param retryAfterMs ms until the request could pass.
 */
export function retryAfterHeaders(retryAfterMs: number, withMs = true): HeaderMap {
  const ms = Math.max(0, Math.ceil(retryAfterMs));
  const headers: HeaderMap = { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))) };
  if (withMs) headers['retry-after-ms'] = String(ms);
  return headers;
}
