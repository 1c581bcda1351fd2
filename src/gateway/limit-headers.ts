/**
 * The tenant's rate-limit and budget headers on every reply, admitted or refused, in the client's
 * dialect: OpenAI's `x-ratelimit-*` always, Anthropic's `anthropic-ratelimit-*` too for an
 * Anthropic client (see `src/providers/rate-limit-headers.ts` for each header's rule).
 */
import type { ErrorDialect } from '../errors.ts';
import type { LimitState } from '../limiter/types.ts';
import { anthropicRateLimitHeaders, budgetHeaders, openAIRateLimitHeaders } from '../providers/rate-limit-headers.ts';
import type { GatewayContext } from './context.ts';

/** The tenant's rate-limit and budget headers in the client's dialect (OpenAI's `x-ratelimit-*`, plus Anthropic's for an Anthropic client). */
export function limitHeaders(ctx: GatewayContext, dialect: ErrorDialect, limits: readonly LimitState[]): Record<string, string> {
  const headers = openAIRateLimitHeaders(limits);
  const now = ctx.clock.now();
  Object.assign(headers, budgetHeaders(limits, now));
  return dialect === 'anthropic' ? { ...headers, ...anthropicRateLimitHeaders(limits, now) } : headers;
}
