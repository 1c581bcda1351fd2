/**
 * A request's take from a global-cap group's local leases: a deployment's provider quota (at
 * admission, and for each failover deployment) or a spread tenant's share. A fair-shared
 * deployment (`fair_share`, `src/fairshare/`) first asks whether the request is within its tenant's
 * share; a request over it takes only above the deployment's reserve.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { wallNow } from '../clock.ts';
import type { CapLeases, CapTakeResult } from '../globalcap/cap-leases.ts';
import type { ConfiguredQuotas } from '../globalcap/quotas-from-config.ts';

/**
 * One request (1 request, `cost` tokens) from a global-cap group's local leases. A refusal that only
 * means "a renewal is in flight" waits for it rather than refusing what the cluster can take.
 * @param reserve fraction of each bucket the take may not spend (a request over its fair share).
 * @returns the take's result, or 'unavailable' when Redis is unavailable and `closedOnFailure` is set
 *   (whatever the local share gave is given back; the take itself keeps probing Redis).
 */
export async function takeLeased(leases: CapLeases, group: string, cost: number, closedOnFailure: boolean, requests = 1, reserve = 0): Promise<CapTakeResult | 'unavailable'> {
  const want = { requests, tokens: cost };
  const taken = leases.take(group, want, reserve);
  if (leases.inFallback && closedOnFailure) {
    if (taken.ok) leases.refund(group, want);
    return 'unavailable';
  }
  return taken.ok ? taken : leases.takeAfterRenewals(group, want, taken, reserve);
}

/**
 * Longest wait of a request within its fair share whose deployment's reserve is momentarily spent,
 * ms: it waits for the refill once rather than get a 429 (a request over its share is never held).
 */
export const WITHIN_SHARE_WAIT_MS = 2_000;

/** A deployment quota take's result: as the leases', and whether the request was over its tenant's fair share. */
export type QuotaTake = { readonly ok: true } | { readonly ok: false; readonly waitMs: number; readonly overShare?: { readonly waitMs: number } } | 'unavailable';

/**
 * One request of `tenant` (1 request, `cost` tokens) from deployment `deployment`'s quota. On a
 * fair-shared deployment the ask is counted, and a request over its tenant's share takes only
 * above the reserve; a refusal then says how long until the request is within its share.
 */
export async function takeDeploymentQuota(quotas: ConfiguredQuotas, tenant: string, deployment: string, cost: number): Promise<QuotaTake> {
  const fair = quotas.fair;
  const verdict = fair?.ask(tenant, deployment, { requests: 1, tokens: cost });
  const reserve = verdict === undefined || verdict.within ? 0 : (fair?.reserveOf(deployment) ?? 0);
  let taken = await takeLeased(quotas.leases, deployment, cost, quotas.closedOnFailure, 1, reserve);
  if (verdict?.within === true) {
    // Within its share, the reserve momentarily spent (several tenants within their shares at once,
    // renewals of other takes in flight): the refill it waits for is its own, since takes over a
    // share stay above the reserve. It waits while that fits in WITHIN_SHARE_WAIT_MS in all.
    const until = wallNow() + WITHIN_SHARE_WAIT_MS; // wall time: a real wait on real timers
    while (taken !== 'unavailable' && !taken.ok && taken.waitMs > 0 && wallNow() + taken.waitMs <= until) {
      await sleep(taken.waitMs);
      taken = await takeLeased(quotas.leases, deployment, cost, quotas.closedOnFailure, 1, 0);
    }
  }
  if (taken === 'unavailable') return taken;
  if (taken.ok) {
    fair?.used(tenant, deployment, { requests: 1, tokens: cost }, 1, verdict?.within === true);
    return taken;
  }
  return verdict === undefined || verdict.within ? taken : { ok: false, waitMs: taken.waitMs, overShare: { waitMs: verdict.waitMs } };
}

/** Gives a taken request's deployment quota back (refused elsewhere, or moved to a failover deployment). */
export function giveBackDeploymentQuota(quotas: ConfiguredQuotas, tenant: string, deployment: string, cost: number): void {
  quotas.leases.refund(deployment, { requests: 1, tokens: cost });
  quotas.fair?.used(tenant, deployment, { requests: 1, tokens: cost }, -1);
}

/** Trues a settled request's deployment quota up to the tokens it used (`reserved` were taken). */
export function settleDeploymentQuota(quotas: ConfiguredQuotas, tenant: string, deployment: string, reserved: number, used: number): void {
  if (used < reserved) quotas.leases.refund(deployment, { tokens: reserved - used });
  else if (used > reserved) quotas.leases.debit(deployment, { tokens: used - reserved });
  quotas.fair?.settled(tenant, deployment, used - reserved);
}
