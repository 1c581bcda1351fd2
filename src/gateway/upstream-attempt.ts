/**
 * Stage 2 of a request, the upstream attempt and failover: calling the deployment (its 429s retried
 * after the provider's wait within `max_retry_wait`, a provider 429 draining the deployment's
 * cluster-wide quota), what its answer means (a response to relay, the client gone, or a failure),
 * and on a hard failure the next deployment of the model (its wire format able to carry the request,
 * its quota taken) — until a response comes or none is left, when the failure is rendered. Each
 * deployment's call is chosen by `deployment-calls.ts`.
 */
import type { EventEmitter } from 'node:events';
import type { FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import type { ResolvedDeployment } from '../config/load.ts';
import { sendError } from '../error-reply.ts';
import { wallNow } from '../clock.ts';
import { adapterOf } from '../providers/adapters.ts';
import { retryAfterHeaders } from '../providers/rate-limit-headers.ts';
import { readProviderRateLimits } from '../providers/rate-limit-read.ts';
import { providerRetryWaitMs } from '../providers/retry-wait.ts';
import { bodyRetryWaitMs, openAIShapedError } from '../providers/upstream-errors.ts';
import type { GatewayContext } from './context.ts';
import { translatedCall } from './deployment-calls.ts';
import { passHeaders, scrubberOf } from './passed-headers.ts';
import { giveBackDeploymentQuota, takeDeploymentQuota } from './quota-take.ts';
import type { AdmittedRun, Answered, CallOutcome, DeploymentCall, Exchange, UpstreamResponse } from './request.ts';
import { upstreamError, upstreamMessage } from './upstream-failure.ts';
import { endAttemptSpan, startAttemptSpan } from './request-spans.ts';
import type { Span } from '../http/tracing.ts';

/**
 * Calls the deployments of the request until one answers: `served` (the primary's, from admission)
 * moves to the next deployment on each hard failure (no connection, a 5xx, a 429 after its
 * retries). @returns the response to relay (any status but a hard failure's), or the request
 * answered: the failure rendered when no deployment is left (a provider 429's wait replaced by the
 * tenant's own when that is later), nothing when the client left (`used` then names what to settle).
 */
export async function attemptUpstream(run: AdmittedRun): Promise<UpstreamResponse | Answered> {
  const { ctx, request, reply, ex, admission, served, cancel, client, used, trail } = run;
  const { id, cost, asked, headers, spread } = admission;
  const tenantId = ex.tenant.id;
  let nextCandidate = 0;
  // Upstream calls of this request so far (retries and failovers included): numbers the attempt spans.
  const attempts = { n: 0 };
  if (admission.first === null) {
    // The primary cannot take it translated, a failover deployment can (checked before admission).
    const next = await nextDeployment(ctx, ex, served.held, cost, () => nextCandidate++);
    if (next === undefined) return { kind: 'answered', reply: sendError(reply, ex.dialect, 'invalid_request', { headers, marked: false, message: `This request cannot be sent to deployment ${ex.deployment.name} (${ex.deployment.provider} API), and no other deployment of model ${ex.model.name} is available.` }) };
    served.held = next.held;
    served.deployment = next.deployment;
    served.call = next.call;
  }
  for (;;) {
    const { deployment, call } = served;
    trail.deployment = deployment.name;
    const attempt = await callDeployment(ctx, request, ex, deployment, call, cancel, client, run.span, attempts);
    if (attempt.kind === 'gone') {
      if (attempt.delivered) used.tokens = ex.promptTokens;
      return { kind: 'answered', reply: reply.hijack() };
    }
    // A hard failure (no connection, a 5xx, a 429 after its retries) moves the request to the next deployment at once.
    if (attempt.kind === 'failed' && attempt.hard) {
      ctx.health.failed(deployment);
      const next = await nextDeployment(ctx, ex, served.held, cost, () => nextCandidate++);
      if (next !== undefined) {
        request.log.warn({ tenant: tenantId, from: deployment.name, to: next.deployment.name, status: attempt.status, err: attempt.reason }, 'deployment failed: failing over');
        served.held = next.held;
        served.deployment = next.deployment;
        served.call = next.call;
        continue;
      }
    }
    if (attempt.kind === 'failed') {
      // A provider 429 and the tenant's own limits may both ask for a wait: the client is told the later.
      let later: Record<string, string> | undefined;
      if (attempt.status === 429) {
        // Where this node keeps the tenant's limits, the reservation goes back now and the tenant's own wait is known.
        const own = ctx.reservations.of(tenantId, spread !== undefined).refundForRetry(tenantId, id, { tokens: cost, ...asked, ...(ex.tier.floor > 0 ? { floor: ex.tier.floor } : {}) });
        if (own !== undefined && own > (attempt.waitMs ?? 0) && own < Infinity) later = retryAfterHeaders(own);
      }
      return { kind: 'answered', reply: attempt.send(reply, headers, later) };
    }
    return attempt;
  }
}

/**
 * Calls one deployment, retrying its 429s after the provider's wait while the request's waits fit
 * in the deployment's `max_retry_wait`. A 5xx is read whole and returned as a hard failure (the
 * caller fails over, or relays it).
 */
async function callDeployment(
  ctx: GatewayContext,
  request: FastifyRequest,
  ex: Exchange,
  deployment: ResolvedDeployment,
  call: DeploymentCall,
  cancel: EventEmitter,
  client: { readonly gone: boolean },
  span: Span | undefined,
  attempts: { n: number },
): Promise<CallOutcome> {
  const forwarded: Record<string, string> = { ...call.headers };
  for (const name of deployment.forward_headers) {
    const value = request.headers[name];
    if (typeof value === 'string') forwarded[name] = value;
  }
  const quotas = ctx.quotas !== undefined && ex.deploymentQuota !== false && ctx.quotas.limited.has(deployment.name) ? ctx.quotas.leases : undefined;
  let budget = deployment.max_retry_wait;
  // A 429 that names no wait (Bedrock's ThrottlingException) waits this, doubled at each retry.
  let backoff = deployment.retry_backoff ?? adapterOf(deployment.provider).defaultRetryBackoffMs;
  for (;;) {
    let res: Dispatcher.ResponseData;
    const sentAt = ctx.clock.now();
    attempts.n++;
    // Traced: each attempt its own span, its trace context sent to the provider (`traceparent`).
    const headers = span === undefined ? forwarded : { ...forwarded };
    const attemptSpan = span === undefined ? undefined : startAttemptSpan(ctx, span, ex, deployment, attempts.n, headers);
    try {
      res = await ctx.upstreams.request(deployment, { path: call.path, body: call.body, headers, signal: cancel });
      if (attemptSpan !== undefined) endAttemptSpan(attemptSpan, res.statusCode);
      ctx.health.record(deployment, ctx.clock.now() - sentAt);
      ctx.activity.upstream(deployment.name, res.statusCode);
    } catch (err) {
      if (attemptSpan !== undefined) endAttemptSpan(attemptSpan, 0);
      // The client left before the upstream answered: nothing more to send.
      if (client.gone) return { kind: 'gone', delivered: true };
      ctx.activity.upstream(deployment.name, 0);
      const error = upstreamError(err);
      request.log.warn({ deployment: deployment.name, err: scrubberOf(ctx).text((err as Error).message) }, 'upstream request failed');
      return { kind: 'failed', hard: true, status: 0, reason: error.message, send: (reply, headers) => sendError(reply, ex.dialect, error.code, { headers, message: error.message }) };
    }
    if (res.statusCode !== 429 && res.statusCode < 500) {
      // What the provider says it has left corrects the deployment's cluster bucket (background, rate-limited).
      const feedback = quotas === undefined ? undefined : ctx.quotas?.feedback;
      if (feedback?.has(deployment.name) === true && res.statusCode < 300) feedback.observe(deployment.name, readProviderRateLimits(res.headers, wallNow()), sentAt); // wall time: Anthropic resets are RFC 3339 times
      return { kind: 'response', res, text: undefined, relayedHeaders: {} };
    }
    let raw: string;
    try {
      raw = await res.body.text();
    } catch (err) {
      if (client.gone) return { kind: 'gone', delivered: false };
      const error = upstreamError(err);
      return { kind: 'failed', hard: true, status: res.statusCode, reason: error.message, send: (reply, headers) => sendError(reply, ex.dialect, error.code, { headers, message: error.message }) };
    }
    const text = openAIShapedError(deployment.provider, res.statusCode, raw);
    if (res.statusCode >= 500) {
      const status = res.statusCode;
      const upstreamHeaders = res.headers;
      const body = text;
      return {
        kind: 'failed',
        hard: true,
        status,
        reason: `HTTP ${status}`,
        send: (reply, headers) => {
          const scrubber = scrubberOf(ctx);
          passHeaders(scrubber, upstreamHeaders, headers, true);
          if (call.translate === undefined) return reply.code(status).headers(headers).send(scrubber.body(body));
          headers['content-type'] = 'application/json';
          return sendError(reply, ex.dialect, 'upstream_unavailable', { status, headers, marked: false, message: upstreamMessage(scrubber.body(body), deployment.name) });
        },
      };
    }
    // A 429 about billing (insufficient_quota) is not fixed by waiting: no retry, no cooldown, no failover.
    const billing = text.includes('insufficient_quota');
    // Gemini gives its wait only in the body (RetryInfo).
    const hinted = billing ? undefined : (providerRetryWaitMs(res.headers, Date.now()) ?? bodyRetryWaitMs(deployment.provider, raw));
    const wait = billing ? undefined : (hinted ?? backoff);
    if (hinted === undefined && backoff !== undefined) backoff *= 2;
    // A provider 429 drains the deployment's bucket for the whole cluster by its wait × rate.
    if (!billing && quotas !== undefined) void quotas.providerLimited(deployment.name, { retryAfterMs: wait ?? 1_000 });
    if (wait === undefined || wait > budget || String(res.headers['x-should-retry']) === 'false') {
      let relayedHeaders: Record<string, string> = {};
      if (billing) relayedHeaders = { 'x-should-retry': 'false' };
      else if (wait !== undefined && res.headers['retry-after'] === undefined) relayedHeaders = retryAfterHeaders(wait);
      const relayed: CallOutcome = { kind: 'response', res, text, relayedHeaders };
      if (billing) return relayed;
      const response = res;
      return {
        kind: 'failed',
        hard: true,
        status: 429,
        reason: 'rate limited after its retries',
        ...(wait === undefined ? {} : { waitMs: wait }),
        send: (reply, headers, later) => {
          const scrubber = scrubberOf(ctx);
          passHeaders(scrubber, response.headers, headers, true);
          Object.assign(headers, relayedHeaders, later);
          if (call.translate === undefined) return reply.code(429).headers(headers).send(scrubber.body(text));
          headers['content-type'] = 'application/json';
          return sendError(reply, ex.dialect, 'rate_limit_exceeded', { headers, marked: false, message: upstreamMessage(scrubber.body(text), deployment.name) });
        },
      };
    }
    budget -= wait;
    request.log.info({ deployment: deployment.name, waitMs: wait }, 'provider 429: retrying after its wait');
    if (!(await pause(wait, cancel)) || client.gone) return { kind: 'gone', delivered: false };
  }
}

/**
 * The next deployment to fail over to, with its call and its quota taken (the quota held for the
 * previous one given back); undefined when none is left. A candidate whose quota refuses, or whose
 * wire format cannot carry this request, is skipped.
 * @returns `held`: the deployment whose quota the request now holds (undefined: none).
 */
async function nextDeployment(
  ctx: GatewayContext,
  ex: Exchange,
  held: string | undefined,
  cost: number,
  next: () => number,
): Promise<{ deployment: ResolvedDeployment; call: DeploymentCall; held: string | undefined } | undefined> {
  for (let i = next(); i < ex.failover.length; i = next()) {
    const candidate = ex.failover[i] as ResolvedDeployment;
    const call = translatedCall(ex, candidate);
    if (call === undefined) continue; // this request cannot be said in the candidate's format
    const quotas = ex.deploymentQuota === false ? undefined : ctx.quotas;
    if (quotas !== undefined && quotas.limited.has(candidate.name)) {
      const taken = await takeDeploymentQuota(quotas, ex.tenant.id, candidate.name, cost);
      if (taken === 'unavailable' || !taken.ok) continue;
      if (held !== undefined) giveBackDeploymentQuota(quotas, ex.tenant.id, held, cost);
      return { deployment: candidate, call, held: candidate.name };
    }
    if (held !== undefined && quotas !== undefined) giveBackDeploymentQuota(quotas, ex.tenant.id, held, cost);
    return { deployment: candidate, call, held: undefined };
  }
  return undefined;
}

/** Resolves true after `ms`, or false as soon as `cancel` emits `abort` (the client left). */
function pause(ms: number, cancel: EventEmitter): Promise<boolean> {
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      cancel.off('abort', onAbort);
      resolve(true);
    }, ms);
    cancel.once('abort', onAbort);
  });
}
