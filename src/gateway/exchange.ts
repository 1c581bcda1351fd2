/**
 * One limited request from admission to settlement: reserve (prompt + reserved output) on the
 * tenant's limits, call the deployment, pass the reply through (JSON whole, SSE event by event),
 * then settle on the provider's reported usage and release the concurrency slot — on every path.
 */
import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment, Tier } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import { GatewayError, errorBody } from '../errors.ts';
import type { ErrorDialect } from '../errors.ts';
import type { AcquireResult, LimitState } from '../limiter/types.ts';
import { SseSplitter } from '../providers/sse.ts';
import type { SseEvent } from '../providers/sse.ts';
import type { Dispatcher } from 'undici';
import { jsonField } from '../providers/json-field.ts';
import type { StreamObserver, TokenUsage } from '../providers/types.ts';
import type { AdmitOutcome } from './admission-queue.ts';
import { newTrail } from '../ops/node-activity.ts';
import { levelEnabled } from '../ops/logging.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import type { GatewayContext } from './context.ts';
import { sendMisdirected } from './ownership.ts';
import { providerRetryWaitMs } from '../providers/retry-wait.ts';
import { bodyRetryWaitMs, openAIShapedError } from '../providers/upstream-errors.ts';
import type { CapLeases, CapTakeResult } from '../globalcap/cap-leases.ts';
import { anthropicRateLimitHeaders, budgetHeaders, budgetRenewal, openAIRateLimitHeaders, retryAfterHeaders, rfc3339After } from '../providers/rate-limit-headers.ts';
import type { SettleDetail } from '../limiter/types.ts';
import { formatMicros, formatPicoUsdCeil } from '../pricing/usd.ts';
import { budgetedKey, pricesOf, reservedCost, settleDetail, staysOnOwner } from './spend.ts';
import { SecretScrubber } from '../security/scrub.ts';
import { wireFormatOf } from '../providers/wire-format.ts';
import { TranslationError } from '../providers/translate/index.ts';

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
   * Units the request takes from the tenant's requests limits: 0 for a call that holds only a
   * concurrency slot and is charged nothing (`count_tokens: free`). @default 1
   */
  readonly requests?: 0 | 1;
  /**
   * Called once per request whose reply succeeded (2xx), after it was relayed, with the upstream's
   * JSON text (undefined for a stream). `settle` is given when the reply may not have reported its
   * usage (a JSON reply without it, any stream): the concurrency slot was released, and returning
   * true takes the settlement over — the reservation (and the deployment quota it holds) stays
   * until `settle(actualTokens)` is called, once the provider reports the usage (Responses
   * `background: true`, whose usage comes with a later GET). Returning false settles as usual.
   * Never given `settle` in central mode (one call settles and releases there). @default none
   */
  readonly onReply?: (text: string | undefined, settle: ((actualTokens: number, usage?: TokenUsage) => void) | undefined) => boolean;
}

/** First wait before retrying a Bedrock ThrottlingException (it carries no retry-after), ms; `retry_backoff` overrides. */
const DEFAULT_BEDROCK_BACKOFF_MS = 1_000;

/**
 * Upstream response headers never passed to the client: hop-by-hop, length, and the upstream's own
 * limits (Azure's `x-ms-retry-after-ms` too: a relayed 429 carries `retry-after` and `retry-after-ms`,
 * which are replaced when the tenant must wait longer).
 */
const DROPPED_UPSTREAM_HEADER = /^(connection|keep-alive|transfer-encoding|content-length|content-encoding|set-cookie|x-ratelimit-.*|anthropic-ratelimit-.*|openai-organization|openai-project|x-ms-retry-after-ms)$/;
/** Upstream retry hints, passed only with an upstream error (a success carries the tenant's view alone). */
const RETRY_HEADER = /^(retry-after|retry-after-ms|x-should-retry)$/;

function limitHeaders(ctx: GatewayContext, dialect: ErrorDialect, limits: readonly LimitState[]): Record<string, string> {
  const headers = openAIRateLimitHeaders(limits);
  const now = ctx.clock.now();
  Object.assign(headers, budgetHeaders(limits, now));
  return dialect === 'anthropic' ? { ...headers, ...anthropicRateLimitHeaders(limits, now) } : headers;
}

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
    return reply.code(429).headers({ ...headers, 'x-should-retry': 'false', 'x-quotaring-error': 'request_too_large' }).send(errorBody(ex.dialect, 'request_too_large', message, { openaiType: 'insufficient_quota' }));
  }
  const renews = refusing === undefined ? rfc3339After(ctx.clock.now(), result.retryAfterMs) : budgetRenewal(refusing, ctx.clock.now());
  const spent = budget - (refusing?.remaining ?? 0);
  const message = `Budget ${result.limit} of ${whose} is spent: $${formatMicros(spent)} of $${formatMicros(budget)} used (requests in flight included) and ${needs}.${queued} It renews at ${renews}.`;
  const retry = result.retryAfterMs <= BUDGET_RETRY_MAX_MS ? retryAfterHeaders(result.retryAfterMs) : { 'x-should-retry': 'false' };
  return reply.code(429).headers({ ...headers, ...retry, 'x-quotaring-error': 'budget_exceeded' }).send(errorBody(ex.dialect, 'budget_exceeded', message));
}

/** One scrubber per deployment set (deployments never change on a reload; a new set gets a new one). */
const scrubbers = new WeakMap<object, SecretScrubber>();

/**
 * The scrubber of everything relayed from upstreams: it knows every deployment's provider key (a
 * failover or a shared proxy may echo another deployment's key than the one it was sent).
 */
export function scrubberOf(ctx: GatewayContext): SecretScrubber {
  const deployments = ctx.config.deployments;
  let scrubber = scrubbers.get(deployments);
  if (scrubber === undefined) {
    scrubber = new SecretScrubber([...deployments.values()].flatMap((d) => [d.apiKey, d.aws?.credentials.secretAccessKey, d.aws?.credentials.sessionToken]));
    scrubbers.set(deployments, scrubber);
  }
  return scrubber;
}

/** Copies the upstream's headers the client may see into `into`, scrubbed of credentials (see `SecretScrubber.headers`). */
export function passHeaders(scrubber: SecretScrubber, upstream: Record<string, string | string[] | undefined>, into: Record<string, string>, isError: boolean): void {
  const passed: Record<string, string> = {};
  for (const [name, value] of Object.entries(upstream)) {
    if (value === undefined || DROPPED_UPSTREAM_HEADER.test(name) || (!isError && RETRY_HEADER.test(name))) continue;
    passed[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  scrubber.headers(passed);
  Object.assign(into, passed);
}

/** Why a refused request did not wait, or how its wait ended (see `AdmissionQueues`). */
type QueueEnd = { readonly kind: 'timeout' | 'overflow'; readonly waitedMs: number } | undefined;

/**
 * Renders a refusal: 429 `rate_limit_exceeded` with retry headers, 429 `budget_exceeded` (a cost
 * limit, see {@link sendBudgetRefusal}), or 429 `request_too_large` that must not be retried.
 * @param money the request's reservation from cost limits, pico-dollars.
 */
function sendRefusal(ctx: GatewayContext, reply: FastifyReply, ex: Exchange, result: Extract<AcquireResult, { ok: false }>, cost: number, queue?: QueueEnd, money = 0n): FastifyReply {
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
    return reply
      .code(429)
      .headers({ ...headers, 'x-should-retry': 'false', 'x-quotaring-error': 'request_too_large' })
      .send(errorBody(ex.dialect, 'request_too_large', message, { openaiType: result.kind === 'tokens' ? 'tokens' : 'requests' }));
  }
  const wait = (result.retryAfterMs / 1_000).toFixed(3).replace(/\.?0+$/, '');
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
function sendQuotaRefusal(reply: FastifyReply, ex: Exchange, waitMs: number, cost: number): FastifyReply {
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
function sendUnavailable(reply: FastifyReply, ex: Exchange): FastifyReply {
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
async function takeLeased(leases: CapLeases, group: string, cost: number, closedOnFailure: boolean, requests = 1): Promise<CapTakeResult | 'unavailable'> {
  const want = { requests, tokens: cost };
  const taken = leases.take(group, want);
  if (leases.inFallback && closedOnFailure) {
    if (taken.ok) leases.refund(group, want);
    return 'unavailable';
  }
  return taken.ok ? taken : leases.takeAfterRenewals(group, want, taken);
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

/** Resolves when `stream` drains; rejects when it closes first (the client left). */
function drained(stream: NodeJS.WritableStream & EventEmitter): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', gone);
      resolve();
    };
    const gone = (): void => {
      stream.off('drain', done);
      stream.off('close', gone);
      reject(new Error('client closed the stream'));
    };
    stream.on('drain', done);
    stream.on('close', gone);
  });
}

/** Maps an undici failure before any response to a client error. */
export function upstreamError(err: unknown): GatewayError {
  const code = (err as { code?: string }).code ?? '';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new GatewayError('upstream_timeout');
  }
  return new GatewayError('upstream_unavailable', `The upstream provider could not be reached (${code || 'connection failed'}).`);
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
  const requests = ex.requests ?? 1;
  // Money reserved from the tenant's and key's cost limits, at the primary deployment's prices (pico-dollars).
  const money = reservedCost(pricesOf(ex.model, ex.deployment), ex.promptTokens, ex.reservedOutput);
  const keyId = request.keyId ?? undefined;
  /** What every acquire of this request asks besides its tokens: its model, key and money. */
  const asked = { requests, model: ex.model.name, ...(keyId === undefined ? {} : { key: keyId }), ...(money === 0n ? {} : { cost: money }) };
  const central = ctx.central;
  // Central mode: every limit of every tenant is in Redis; no owner, no spread.
  const spread = central === undefined && ctx.spread?.isSpread(tenantId) === true ? ctx.spread : undefined;
  // The tenant moved away while this request was being read and counted: never decide it here.
  if (central === undefined && spread === undefined && ctx.handoff !== undefined && !ctx.handoff.holds(tenantId)) return sendMisdirected(request, reply, ctx.handoff, tenantId, ctx.handoff.ring().owner(tenantId));
  if (spread !== undefined && ctx.handoff !== undefined && spread.placement(tenantId).index < 0) return sendMisdirected(request, reply, ctx.handoff, tenantId, spread.placement(tenantId).members[0]);
  // Hot tenant detection: the owner counts its tenants' requests (a found-hot tenant's share here × k).
  if (ctx.hot !== undefined && central === undefined) {
    if (spread === undefined) {
      if (!staysOnOwner(ex.tenant)) ctx.hot.observe(tenantId);
    }
    else if (spread.isHot(tenantId) && spread.owns(tenantId)) ctx.hot.observeSpread(tenantId, spread.spreadOf(tenantId) ?? 1);
  }
  // The primary deployment speaks another format: its call is the translation. A request that no
  // deployment of the model can take (every translation refuses it) is the client's fault: 400
  // before anything is taken (it used to be refused after admission, its request counted).
  const first = firstCall(ex);
  if (first instanceof TranslationError) return sendUntranslatable(reply, ex, first);
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
    const taken = await takeLeased(leases, group, cost, closed, requests);
    if (taken === 'unavailable' || !taken.ok) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (taken === 'unavailable') return sendUnavailable(reply, ex);
    if (!taken.ok) return sendRefusal(ctx, reply, ex, spread.refusal(group, taken.waitMs, { requests, tokens: cost }), cost);
  }
  let admitted: AcquireResult;
  /** The deployment quota taken above is still this request's (a request that waits gives it back meanwhile). */
  let quotaHeld = quotas !== undefined;
  /** Time the request waited in its tenant's queue, ms. */
  let waitedMs = 0;
  if (central !== undefined) {
    const decided = await central.guard.run(() => central.limiter.acquire(tenantId, { id, tokens: cost, ...asked }));
    if (!decided.ok) {
      // The central store could not decide: never a rate-limit answer, and nothing charged.
      quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      request.log.warn({ tenant: tenantId, reason: decided.reason }, 'central store unavailable');
      return sendUnavailable(reply, ex);
    }
    admitted = decided.value;
  } else if (spread !== undefined) {
    // A spread tenant's requests/tokens limits are leases (taken above): no floor, no queue here.
    admitted = ctx.limiter.acquire(tenantId, { id, tokens: cost, ...asked });
  } else {
    const tier = ex.tier;
    const handoff = ctx.handoff;
    const attempt = (): AcquireResult | undefined =>
      handoff !== undefined && !handoff.holds(tenantId) ? undefined : ctx.limiter.acquire(tenantId, { id, tokens: cost, ...asked, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
    // When a waiter's deadline comes: how long a request like this one would still wait now.
    const hint = (): number => ctx.limiter.waitMs(tenantId, { tokens: cost, ...asked, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
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
      return sendRefusal(ctx, reply, ex, outcome.result, cost, { kind: outcome.kind, waitedMs: outcome.waitedMs }, money);
    }
    admitted = outcome.result;
  }
  if (!admitted.ok) {
    if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (group !== undefined) leases?.refund(group, { requests, tokens: cost });
    return sendRefusal(ctx, reply, ex, group === undefined ? admitted : { ...admitted, limits: [...(spread?.limitStates(group) ?? []), ...admitted.limits] }, cost, undefined, money);
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
  /** The usage the provider reported (prices and weighs the settlement), when it did. */
  let reported: TokenUsage | undefined;
  /** A success that reported no usage: the reserved cost stays charged. */
  let unreported = false;
  /** A success: its upstream JSON text (undefined for a stream) and whether it reported usage, for `ex.onReply`. */
  let succeeded: { readonly text: string | undefined; readonly reported: boolean } | undefined;
  // The deployment serving the request and whose quota it holds (failover moves both).
  let deployment = ex.deployment;
  let call: DeploymentCall = first ?? ex;
  let held: string | undefined = quotas !== undefined ? ex.deployment.name : undefined;
  let nextCandidate = 0;
  // In flight from here to the `finally` that settles it.
  ctx.activity.inFlight++;
  try {
    if (first === null) {
      // The primary cannot take it translated, a failover deployment can (checked before admission).
      const next = await nextDeployment(ctx, ex, held, cost, closed, () => nextCandidate++);
      if (next === undefined) return reply.code(400).headers(headers).send(errorBody(ex.dialect, 'invalid_request', `This request cannot be sent to deployment ${ex.deployment.name} (${ex.deployment.provider} API), and no other deployment of model ${ex.model.name} is available.`));
      held = next.held;
      deployment = next.deployment;
      call = next.call;
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
          const own = ctx.limiter.waitMs(tenantId, { tokens: cost, ...asked, ...(ex.tier.floor > 0 ? { floor: ex.tier.floor } : {}) });
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
          // Gemini's and vLLM's error bodies are rewritten in OpenAI's shape (read already: a 429's).
          text = attempt.text ?? (res.statusCode >= 400 ? openAIShapedError(deployment.provider, res.statusCode, await res.body.text()) : await res.body.text());
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
          reported = usage;
          unreported = usage === undefined;
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
      const streamed = await pipeStream(ctx, reply, ex, call, res, headers, client, id);
      actual = streamed.tokens;
      reported = streamed.usage;
      if (res.statusCode < 300) succeeded = { text: undefined, reported: false };
      return reply;
    }
  } finally {
    raw.off('close', onClose);
    ctx.activity.inFlight--;
    trail.used = actual;
    const quotaHolder = held;
    // Priced by the deployment that served the request (a failover may have moved it to other prices).
    const servedPrices = pricesOf(ex.model, deployment);
    const settle = (tokens: number, usage?: TokenUsage, keepCost = false): void => {
      const detail = settleDetail(servedPrices, usage, ex.promptTokens, keepCost ? undefined : tokens);
      finish(ctx, tenantId, id, tokens, spread !== undefined, detail);
      // What the cost limits were charged: the actual cost, else the reservation that stays charged.
      if (ex.tenant.metrics) ctx.activity.metrics.spent(tenantId, ex.model.name, budgetedKey(ex.tenant, keyId), detail.cost ?? money);
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
    if (!taken) settle(actual, reported, unreported);
  }
}

/**
 * Frees the concurrency slot of reservation `id` and keeps its tokens reserved (see `Exchange.onReply`).
 * @returns false when this node no longer decides for the tenant (then the request settles at once).
 */
function releaseSlot(ctx: GatewayContext, tenant: string, id: string, spread: boolean): boolean {
  const handoff = ctx.handoff;
  if (!spread && handoff !== undefined && !handoff.holds(tenant)) return false;
  ctx.limiter.release(tenant, id);
  if (!spread) handoff?.touched(tenant);
  return true;
}

/**
 * The call of the primary deployment when it speaks another format than the client (its
 * translation); undefined when it speaks the client's (the call is `ex`); null when its translation
 * refuses the request but a failover deployment can take it; the primary's refusal when no
 * deployment of the model can.
 */
function firstCall(ex: Exchange): DeploymentCall | null | undefined | TranslationError {
  if (wireFormatOf(ex.deployment.provider) === ex.dialect) return undefined;
  const primary = translation(ex, ex.deployment);
  if (!(primary instanceof Error)) return primary;
  for (const d of ex.failover) if (!(translation(ex, d) instanceof Error)) return null;
  return primary instanceof TranslationError ? primary : new TranslationError('the request could not be translated');
}

/** 400 `invalid_request` for a request no deployment of its model can take, naming the primary's reason and field. */
function sendUntranslatable(reply: FastifyReply, ex: Exchange, why: TranslationError): FastifyReply {
  const message = `This request cannot be sent to deployment ${ex.deployment.name} (${ex.deployment.provider} API), and no other deployment of model ${ex.model.name} can take it: ${why.message}`;
  return reply.code(400).header('x-quotaring-error', 'invalid_request').send(errorBody(ex.dialect, 'invalid_request', message, { param: why.param }));
}

/** `ex.callFor(deployment)`, or the error that says why the request cannot be said in its format (any error: a translation that throws is a refusal). */
function translation(ex: Exchange, deployment: ResolvedDeployment): DeploymentCall | Error {
  try {
    return ex.callFor(deployment);
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/** `ex.callFor(deployment)`, or undefined when the request cannot be said in its format. */
function translatedCall(ex: Exchange, deployment: ResolvedDeployment): DeploymentCall | undefined {
  try {
    return ex.callFor(deployment);
  } catch {
    return undefined;
  }
}

/** The provider's error message from an error body (OpenAI's, Anthropic's, or AWS's `{"message"}`), for a reply in the client's format. */
function upstreamMessage(text: string, deployment: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown }; message?: unknown };
    if (typeof body.error?.message === 'string') return `Deployment ${deployment}: ${body.error.message}`;
    if (typeof body.message === 'string') return `Deployment ${deployment}: ${body.message}`;
  } catch {
    // not JSON: fall through
  }
  return `Deployment ${deployment} refused the request.`;
}

/** One deployment's answer: a response to relay, the client gone, or a failure to render or fail over from. */
type CallOutcome =
  | {
      readonly kind: 'response';
      readonly res: Dispatcher.ResponseData;
      /** The body, when it was read already (a relayed 429). */
      readonly text: string | undefined;
      readonly relayedHeaders: Record<string, string>;
    }
  | { readonly kind: 'gone'; /** Output may have been produced: settle on the prompt. */ readonly delivered: boolean }
  | {
      readonly kind: 'failed';
      /** A failure another deployment may not share: no connection, a 5xx, a 429 after its retries. */
      readonly hard: boolean;
      readonly status: number;
      readonly reason: string;
      /** A 429's wait as the provider gave it, ms. */
      readonly waitMs?: number;
      /** Renders the failure; `later` (retry headers) replaces the provider's when the tenant must wait longer. */
      readonly send: (reply: FastifyReply, headers: Record<string, string>, later?: Record<string, string>) => FastifyReply;
    };

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
): Promise<CallOutcome> {
  const forwarded: Record<string, string> = { ...call.headers };
  for (const name of deployment.forward_headers) {
    const value = request.headers[name];
    if (typeof value === 'string') forwarded[name] = value;
  }
  const quotas = ctx.quotas !== undefined && ex.deploymentQuota !== false && ctx.quotas.limited.has(deployment.name) ? ctx.quotas.leases : undefined;
  let budget = deployment.max_retry_wait;
  // A 429 that names no wait (Bedrock's ThrottlingException) waits this, doubled at each retry.
  let backoff = deployment.retry_backoff ?? (deployment.provider === 'bedrock' ? DEFAULT_BEDROCK_BACKOFF_MS : undefined);
  for (;;) {
    let res: Dispatcher.ResponseData;
    const sentAt = ctx.clock.now();
    try {
      res = await ctx.upstreams.request(deployment, { path: call.path, body: call.body, headers: forwarded, signal: cancel });
      ctx.health.record(deployment, ctx.clock.now() - sentAt);
      ctx.activity.upstream(deployment.name, res.statusCode);
    } catch (err) {
      // The client left before the upstream answered: nothing more to send.
      if (client.gone) return { kind: 'gone', delivered: true };
      ctx.activity.upstream(deployment.name, 0);
      const error = upstreamError(err);
      request.log.warn({ deployment: deployment.name, err: scrubberOf(ctx).text((err as Error).message) }, 'upstream request failed');
      return { kind: 'failed', hard: true, status: 0, reason: error.message, send: (reply, headers) => reply.code(error.statusCode).headers({ ...headers, 'x-quotaring-error': error.code }).send(errorBody(ex.dialect, error.code, error.message)) };
    }
    if (res.statusCode !== 429 && res.statusCode < 500) return { kind: 'response', res, text: undefined, relayedHeaders: {} };
    let raw: string;
    try {
      raw = await res.body.text();
    } catch (err) {
      if (client.gone) return { kind: 'gone', delivered: false };
      const error = upstreamError(err);
      return { kind: 'failed', hard: true, status: res.statusCode, reason: error.message, send: (reply, headers) => reply.code(error.statusCode).headers({ ...headers, 'x-quotaring-error': error.code }).send(errorBody(ex.dialect, error.code, error.message)) };
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
          return reply.code(status).headers(headers).send(errorBody(ex.dialect, 'upstream_unavailable', upstreamMessage(scrubber.body(body), deployment.name)));
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
          return reply.code(429).headers(headers).send(errorBody(ex.dialect, 'rate_limit_exceeded', upstreamMessage(scrubber.body(text), deployment.name)));
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
  closed: boolean,
  next: () => number,
): Promise<{ deployment: ResolvedDeployment; call: DeploymentCall; held: string | undefined } | undefined> {
  for (let i = next(); i < ex.failover.length; i = next()) {
    const candidate = ex.failover[i] as ResolvedDeployment;
    const call = translatedCall(ex, candidate);
    if (call === undefined) continue; // this request cannot be said in the candidate's format
    const quotas = ex.deploymentQuota === false ? undefined : ctx.quotas;
    if (quotas !== undefined && quotas.limited.has(candidate.name)) {
      const taken = await takeLeased(quotas.leases, candidate.name, cost, closed);
      if (taken === 'unavailable' || !taken.ok) continue;
      if (held !== undefined) quotas.leases.refund(held, { requests: 1, tokens: cost });
      return { deployment: candidate, call, held: candidate.name };
    }
    if (held !== undefined) quotas?.leases.refund(held, { requests: 1, tokens: cost });
    return { deployment: candidate, call, held: undefined };
  }
  return undefined;
}

/**
 * Settles reservation `id` on `actual` tokens and releases its slot: in this node's limiter while it
 * holds the tenant (synchronously: the next decision sees it), at the tenant's new owner otherwise.
 */
function finish(ctx: GatewayContext, tenant: string, id: string, actual: number, spread: boolean, detail: SettleDetail): void {
  const handoff = ctx.handoff;
  const central = ctx.central;
  if (central !== undefined) {
    // One call settles and frees the slot; if it fails the slot expires with its lease.
    void central.guard.run(() => central.limiter.finish(tenant, id, actual));
  } else if (spread) {
    // A spread tenant's slot is always this node's; its tokens were settled on the leases.
    ctx.limiter.release(tenant, id);
  } else if (handoff === undefined || handoff.holds(tenant)) {
    ctx.limiter.settle(tenant, id, actual, detail);
    ctx.limiter.release(tenant, id);
    handoff?.touched(tenant);
  } else {
    void handoff.finish(tenant, id, actual, 0, undefined, detail);
  }
}

/** The SSE events of a body, one batch per chunk (the splitter keeps an unterminated tail). */
async function* sseBatches(body: AsyncIterable<Buffer>, splitter: SseSplitter): AsyncGenerator<readonly SseEvent[]> {
  for await (const chunk of body) yield splitter.push(chunk);
}

/**
 * Passes an SSE reply through event by event, with backpressure, renewing the concurrency lease while
 * it flows. @returns tokens to settle: reported usage, or prompt + delivered output when the stream
 * ended early (client abort or upstream drop); and the usage when the stream reported it.
 */
async function pipeStream(
  ctx: GatewayContext,
  reply: FastifyReply,
  ex: Exchange,
  call: DeploymentCall,
  res: { statusCode: number; body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown } },
  headers: Record<string, string>,
  client: { readonly gone: boolean },
  id: string,
): Promise<{ readonly tokens: number; readonly usage: TokenUsage | undefined }> {
  const raw = reply.raw;
  reply.hijack();
  raw.writeHead(res.statusCode, headers);
  const splitter = new SseSplitter();
  const observer = call.observer();
  const translator = call.translate?.stream();
  const scrubber = scrubberOf(ctx);
  const renewEvery = 5_000;
  let lastRenew = ctx.clock.now();
  const batches = call.framing === undefined ? sseBatches(res.body, splitter) : call.framing.events(res.body);
  try {
    for await (const batch of batches) {
      let out = '';
      for (const upstreamEvent of batch) {
        // An error event may echo what the upstream was sent (the provider key): scrubbed; other events are passed exactly.
        const event = scrubber.event(upstreamEvent);
        const pass = observer.onEvent(event);
        if (translator !== undefined) out += translator.push(event);
        else if (pass) out += event.raw;
      }
      const now = ctx.clock.now();
      if (now - lastRenew >= renewEvery) {
        const central = ctx.central;
        if (central !== undefined) {
          void central.guard.run(() => central.limiter.renew(ex.tenant.id, id));
        } else if (ctx.spread?.isSpread(ex.tenant.id) === true) {
          ctx.limiter.renew(ex.tenant.id, id);
        } else if (ctx.handoff === undefined || ctx.handoff.holds(ex.tenant.id)) {
          ctx.limiter.renew(ex.tenant.id, id);
          ctx.handoff?.touched(ex.tenant.id);
        } else {
          void ctx.handoff.renew(ex.tenant.id, id);
        }
        lastRenew = now;
      }
      if (out.length > 0 && !raw.write(out)) await drained(raw);
    }
    raw.end(translator === undefined ? scrubber.text(splitter.rest()) : translator.end());
  } catch {
    res.body.destroy();
    // Client gone, or the upstream dropped the stream: mirror the drop so the client sees it.
    if (!raw.destroyed) raw.destroy();
  }
  const usage = observer.usage();
  if (usage !== undefined) return { tokens: usage.input + usage.output, usage };
  return { tokens: ex.promptTokens + observer.deliveredOutput, usage: undefined };
}
