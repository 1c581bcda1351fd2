/**
 * The answers of a request that is not admitted — 429 `rate_limit_exceeded` (with retry headers) or
 * `request_too_large` for a tenant's limit or a deployment's provider quota, 503
 * `limiter_unavailable` — and the take from a global-cap group's leases whose refusal they render.
 * "Limited" is a result here, never an exception; nothing is charged on these paths.
 */
import type { FastifyReply } from 'fastify';
import { GatewayError, errorBody } from '../errors.ts';
import type { CapLeases, CapTakeResult } from '../globalcap/cap-leases.ts';
import type { AcquireResult } from '../limiter/types.ts';
import { retryAfterHeaders } from '../providers/rate-limit-headers.ts';
import type { GatewayContext } from './context.ts';
import type { Exchange } from './exchange.ts';
import { limitHeaders } from './relay.ts';

/** Why a refused request did not wait, or how its wait ended (see `AdmissionQueues`). */
export type QueueEnd = { readonly kind: 'timeout' | 'overflow'; readonly waitedMs: number } | undefined;

/** Renders a refusal: 429 `rate_limit_exceeded` with retry headers, or 429 `request_too_large` that must not be retried. */
export function sendRefusal(ctx: GatewayContext, reply: FastifyReply, ex: Exchange, result: Extract<AcquireResult, { ok: false }>, cost: number, queue?: QueueEnd): FastifyReply {
  const trail = reply.request.trail;
  if (trail !== null) {
    trail.result = queue === undefined ? (result.reason === 'too_large' ? 'too_large' : 'limited') : queue.kind === 'timeout' ? 'queue_timeout' : 'queue_full';
    trail.limitKind = result.kind;
    trail.limit = result.limit;
  }
  const headers = limitHeaders(ctx, ex.dialect, result.limits);
  const refusing = result.limits.find((l) => l.name === result.limit);
  const capacity = refusing?.limit ?? 0;
  if (result.reason === 'too_large') {
    const unit = result.kind === 'tokens' ? `${cost} tokens (prompt ${ex.promptTokens} + max output ${ex.reservedOutput})` : `${cost} ${result.kind}`;
    const floored = ex.tier.floor > 0 && result.kind !== 'concurrent' ? ` and priority ${ex.tier.name} may use only ${Math.round((1 - ex.tier.floor) * 100)}% of it` : '';
    const message = `Request too large for ${result.limit} of tenant ${ex.tenant.id}: it needs ${unit} but the limit is ${capacity}${floored}. Lower max_tokens or shorten the prompt.`;
    return reply
      .code(429)
      .headers({ ...headers, 'x-should-retry': 'false', 'x-quotaring-error': 'request_too_large' })
      .send(errorBody(ex.dialect, 'request_too_large', message, { openaiType: result.kind === 'tokens' ? 'tokens' : 'requests' }));
  }
  const wait = (result.retryAfterMs / 1_000).toFixed(3).replace(/\.?0+$/, '');
  const queued =
    queue === undefined
      ? ''
      : queue.kind === 'timeout'
        ? ` Waited ${(queue.waitedMs / 1_000).toFixed(1)}s in the queue (max_wait of priority ${ex.tier.name}).`
        : ` The tenant's queue is full (queue.max_depth).`;
  const message = `Rate limit reached for ${result.limit} of tenant ${ex.tenant.id}: limit ${capacity}, remaining ${refusing?.remaining ?? 0}, requested ${result.kind === 'tokens' ? cost : 1}.${queued} Please try again in ${wait}s.`;
  return reply
    .code(429)
    .headers({ ...headers, ...retryAfterHeaders(result.retryAfterMs), 'x-quotaring-error': 'rate_limit_exceeded' })
    .send(errorBody(ex.dialect, 'rate_limit_exceeded', message, { openaiType: result.kind === 'tokens' ? 'tokens' : 'requests' }));
}

/**
 * 429 for a request its deployment's quota cannot take now (the node's lease of the cluster-wide
 * `quota × headroom` is spent): retry after `waitMs`; `waitMs` −1: larger than the quota can ever
 * take (request_too_large). Nothing was charged to the tenant.
 */
export function sendQuotaRefusal(reply: FastifyReply, ex: Exchange, waitMs: number, cost: number): FastifyReply {
  const name = ex.deployment.name;
  const trail = reply.request.trail;
  if (trail !== null) {
    trail.result = waitMs < 0 ? 'too_large' : 'limited';
    trail.limitKind = 'quota';
    trail.limit = name;
  }
  if (waitMs < 0) {
    const message = `Request too large for the provider quota of deployment ${name}: it needs ${cost} tokens (prompt ${ex.promptTokens} + max output ${ex.reservedOutput}). Lower max_tokens or shorten the prompt.`;
    return reply.code(429).headers({ 'x-should-retry': 'false', 'x-quotaring-error': 'request_too_large' }).send(errorBody(ex.dialect, 'request_too_large', message, { openaiType: 'tokens' }));
  }
  const wait = Math.max(1, waitMs);
  const message = `Rate limit reached for the provider quota of deployment ${name} (shared by every tenant of the model). Please try again in ${(wait / 1_000).toFixed(3).replace(/\.?0+$/, '')}s.`;
  return reply.code(429).headers({ ...retryAfterHeaders(wait), 'x-quotaring-error': 'rate_limit_exceeded' }).send(errorBody(ex.dialect, 'rate_limit_exceeded', message, { openaiType: 'tokens' }));
}

/** 503 `limiter_unavailable`: Redis is unreachable and `cluster.on_redis_failure` is `closed`. Nothing was charged. */
export function sendUnavailable(reply: FastifyReply, ex: Exchange): FastifyReply {
  if (reply.request.trail !== null) reply.request.trail.result = 'unavailable';
  const error = new GatewayError('limiter_unavailable');
  return reply.code(error.statusCode).headers({ 'retry-after': '1', 'x-quotaring-error': error.code }).send(errorBody(ex.dialect, error.code));
}

/**
 * One request (1 request, `cost` tokens) from a global-cap group's local leases. A refusal that only
 * means "a renewal is in flight" waits for it rather than refusing what the cluster can take.
 * @returns the take's result, or 'unavailable' when Redis is unavailable and `closedOnFailure` is set
 *   (whatever the local share gave is given back; the take itself keeps probing Redis).
 */
export async function takeLeased(leases: CapLeases, group: string, cost: number, closedOnFailure: boolean): Promise<CapTakeResult | 'unavailable'> {
  const want = { requests: 1, tokens: cost };
  const taken = leases.take(group, want);
  if (leases.inFallback && closedOnFailure) {
    if (taken.ok) leases.refund(group, want);
    return 'unavailable';
  }
  return taken.ok ? taken : leases.takeAfterRenewals(group, want, taken);
}
