/**
 * Renewal: when a node leases from a cluster bucket, how much it asks for, and what it does with the
 * answer. One call per bucket at a time, in the background (never on a take's path); a take that
 * finds the balance short, or leaves it below the low-water mark, starts one.
 *
 * Safety rules kept here:
 * - **Reseed and charge before lease.** A bucket whose Redis lost or regressed its data is first
 *   lowered to the level this node last saw, refilled since (`lua/reseed.lua`, `reconcile.ts`), and
 *   usage Redis has not been told (units spent from a fallback share, `owe`) is charged with force;
 *   each of those calls stands in for the lease, which comes at the next renewal. Usage is the
 *   maximum of what Redis holds and what the node knew, never their sum. A charge answered after
 *   its timeout is not charged twice.
 * - **A lease expires** `leaseTtlMs` after its call was *sent*, so a slow answer never extends it.
 * - **How much.** The smallest useful grant is what the refused take lacks (a denial's wait is then
 *   that take's real refill time, the retry-after its client is told) or a minimum block; a renewal
 *   asks for a block (`blockSize`, `lease-bucket.ts`) plus debt, unless the bucket is small
 *   (`mayPrefetch`, `give-back.ts`): then exactly what is lacking, nothing ahead.
 * - **Starved buckets.** A partial grant delays the next renewal by 2 × blockMs, a denied one by the
 *   bucket's wait for what the refused take lacks, and a starved renewal asks for at least its fair
 *   part of 2 × blockMs of refill, so starved nodes together take all of it and each sends at most
 *   one call per wait.
 * - A grant answered after its call timed out (`late`) is still the node's until its lease expires;
 *   one answered after `close` is given back at once.
 * - **Above a floor.** A renewal for a take with a reserve leases only above `floor` units; its
 *   denial delays later renewals *with* a floor only (`overRetryAt`), never one for a take within
 *   its share, and does not mark the bucket starved.
 */
import { mayPrefetch } from './give-back.ts';
import { blockSize, credit, sharedBy } from './lease-bucket.ts';
import type { Bucket } from './lease-bucket.ts';
import { answered, failed } from './fallback-share.ts';
import { expire, giveBack } from './lease-give-back.ts';
import { seen } from './lease-node.ts';
import type { LeaseNode } from './lease-node.ts';

/**
 * Starts a renewal of `b` unless one is in flight or the bucket said to wait; returns the ms a
 * refused take should wait. `need`: units the refused take lacks (0 for a low-water renewal).
 * `floor`: units the lease leaves in the cluster bucket (a take over its fair share), 0 otherwise. A
 * pending reseed, then usage Redis has not been told, go first (that call then stands in for the
 * renewal).
 */
export function maybeRenew(n: LeaseNode, b: Bucket, now: number, need: number, floor = 0): number {
  if (b.renewing !== undefined) return n.pendingWaitMs;
  if (n.held) return n.probeIntervalMs;
  if (now < b.retryAt) return Math.max(1, Math.ceil(b.retryAt - now));
  if (floor > 0 && now < b.overRetryAt) return Math.max(1, Math.ceil(b.overRetryAt - now));
  if (n.closed) return n.pendingWaitMs;
  const reseed = b.reseedFrom;
  if (reseed !== undefined && n.reseed !== undefined) {
    const fn = n.reseed;
    b.renewing = n.call(() =>
      fn(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, knownLevel: reseed.level, ageMs: Math.max(0, n.clock.now() - reseed.at), epoch: reseed.epoch, ttlMs: b.windowMs }),
    ).then((r) => {
      b.renewing = undefined;
      const at = n.clock.now();
      if (!r.ok) {
        failed(n, b, at, r.open);
        return;
      }
      if (b.reseedFrom === reseed) b.reseedFrom = undefined;
      b.level = r.value.level;
      b.levelAt = at;
      b.prior = undefined;
      b.retryAt = -Infinity;
      answered(n, b);
      // Usage spent in fallback is not in what the node saw: charge it now too.
      if (b.unreconciled > 0) maybeRenew(n, b, at, 0);
    });
    return n.pendingWaitMs;
  }
  const unreconciled = b.unreconciled;
  if (unreconciled > 0) {
    const charged = (level: number): void => {
      b.unreconciled = Math.max(0, b.unreconciled - unreconciled);
      seen(n, b, level, unreconciled);
    };
    b.renewing = n.call(() =>
      n.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: unreconciled, force: true, ttlMs: b.windowMs }),
    ).then((r) => {
      b.renewing = undefined;
      const at = n.clock.now();
      if (!r.ok) {
        // Charged after all (the answer came late): do not charge it twice.
        r.late?.then((v) => charged(v.level), () => undefined);
        failed(n, b, at, r.open);
        return;
      }
      charged(r.value.level);
      b.retryAt = -Infinity;
      answered(n, b);
    });
    return n.pendingWaitMs;
  }
  // The smallest useful grant: what the refused take lacks (so a denial's wait is that take's real
  // refill time), or a minimum block for a low-water renewal.
  const min = Math.min(b.capacity, need > 0 ? Math.ceil(need) : b.minBlock);
  // A starved bucket is renewed every 2 × blockMs: ask for at least this node's fair part of the
  // refill over that time, so k nodes together can take the whole refill.
  const starvedPart = Math.min(Math.floor(b.capacity / (4 * sharedBy(b))), Math.ceil((b.ratePerSec * 2 * n.blockMs) / 1000 / sharedBy(b)));
  const block = blockSize(n, b, now);
  // A small bucket (give-back.ts): lease exactly what is lacking, nothing ahead.
  const want = Math.min(b.capacity - floor, mayPrefetch(b.capacity, b.share(), block) ? Math.min(b.capacity, Math.max(min, block + Math.ceil(b.debt), b.starved ? starvedPart : 0)) : min);
  const sentAt = now;
  const granted = (g: number, at: number): void => {
    if (n.closed) {
      // Answered after close (a late grant): the node will never spend it.
      void giveBack(n, b, g);
      return;
    }
    credit(b, g, sentAt + n.ttlMs);
    void expire(n, b, at);
  };
  b.renewing = n.call(() =>
    n.scripts.lease(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, want: Math.max(want, Math.min(min, b.capacity - floor)), min: Math.min(min, b.capacity - floor), ttlMs: b.windowMs, ...(floor > 0 ? { floor } : {}) }),
  ).then((r) => {
    b.renewing = undefined;
    const at = n.clock.now();
    if (!r.ok) {
      // Without Redis every call fails by design: that is not a failed renewal.
      if (!n.localOnly) n.renewals.failed++;
      // A grant answered after the timeout is still this node's until its lease expires.
      if (r.late !== undefined) {
        const late: Promise<void> = r.late.then(
          (v) => {
            n.inFlight.delete(late);
            if (v.granted > 0) granted(v.granted, n.clock.now());
          },
          () => void n.inFlight.delete(late),
        );
        n.inFlight.add(late);
      }
      failed(n, b, at, r.open);
      return;
    }
    seen(n, b, r.value.level, r.value.granted);
    answered(n, b);
    if (r.value.granted >= want) n.renewals.granted++;
    else if (r.value.granted > 0) n.renewals.partial++;
    else n.renewals.denied++;
    if (floor > 0) {
      // Above the reserve: a denial holds back only renewals with a floor; the bucket is not starved
      // for takes within their share.
      if (r.value.granted > 0) granted(r.value.granted, at);
      else b.overRetryAt = at + (r.value.waitMs >= 0 ? r.value.waitMs : n.ttlMs);
      return;
    }
    if (r.value.granted > 0) {
      // A partial grant emptied the cluster bucket: the next renewal waits 2 × blockMs (asking at
      // once would only be denied); units refilled meanwhile wait in Redis.
      b.starved = r.value.granted < want;
      b.retryAt = b.starved ? at + 2 * n.blockMs : -Infinity;
      granted(r.value.granted, at);
    } else {
      // Denied: ask again when the bucket will hold `min` (the Lua's wait: the refused take's real
      // refill time, which its client is told), and ask then for at least the node's fair part of
      // the refill (starved). Each node sends at most one call per such wait.
      b.starved = true;
      b.retryAt = at + (r.value.waitMs >= 0 ? r.value.waitMs : n.ttlMs);
    }
  });
  return n.pendingWaitMs;
}
