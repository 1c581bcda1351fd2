/**
 * One limited request from admission to settlement: reserve (prompt + reserved output) on the
 * tenant's limits, call the deployment, pass the reply through (JSON whole, SSE event by event),
 * then settle on the provider's reported usage and release the concurrency slot — on every path.
 * This file holds the request's contract (`Exchange`, `DeploymentCall`) and its stages in order;
 * each stage's rules live in their own file: refusals and leased takes (`refusals.ts`), the upstream
 * attempt, retries and failover (`upstream-attempt.ts`), relaying the reply and its headers
 * (`relay.ts`), settlement and the concurrency slot (`settlement.ts`).
 */
import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment, Tier } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import { GatewayError, errorBody } from '../errors.ts';
import type { ErrorDialect } from '../errors.ts';
import type { AcquireResult } from '../limiter/types.ts';
import type { SseEvent } from '../providers/sse.ts';
import { jsonField } from '../providers/json-field.ts';
import type { StreamObserver, TokenUsage } from '../providers/types.ts';
import type { AdmitOutcome } from './admission-queue.ts';
import { newTrail } from '../ops/node-activity.ts';
import { levelEnabled } from '../ops/logging.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import type { GatewayContext } from './context.ts';
import { sendMisdirected } from './ownership.ts';
import { retryAfterHeaders } from '../providers/rate-limit-headers.ts';
import { wireFormatOf } from '../providers/wire-format.ts';
import { sendQuotaRefusal, sendRefusal, sendUnavailable, takeLeased } from './refusals.ts';
import { limitHeaders, passHeaders, pipeStream, scrubberOf, upstreamMessage } from './relay.ts';
import { finish, releaseSlot } from './settlement.ts';
import { callDeployment, nextDeployment, translatedCall, upstreamError } from './upstream-attempt.ts';

export { passHeaders, scrubberOf } from './relay.ts';
export { upstreamError } from './upstream-attempt.ts';

/** A stream of the other wire format, re-written in the client's: see `src/providers/translate`. */
export interface StreamTranslator {
  /** The client's SSE text for one upstream event ('' for none). */
  push(event: SseEvent): string;
  /** The client's SSE text that closes a finished stream. */
  end(): string;
}

/** How to call one deployment for this request, in the deployment's wire format. */
export interface DeploymentCall {
  /** Upstream provider path, e.g. `/v1/chat/completions`. */
  readonly path: string;
  readonly body: string | Buffer;
  /** Extra upstream headers (provider version headers). */
  readonly headers: Record<string, string>;
  /** Usage from the `usage` field of a JSON reply body. */
  readonly usageFromJson: (usage: unknown) => TokenUsage | undefined;
  /** A fresh stream observer, for SSE replies (of the deployment's format). */
  readonly observer: () => StreamObserver;
  /** Set when the deployment speaks the other wire format: its replies re-written in the client's. */
  readonly translate?: { json(text: string): string; stream(): StreamTranslator };
  /**
   * Set when the deployment streams something other than SSE (Bedrock's event stream, which is
   * always translated): the reply's content type and its decoder into events, in batches.
   */
  readonly framing?: { readonly contentType: string; events(body: AsyncIterable<Uint8Array>): AsyncIterable<readonly SseEvent[]> };
}

/** Everything a route knows about a request once it is parsed and counted; as a call, the primary deployment's. */
export interface Exchange extends DeploymentCall {
  readonly dialect: ErrorDialect;
  readonly tenant: TenantConfig;
  /** Priority tier of the request (its floor and longest queue wait). */
  readonly tier: Tier;
  readonly model: ModelConfig;
  readonly deployment: ResolvedDeployment;
  /** The model's other deployments, in order: a hard failure of one moves the request to the next. */
  readonly failover: readonly ResolvedDeployment[];
  /** The call of a failover deployment. @throws TranslationError when the request cannot be said in its format. */
  readonly callFor: (deployment: ResolvedDeployment) => DeploymentCall;
  /** Prompt tokens counted or estimated at admission. */
  readonly promptTokens: number;
  /** Output tokens reserved (max_tokens × n, or the model's default). */
  readonly reservedOutput: number;
  readonly stream: boolean;
  /**
   * Whether the request takes from its deployments' provider quotas (false for calls a provider
   * limits apart, such as Anthropic's count_tokens: no quota taken, a 429 drains none). @default true
   */
  readonly deploymentQuota?: boolean;
  /**
   * Called once per request whose reply succeeded (2xx), after it was relayed, with the upstream's
   * JSON text (undefined for a stream). `settle` is given when the reply may not have reported its
   * usage (a JSON reply without it, any stream): the concurrency slot was released, and returning
   * true takes the settlement over — the reservation (and the deployment quota it holds) stays
   * until `settle(actualTokens)` is called, once the provider reports the usage (Responses
   * `background: true`, whose usage comes with a later GET). Returning false settles as usual.
   * Never given `settle` in central mode (one call settles and releases there). @default none
   */
  readonly onReply?: (text: string | undefined, settle: ((actualTokens: number) => void) | undefined) => boolean;
}

/**
 * Runs an exchange and answers the client. Never throws for a client-caused condition: refusals and
 * upstream failures are rendered here; the slot is released and the reservation settled on every path.
 */
export async function runExchange(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, ex: Exchange): Promise<FastifyReply> {
  const startedAt = performance.now();
  const trail = newTrail(ex.tenant.id, ex.tier.name, ex.model.name, ex.promptTokens + ex.reservedOutput);
  request.trail = trail;
  try {
    return await exchange(ctx, request, reply, ex, trail);
  } finally {
    // A client that closed first: 499, as proxies log it.
    const status = trail.clientGone === true ? 499 : reply.raw.headersSent ? reply.raw.statusCode : reply.statusCode;
    ctx.activity.finished(trail, status, performance.now() - startedAt, request.log);
  }
}

async function exchange(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, ex: Exchange, trail: RequestTrail): Promise<FastifyReply> {
  const id = ctx.nextRequestId();
  const tenantId = ex.tenant.id;
  const cost = ex.promptTokens + ex.reservedOutput;
  const central = ctx.central;
  // Central mode: every limit of every tenant is in Redis; no owner, no spread.
  const spread = central === undefined && ctx.spread?.isSpread(tenantId) === true ? ctx.spread : undefined;
  // The tenant moved away while this request was being read and counted: never decide it here.
  if (central === undefined && spread === undefined && ctx.handoff !== undefined && !ctx.handoff.holds(tenantId)) return sendMisdirected(request, reply, ctx.handoff, tenantId, ctx.handoff.ring().owner(tenantId));
  if (spread !== undefined && ctx.handoff !== undefined && spread.placement(tenantId).index < 0) return sendMisdirected(request, reply, ctx.handoff, tenantId, spread.placement(tenantId).members[0]);
  // Hot tenant detection: the owner counts its tenants' requests (a found-hot tenant's share here × k).
  if (ctx.hot !== undefined && central === undefined) {
    if (spread === undefined) ctx.hot.observe(tenantId);
    else if (spread.isHot(tenantId) && spread.owns(tenantId)) ctx.hot.observeSpread(tenantId, spread.spreadOf(tenantId) ?? 1);
  }
  const leases = ctx.quotas?.leases;
  // The deployment's provider quota (a local lease of the cluster-wide cap), then the tenant's limits.
  const quotas = ctx.quotas !== undefined && ex.deploymentQuota !== false && ctx.quotas.limited.has(ex.deployment.name) ? ctx.quotas.leases : undefined;
  const closed = ctx.quotas?.closedOnFailure === true;
  if (quotas !== undefined) {
    const taken = await takeLeased(quotas, ex.deployment.name, cost, closed);
    if (taken === 'unavailable') return sendUnavailable(reply, ex);
    if (!taken.ok) return sendQuotaRefusal(reply, ex, taken.waitMs, cost);
  }
  // A spread tenant's requests/tokens limits: its node's lease of the tenant's global-cap buckets.
  const group = spread?.group(tenantId, ex.model.name);
  if (spread !== undefined && leases !== undefined && group !== undefined) {
    const taken = await takeLeased(leases, group, cost, closed);
    if (taken === 'unavailable' || !taken.ok) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (taken === 'unavailable') return sendUnavailable(reply, ex);
    if (!taken.ok) return sendRefusal(ctx, reply, ex, spread.refusal(group, taken.waitMs, { requests: 1, tokens: cost }), cost);
  }
  let admitted: AcquireResult;
  /** The deployment quota taken above is still this request's (a request that waits gives it back meanwhile). */
  let quotaHeld = quotas !== undefined;
  /** Time the request waited in its tenant's queue, ms. */
  let waitedMs = 0;
  if (central !== undefined) {
    const decided = await central.guard.run(() => central.limiter.acquire(tenantId, { id, tokens: cost, model: ex.model.name }));
    if (!decided.ok) {
      // The central store could not decide: never a rate-limit answer, and nothing charged.
      quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      request.log.warn({ tenant: tenantId, reason: decided.reason }, 'central store unavailable');
      return sendUnavailable(reply, ex);
    }
    admitted = decided.value;
  } else if (spread !== undefined) {
    // A spread tenant's requests/tokens limits are leases (taken above): no floor, no queue here.
    admitted = ctx.limiter.acquire(tenantId, { id, tokens: cost, model: ex.model.name });
  } else {
    const tier = ex.tier;
    const handoff = ctx.handoff;
    const attempt = (): AcquireResult | undefined =>
      handoff !== undefined && !handoff.holds(tenantId) ? undefined : ctx.limiter.acquire(tenantId, { id, tokens: cost, model: ex.model.name, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
    // When a waiter's deadline comes: how long a request like this one would still wait now.
    const hint = (): number => ctx.limiter.waitMs(tenantId, { tokens: cost, model: ex.model.name, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
    const decided = ctx.queues.admit(tenantId, tier.rank, tier.maxWaitMs, attempt, hint);
    let outcome: AdmitOutcome;
    if (decided.kind === 'waiting') {
      // It waits: the deployment quota it took goes back meanwhile, and a client that leaves takes it out of the queue.
      quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      quotaHeld = false;
      reply.raw.on('close', decided.leave);
      try {
        outcome = await decided.done;
      } finally {
        reply.raw.off('close', decided.leave);
      }
      if (outcome.kind === 'admitted' && quotas !== undefined) {
        const taken = await takeLeased(quotas, ex.deployment.name, cost, closed);
        quotaHeld = taken !== 'unavailable' && taken.ok;
        if (taken === 'unavailable' || !taken.ok) {
          // Admitted by the tenant's limits, not by the quota: the tenant gets its tokens and slot back.
          ctx.limiter.settle(tenantId, id, 0);
          ctx.limiter.release(tenantId, id);
          return taken === 'unavailable' ? sendUnavailable(reply, ex) : sendQuotaRefusal(reply, ex, taken.waitMs, cost);
        }
      }
      if (outcome.kind !== 'gone' && outcome.kind !== 'moved') waitedMs = outcome.waitedMs;
    } else outcome = decided;
    if (outcome.kind === 'gone') {
      trail.result = 'gone';
      trail.clientGone = true;
      trail.waitMs = waitedMs;
      return reply.hijack();
    }
    if (outcome.kind === 'moved') {
      if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      if (handoff !== undefined) return sendMisdirected(request, reply, handoff, tenantId, handoff.ring().owner(tenantId));
      return sendUnavailable(reply, ex);
    }
    if (outcome.kind !== 'admitted' && outcome.kind !== 'refused') {
      // Waited past its deadline, or found the queue full: the quota was given back when it queued.
      if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      return sendRefusal(ctx, reply, ex, outcome.result, cost, { kind: outcome.kind, waitedMs: outcome.waitedMs });
    }
    admitted = outcome.result;
  }
  if (!admitted.ok) {
    if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (group !== undefined) leases?.refund(group, { requests: 1, tokens: cost });
    return sendRefusal(ctx, reply, ex, group === undefined ? admitted : { ...admitted, limits: [...(spread?.limitStates(group) ?? []), ...admitted.limits] }, cost);
  }
  if (spread === undefined && central === undefined) ctx.handoff?.touched(tenantId);
  trail.result = 'admitted';
  trail.waitMs = waitedMs;
  ctx.activity.decided(trail);
  if (levelEnabled(request.log, 'debug')) request.log.debug({ tenant: tenantId, priority: ex.tier.name, tokens: cost, waitMs: Math.round(waitedMs), limits: admitted.limits.map((l) => `${l.name}=${l.remaining}/${l.limit}`) }, 'admitted');

  const headers = limitHeaders(ctx, ex.dialect, group === undefined ? admitted.limits : [...(spread?.limitStates(group) ?? []), ...admitted.limits]);
  headers['x-quotaring-request-id'] = id;
  if (waitedMs > 0) headers['x-quotaring-queued-ms'] = String(Math.round(waitedMs));
  // undici takes an EventEmitter as its abort signal: much cheaper per request than an AbortController.
  const cancel = new EventEmitter();
  const client = { gone: false };
  const raw = reply.raw;
  const onClose = (): void => {
    if (!raw.writableFinished) {
      client.gone = true;
      trail.clientGone = true;
      cancel.emit('abort');
    }
  };
  raw.on('close', onClose);
  // Tokens to settle at the end; starts at "refund everything" (upstream failure before any output).
  let actual = 0;
  /** A success: its upstream JSON text (undefined for a stream) and whether it reported usage, for `ex.onReply`. */
  let succeeded: { readonly text: string | undefined; readonly reported: boolean } | undefined;
  // The deployment serving the request and whose quota it holds (failover moves both).
  let deployment = ex.deployment;
  let call: DeploymentCall = ex;
  let held: string | undefined = quotas !== undefined ? ex.deployment.name : undefined;
  let nextCandidate = 0;
  // In flight from here to the `finally` that settles it.
  ctx.activity.inFlight++;
  try {
    if (wireFormatOf(ex.deployment.provider) !== ex.dialect) {
      // Every deployment of the client's format is down: this one speaks the other, translated.
      const translated = translatedCall(ex, ex.deployment);
      if (translated !== undefined) call = translated;
      else {
        const next = await nextDeployment(ctx, ex, held, cost, closed, () => nextCandidate++);
        if (next === undefined) return reply.code(400).headers(headers).send(errorBody(ex.dialect, 'invalid_request', `This request cannot be sent to deployment ${ex.deployment.name} (${ex.deployment.provider} API), and no other deployment of model ${ex.model.name} is available.`));
        held = next.held;
        deployment = next.deployment;
        call = next.call;
      }
    }
    for (;;) {
      trail.deployment = deployment.name;
      const attempt = await callDeployment(ctx, request, ex, deployment, call, cancel, client);
      if (attempt.kind === 'gone') {
        if (attempt.delivered) actual = ex.promptTokens;
        return reply.hijack();
      }
      // A hard failure (no connection, a 5xx, a 429 after its retries) moves the request to the next deployment at once.
      if (attempt.kind === 'failed' && attempt.hard) {
        ctx.health.failed(deployment);
        const next = await nextDeployment(ctx, ex, held, cost, closed, () => nextCandidate++);
        if (next !== undefined) {
          request.log.warn({ tenant: tenantId, from: deployment.name, to: next.deployment.name, status: attempt.status, err: attempt.reason }, 'deployment failed: failing over');
          held = next.held;
          deployment = next.deployment;
          call = next.call;
          continue;
        }
      }
      if (attempt.kind === 'failed') {
        // A provider 429 and the tenant's own limits may both ask for a wait: the client is told the later.
        let later: Record<string, string> | undefined;
        if (attempt.status === 429 && central === undefined && spread === undefined && (ctx.handoff === undefined || ctx.handoff.holds(tenantId))) {
          ctx.limiter.settle(tenantId, id, 0);
          ctx.limiter.release(tenantId, id);
          const own = ctx.limiter.waitMs(tenantId, { tokens: cost, model: ex.model.name, ...(ex.tier.floor > 0 ? { floor: ex.tier.floor } : {}) });
          if (own > (attempt.waitMs ?? 0) && own < Infinity) later = retryAfterHeaders(own);
        }
        return attempt.send(reply, headers, later);
      }
      const res = attempt.res;
      const scrubber = scrubberOf(ctx);
      passHeaders(scrubber, res.headers, headers, res.statusCode >= 400);
      Object.assign(headers, attempt.relayedHeaders);
      // Which deployment served, when it is not the model's first (a headroom choice or a failover).
      if (deployment.name !== ex.model.deployments[0]) headers['x-quotaring-deployment'] = deployment.name;
      const isEventStream = String(res.headers['content-type'] ?? '').startsWith(call.framing?.contentType ?? 'text/event-stream');
      if (res.statusCode >= 300 || !ex.stream || !isEventStream) {
        let text: string;
        try {
          text = attempt.text ?? (await res.body.text());
        } catch (err) {
          if (client.gone) {
            actual = ex.promptTokens;
            return reply.hijack();
          }
          const error = upstreamError(err);
          return reply.code(error.statusCode).headers({ ...headers, 'x-quotaring-error': error.code }).send(errorBody(ex.dialect, error.code, error.message));
        }
        if (res.statusCode < 300) {
          const usage = call.usageFromJson(jsonField(text, 'usage'));
          // No usage reported: keep the reservation (the conservative charge).
          actual = usage === undefined ? cost : usage.input + usage.output;
          succeeded = { text, reported: usage !== undefined };
        }
        if (call.translate !== undefined) {
          delete headers['content-length'];
          headers['content-type'] = 'application/json';
          if (res.statusCode < 300) {
            let translated: string;
            try {
              translated = call.translate.json(text);
            } catch (err) {
              const error = new GatewayError('upstream_unavailable', `Deployment ${deployment.name} sent a reply that could not be translated (${scrubber.text((err as Error).message)}).`);
              return reply.code(error.statusCode).headers({ ...headers, 'x-quotaring-error': error.code }).send(errorBody(ex.dialect, error.code, error.message));
            }
            return reply.code(res.statusCode).headers(headers).send(translated);
          }
          return reply.code(res.statusCode).headers(headers).send(errorBody(ex.dialect, res.statusCode === 429 ? 'rate_limit_exceeded' : 'invalid_request', upstreamMessage(scrubber.body(text), deployment.name)));
        }
        // An upstream error body may echo what it was sent (the provider key): scrubbed. Replies are not (model output).
        return reply.code(res.statusCode).headers(headers).send(res.statusCode < 300 ? text : scrubber.body(text));
      }
      if (call.translate !== undefined) headers['content-type'] = 'text/event-stream';
      actual = await pipeStream(ctx, reply, ex, call, res, headers, client, id);
      if (res.statusCode < 300) succeeded = { text: undefined, reported: false };
      return reply;
    }
  } finally {
    raw.off('close', onClose);
    ctx.activity.inFlight--;
    trail.used = actual;
    const quotaHolder = held;
    const settle = (tokens: number): void => {
      finish(ctx, tenantId, id, tokens, spread !== undefined);
      if (quotaHolder !== undefined && ctx.quotas !== undefined) {
        if (tokens < cost) ctx.quotas.leases.refund(quotaHolder, { tokens: cost - tokens });
        else if (tokens > cost) ctx.quotas.leases.debit(quotaHolder, { tokens: tokens - cost });
      }
      if (group !== undefined && leases !== undefined) {
        if (tokens < cost) leases.refund(group, { tokens: cost - tokens });
        else if (tokens > cost) leases.debit(group, { tokens: tokens - cost });
      }
    };
    let taken = false;
    if (succeeded !== undefined && ex.onReply !== undefined) {
      // Maybe still at work upstream (background): the slot goes back now, the tokens once it reports them.
      const deferrable = !succeeded.reported && central === undefined && releaseSlot(ctx, tenantId, id, spread !== undefined);
      taken = ex.onReply(succeeded.text, deferrable ? settle : undefined) && deferrable;
    }
    if (!taken) settle(actual);
  }
}
