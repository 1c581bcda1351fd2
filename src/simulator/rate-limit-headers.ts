/**
 * Provider-style rate-limit response headers of the simulator's quota.
 * - OpenAI (https://platform.openai.com/docs/guides/rate-limits, "Rate limits in headers"):
 *   `x-ratelimit-limit-requests|tokens`, `x-ratelimit-remaining-requests|tokens`,
 *   `x-ratelimit-reset-requests|tokens` = time until the limit is back to its initial state as a Go
 *   duration (`1s`, `6m0s`, `1.574s`, `20ms`); on 429 also `retry-after` (s) and `retry-after-ms`.
 * - Anthropic (https://docs.anthropic.com/en/api/rate-limits, "Response headers"):
 *   `anthropic-ratelimit-requests|tokens-limit|remaining|reset`, reset as an RFC 3339 time when
 *   the limit is fully replenished; `retry-after` (s) on 429.
 */
import type { LimitState } from '../limiter/index.ts';

/** Header name → value. */
export type HeaderMap = Record<string, string>;

/**
 * A duration as Go's `time.Duration.String()` prints it, at ms resolution: `0s`, `20ms`,
 * `1.574s`, `59s`, `6m0s`, `1h0m0s`.
 * @param ms duration in ms; rounded up to a whole ms; negative reads as 0.
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

/** Writes OpenAI's `x-ratelimit-*` headers of `limits` into `out`. */
export function addOpenAIRateLimitHeaders(out: HeaderMap, limits: readonly LimitState[]): void {
  for (const l of limits) {
    if (l.kind === 'concurrent') continue;
    out[`x-ratelimit-limit-${l.kind}`] = String(l.limit);
    out[`x-ratelimit-remaining-${l.kind}`] = String(l.remaining);
    out[`x-ratelimit-reset-${l.kind}`] = formatGoDuration(l.resetMs);
  }
}

/** Writes Anthropic's `anthropic-ratelimit-*` headers of `limits` into `out`. @param nowMs ms since the epoch. */
export function addAnthropicRateLimitHeaders(out: HeaderMap, limits: readonly LimitState[], nowMs: number): void {
  for (const l of limits) {
    if (l.kind === 'concurrent') continue;
    out[`anthropic-ratelimit-${l.kind}-limit`] = String(l.limit);
    out[`anthropic-ratelimit-${l.kind}-remaining`] = String(l.remaining);
    out[`anthropic-ratelimit-${l.kind}-reset`] = rfc3339After(nowMs, l.resetMs);
  }
}

/**
 * Writes `retry-after` (whole seconds, rounded up, at least 1) and, for OpenAI, `retry-after-ms`.
 * @param retryAfterMs ms until the request could be admitted.
 */
export function addRetryHeaders(out: HeaderMap, retryAfterMs: number, withMs: boolean): void {
  out['retry-after'] = String(Math.max(1, Math.ceil(retryAfterMs / 1000)));
  if (withMs) out['retry-after-ms'] = String(Math.ceil(retryAfterMs));
}
