/**
 * A node's leases on the global cap: the cluster-wide buckets that no single node can own.
 * A *group* is what one `take` spends from, all-or-nothing:
 * - a deployment's provider quota (constructor option `deployments`): requests (capacity
 *   ⌊rpm × headroom⌋) and tokens (capacity ⌊tpm × headroom⌋), refilled continuously at capacity / 60 s,
 *   shared by every live node;
 * - a hot tenant's `requests` and `tokens` limits (`define`), each a token bucket of capacity
 *   `limit` refilled over its window, shared by the k nodes the tenant is spread over.
 * The node leases blocks from the buckets in Redis, spends the blocks locally and synchronously
 * (`take`, no Redis on that path), and renews in the background before a block runs dry.
 *
 * Safety rules (they err on admitting less, never more, than the cluster-wide limit), each written
 * out in the file that keeps it:
 * | rule | file |
 * |---|---|
 * | balance (lots minus debt), block size, the node's known in-window usage | `lease-bucket.ts` |
 * | spending: all-or-nothing takes, fallback spends owed to Redis, low-water renewal, refund, debit | `lease-spend.ts` |
 * | when and how much to lease; reseed and charge before a lease; starved buckets; late grants | `lease-renewal.ts` |
 * | fallback shares while Redis is unavailable; blips; leaving fallback | `fallback-share.ts` |
 * | give-back of unspent units (expiry, idle, close); the prefetch rule; how stale a view can be | `give-back.ts`, `lease-give-back.ts` |
 * | Redis lost, back, restored or probed: hold, re-seed by maximum, leave fallback | `lease-reconcile.ts`, `reconcile.ts` |
 * | options, defaults and the state those files share | `lease-node.ts` |
 * | how a Redis call reports failure (blip or unavailable) | `cap-call.ts` |
 */
import { bucketAdjust, bucketRefill, bucketUsed } from '../limiter/token-bucket.ts';
import { capKey } from './keys.ts';
import { answered, failed, fallbackBucket } from './fallback-share.ts';
import { balanceOf, blockSize, decayedSpend, deficit, deploymentBuckets, newBucket, nonNegative, validBucketSpec } from './lease-bucket.ts';
import type { BucketKind, CapCost, CapGroupSpec, Group, LeaseBucketView } from './lease-bucket.ts';
import { closeLeases, expire, sweep } from './lease-give-back.ts';
import { leaseNode, seen } from './lease-node.ts';
import type { CapLeasesOptions, GivenBackCounts, LeaseNode, RenewalCounts } from './lease-node.ts';
import { connectionLost, probeAnswered, reconnected, restored } from './lease-reconcile.ts';
import { debit as debitLeases, refund as refundToLeases, take as takeFromLeases } from './lease-spend.ts';
import type { CapTakeResult } from './lease-spend.ts';

export { runCapCall } from './cap-call.ts';
export type { CapCall, CapCallResult } from './cap-call.ts';
export type { CapBucketSpec, CapCost, CapGroupSpec, DeploymentQuota, LeaseBucketView } from './lease-bucket.ts';
export type { CapLeasesOptions, FallbackShare } from './lease-node.ts';
export type { CapTakeResult } from './lease-spend.ts';

/** A refusal at most this long (ms) means a renewal is in flight: see {@link CapLeases.takeAfterRenewals}. */
export const RENEWAL_WAIT_MS = 20;
/** Renewals a take may await before it is refused. */
export const RENEWAL_WAITS = 3;

/**
 * A node's leases on the global cap. `take`, `refund` and `debit` are synchronous and local;
 * renewals (one `lease` call per bucket, never two in flight on one bucket) run in the background,
 * triggered when a balance drops below the low-water mark or a take is refused. Block size =
 * max(minBlock, the last take's cost, spend rate × blockMs capped at capacity / (4 × share)), and a
 * refused take's renewal asks at least for what it lacks, so a node at steady load renews about
 * 1000 / blockMs times a second (2 with the defaults). When a cluster bucket runs dry, a partial grant
 * delays the next renewal by 2 × blockMs and a denied one by the bucket's wait for what the refused
 * take lacks (the retry-after its client is told), and a starved renewal asks for at least its fair
 * part of 2 × blockMs of refill, so starved nodes together take all of it. A small bucket is never
 * prefetched from, and unspent units go back to Redis (`give-back.ts`).
 */
export class CapLeases {
  readonly #node: LeaseNode;
  /** Lease renewals since construction, by outcome (`quotaring_lease_renewals_total`): in full, partly, denied (bucket empty), failed (Redis). */
  readonly renewals: RenewalCounts;
  /** Unspent units given back to Redis (`quotaring_lease_given_back_units_total`): sent, and answered. */
  readonly givenBack: GivenBackCounts;

  /**
   * @throws RangeError when a quota, headroom or option is out of range, or a name is not a valid
   *   cap key part (empty, braces).
   */
  constructor(options: CapLeasesOptions) {
    const n = leaseNode(options);
    this.#node = n;
    this.renewals = n.renewals;
    this.givenBack = n.givenBack;
    if (n.sweepMs > 0 && !n.localOnly) {
      n.sweepTimer = setInterval(() => void this.sweep(), n.sweepMs);
      n.sweepTimer.unref();
    }
    const live = (): number => Math.max(1, n.liveNodes());
    for (const [name, quota] of Object.entries(options.deployments ?? {})) this.define(name, { buckets: deploymentBuckets(name, quota), share: live });
  }

  /** True while the node decides from its fallback share (the last Redis call failed). */
  get inFallback(): boolean {
    return this.#node.inFallback;
  }

  /**
   * Defines (or redefines) group `group`: later takes spend from its buckets. A bucket already
   * known by name (another group's) is shared, and takes its `share` from the latest definition.
   * @throws RangeError for a bad capacity or window, a bucket name that is not a cap key part, or a
   *   known bucket name with another capacity, window or kind.
   */
  define(group: string, spec: CapGroupSpec): void {
    const n = this.#node;
    if (n.closed) throw new Error('CapLeases is closed');
    const now = n.clock.now();
    const buckets = spec.buckets.map((bs) => {
      validBucketSpec(bs);
      const key = capKey(n.cluster, bs.name);
      const known = n.buckets.get(key);
      if (known !== undefined) {
        if (known.capacity !== bs.capacity || known.windowMs !== bs.windowMs || known.kind !== bs.kind) {
          throw new RangeError(`bucket ${bs.name} is already defined with another kind, capacity or window`);
        }
        known.share = spec.share;
        return known;
      }
      const b = newBucket(key, bs, spec.share, n.minBlockMs, now);
      n.buckets.set(key, b);
      return b;
    });
    n.groups.set(group, { buckets });
  }

  /**
   * Spends `cost` from the node's local leases, all-or-nothing across the group's buckets.
   * Never touches Redis: a refused take (or a balance left below the low-water mark) starts a
   * background renewal. In fallback, a bucket whose lease cannot cover the cost takes it from the
   * node's share (capacity / share per window).
   * @returns `{ ok: true }`, or `{ ok: false, waitMs }`: ms until the next renewal may cover it
   *   (`pendingWaitMs` while one is in flight, else the bucket's own wait), -1 when the cost exceeds
   *   a bucket's capacity (never admitted).
   * @param reserve fraction of each bucket (0 ≤ r < 1) this take may not spend: a request over its
   *   tenant's fair share (`src/fairshare/`) spends only above it; 0 (default) for every other take.
   * @throws RangeError for an unknown group, a cost that is not a finite number ≥ 0 or a reserve
   *   outside [0, 1); Error after `close()`.
   */
  take(group: string, cost: CapCost, reserve = 0): CapTakeResult {
    if (!(reserve >= 0 && reserve < 1)) throw new RangeError(`reserve must be in [0, 1), got ${reserve}`);
    return takeFromLeases(this.#node, this.#group(group), cost, reserve);
  }

  /**
   * Gives back units taken but not used — tokens reserved beyond the actual usage after settlement,
   * or a whole `take` whose request was then refused elsewhere (`requests: 1`): they go to the local
   * balance (repaying debt first), not to Redis, valid for one lease ttl from now.
   * @throws RangeError for an unknown group or units not finite ≥ 0.
   */
  refund(group: string, usage: { readonly requests?: number; readonly tokens: number }): void {
    const now = this.#node.clock.now();
    const tokens = nonNegative('tokens', usage.tokens);
    const requests = nonNegative('requests', usage.requests ?? 0);
    refundToLeases(this.#node, this.#group(group), { tokens, requests }, now);
  }

  /**
   * Takes tokens used beyond a `take`'s reservation (actual > reserved) from the local balance,
   * which may go negative (debt repaid by the next renewal's grant).
   * @throws RangeError for an unknown group or tokens not finite ≥ 0.
   */
  debit(group: string, usage: { readonly tokens: number }): void {
    const units = nonNegative('tokens', usage.tokens);
    if (units === 0) return;
    const now = this.#node.clock.now();
    debitLeases(this.#node, this.#group(group), units, now);
  }

  /**
   * A provider answered 429 (rate limited) for this group's deployment: drains the cluster buckets
   * by `retryAfterMs × rate` (token-bucket calls with force, so they may go into debt) and zeroes the
   * node's local balances (leases and debt); in fallback the local share is drained likewise.
   * Do NOT call this for a 429 of type `insufficient_quota` (billing, not rate): it is no reason to
   * slow the cluster down; the caller tells the two apart.
   * @param retryAfterMs the provider's wait (retry-after / reset headers), ms ≥ 0.
   * @throws RangeError for an unknown group or a negative/non-finite wait.
   */
  async providerLimited(group: string, { retryAfterMs }: { readonly retryAfterMs: number }): Promise<void> {
    const d = this.#group(group);
    nonNegative('retryAfterMs', retryAfterMs);
    const now = this.#node.clock.now();
    const calls: Promise<void>[] = [];
    for (const b of d.buckets) {
      b.lots = [];
      b.debt = 0;
      const drain = (retryAfterMs * b.ratePerSec) / 1000;
      if (drain === 0) continue;
      if (b.fallback !== undefined) {
        bucketRefill(b.fallback, 0, b.fallbackShare, b.windowMs, now);
        bucketAdjust(b.fallback, 0, b.fallbackShare, b.windowMs, (drain * b.fallbackShare) / b.capacity);
      }
      if (this.#node.localOnly || this.#node.held) continue;
      calls.push(
        this.#node.call(() =>
          this.#node.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: drain, force: true, ttlMs: b.windowMs }),
        ).then((r) => (r.ok ? answered(this.#node, b) : failed(this.#node, b, this.#node.clock.now(), r.open))),
      );
    }
    await Promise.all(calls);
  }

  /**
   * After `take` refused with `refused`: when that refusal only means "a renewal is in flight"
   * (waitMs ≤ {@link RENEWAL_WAIT_MS}), waits for the renewals (each bounded by the `call`
   * wrapper's timeout; the group's buckets renew separately) and takes again, up to
   * {@link RENEWAL_WAITS} times. Resolves with the last result (`refused` itself when there was
   * nothing to wait for). A take with a `reserve` retakes after the takes without one that waited
   * for the same renewal. @throws RangeError as {@link take}.
   */
  async takeAfterRenewals(group: string, cost: CapCost, refused: CapTakeResult, reserve = 0): Promise<CapTakeResult> {
    let taken = refused;
    for (let i = 0; i < RENEWAL_WAITS && !taken.ok && taken.waitMs >= 0 && taken.waitMs <= RENEWAL_WAIT_MS; i++) {
      await this.whenRenewed(group);
      // A take over its fair share lets every take within one that waited for the same renewal go
      // first (their continuations run before this turn ends): a grant is theirs before it is its.
      if (reserve > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      taken = this.take(group, cost, reserve);
    }
    return taken;
  }

  /** Resolves when the group's renewals in flight (if any) have settled. Never rejects. */
  async whenRenewed(group: string): Promise<void> {
    await Promise.all(this.#group(group).buckets.map((b) => b.renewing));
  }

  /**
   * The local state of a group's buckets, in definition order (a deployment: requests then tokens).
   * @throws RangeError for an unknown group.
   */
  buckets(group: string): (LeaseBucketView & { readonly kind: BucketKind })[] {
    const now = this.#node.clock.now();
    return this.#group(group).buckets.map((b) => {
      void expire(this.#node, b, now);
      let refilled = b.level + ((now - b.levelAt) * b.ratePerSec) / 1000;
      if (this.#node.inFallback) {
        // Deciding from the local share: what it has left is what this node can still admit.
        const fb = fallbackBucket(this.#node, b, now);
        refilled = b.fallbackShare - bucketUsed(fb, 0, b.fallbackShare, b.windowMs);
      }
      return {
        kind: b.kind,
        capacity: b.capacity,
        balance: balanceOf(b),
        block: blockSize(this.#node, b, now),
        ratePerSec: (decayedSpend(this.#node, b, now) * 1000) / this.#node.rateWindowMs,
        renewing: b.renewing !== undefined,
        level: Math.floor(Math.min(b.capacity, refilled)),
        knownUsage: deficit(b, b.known, now),
        unreconciled: b.unreconciled,
      };
    });
  }

  /**
   * A deployment group's buckets by kind (absent when its quota has no rpm / tpm).
   * @throws RangeError for an unknown group.
   */
  view(group: string): { readonly requests?: LeaseBucketView; readonly tokens?: LeaseBucketView } {
    const out: { requests?: LeaseBucketView; tokens?: LeaseBucketView } = {};
    for (const v of this.buckets(group)) out[v.kind] = v;
    return out;
  }

  /**
   * Charges `units[i]` to the group's bucket i in Redis (forced: may go into debt), e.g. a tenant's
   * usage on its owner when it becomes hot. Resolves false when a call failed (Redis unavailable).
   * @throws RangeError for an unknown group or units not finite ≥ 0.
   */
  async charge(group: string, units: readonly number[]): Promise<boolean> {
    const buckets = this.#group(group).buckets;
    if (this.#node.localOnly) return false;
    const calls = buckets.map((b, i) => {
      const u = nonNegative('units', units[i] ?? 0);
      if (u === 0) return Promise.resolve(true);
      return this.#node.call(() => this.#node.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: u, force: true, ttlMs: b.windowMs })).then((r) => {
        if (r.ok) seen(this.#node, b, r.value.level, u);
        return r.ok;
      });
    });
    return (await Promise.all(calls)).every(Boolean);
  }

  /**
   * Records `units[i]` as usage of the group's bucket i that Redis has not been told: charged
   * (forced) before this node's next lease of that bucket. @throws RangeError for an unknown group
   * or units not finite ≥ 0.
   */
  owe(group: string, units: readonly number[]): void {
    this.#group(group).buckets.forEach((b, i) => {
      b.unreconciled += nonNegative('units', units[i] ?? 0);
    });
  }

  /**
   * Each bucket's level in Redis now (a token-bucket call of cost 0), or, for a bucket whose call
   * failed, the level this node last saw refilled since (never above capacity).
   * @throws RangeError for an unknown group.
   */
  async levels(group: string): Promise<number[]> {
    const buckets = this.#group(group).buckets;
    return Promise.all(
      buckets.map(async (b) => {
        const r = this.#node.localOnly
          ? ({ ok: false } as const)
          : await this.#node.call(() => this.#node.scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: 0, force: true, ttlMs: b.windowMs }));
        if (r.ok) return r.value.level;
        return Math.min(b.capacity, b.level + ((this.#node.clock.now() - b.levelAt) * b.ratePerSec) / 1000);
      }),
    );
  }

  /**
   * The connection to Redis dropped (ioredis `close`): no lease or charge is sent until
   * {@link reconnected}, so nothing is granted from a Redis that may have restarted empty before the
   * node's usage is charged to it. The node enters fallback: takes go on from the leases, then the
   * fallback shares.
   */
  connectionLost(): void {
    connectionLost(this.#node);
  }

  /**
   * The connection is back (ioredis `ready`) and was checked: call {@link restored} first when Redis
   * restarted or lost data, so no lease is sent before the buckets are re-seeded.
   */
  reconnected(): void {
    reconnected(this.#node);
  }

  /**
   * Redis lost or regressed its data (restarted empty, restored from an older snapshot, flushed),
   * named by `epoch` (the same on every node, see `reconcile.ts`): every bucket this node has seen a
   * level of is lowered to that level refilled since (`lua/reseed.lua`, never below what Redis
   * holds), before its next lease, now rather than at the next take. Usage this node spent in
   * fallback is charged after. No-op without a `reseed` option, without Redis, or after `close`.
   */
  restored(epoch: string): void {
    restored(this.#node, epoch);
  }

  /**
   * Redis answered a background probe (`quotas-from-config.ts`, every `cluster.redis.probe_interval`),
   * so the node does not wait for a request to call Redis. A bucket holding usage Redis has not been
   * told (units spent from the fallback share, or the known usage to charge to a restarted Redis)
   * is charged now, and the node leaves fallback when that charge is answered, as after a take's
   * renewal (until then it keeps deciding from its shares, never leasing from a bucket that lacks
   * its usage); with nothing to charge it leaves fallback at once. No-op while the connection is
   * held (lost, `reconnected` not yet called), without Redis, or after `close`.
   */
  probeAnswered(): void {
    probeAnswered(this.#node);
  }

  /**
   * Gives back to Redis the unspent units of expired leases, and all unspent units of buckets with no
   * take for `idleMs` (the periodic sweep calls it every `sweepMs`). Resolves when those calls have
   * settled; never rejects (a failed give-back leaves the units consumed, the safe side). No-op after
   * `close`.
   */
  async sweep(): Promise<void> {
    await sweep(this.#node);
  }

  /**
   * Waits for renewals in flight (and, up to `closeWaitMs`, for grants answered after their call
   * timed out), then returns each bucket's unspent, unexpired balance to Redis (token-bucket call
   * with a negative cost; a negative balance, i.e. debt, is charged with force). Units leased before
   * a Redis restart are not returned. Later calls of `take` throw; the sweep timer stops.
   * Idempotent; never rejects (a failed return leaves the units consumed in Redis, the safe side).
   */
  async close(): Promise<void> {
    await closeLeases(this.#node);
  }

  #group(name: string): Group {
    if (this.#node.closed) throw new Error('CapLeases is closed');
    const d = this.#node.groups.get(name);
    if (d === undefined) throw new RangeError(`unknown group ${JSON.stringify(name)} (not a deployment with a quota, nor defined)`);
    return d;
  }
}
