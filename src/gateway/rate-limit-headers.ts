/**
 * Rate-limit response headers, scoped to the tenant (never the upstream organisation).
 * Source: OpenAI "Rate limits" guide (x-ratelimit-limit/remaining/reset-requests|tokens, reset as a
 * duration such as `1s`, `6m0s`); Anthropic "Rate limits" (anthropic-ratelimit-*-limit/remaining/reset,
 * reset as an RFC 3339 time).
 */
import { formatResetDuration } from '../config/duration.ts';
import type { LimitState } from '../limiter/types.ts';

/** The binding (least remaining) limit of a kind, or undefined when the tenant has none. */
function binding(limits: readonly LimitState[], kind: 'requests' | 'tokens'): LimitState | undefined {
  let best: LimitState | undefined;
  for (const l of limits) {
    if (l.kind === kind && (best === undefined || l.remaining < best.remaining)) best = l;
  }
  return best;
}

/**
 * OpenAI-style headers for a decision: for requests and for tokens, the limit with the least remaining.
 * Kinds the tenant has no limit of are left out.
 */
export function openAIRateLimitHeaders(limits: readonly LimitState[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const kind of ['requests', 'tokens'] as const) {
    const l = binding(limits, kind);
    if (l === undefined) continue;
    headers[`x-ratelimit-limit-${kind}`] = String(l.limit);
    headers[`x-ratelimit-remaining-${kind}`] = String(l.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatResetDuration(l.resetMs);
  }
  return headers;
}

/**
 * Anthropic-style headers (plus the OpenAI ones, which the gateway sends on every route).
 * @param nowMs current time in ms since the epoch, to turn reset durations into RFC 3339 times.
 */
export function anthropicRateLimitHeaders(limits: readonly LimitState[], nowMs: number): Record<string, string> {
  const headers = openAIRateLimitHeaders(limits);
  for (const kind of ['requests', 'tokens'] as const) {
    const l = binding(limits, kind);
    if (l === undefined) continue;
    headers[`anthropic-ratelimit-${kind}-limit`] = String(l.limit);
    headers[`anthropic-ratelimit-${kind}-remaining`] = String(l.remaining);
    headers[`anthropic-ratelimit-${kind}-reset`] = new Date(nowMs + l.resetMs).toISOString();
  }
  return headers;
}

/**
 * Headers of a 429: `retry-after` in whole seconds (rounded up, at least 1) and `retry-after-ms` exact.
 * @param retryAfterMs ms until every limit could admit the request.
 */
export function retryAfterHeaders(retryAfterMs: number): Record<string, string> {
  const ms = Math.max(0, Math.ceil(retryAfterMs));
  return { 'retry-after': String(Math.max(1, Math.ceil(ms / 1_000))), 'retry-after-ms': String(ms) };
}
