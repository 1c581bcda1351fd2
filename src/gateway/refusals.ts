/**
 * Admission's answers to a request it does not admit (used by `admission.ts`): 429
 * `rate_limit_exceeded` with retry headers, 429 `budget_exceeded` or `request_too_large` for a
 * tenant's limit, a budget or a deployment's provider quota, 503 `limiter_unavailable`, 400 for a
 * request no deployment can take in its format. "Limited" is a result here, never an exception;
 * nothing is charged on these paths.
 */
import type { FastifyReply } from 'fastify';
import { sendError } from '../error-reply.ts';
import type { AcquireResult } from '../limiter/types.ts';
import { formatMicros, formatPicoUsdCeil } from '../pricing/usd.ts';
import { budgetRenewal, retryAfterHeaders, rfc3339After } from '../providers/rate-limit-headers.ts';
import type { TranslationError } from '../providers/translate/index.ts';
import type { GatewayContext } from './context.ts';
import { limitHeaders } from './limit-headers.ts';
import { notTheTenants, quotaStates, refusingBucket } from './quota-state.ts';
import type { Exchange } from './request.ts';

/** Longest wait a budget refusal still names in `retry-after`, ms: beyond it the client is told not to retry (`x-should-retry: false`). */
const BUDGET_RETRY_MAX_MS = 3_600_000;

/**
 * Renders a refusal by a cost limit: 429 `request_too_large` when the request's reservation alone
 * exceeds the budget, else 429 `budget_exceeded` saying what is spent and when the budget renews,
 * with `retry-after` only when that is within the hour (else `x-should-retry: false`).
 * @param money the request's reservation, pico-dollars.
 */
function sendBudgetRefusal(ctx: GatewayContext, reply: FastifyReply, ex: Exchange, result: Extract<AcquireResult, { ok: false }>, money: bigint, headers: Record<string, string>, queued: string): FastifyReply {
  const refusing = result.limits.find((l) => l.name === result.limit);
  const budget = refusing?.limit ?? 0;
  const whose = result.limit.includes('#') ? `key ${result.limit.slice(result.limit.indexOf('#') + 1)} of tenant ${ex.tenant.id}` : `tenant ${ex.tenant.id}`;
  const needs = `it may cost up to ${formatPicoUsdCeil(money)} (prompt ${ex.promptTokens} + max output ${ex.reservedOutput} tokens at ${ex.model.name} prices)`;
  if (result.reason === 'too_large') {
    const message = `Request too large for budget ${result.limit} of ${whose}: ${needs} but the budget is $${formatMicros(budget)}${ex.tier.floor > 0 ? ` and priority ${ex.tier.name} may use only ${Math.round((1 - ex.tier.floor) * 100)}% of it` : ''}. Lower max_tokens or shorten the prompt.`;
    return sendError(reply, ex.dialect, 'request_too_large', { headers: { ...headers, 'x-should-retry': 'false' }, message, openaiType: 'insufficient_quota' });
  }
  const renews = refusing === undefined ? rfc3339After(ctx.clock.now(), result.retryAfterMs) : budgetRenewal(refusing, ctx.clock.now());
  const spent = budget - (refusing?.remaining ?? 0);
  const message = `Budget ${result.limit} of ${whose} is spent: $${formatMicros(spent)} of $${formatMicros(budget)} used (requests in flight included) and ${needs}.${queued} It renews at ${renews}.`;
  const retry = result.retryAfterMs <= BUDGET_RETRY_MAX_MS ? retryAfterHeaders(result.retryAfterMs) : { 'x-should-retry': 'false' };
  return sendError(reply, ex.dialect, 'budget_exceeded', { headers: { ...headers, ...retry }, message });
}

/** Why a refused request did not wait, or how its wait ended (see `AdmissionQueues`). */
export type QueueEnd = { readonly kind: 'timeout' | 'overflow'; readonly waitedMs: number } | undefined;

/**
 * Renders a refusal: 429 `rate_limit_exceeded` with retry headers, 429 `budget_exceeded` (a cost
 * limit, see {@link sendBudgetRefusal}), or 429 `request_too_large` that must not be retried.
 * @param money the request's reservation from cost limits, pico-dollars.
 */
export function sendRefusal(ctx: GatewayContext, reply: FastifyReply, ex: Exchange, result: Extract<AcquireResult, { ok: false }>, cost: number, queue?: QueueEnd, money = 0n): FastifyReply {
  const trail = reply.request.trail;
  if (trail !== null) {
    trail.result = queue === undefined ? (result.reason === 'too_large' ? 'too_large' : 'limited') : queue.kind === 'timeout' ? 'queue_timeout' : 'queue_full';
    trail.limitKind = result.kind;
    trail.limit = result.limit;
  }
  const headers = limitHeaders(ctx, ex.dialect, result.limits);
  const refusing = result.limits.find((l) => l.name === result.limit);
  const capacity = refusing?.limit ?? 0;
  const queued =
    queue === undefined
      ? ''
      : queue.kind === 'timeout'
        ? ` Waited ${(queue.waitedMs / 1_000).toFixed(1)}s in the queue (max_wait of priority ${ex.tier.name}).`
        : ` The tenant's queue is full (queue.max_depth).`;
  if (result.kind === 'cost') return sendBudgetRefusal(ctx, reply, ex, result, money, headers, queued);
  if (result.reason === 'too_large') {
    const unit = result.kind === 'tokens' ? `${cost} tokens (prompt ${ex.promptTokens} + max output ${ex.reservedOutput})` : `${cost} ${result.kind}`;
    const floored = ex.tier.floor > 0 && result.kind !== 'concurrent' ? ` and priority ${ex.tier.name} may use only ${Math.round((1 - ex.tier.floor) * 100)}% of it` : '';
    const message = `Request too large for ${result.limit} of tenant ${ex.tenant.id}: it needs ${unit} but the limit is ${capacity}${floored}. Lower max_tokens or shorten the prompt.`;
    return sendError(reply, ex.dialect, 'request_too_large', { headers: { ...headers, 'x-should-retry': 'false' }, message, openaiType: result.kind === 'tokens' ? 'tokens' : 'requests' });
  }
  const wait = (result.retryAfterMs / 1_000).toFixed(3).replace(/\.?0+$/, '');
  const message = `Rate limit reached for ${result.limit} of tenant ${ex.tenant.id}: limit ${capacity}, remaining ${refusing?.remaining ?? 0}, requested ${result.kind === 'tokens' ? cost : 1}.${queued} Please try again in ${wait}s.`;
  return sendError(reply, ex.dialect, 'rate_limit_exceeded', { headers: { ...headers, ...retryAfterHeaders(result.retryAfterMs) }, message, openaiType: result.kind === 'tokens' ? 'tokens' : 'requests' });
}

/**
 * 429 for a request its deployment's quota cannot take now (the node's lease of the cluster-wide
 * `quota × headroom` is spent): retry after `waitMs`; `waitMs` −1: larger than the quota can ever
 * take (request_too_large). Nothing was charged to the tenant. The OpenAI error `type` and the
 * message name the bucket that ran out (`requests`: rpm, `tokens`: tpm; see `refusingBucket`); the
 * quota's `x-ratelimit-*` headers (in the client's dialect) are sent for each kind the tenant has no
 * limit of its own of (`quota-state.ts`).
 */
export function sendQuotaRefusal(ctx: GatewayContext, reply: FastifyReply, ex: Exchange, waitMs: number, cost: number): FastifyReply {
  const name = ex.deployment.name;
  const trail = reply.request.trail;
  if (trail !== null) {
    trail.result = waitMs < 0 ? 'too_large' : 'limited';
    trail.limitKind = 'quota';
    trail.limit = name;
  }
  const states = quotaStates(ctx.quotas, ex.deployment);
  const headers = limitHeaders(ctx, ex.dialect, notTheTenants(states, ctx.config.policies.get(ex.tenant.id)));
  if (waitMs < 0) {
    const message = `Request too large for the provider quota of deployment ${name}: it needs ${cost} tokens (prompt ${ex.promptTokens} + max output ${ex.reservedOutput}). Lower max_tokens or shorten the prompt.`;
    return sendError(reply, ex.dialect, 'request_too_large', { headers: { ...headers, 'x-should-retry': 'false' }, message, openaiType: 'tokens' });
  }
  const wait = Math.max(1, waitMs);
  const refusing = refusingBucket(states, cost);
  const kind = refusing?.kind ?? 'tokens';
  const what =
    refusing === undefined
      ? ''
      : kind === 'requests'
        ? `: its requests (rpm) ran out (limit ${refusing.limit} a minute, quota x headroom; remaining ${refusing.remaining}; requested 1)`
        : `: its tokens (tpm) ran out (limit ${refusing.limit} a minute, quota x headroom; remaining ${refusing.remaining}; requested ${cost})`;
  const message = `Rate limit reached for the provider quota of deployment ${name} (shared by every tenant of the model)${what}. Please try again in ${(wait / 1_000).toFixed(3).replace(/\.?0+$/, '')}s.`;
  return sendError(reply, ex.dialect, 'rate_limit_exceeded', { headers: { ...headers, ...retryAfterHeaders(wait) }, message, openaiType: kind });
}

/** 503 `limiter_unavailable`: Redis is unreachable and `cluster.on_redis_failure` is `closed`. Nothing was charged. */
export function sendUnavailable(reply: FastifyReply, ex: Exchange): FastifyReply {
  if (reply.request.trail !== null) reply.request.trail.result = 'unavailable';
  return sendError(reply, ex.dialect, 'limiter_unavailable', { headers: { 'retry-after': '1' } });
}

/** 400 `invalid_request` for a request no deployment of its model can take, naming the primary's reason and field. */
export function sendUntranslatable(reply: FastifyReply, ex: Exchange, why: TranslationError): FastifyReply {
  const message = `This request cannot be sent to deployment ${ex.deployment.name} (${ex.deployment.provider} API), and no other deployment of model ${ex.model.name} can take it: ${why.message}`;
  return sendError(reply, ex.dialect, 'invalid_request', { message, param: why.param });
}

/**
 * 429 `share_exhausted`: the request is over its tenant's fair share of a deployment quota that
 * other tenants within their shares need now. `retry-after` is the earlier of when the request is
 * within its share again and when the quota above its reserve may cover it.
 * @param quotaWaitMs the leases' wait (above the reserve); @param shareWaitMs until within the share;
 * @param waitedMs how long it waited for its share (its tier's `max_wait`), told in the message and
 *   `x-quotaring-queued-ms`.
 */
export function sendShareRefusal(reply: FastifyReply, ex: Exchange, quotaWaitMs: number, shareWaitMs: number, waitedMs = 0): FastifyReply {
  const name = ex.deployment.name;
  const trail = reply.request.trail;
  if (trail !== null) {
    trail.result = 'limited';
    trail.limitKind = 'quota';
    trail.limit = `${name}#share`;
  }
  const wait = Math.max(1, quotaWaitMs > 0 ? Math.min(quotaWaitMs, shareWaitMs) : shareWaitMs);
  const queued = waitedMs > 0 ? ` Waited ${(waitedMs / 1_000).toFixed(1)}s (max_wait of priority ${ex.tier.name}).` : '';
  const message = `Rate limit reached for tenant ${ex.tenant.id}'s fair share of the provider quota of deployment ${name}: other tenants within their shares use the rest now.${queued} Please try again in ${(wait / 1_000).toFixed(3).replace(/\.?0+$/, '')}s.`;
  const headers = retryAfterHeaders(wait);
  if (waitedMs > 0) headers['x-quotaring-queued-ms'] = String(Math.round(waitedMs));
  return sendError(reply, ex.dialect, 'share_exhausted', { headers, message, openaiType: 'tokens' });
}
