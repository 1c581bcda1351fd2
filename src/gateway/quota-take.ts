/**
 * A request's take from a global-cap group's local leases: a deployment's provider quota (at
 * admission, and for each failover deployment) or a spread tenant's share.
 */
import type { CapLeases, CapTakeResult } from '../globalcap/cap-leases.ts';

/**
 * One request (1 request, `cost` tokens) from a global-cap group's local leases. A refusal that only
 * means "a renewal is in flight" waits for it rather than refusing what the cluster can take.
 * @returns the take's result, or 'unavailable' when Redis is unavailable and `closedOnFailure` is set
 *   (whatever the local share gave is given back; the take itself keeps probing Redis).
 */
export async function takeLeased(leases: CapLeases, group: string, cost: number, closedOnFailure: boolean, requests = 1): Promise<CapTakeResult | 'unavailable'> {
  const want = { requests, tokens: cost };
  const taken = leases.take(group, want);
  if (leases.inFallback && closedOnFailure) {
    if (taken.ok) leases.refund(group, want);
    return 'unavailable';
  }
  return taken.ok ? taken : leases.takeAfterRenewals(group, want, taken);
}
