/**
 * Stage 4 of a request, settlement: once, when the request ends on any path, its reservation is
 * settled on the tokens it used (priced by the deployment that served it) and its concurrency slot
 * released — in this node's limiter while it decides for the tenant, at the tenant's new owner
 * otherwise, in Redis in central mode — and the deployment quota and spread leases it holds are
 * trued up. Also here: renewing the slot while a stream flows, and freeing it early while the tokens
 * stay reserved (a reply whose usage comes later, see `Exchange.onReply`).
 */
import type { SettleDetail } from '../limiter/types.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import type { TokenUsage } from '../providers/types.ts';
import type { Admission } from './admission.ts';
import type { GatewayContext } from './context.ts';
import type { Exchange } from './exchange.ts';
import { budgetedKey, pricesOf, settleDetail } from './spend.ts';
import type { Served } from './upstream-attempt.ts';

/** What a request used, as the upstream attempt and the relay learn it; settled once, when the request ends. */
export interface Usage {
  /** Tokens to settle at the end; starts at 0, "refund everything" (upstream failure before any output). */
  tokens: number;
  /** The usage the provider reported (prices and weighs the settlement), when it did. */
  reported: TokenUsage | undefined;
  /** A success that reported no usage: the reserved cost stays charged. */
  unreported: boolean;
  /** A success: its upstream JSON text (undefined for a stream) and whether it reported usage, for `ex.onReply`. */
  succeeded: { readonly text: string | undefined; readonly reported: boolean } | undefined;
}

/** Nothing used yet: an upstream failure before any output refunds everything. */
export function nothingUsed(): Usage {
  return { tokens: 0, reported: undefined, unreported: false, succeeded: undefined };
}

/**
 * Settles an admitted request that has ended, on every path (answered, failed, client gone, thrown):
 * `used` as the stages left it, at the prices of `served.deployment`, the quota of `served.held`.
 * A successful reply that reported no usage may be taken over by `ex.onReply` (the slot released
 * now, the tokens settled when the provider reports them).
 */
export function settleExchange(ctx: GatewayContext, ex: Exchange, admission: Admission, served: Served, used: Usage, trail: RequestTrail): void {
  const { id, cost, money, keyId, spread, group, leases } = admission;
  const tenantId = ex.tenant.id;
  trail.used = used.tokens;
  const quotaHolder = served.held;
  // Priced by the deployment that served the request (a failover may have moved it to other prices).
  const servedPrices = pricesOf(ex.model, served.deployment);
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
  if (used.succeeded !== undefined && ex.onReply !== undefined) {
    // Maybe still at work upstream (background): the slot goes back now, the tokens once it reports them.
    const deferrable = !used.succeeded.reported && ctx.central === undefined && releaseSlot(ctx, tenantId, id, spread !== undefined);
    taken = ex.onReply(used.succeeded.text, deferrable ? settle : undefined) && deferrable;
  }
  if (!taken) settle(used.tokens, used.reported, used.unreported);
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
  } else if (handoff === undefined || handoff.settlesHere(tenant)) {
    ctx.limiter.settle(tenant, id, actual, detail);
    ctx.limiter.release(tenant, id);
    handoff?.touched(tenant);
  } else {
    void handoff.finish(tenant, id, actual, 0, undefined, detail);
  }
}

/**
 * Frees the concurrency slot of reservation `id` and keeps its tokens reserved (see `Exchange.onReply`).
 * @returns false when this node no longer decides for the tenant (then the request settles at once).
 */
function releaseSlot(ctx: GatewayContext, tenant: string, id: string, spread: boolean): boolean {
  const handoff = ctx.handoff;
  if (!spread && handoff !== undefined && !handoff.settlesHere(tenant)) return false;
  ctx.limiter.release(tenant, id);
  if (!spread) handoff?.touched(tenant);
  return true;
}

/**
 * Renews the concurrency lease of reservation `id` while its stream flows: in this node's limiter
 * while it holds the tenant (or the tenant is spread), at the tenant's new owner otherwise, in Redis
 * in central mode.
 */
export function renewSlot(ctx: GatewayContext, tenant: string, id: string): void {
  const central = ctx.central;
  if (central !== undefined) {
    void central.guard.run(() => central.limiter.renew(tenant, id));
  } else if (ctx.spread?.isSpread(tenant) === true) {
    ctx.limiter.renew(tenant, id);
  } else if (ctx.handoff === undefined || ctx.handoff.settlesHere(tenant)) {
    ctx.limiter.renew(tenant, id);
    ctx.handoff?.touched(tenant);
  } else {
    void ctx.handoff.renew(tenant, id);
  }
}
