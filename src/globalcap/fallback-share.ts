/**
 * Fallback shares: how a node admits while it cannot lease from Redis.
 *
 * Safety rules kept here (they err on admitting less, never more, than the cluster-wide limit):
 * - **Fallback.** While Redis is unavailable (a call failed with the breaker open, the connection
 *   dropped, or no Redis at all), each node admits from a local token bucket holding capacity / share
 *   (live nodes for a deployment, k for a hot tenant, by the largest share seen), refilled at that
 *   share per window, plus any lease units still valid. The share starts from the node's part of the
 *   level it last saw and its own in-window usage (`fallbackBudget`, `give-back.ts`), never from a
 *   fresh share. Units spent from it are owed to Redis (`unreconciled`) and charged before the next
 *   lease (`lease-renewal.ts`), so the node leaves fallback only onto a bucket that holds its usage.
 * - **Blips.** A single failed call while the breaker stays closed does not enter fallback: the
 *   takes waiting on it, and those of the next `blipMs`, are served from the fallback share, and the
 *   next take may renew at once.
 * - **Leaving fallback.** Any answered call leaves it: the local shares are dropped and every bucket
 *   may renew at once. A background probe answered by Redis leaves it without waiting for traffic
 *   (`probeAnswered`, `lease-reconcile.ts`).
 */
import { BUCKET_SLOTS, bucketAdjust, bucketInit, bucketRefill } from '../limiter/token-bucket.ts';
import { fallbackBudget } from './give-back.ts';
import { deficit, sharedBy } from './lease-bucket.ts';
import type { Bucket } from './lease-bucket.ts';
import type { LeaseNode } from './lease-node.ts';
import { lowestKnown, refilledLevel } from './reconcile.ts';

/**
 * `b`'s local fallback bucket refilled to `now` (slots of `limiter/token-bucket.ts`, capacity
 * `b.fallbackShare`), made on first use from the node's fallback budget (and told to
 * `onFallbackShare`).
 */
export function fallbackBucket(n: LeaseNode, b: Bucket, now: number): number[] {
  if (b.fallback === undefined) {
    const share = sharedBy(b);
    b.fallbackShare = b.capacity / share;
    b.fallback = new Array<number>(BUCKET_SLOTS).fill(0);
    bucketInit(b.fallback, 0, b.fallbackShare, b.windowMs, now);
    const budget = fallbackBudget(b.capacity, share, deficit(b, b.known, now), refilledLevel(b, lowestKnown(b, now), now));
    const used = b.fallbackShare - budget;
    if (used > 0) bucketAdjust(b.fallback, 0, b.fallbackShare, b.windowMs, used);
    n.onFallbackShare?.({ bucket: b.key, budget, share: b.fallbackShare });
  } else {
    bucketRefill(b.fallback, 0, b.fallbackShare, b.windowMs, now);
  }
  return b.fallback;
}

/**
 * Enters (`on`) or leaves fallback, telling `onFallbackChange`; no-op when already there. Leaving
 * drops every bucket's local share and lets it renew at once.
 */
export function setFallback(n: LeaseNode, on: boolean): void {
  if (on === n.inFallback) return;
  n.inFallback = on;
  if (!on) {
    // Back on Redis: drop the local shares, and let every bucket renew at once (a bucket whose last
    // probe failed would otherwise refuse takes until its probe time). Units spent from the shares
    // are charged (unreconciled) before each bucket's next lease.
    for (const b of n.buckets.values()) {
      b.fallback = undefined;
      if (b.renewing === undefined) b.retryAt = -Infinity;
    }
  }
  n.onFallbackChange?.(on);
}

/**
 * A call on `b` failed at `at`. A blip (`open` false: the breaker is still closed) leaves the node on
 * its leases: the takes waiting on the call, and those of the next `blipMs`, are served from the
 * fallback share, and the next take may renew at once. Otherwise the node enters fallback and
 * probes again after `probeIntervalMs`.
 */
export function failed(n: LeaseNode, b: Bucket, at: number, open: boolean | undefined): void {
  if (open === false) {
    b.blipUntil = at + n.blipMs;
    b.retryAt = at;
    return;
  }
  b.retryAt = at + n.probeIntervalMs;
  setFallback(n, true);
}

/** A call on `b` was answered: the node is on its leases (a blip's share is dropped). */
export function answered(n: LeaseNode, b: Bucket): void {
  b.blipUntil = -Infinity;
  if (!n.inFallback) b.fallback = undefined;
  setFallback(n, false);
}
