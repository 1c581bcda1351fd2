/**
 * The tenant's rate-limit and budget headers on every reply, admitted or refused, in the client's
 * dialect: OpenAI's `x-ratelimit-*` always, Anthropic's `anthropic-ratelimit-*` too for an
 * Anthropic client, and the IETF `RateLimit-Policy` / `RateLimit` when `server.ratelimit_headers`
 * has `ietf` (see `src/providers/rate-limit-headers.ts` and `ietf-rate-limit-headers.ts`).
 */
import type { ErrorDialect } from '../errors.ts';
import type { LimitState } from '../limiter/types.ts';
import { ietfRateLimitHeaders } from '../providers/ietf-rate-limit-headers.ts';
import { anthropicRateLimitHeaders, budgetHeaders, openAIRateLimitHeaders } from '../providers/rate-limit-headers.ts';
import type { GatewayContext } from './context.ts';

/**
 * The tenant's rate-limit and budget headers in the client's dialect (OpenAI's `x-ratelimit-*`, plus
 * Anthropic's for an Anthropic client), and the IETF fields (draft-ietf-httpapi-ratelimit-headers
 * §3, §4) of the same limits when the config opts in.
 */
export function limitHeaders(ctx: GatewayContext, dialect: ErrorDialect, limits: readonly LimitState[]): Record<string, string> {
  const headers = openAIRateLimitHeaders(limits);
  const now = ctx.clock.now();
  Object.assign(headers, budgetHeaders(limits, now));
  if (ctx.config.config.server.ratelimit_headers.includes('ietf')) Object.assign(headers, ietfRateLimitHeaders(limits));
  return dialect === 'anthropic' ? { ...headers, ...anthropicRateLimitHeaders(limits, now) } : headers;
}
