/**
 * Stage 1 of a request, admission: whether this node decides for the tenant (else 421 naming its
 * owner), hot-tenant counting, whether any deployment of the model can take the request in its wire
 * format (else 400 before anything is taken), then the reservation — the primary deployment's
 * provider quota (a lease of the cluster-wide cap), a spread tenant's leased share, and the tenant's
 * limits (this node's limiter and its priority queue, or Redis in central mode). Refusals are
 * rendered by `refusals.ts`; an admitted request leaves with what the later stages need of it.
 */
import type { AcquireResult } from '../limiter/types.ts';
import { levelEnabled } from '../ops/logging.ts';
import { TranslationError } from '../providers/translate/index.ts';
import type { AdmitOutcome } from './admission-queue.ts';
import { firstCall } from './deployment-calls.ts';
import { limitHeaders } from './limit-headers.ts';
import { sendMisdirected } from './ownership.ts';
import { takeLeased } from './quota-take.ts';
import { sendQuotaRefusal, sendRefusal, sendUnavailable, sendUntranslatable } from './refusals.ts';
import type { Admission, Answered, RequestRun } from './request.ts';
import { pricesOf, reservedCost, staysOnOwner } from './spend.ts';

/**
 * Admits a request, or answers it: 421 when another node decides for its tenant, 400 when no
 * deployment can take it, 429 when a limit, budget or quota refuses it (after its queue wait, for a
 * tier with `max_wait`), 503 when the limits cannot be decided, nothing when the client left while
 * it waited. Nothing is held on an answered path; an admitted request holds its reservation, and
 * its deployment quota or spread lease, until settlement.
 */
export async function admit(run: RequestRun): Promise<Admission | Answered> {
  const { ctx, request, reply, ex, trail } = run;
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
  if (central === undefined && spread === undefined && ctx.handoff !== undefined && !ctx.handoff.holds(tenantId)) return { kind: 'answered', reply: await sendMisdirected(request, reply, ctx.handoff, tenantId, ctx.handoff.ring().owner(tenantId)) };
  if (spread !== undefined && ctx.handoff !== undefined && spread.placement(tenantId).index < 0) return { kind: 'answered', reply: await sendMisdirected(request, reply, ctx.handoff, tenantId, spread.placement(tenantId).members[0]) };
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
  if (first instanceof TranslationError) return { kind: 'answered', reply: sendUntranslatable(reply, ex, first) };
  const leases = ctx.quotas?.leases;
  // The deployment's provider quota (a local lease of the cluster-wide cap), then the tenant's limits.
  const quotas = ctx.quotas !== undefined && ex.deploymentQuota !== false && ctx.quotas.limited.has(ex.deployment.name) ? ctx.quotas.leases : undefined;
  const closed = ctx.quotas?.closedOnFailure === true;
  if (quotas !== undefined) {
    const taken = await takeLeased(quotas, ex.deployment.name, cost, closed);
    if (taken === 'unavailable') return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    if (!taken.ok) return { kind: 'answered', reply: sendQuotaRefusal(reply, ex, taken.waitMs, cost) };
  }
  // A spread tenant's requests/tokens limits: its node's lease of the tenant's global-cap buckets.
  const group = spread?.group(tenantId, ex.model.name);
  if (spread !== undefined && leases !== undefined && group !== undefined) {
    const taken = await takeLeased(leases, group, cost, closed, requests);
    if (taken === 'unavailable' || !taken.ok) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (taken === 'unavailable') return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    if (!taken.ok) return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, spread.refusal(group, taken.waitMs, { requests, tokens: cost }), cost) };
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
      return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    }
    admitted = decided.value;
  } else if (spread !== undefined) {
    // A spread tenant's requests/tokens limits are leases (taken above): no floor, no queue here.
    admitted = ctx.limiter.acquire(tenantId, { id, tokens: cost, ...asked });
  } else {
    const tier = ex.tier;
    const handoff = ctx.handoff;
    // A waiter woken on a node just back from a stall (its fence not caught up yet) is sent on like a
    // moved tenant's (421): its retry waits for the catch-up at the ownership check.
    const fence = ctx.fence;
    const attempt = (): AcquireResult | undefined =>
      (handoff !== undefined && !handoff.holds(tenantId)) || fence?.stale() === true ? undefined : ctx.limiter.acquire(tenantId, { id, tokens: cost, ...asked, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
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
          return { kind: 'answered', reply: taken === 'unavailable' ? sendUnavailable(reply, ex) : sendQuotaRefusal(reply, ex, taken.waitMs, cost) };
        }
      }
      if (outcome.kind !== 'gone' && outcome.kind !== 'moved') waitedMs = outcome.waitedMs;
    } else outcome = decided;
    if (outcome.kind === 'gone') {
      trail.result = 'gone';
      trail.clientGone = true;
      trail.waitMs = waitedMs;
      return { kind: 'answered', reply: reply.hijack() };
    }
    if (outcome.kind === 'moved') {
      if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      if (handoff !== undefined) return { kind: 'answered', reply: await sendMisdirected(request, reply, handoff, tenantId, handoff.ring().owner(tenantId)) };
      return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    }
    if (outcome.kind !== 'admitted' && outcome.kind !== 'refused') {
      // Waited past its deadline, or found the queue full: the quota was given back when it queued.
      if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
      return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, outcome.result, cost, { kind: outcome.kind, waitedMs: outcome.waitedMs }, money) };
    }
    admitted = outcome.result;
  }
  if (!admitted.ok) {
    if (quotaHeld) quotas?.refund(ex.deployment.name, { requests: 1, tokens: cost });
    if (group !== undefined) leases?.refund(group, { requests, tokens: cost });
    return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, group === undefined ? admitted : { ...admitted, limits: [...(spread?.limitStates(group) ?? []), ...admitted.limits] }, cost, undefined, money) };
  }
  if (spread === undefined && central === undefined) ctx.handoff?.touched(tenantId);
  trail.result = 'admitted';
  trail.waitMs = waitedMs;
  ctx.activity.decided(trail);
  if (levelEnabled(request.log, 'debug')) request.log.debug({ tenant: tenantId, priority: ex.tier.name, tokens: cost, waitMs: Math.round(waitedMs), limits: admitted.limits.map((l) => `${l.name}=${l.remaining}/${l.limit}`) }, 'admitted');

  const headers = limitHeaders(ctx, ex.dialect, group === undefined ? admitted.limits : [...(spread?.limitStates(group) ?? []), ...admitted.limits]);
  headers['x-quotaring-request-id'] = id;
  if (waitedMs > 0) headers['x-quotaring-queued-ms'] = String(Math.round(waitedMs));
  return { kind: 'admitted', id, cost, money, keyId, asked, spread, group, leases, held: quotas !== undefined ? ex.deployment.name : undefined, closed, headers, first };
}
