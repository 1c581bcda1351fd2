/**
 * Stage 1 of a request, admission: whether this node decides for the tenant (else 421 naming its
 * owner), hot-tenant counting, whether any deployment of the model can take the request in its wire
 * format (else 400 before anything is taken), then the reservation — the primary deployment's
 * provider quota (a lease of the cluster-wide cap), a spread tenant's leased share, and the tenant's
 * limits, each decided by the tenant's decider (`tenant-deciders.ts`: this node's limiter and its
 * priority queue, a spread group's leases, or Redis in central mode). Refusals are rendered by
 * `refusals.ts`; an admitted request leaves with what the later stages need of it.
 */
import { wallNow } from '../clock.ts';
import { levelEnabled } from '../ops/logging.ts';
import { TranslationError } from '../providers/translate/index.ts';
import { firstCall } from './deployment-calls.ts';
import { limitHeaders } from './limit-headers.ts';
import { giveBackDeploymentQuota, refusedOverShare, takeDeploymentQuota, waitForShare } from './quota-take.ts';
import type { WaitedTake } from './quota-take.ts';
import { sendQuotaRefusal, sendRefusal, sendShareRefusal, sendUnavailable, sendUntranslatable } from './refusals.ts';
import type { Admission, Answered, RequestRun } from './request.ts';
import { pricesOf, reservedCost } from './spend.ts';
import { deciderOf } from './tenant-deciders.ts';

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
  const decider = deciderOf(ctx, tenantId);
  const misdirected = decider.misdirected(run);
  if (misdirected !== undefined) return { kind: 'answered', reply: await misdirected };
  // Hot tenant detection: the owner counts its tenants' requests.
  decider.observe(run);
  // The primary deployment speaks another format: its call is the translation. A request that no
  // deployment of the model can take (every translation refuses it) is the client's fault: 400
  // before anything is taken (it used to be refused after admission, its request counted).
  const first = firstCall(ex);
  if (first instanceof TranslationError) return { kind: 'answered', reply: sendUntranslatable(reply, ex, first) };
  const leases = ctx.quotas?.leases;
  // The deployment's provider quota (a local lease of the cluster-wide cap), then the tenant's limits.
  const quotas = ctx.quotas !== undefined && ex.deploymentQuota !== false && ctx.quotas.limited.has(ex.deployment.name) ? ctx.quotas.leases : undefined;
  const closed = ctx.quotas?.closedOnFailure === true;
  // A request over its tenant's fair share waits for it, bounded by its tier's max_wait.
  let shareWaitedMs = 0;
  if (quotas !== undefined && ctx.quotas !== undefined) {
    let taken = await takeDeploymentQuota(ctx.quotas, tenantId, ex.deployment.name, cost);
    if (ex.tier.maxWaitMs > 0 && refusedOverShare(taken)) {
      const since = wallNow(); // wall time: the share wait sleeps on real timers
      const left = new AbortController();
      const onClose = (): void => left.abort();
      reply.raw.on('close', onClose);
      let waited: WaitedTake;
      try {
        waited = await waitForShare(ctx.quotas, tenantId, ex.deployment.name, cost, taken, since, ex.tier.maxWaitMs, left.signal);
      } finally {
        reply.raw.off('close', onClose);
      }
      taken = waited.taken;
      shareWaitedMs = waited.waitedMs;
      if (waited.gone) {
        trail.result = 'gone';
        trail.clientGone = true;
        trail.waitMs = shareWaitedMs;
        return { kind: 'answered', reply: reply.hijack() };
      }
    }
    if (taken === 'unavailable') return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    if (!taken.ok) return { kind: 'answered', reply: taken.overShare === undefined ? sendQuotaRefusal(ctx, reply, ex, taken.waitMs, cost) : sendShareRefusal(reply, ex, taken.waitMs, taken.overShare.waitMs, shareWaitedMs) };
  }
  const want = { id, cost, requests, asked, money, quotas, leases, closed, maxWaitMs: Math.max(0, ex.tier.maxWaitMs - shareWaitedMs) };
  // A spread tenant's requests/tokens limits: its node's lease of the tenant's global-cap buckets.
  const share = await decider.takeShare(run, want);
  if (share.kind === 'answered') return share;
  const group = share.group;
  const decided = await decider.acquire(run, want);
  if (decided.kind === 'answered') return decided;
  const { result: admitted, quotaHeld } = decided;
  const waitedMs = decided.waitedMs + shareWaitedMs;
  const extra = decider.extraLimits(group);
  const limits = group === undefined ? admitted.limits : [...extra, ...admitted.limits];
  if (!admitted.ok) {
    if (quotaHeld && ctx.quotas !== undefined) giveBackDeploymentQuota(ctx.quotas, tenantId, ex.deployment.name, cost);
    if (group !== undefined) leases?.refund(group, { requests, tokens: cost });
    return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, group === undefined ? admitted : { ...admitted, limits }, cost, undefined, money) };
  }
  decider.admitted(run);
  trail.result = 'admitted';
  trail.waitMs = waitedMs;
  ctx.activity.decided(trail);
  if (levelEnabled(request.log, 'debug')) request.log.debug({ tenant: tenantId, priority: ex.tier.name, tokens: cost, waitMs: Math.round(waitedMs), limits: admitted.limits.map((l) => `${l.name}=${l.remaining}/${l.limit}`) }, 'admitted');

  const headers = limitHeaders(ctx, ex.dialect, limits);
  headers['x-quotaring-request-id'] = id;
  if (waitedMs > 0) headers['x-quotaring-queued-ms'] = String(Math.round(waitedMs));
  return { kind: 'admitted', id, cost, money, keyId, asked, spread: decider.kind === 'spread' ? ctx.spread : undefined, group, leases, held: quotas !== undefined ? ex.deployment.name : undefined, closed, headers, first };
}
