/**
 * How a node's leases follow Redis going away and coming back: the hooks `CapLeases` exposes to the
 * Redis watchers (`quotas-from-config.ts`). Detection and the re-seed arithmetic are in
 * `reconcile.ts`; the reseed and charge calls themselves go first in each bucket's next renewal
 * (`lease-renewal.ts`).
 *
 * Safety rules kept here:
 * - **Connection lost** (ioredis `close`): no lease or charge is sent until the connection is back
 *   *and checked*, so nothing is granted from a Redis that may have restarted empty before the
 *   node's usage is charged to it; meanwhile the node decides from its leases, then its fallback
 *   shares.
 * - **Restored** (Redis lost or regressed its data): every bucket this node has seen a level of is
 *   lowered to that level refilled since, before its next lease, now rather than at the next take;
 *   usage is the maximum of what Redis holds and what the node knew, never their sum, and a node
 *   never lowers in-window usage it knows. Units leased from the lost data are never given back.
 * - **Probe answered**: the node leaves fallback within one probe interval, with or without
 *   traffic, but only once each bucket's owed usage has been charged (never leasing from a bucket
 *   that lacks it).
 */
import { setFallback } from './fallback-share.ts';
import { leasedFromLostRedis } from './lease-give-back.ts';
import type { LeaseNode } from './lease-node.ts';
import { maybeRenew } from './lease-renewal.ts';
import { lowestKnown, refilledLevel } from './reconcile.ts';

/** The connection dropped: hold every Redis call and enter fallback (`CapLeases.connectionLost`). */
export function connectionLost(n: LeaseNode): void {
  if (n.closed) return; // the connection closed after close(): nothing to hold
  n.held = true;
  // No connection is Redis unavailable: decide from the fallback shares until it is back.
  if (!n.localOnly) setFallback(n, true);
}

/** The connection is back and checked: release the hold, renew pending reseeds (`CapLeases.reconnected`). */
export function reconnected(n: LeaseNode): void {
  n.held = false;
  const now = n.clock.now();
  for (const b of n.buckets.values()) {
    if (b.renewing === undefined) b.retryAt = -Infinity;
    if (b.reseedFrom !== undefined) maybeRenew(n, b, now, 0);
  }
}

/** Redis lost or regressed its data, named by `epoch`: re-seed every bucket seen (`CapLeases.restored`). */
export function restored(n: LeaseNode, epoch: string): void {
  if (n.closed || n.localOnly || n.reseed === undefined) return;
  leasedFromLostRedis(n);
  const now = n.clock.now();
  for (const b of n.buckets.values()) {
    const seenLevel = lowestKnown(b, now);
    const known = refilledLevel(b, seenLevel, now);
    if (known >= b.capacity) continue; // no write seen in the window: nothing to tell
    const pending = b.reseedFrom;
    if (pending === undefined || refilledLevel(b, pending, now) > known) b.reseedFrom = { level: seenLevel.level, at: seenLevel.at, epoch };
    else b.reseedFrom = { ...pending, epoch };
    if (b.renewing === undefined) {
      b.retryAt = -Infinity;
      maybeRenew(n, b, now, 0);
    } else {
      // After the call in flight (its reply does not change what was captured above).
      void b.renewing.then(() => {
        if (b.renewing === undefined && b.reseedFrom !== undefined) {
          b.retryAt = -Infinity;
          maybeRenew(n, b, n.clock.now(), 0);
        }
      });
    }
  }
}

/** Redis answered a background probe: charge what is owed, or leave fallback at once (`CapLeases.probeAnswered`). */
export function probeAnswered(n: LeaseNode): void {
  if (n.closed || n.localOnly || n.held || !n.inFallback) return;
  const now = n.clock.now();
  const owing = [...n.buckets.values()].filter((b) => b.unreconciled > 0 || b.reseedFrom !== undefined);
  if (owing.length === 0) {
    setFallback(n, false);
    return;
  }
  for (const b of owing) {
    // A charge failed or refused earlier may have set a retry time: the probe just proved Redis answers.
    if (b.renewing === undefined) b.retryAt = -Infinity;
    maybeRenew(n, b, now, 0);
  }
}
