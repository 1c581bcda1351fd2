/**
 * Stage 4 of a request, settlement: once, when the request ends on any path, its reservation is
 * settled on the tokens it used (priced by the deployment that served it) and its concurrency slot
 * released — in this node's limiter while it decides for the tenant, at the tenant's new owner
 * otherwise, in Redis in central mode — and the deployment quota and spread leases it holds are
 * trued up; or, for a reply whose usage comes later (see `Exchange.onReply`), the slot freed now and
 * the tokens settled when the provider reports them. Where each is done: `reservations.ts`.
 */
import type { TokenUsage } from '../providers/types.ts';
import type { AdmittedRun } from './request.ts';
import { settleDeploymentQuota } from './quota-take.ts';
import { recordSettlement } from './request-spans.ts';
import { budgetedKey, pricesOf, settleDetail } from './spend.ts';

/**
 * Settles an admitted request that has ended, on every path (answered, failed, client gone, thrown):
 * `used` as the stages left it, at the prices of `served.deployment`, the quota of `served.held`.
 * A successful reply that reported no usage may be taken over by `ex.onReply` (the slot released
 * now, the tokens settled when the provider reports them).
 */
export function settleExchange(run: AdmittedRun): void {
  const { ctx, ex, admission, served, used, trail } = run;
  const { id, cost, money, keyId, spread, group, leases } = admission;
  const tenantId = ex.tenant.id;
  trail.used = used.tokens;
  const quotaHolder = served.held;
  // Priced by the deployment that served the request (a failover may have moved it to other prices).
  const servedPrices = pricesOf(ex.model, served.deployment);
  const settle = (tokens: number, usage?: TokenUsage, keepCost = false): void => {
    const detail = settleDetail(servedPrices, usage, ex.promptTokens, keepCost ? undefined : tokens);
    if (run.span !== undefined) recordSettlement(ctx, run.span, tokens, usage);
    ctx.reservations.of(tenantId, spread !== undefined).finish(tenantId, id, tokens, detail);
    // What the cost limits were charged: the actual cost, else the reservation that stays charged.
    if (ex.tenant.metrics) ctx.activity.metrics.spent(tenantId, ex.model.name, budgetedKey(ex.tenant, keyId), detail.cost ?? money);
    if (quotaHolder !== undefined && ctx.quotas !== undefined) settleDeploymentQuota(ctx.quotas, tenantId, quotaHolder, cost, tokens);
    if (group !== undefined && leases !== undefined) {
      if (tokens < cost) leases.refund(group, { tokens: cost - tokens });
      else if (tokens > cost) leases.debit(group, { tokens: tokens - cost });
    }
  };
  let taken = false;
  if (used.succeeded !== undefined && ex.onReply !== undefined) {
    // Maybe still at work upstream (background): the slot goes back now, the tokens once it reports them.
    const deferrable = !used.succeeded.reported && ctx.reservations.of(tenantId, spread !== undefined).releaseSlot(tenantId, id);
    taken = ex.onReply(used.succeeded.text, deferrable ? settle : undefined) && deferrable;
  }
  if (!taken) settle(used.tokens, used.reported, used.unreported);
}
