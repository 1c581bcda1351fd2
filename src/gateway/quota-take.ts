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
 * @param again the request asked before (it waited): its ask is not counted twice.
 */
export async function takeDeploymentQuota(quotas: ConfiguredQuotas, tenant: string, deployment: string, cost: number, again = false): Promise<QuotaTake> {
  const fair = quotas.fair;
  const verdict = fair?.ask(tenant, deployment, { requests: 1, tokens: cost }, !again);
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

/** How {@link waitForShare} ended: the last take, the ms waited, and whether the client left. */
export interface WaitedTake {
  readonly taken: QuotaTake;
  readonly waitedMs: number;
  readonly gone: boolean;
}

/** Whether `taken` refused a request over its tenant's fair share (one that may wait for it). */
export function refusedOverShare(taken: QuotaTake): taken is { readonly ok: false; readonly waitMs: number; readonly overShare: { readonly waitMs: number } } {
  return taken !== 'unavailable' && !taken.ok && taken.overShare !== undefined;
}

/**
 * After `first`, a {@link takeDeploymentQuota} refused over the tenant's fair share, for a tier
 * that may wait (`maxWaitMs` > 0): tries again when its share or the quota above the reserve is
 * due (the sooner of the two waits the refusal named, at least 10 ms), until it is taken, its
 * `maxWaitMs` passed since `since` (ms, wall time; the last refusal is returned: a 429
 * `share_exhausted`) or `signal` aborted (its client left: `gone`, nothing held). A refusal of the
 * quota itself (not of the share) ends the wait at once: the tenant's queue and the quota's own
 * wait are not this function's.
 */
export async function waitForShare(quotas: ConfiguredQuotas, tenant: string, deployment: string, cost: number, first: QuotaTake, since: number, maxWaitMs: number, signal: AbortSignal): Promise<WaitedTake> {
  let taken: QuotaTake = first;
  while (refusedOverShare(taken)) {
    const left = since + maxWaitMs - wallNow(); // wall time: a real wait on real timers
    if (left <= 0) break;
    const due = Math.min(taken.waitMs > 0 ? taken.waitMs : Infinity, taken.overShare.waitMs > 0 ? taken.overShare.waitMs : Infinity);
    try {
      await sleep(Math.min(left, Math.max(SHARE_RETRY_MIN_MS, Number.isFinite(due) ? due : SHARE_RETRY_MIN_MS)), undefined, { signal });
    } catch {
      return { taken, waitedMs: wallNow() - since, gone: true }; // wall time: as above
    }
    taken = await takeDeploymentQuota(quotas, tenant, deployment, cost, true);
  }
  const waitedMs = wallNow() - since; // wall time: as above
  if (signal.aborted && taken !== 'unavailable' && taken.ok) {
    giveBackDeploymentQuota(quotas, tenant, deployment, cost);
    return { taken, waitedMs, gone: true };
  }
  return { taken, waitedMs, gone: false };
}

/** Shortest pause (ms) between two tries of a request over its share that waits. */
const SHARE_RETRY_MIN_MS = 10;

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
