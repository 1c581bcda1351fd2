/**
 * Give-back applied to a node's buckets: the sweep, `close`, and the calls that return unspent
 * leased units to Redis. The rules and their arithmetic (when units go back, netting against
 * unreconciled usage, the prefetch rule, how stale a node's view can be) are in `give-back.ts`.
 *
 * Safety rules kept here:
 * - Units are dropped from the local balance *before* their give-back is sent, so a unit is never
 *   both spendable locally and back in Redis; a failed give-back leaves them consumed (the safe
 *   side).
 * - Nothing is sent without Redis or while the connection is held (lost, not yet checked): the
 *   units stay consumed.
 * - Units leased from a Redis that has since restarted or regressed are never given back
 *   ({@link leasedFromLostRedis}).
 * - `close` waits for renewals in flight and, up to `closeWaitMs`, for grants answered after their
 *   call timed out, so those are given back too.
 */
import { dropExpired, dropReturnable, netGiveBack } from './give-back.ts';
import type { Bucket } from './lease-bucket.ts';
import { seen } from './lease-node.ts';
import type { LeaseNode } from './lease-node.ts';

/**
 * Drops `b`'s lots whose lease expired at `now` and gives their unspent units back to Redis.
 * @returns the give-back call, if one was sent.
 */
export function expire(n: LeaseNode, b: Bucket, now: number): Promise<unknown> | undefined {
  return giveBack(n, b, dropExpired(b.lots, now));
}

/**
 * Gives `units`, already dropped from the local balance, back to the cluster bucket: first netted
 * against usage Redis has not been told (`unreconciled`), the rest sent as a negative cost.
 * Nothing is sent without Redis or while the connection is held (the units stay consumed).
 * @returns the call, tracked in `inFlight` until it settles, if one was sent.
 */
export function giveBack(n: LeaseNode, b: Bucket, units: number): Promise<unknown> | undefined {
  if (units <= 0) return undefined;
  const net = netGiveBack(units, b.unreconciled);
  b.unreconciled = net.unreconciled;
  const send = net.send;
  if (send <= 0 || n.localOnly || n.held) return undefined;
  n.givenBack.sent += send;
  const call = n.call(() =>
    n.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: -send, force: true, ttlMs: b.windowMs }),
  ).then((r) => {
    n.inFlight.delete(call);
    if (!r.ok) return;
    n.givenBack.answered += send;
    seen(n, b, r.value.level, -send);
  });
  n.inFlight.add(call);
  return call;
}

/**
 * Redis restarted or was restored from an older snapshot: the units the node holds were leased from
 * a bucket that is gone, so they stay spendable until their leases expire but are never given back
 * (the new bucket never took them).
 */
export function leasedFromLostRedis(n: LeaseNode): void {
  for (const b of n.buckets.values()) for (const lot of b.lots) lot.returnable = false;
}

/**
 * Gives back the unspent units of expired leases, and all unspent units of buckets with no take
 * for `idleMs` (`CapLeases.sweep`). Resolves when those calls have settled; never rejects. No-op
 * after close.
 */
export async function sweep(n: LeaseNode): Promise<void> {
  if (n.closed) return;
  const now = n.clock.now();
  const calls: Promise<unknown>[] = [];
  for (const b of n.buckets.values()) {
    if (b.lots.length === 0) continue;
    const expired = expire(n, b, now);
    if (expired !== undefined) calls.push(expired);
    if (now - b.lastUseAt >= n.idleMs && b.renewing === undefined) {
      const idle = giveBack(n, b, dropReturnable(b.lots));
      if (idle !== undefined) calls.push(idle);
    }
  }
  await Promise.all(calls);
}

/**
 * Closes the node's leases (`CapLeases.close`): stops the sweep timer, waits for renewals and late
 * grants, then returns each bucket's balance net of debt and unreconciled usage (charged, with
 * force, when negative). Idempotent; never rejects.
 */
export async function closeLeases(n: LeaseNode): Promise<void> {
  if (n.closed) return;
  n.closed = true;
  if (n.sweepTimer !== undefined) clearInterval(n.sweepTimer);
  const all = [...n.buckets.values()];
  await Promise.all(all.map((b) => b.renewing));
  if (n.inFlight.size > 0) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.all([...n.inFlight]), new Promise<void>((resolve) => (timer = setTimeout(resolve, n.closeWaitMs)))]);
    clearTimeout(timer);
  }
  const now = n.clock.now();
  const calls: Promise<unknown>[] = [];
  for (const b of all) {
    void expire(n, b, now);
    const balance = dropReturnable(b.lots) - b.debt - b.unreconciled;
    b.lots = [];
    b.debt = 0;
    if (balance === 0 || n.localOnly || n.held) continue;
    if (balance > 0) n.givenBack.sent += balance;
    calls.push(
      n.call(() =>
        n.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: -balance, force: true, ttlMs: b.windowMs }),
      ).then((r) => {
        if (r.ok && balance > 0) n.givenBack.answered += balance;
      }),
    );
  }
  await Promise.all(calls);
}
