/**
 * Spending from a node's leases: `take`, `refund` and `debit` (`CapLeases`), synchronous and local —
 * no Redis on a request's path; a take that finds a balance short, or leaves it low, starts a
 * background renewal (`lease-renewal.ts`).
 *
 * Safety rules kept here:
 * - **All or nothing.** A take spends from every bucket of its group or from none; a cost above a
 *   bucket's capacity is refused for good (`waitMs` -1).
 * - **Only granted units.** A take spends from unexpired lots (`lease-bucket.ts`); in fallback or
 *   within a blip, a bucket its leases cannot cover spends from the node's fallback share
 *   (`fallback-share.ts`), and those units are owed to Redis, capped at one share. A take the share
 *   refuses within a blip waits no longer than the blip (`blipBound`).
 * - **Low water.** After a take, a balance below `lowWater × block` renews ahead, asking at least for
 *   what the next take of the same size lacks — never from a small bucket (`mayPrefetch`,
 *   `give-back.ts`), whose last units may be another node's next request.
 * - A refund goes to the local balance (repaying debt first), valid one lease ttl, not to Redis;
 *   a debit beyond the balance is debt, repaid by the next grant.
 * - **Reserve.** A take with a `reserve` (a fraction of each bucket: a request over its tenant's fair
 *   share, `src/fairshare/`) spends the node's lots only while the cluster level it last saw
 *   (refilled since) is at least the reserve, and leases only above it (lua/lease.lua's `floor`):
 *   the last `reserve × capacity` units of a bucket are left to takes without one.
 */
import { bucketTake, bucketWaitMs } from '../limiter/token-bucket.ts';
import { mayPrefetch, spendLots as spendFromLots } from './give-back.ts';
import { fallbackBucket } from './fallback-share.ts';
import { addDeficit, balanceOf, blockSize, costOf, credit, liveUnits, recordSpend, sharedBy } from './lease-bucket.ts';
import type { Bucket, CapCost, Group } from './lease-bucket.ts';
import { expire } from './lease-give-back.ts';
import type { LeaseNode } from './lease-node.ts';
import { maybeRenew } from './lease-renewal.ts';

/**
 * Result of a `take`: admitted, or refused with the ms to wait before trying again (-1: the cost
 * exceeds a bucket's capacity and can never be admitted).
 */
export type CapTakeResult = { readonly ok: true } | { readonly ok: false; readonly waitMs: number };

/**
 * Spends `cost` from group `d`'s buckets, all or nothing (`CapLeases.take`).
 * @param reserve fraction of each bucket (0 ≤ r < 1) this take may not spend (see "Reserve" above).
 * @throws RangeError for a cost not finite ≥ 0.
 */
export function take(n: LeaseNode, d: Group, cost: CapCost, reserve = 0): CapTakeResult {
  const now = n.clock.now();
  for (const b of d.buckets) if (costOf(b, cost) > b.capacity) return { ok: false, waitMs: -1 };
  let waitMs = 0;
  const sources: ('lease' | 'fallback' | 'none')[] = [];
  for (const b of d.buckets) {
    const units = costOf(b, cost);
    if (units === 0) {
      sources.push('none');
      continue;
    }
    b.lastCost = units;
    b.lastUseAt = now;
    void expire(n, b, now);
    const floor = reserve > 0 ? Math.ceil(reserve * b.capacity) : 0;
    if (floor > 0 && units > b.capacity - floor) {
      // Never fits above the reserve: only a take within its share can admit it.
      waitMs = Math.max(waitMs, Math.ceil(b.windowMs));
      sources.push('none');
      continue;
    }
    if (floor > 0 && !n.inFallback && b.blipUntil <= now) {
      // The cluster level as last seen, refilled since (lots are already out of it).
      const seenLevel = Math.min(b.capacity, b.level + ((now - b.levelAt) * b.ratePerSec) / 1000);
      if (seenLevel < floor) {
        waitMs = Math.max(waitMs, Math.max(1, Math.ceil(((floor - seenLevel) * 1000) / b.ratePerSec)));
        sources.push('none');
        continue;
      }
    }
    if (balanceOf(b) >= units) {
      sources.push('lease');
      continue;
    }
    if (n.inFallback || b.blipUntil > now) {
      const fb = fallbackBucket(n, b, now);
      const localFloor = reserve * b.fallbackShare;
      if (units <= b.fallbackShare - localFloor) {
        const w = bucketWaitMs(fb, 0, b.fallbackShare, b.windowMs, units + localFloor);
        if (w === 0) {
          sources.push('fallback');
          continue;
        }
        waitMs = Math.max(waitMs, Math.ceil(blipBound(n, b, now, w)));
      } else if (n.localOnly) {
        return { ok: false, waitMs: -1 };
      } else {
        waitMs = Math.max(waitMs, blipBound(n, b, now, n.probeIntervalMs));
      }
      if (!n.localOnly) maybeRenew(n, b, now, n.inFallback ? 0 : units + b.debt - liveUnits(b), floor);
      sources.push('none');
      continue;
    }
    const need = units + b.debt - liveUnits(b);
    waitMs = Math.max(waitMs, maybeRenew(n, b, now, need, floor));
    sources.push('none');
  }
  if (waitMs > 0) return { ok: false, waitMs };

  d.buckets.forEach((b, i) => {
    const units = costOf(b, cost);
    const source = sources[i];
    if (source === 'lease') spendFromLots(b.lots, units);
    else if (source === 'fallback') {
      bucketTake(b.fallback as number[], 0, b.windowMs, units);
      if (!n.localOnly) b.unreconciled = Math.min(b.unreconciled + units, b.capacity / sharedBy(b));
    } else return;
    recordSpend(n, b, now, units);
    // Low water: renew, asking at least for what the next take of the same size lacks (a smaller
    // grant could not serve it and might expire unused while the node waits for the rest). Never
    // from a small bucket (give-back.ts): its last units may be another node's next request.
    const block = blockSize(n, b, now);
    if (balanceOf(b) < n.lowWater * block && mayPrefetch(b.capacity, b.share(), block)) maybeRenew(n, b, now, Math.max(0, b.lastCost - balanceOf(b)), reserve > 0 ? Math.ceil(reserve * b.capacity) : 0);
  });
  return { ok: true };
}

/**
 * A refusal's wait while `b` is within a blip (not in fallback): no longer than the blip, after
 * which the next take renews from Redis at once. A share spent during a blip says nothing of the
 * cluster's level, so its refill time would tell a client (or a request within its fair share that
 * waits ≤ 2 s) to wait seconds for what the next lease grants in milliseconds.
 */
function blipBound(n: LeaseNode, b: Bucket, now: number, waitMs: number): number {
  return n.inFallback ? waitMs : Math.min(waitMs, Math.max(1, b.blipUntil - now));
}

/** Credits `tokens` / `requests` (checked ≥ 0) to group `d`'s buckets for one lease ttl from `now` (`CapLeases.refund`). */
export function refund(n: LeaseNode, d: Group, usage: { readonly tokens: number; readonly requests: number }, now: number): void {
  const expires = now + n.ttlMs;
  for (const b of d.buckets) {
    const units = b.kind === 'tokens' ? usage.tokens : usage.requests;
    if (units <= 0) continue;
    credit(b, units, expires);
    addDeficit(b, b.known, now, -units);
  }
}

/** Takes `units` tokens (checked > 0) from group `d`'s tokens buckets at `now`, into debt beyond the balance (`CapLeases.debit`). */
export function debit(n: LeaseNode, d: Group, units: number, now: number): void {
  for (const b of d.buckets) {
    if (b.kind !== 'tokens') continue;
    void expire(n, b, now);
    const fromLots = Math.min(units, liveUnits(b));
    spendFromLots(b.lots, fromLots);
    b.debt += units - fromLots;
    recordSpend(n, b, now, units);
  }
}
