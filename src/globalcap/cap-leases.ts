/**
 * A node's leases on the global cap (issue 4): the cluster-wide buckets that no single node can own.
 * A *group* is what one `take` spends from, all-or-nothing:
 * - a deployment's provider quota (constructor option `deployments`): requests (capacity
 *   ⌊rpm × headroom⌋) and tokens (capacity ⌊tpm × headroom⌋), refilled continuously at capacity / 60 s,
 *   shared by every live node;
 * - a hot tenant's `requests` and `tokens` limits (`define`), each a token bucket of capacity
 *   `limit` refilled over its window, shared by the k nodes the tenant is spread over.
 * The node leases blocks from the buckets in Redis, spends the blocks locally and synchronously
 * (`take`, no Redis on that path), and renews in the background before a block runs dry.
 *
 * Safety choices (they err on admitting less, never more, than the cluster-wide limit):
 * - A lease expires `leaseTtlMs` after its lease call was sent. Unspent units go back to Redis when
 *   their lease expires, the bucket is idle for `idleMs`, or the node closes; a small bucket is never
 *   prefetched from (rules and how stale a node's view can be: `give-back.ts`).
 * - While Redis is unavailable, each node admits from a local token bucket holding capacity / share
 *   (live nodes for a deployment, k for a hot tenant), refilled at that share per window (plus any
 *   lease units still valid).
 * - Reconciliation: each bucket tracks the node's own in-window usage as a deficit that drains at
 *   the node's share of the refill rate (an upper bound of what that usage still weighs in the
 *   cluster bucket). Units spent in fallback are charged to Redis (force) before the next lease.
 *   When Redis lost or regressed its data (`restored`, see `reconcile.ts`), each bucket is lowered
 *   to the level this node last saw in Redis, refilled since (`lua/reseed.lua`), before its next
 *   lease: usage is the maximum of what Redis holds and what the node knew, never their sum. A node
 *   never lowers in-window usage it knows.
 */
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import { bucketInit, bucketRefill, bucketTake, bucketWaitMs, bucketAdjust, bucketUsed, BUCKET_SLOTS } from '../limiter/token-bucket.ts';
import { addLot, dropExpired, dropReturnable, fallbackBudget, lotUnits, mayPrefetch, netGiveBack, spendLots as spendFromLots } from './give-back.ts';
import type { Lot } from './give-back.ts';
import { capKey } from './keys.ts';
import type { CapScripts } from './scripts.ts';
import { lowestKnown, noteLevel, refilledLevel } from './reconcile.ts';
import type { LevelSeen, ReseedFn } from './reconcile.ts';

/**
 * Outcome of a Redis call made through {@link CapCall}: the value, or a failure (Redis down, timeout,
 * breaker open). A call given up on after a timeout may still have run in Redis: `late` then settles
 * with its real outcome (a `RedisGuard` passes it), so a lease granted too late is not lost.
 */
export type CapCallResult<T> =
  | { readonly ok: true; readonly value: T }
  | {
      readonly ok: false;
      readonly late?: Promise<T>;
      /**
       * false: a single failure while the circuit breaker is still closed (a blip): the node stays on
       * its leases and serves only the requests waiting on that call from its fallback share.
       * Absent or true: Redis is unavailable (breaker open, or no breaker): the node enters fallback.
       */
      readonly open?: boolean;
    };

/**
 * Runs one Redis call and reports its outcome instead of throwing (a timeout and circuit-breaker
 * wrapper fits here). Must never reject.
 */
export type CapCall = <T>(fn: () => Promise<T>) => Promise<CapCallResult<T>>;

/** The default {@link CapCall}: runs `fn`, any rejection becomes `{ ok: false }` (no timeout). */
export const runCapCall: CapCall = async <T>(fn: () => Promise<T>): Promise<CapCallResult<T>> => {
  try {
    return { ok: true, value: await fn() };
  } catch {
    return { ok: false };
  }
};

/** A deployment's provider quota as configured (`deployments[].quota` and `headroom`). */
export interface DeploymentQuota {
  /** Provider requests per minute; no requests bucket when absent. */
  readonly rpm?: number;
  /** Provider tokens per minute; no tokens bucket when absent. */
  readonly tpm?: number;
  /**
   * Fraction of the provider quota the cluster uses (0 < h ≤ 1).
   * @default 0.9
   */
  readonly headroom?: number;
}

/** Options of {@link CapLeases}. */
export interface CapLeasesOptions {
  /** Cluster name, the namespace of the bucket keys (`capKey(cluster, 'deployment:<name>:rpm' | ':tpm')`). */
  readonly cluster: string;
  /** Quota by deployment name: one group per deployment, named like it, shared by `liveNodes()`. @default {} */
  readonly deployments?: Readonly<Record<string, DeploymentQuota>>;
  /** The global cap's scripts (`defineCapScripts(redis)`). */
  readonly scripts: CapScripts;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Wrapper of every Redis call. @default runCapCall (no timeout) */
  readonly call?: CapCall;
  /** Nodes currently live in the cluster (≥ 1), the share of deployment buckets, read at each renewal and when entering fallback. @default () => 1 */
  readonly liveNodes?: () => number;
  /** Life of a lease from the moment its call is sent, ms. @default 5000 */
  readonly leaseTtlMs?: number;
  /** A renewal asks for the units spent in this many ms at the recent spend rate (a node at steady load renews about 1000 / blockMs times a second per bucket). @default 500 */
  readonly blockMs?: number;
  /** Smallest block, as ms of the bucket's refill (at least 1 unit). @default 100 */
  readonly minBlockMs?: number;
  /** Renew when the balance drops below this fraction of the current block size. @default 0.5 */
  readonly lowWater?: number;
  /** Time constant of the spend-rate estimate (exponentially decayed counter), ms. @default 1000 */
  readonly rateWindowMs?: number;
  /** Wait returned by a refused `take` while a renewal is in flight, ms. @default 5 */
  readonly pendingWaitMs?: number;
  /** After a failed Redis call, no new renewal (probe) is sent for this long, ms. @default 1000 */
  readonly probeIntervalMs?: number;
  /** After a blip (a failed call, breaker still closed), takes the leases cannot cover are served from the fallback share for this long, ms. @default 50 */
  readonly blipMs?: number;
  /** A bucket with no take for this long gives its unspent leased units back to Redis, ms. @default 1000 */
  readonly idleMs?: number;
  /**
   * Period of the sweep that gives back units of expired leases and idle buckets, ms (an unref'd
   * timer); 0: no timer (call {@link CapLeases.sweep} yourself, e.g. with a manual clock). @default 250
   */
  readonly sweepMs?: number;
  /** `close` waits at most this long for grants answered after their call timed out (to give them back), ms. @default 1000 */
  readonly closeWaitMs?: number;
  /**
   * Called when a bucket starts deciding from its fallback share: its key, the units it may admit at
   * once (`fallbackBudget` in `give-back.ts`) and its share (capacity / share, units per window).
   */
  readonly onFallbackShare?: (share: FallbackShare) => void;
  /** Called with true when the node enters fallback (a Redis call failed) and false when it leaves it (a call succeeded). */
  readonly onFallbackChange?: (inFallback: boolean) => void;
  /**
   * No Redis at all (a node without `cluster.redis`): start in fallback and stay there — each node
   * enforces `capacity / share` locally and never calls the scripts. @default false
   */
  readonly localOnly?: boolean;
  /** Lowers a bucket to a node's known level after Redis lost or regressed its data (`defineReconcileScripts(redis).reseed`); without it `restored` is a no-op. */
  readonly reseed?: ReseedFn;
}

/** A bucket's fallback share as it starts (see {@link CapLeasesOptions.onFallbackShare}). */
export interface FallbackShare {
  /** The bucket's Redis key. */
  readonly bucket: string;
  /** Units it may admit at once, ≥ 0. */
  readonly budget: number;
  /** Units per window it refills (capacity / nodes sharing it). */
  readonly share: number;
}

/** A `requests` or `tokens` bucket of a group defined with {@link CapLeases.define}. */
export interface CapBucketSpec {
  readonly kind: 'requests' | 'tokens';
  /** Bucket name in the global cap (the key is `capKey(cluster, name)`); groups naming the same bucket share it. */
  readonly name: string;
  /** Units the bucket holds when full (the limit), integer ≥ 1. */
  readonly capacity: number;
  /** Window over which a full bucket refills, ms (> 0). */
  readonly windowMs: number;
}

/** A group defined with {@link CapLeases.define}: its buckets, and how many nodes share them. */
export interface CapGroupSpec {
  readonly buckets: readonly CapBucketSpec[];
  /** Nodes spending from these buckets now (≥ 1): the fallback share is capacity / share. */
  readonly share: () => number;
}

/** What a `take` spends. */
export interface CapCost {
  /** Requests (units of the group's requests buckets). @default 1 */
  readonly requests?: number;
  /** Tokens (units of the group's tokens buckets), e.g. prompt + reserved output. */
  readonly tokens: number;
}

/** A refusal at most this long (ms) means a renewal is in flight: see {@link CapLeases.takeAfterRenewals}. */
export const RENEWAL_WAIT_MS = 20;
/** Renewals a take may await before it is refused. */
export const RENEWAL_WAITS = 3;

/**
 * Result of a `take`: admitted, or refused with the ms to wait before trying again (-1: the cost
 * exceeds a bucket's capacity and can never be admitted).
 */
export type CapTakeResult = { readonly ok: true } | { readonly ok: false; readonly waitMs: number };

/** A bucket's local state, for headers, metrics and tests. */
export interface LeaseBucketView {
  /** Bucket capacity in units (⌊quota × headroom⌋, or the limit). */
  readonly capacity: number;
  /** Units of unexpired leases minus debt (negative after a debit beyond the balance). */
  readonly balance: number;
  /** Current block size a renewal asks for, units. */
  readonly block: number;
  /** Recent spend rate, units per second. */
  readonly ratePerSec: number;
  /** A lease call is in flight. */
  readonly renewing: boolean;
  /** Cluster level at the last lease reply (units, floored), refilled locally since; capacity before any reply. In fallback: what the node's local share has left. */
  readonly level: number;
  /** This node's in-window usage as the reconciliation counts it (units, decaying at the node's share of the refill). */
  readonly knownUsage: number;
  /** Of which Redis has not been told yet (spent in fallback, or before a Redis restart). */
  readonly unreconciled: number;
}

/** Refill window of deployment buckets: quotas are per minute. */
const DEPLOYMENT_WINDOW_MS = 60_000;

type BucketKind = 'requests' | 'tokens';

/** A number that drains linearly (at a given rate, never below 0) as time passes. */
interface Deficit {
  value: number;
  at: number;
}

interface Bucket {
  readonly kind: BucketKind;
  readonly key: string;
  readonly capacity: number;
  readonly windowMs: number;
  readonly ratePerSec: number;
  readonly minBlock: number;
  /** Nodes sharing the bucket now. */
  share: () => number;
  /**
   * The largest share seen: reconciliation and the fallback share use it, so a view that shrinks for
   * a moment (a member list read from a Redis that just restarted empty) never drains the node's
   * known usage faster or grows its fallback share.
   */
  maxShare: number;
  /** Unexpired leased units, oldest first (expiry order). */
  lots: Lot[];
  /** Units spent beyond the leases (repaid by the next grant). */
  debt: number;
  /** Decayed spend counter (units) and the time it was last decayed to. */
  spendAcc: number;
  spendAt: number;
  /** Units of the last take (a block never covers less than one such take). */
  lastCost: number;
  /** Time of the last take that needed this bucket, ms: idle after `idleMs` without one. */
  lastUseAt: number;
  renewing: Promise<void> | undefined;
  /** No renewal before this time (after a refusal or a failed call), ms. */
  retryAt: number;
  /** Local token bucket used in fallback (BUCKET_SLOTS numbers), and its capacity (units). */
  fallback: number[] | undefined;
  fallbackShare: number;
  /** The node's in-window usage (drains at ratePerSec / share). */
  readonly known: Deficit;
  /**
   * Usage Redis has not been told, charged before the next lease. Units spent from the fallback share
   * do not drain (the other nodes may have leased the whole refill meanwhile), capped at one share;
   * after a Redis restart it is the known usage at that moment.
   */
  unreconciled: number;
  /** The last lease was partial or denied: the cluster bucket is the bottleneck. */
  starved: boolean;
  /** Until then (ms) a take the leases cannot cover is served from the fallback share: the last call failed while the breaker stayed closed. */
  blipUntil: number;
  /** Cluster level at the last reply, and when. */
  level: number;
  levelAt: number;
  /** Redis lost or regressed its data: lower the bucket to this known level (refilled since `at`) before the next lease. */
  reseedFrom: (LevelSeen & { readonly epoch: string }) | undefined;
  /** The known level before a reply that came back higher than it allowed (see `noteLevel`). */
  prior: (LevelSeen & { readonly until: number }) | undefined;
}

interface Group {
  readonly buckets: readonly Bucket[];
}

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
  readonly #groups = new Map<string, Group>();
  readonly #buckets = new Map<string, Bucket>();
  readonly #cluster: string;
  readonly #scripts: CapScripts;
  readonly #clock: Clock;
  readonly #call: CapCall;
  readonly #liveNodes: () => number;
  readonly #ttlMs: number;
  readonly #blockMs: number;
  readonly #minBlockMs: number;
  readonly #lowWater: number;
  readonly #rateWindowMs: number;
  readonly #pendingWaitMs: number;
  readonly #probeIntervalMs: number;
  readonly #blipMs: number;
  readonly #onFallbackChange: ((inFallback: boolean) => void) | undefined;
  readonly #onFallbackShare: ((share: FallbackShare) => void) | undefined;
  readonly #reseed: ReseedFn | undefined;
  /** Lease renewals since construction, by outcome (`quotaring_lease_renewals_total`): in full, partly, denied (bucket empty), failed (Redis). */
  readonly renewals = { granted: 0, partial: 0, denied: 0, failed: 0 };
  #inFallback: boolean;
  readonly #localOnly: boolean;
  /** The connection to Redis dropped: no Redis call until `reconnected()` says whether Redis restarted. */
  #held = false;
  #closed = false;
  readonly #idleMs: number;
  readonly #closeWaitMs: number;
  readonly #sweepTimer: ReturnType<typeof setInterval> | undefined;
  /** Give-back calls in flight, and grants that may still be answered after their call timed out. */
  readonly #inFlight = new Set<Promise<unknown>>();
  /** Unspent units given back to Redis (`quotaring_lease_given_back_units_total`): sent, and answered. */
  readonly givenBack = { sent: 0, answered: 0 };

  /**
   * @throws RangeError when a quota, headroom or option is out of range, or a name is not a valid
   *   cap key part (empty, braces).
   */
  constructor(options: CapLeasesOptions) {
    this.#cluster = options.cluster;
    this.#scripts = options.scripts;
    this.#clock = options.clock ?? systemClock;
    this.#call = options.call ?? runCapCall;
    this.#liveNodes = options.liveNodes ?? (() => 1);
    this.#ttlMs = positive('leaseTtlMs', options.leaseTtlMs ?? 5_000);
    this.#blockMs = positive('blockMs', options.blockMs ?? 500);
    this.#minBlockMs = positive('minBlockMs', options.minBlockMs ?? 100);
    this.#lowWater = options.lowWater ?? 0.5;
    if (!(this.#lowWater >= 0 && this.#lowWater <= 1)) throw new RangeError(`lowWater must be in [0, 1], got ${this.#lowWater}`);
    this.#rateWindowMs = positive('rateWindowMs', options.rateWindowMs ?? 1_000);
    this.#pendingWaitMs = positive('pendingWaitMs', options.pendingWaitMs ?? 5);
    this.#probeIntervalMs = positive('probeIntervalMs', options.probeIntervalMs ?? 1_000);
    this.#blipMs = positive('blipMs', options.blipMs ?? 50);
    this.#idleMs = positive('idleMs', options.idleMs ?? 1_000);
    this.#closeWaitMs = nonNegative('closeWaitMs', options.closeWaitMs ?? 1_000);
    const sweepMs = nonNegative('sweepMs', options.sweepMs ?? 250);
    if (sweepMs > 0 && options.localOnly !== true) {
      this.#sweepTimer = setInterval(() => void this.sweep(), sweepMs);
      this.#sweepTimer.unref();
    }
    this.#localOnly = options.localOnly === true;
    this.#inFallback = this.#localOnly;
    this.#onFallbackChange = options.onFallbackChange;
    this.#onFallbackShare = options.onFallbackShare;
    this.#reseed = options.reseed;
    const live = (): number => Math.max(1, this.#liveNodes());
    for (const [name, quota] of Object.entries(options.deployments ?? {})) {
      const headroom = quota.headroom ?? 0.9;
      if (!(headroom > 0 && headroom <= 1)) throw new RangeError(`deployment ${name}: headroom must be in (0, 1], got ${headroom}`);
      const buckets: CapBucketSpec[] = [];
      const add = (kind: BucketKind, suffix: string, perMinute: number | undefined): void => {
        if (perMinute === undefined) return;
        if (!Number.isFinite(perMinute) || perMinute <= 0) throw new RangeError(`deployment ${name}: quota.${suffix} must be > 0, got ${perMinute}`);
        buckets.push({ kind, name: `deployment:${name}:${suffix}`, capacity: Math.max(1, Math.floor(perMinute * headroom)), windowMs: DEPLOYMENT_WINDOW_MS });
      };
      add('requests', 'rpm', quota.rpm);
      add('tokens', 'tpm', quota.tpm);
      this.define(name, { buckets, share: live });
    }
  }

  /** True while the node decides from its fallback share (the last Redis call failed). */
  get inFallback(): boolean {
    return this.#inFallback;
  }

  /**
   * Defines (or redefines) group `group`: later takes spend from its buckets. A bucket already
   * known by name (another group's) is shared, and takes its `share` from the latest definition.
   * @throws RangeError for a bad capacity or window, a bucket name that is not a cap key part, or a
   *   known bucket name with another capacity, window or kind.
   */
  define(group: string, spec: CapGroupSpec): void {
    if (this.#closed) throw new Error('CapLeases is closed');
    const now = this.#clock.now();
    const buckets = spec.buckets.map((bs) => {
      if (!Number.isInteger(bs.capacity) || bs.capacity < 1) throw new RangeError(`bucket ${bs.name}: capacity must be an integer >= 1, got ${bs.capacity}`);
      positive(`bucket ${bs.name}: windowMs`, bs.windowMs);
      const key = capKey(this.#cluster, bs.name);
      const known = this.#buckets.get(key);
      if (known !== undefined) {
        if (known.capacity !== bs.capacity || known.windowMs !== bs.windowMs || known.kind !== bs.kind) {
          throw new RangeError(`bucket ${bs.name} is already defined with another kind, capacity or window`);
        }
        known.share = spec.share;
        return known;
      }
      const ratePerSec = (bs.capacity * 1000) / bs.windowMs;
      const b: Bucket = {
        kind: bs.kind,
        key,
        capacity: bs.capacity,
        windowMs: bs.windowMs,
        ratePerSec,
        minBlock: Math.min(bs.capacity, Math.max(1, Math.ceil((ratePerSec * this.#minBlockMs) / 1000))),
        share: spec.share,
        maxShare: Math.max(1, spec.share()),
        lots: [],
        debt: 0,
        spendAcc: 0,
        spendAt: now,
        lastCost: 0,
        lastUseAt: now,
        renewing: undefined,
        retryAt: -Infinity,
        fallback: undefined,
        fallbackShare: 0,
        known: { value: 0, at: now },
        unreconciled: 0,
        starved: false,
        blipUntil: -Infinity,
        level: bs.capacity,
        levelAt: now,
        reseedFrom: undefined,
        prior: undefined,
      };
      this.#buckets.set(key, b);
      return b;
    });
    this.#groups.set(group, { buckets });
  }

  /**
   * Spends `cost` from the node's local leases, all-or-nothing across the group's buckets.
   * Never touches Redis: a refused take (or a balance left below the low-water mark) starts a
   * background renewal. In fallback, a bucket whose lease cannot cover the cost takes it from the
   * node's share (capacity / share per window).
   * @returns `{ ok: true }`, or `{ ok: false, waitMs }`: ms until the next renewal may cover it
   *   (`pendingWaitMs` while one is in flight, else the bucket's own wait), -1 when the cost exceeds
   *   a bucket's capacity (never admitted).
   * @throws RangeError for an unknown group or a cost that is not a finite number ≥ 0;
   *   Error after `close()`.
   */
  take(group: string, cost: CapCost): CapTakeResult {
    const d = this.#group(group);
    const now = this.#clock.now();
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
      void this.#expire(b, now);
      if (balanceOf(b) >= units) {
        sources.push('lease');
        continue;
      }
      if (this.#inFallback || b.blipUntil > now) {
        const fb = this.#fallbackBucket(b, now);
        if (units <= b.fallbackShare) {
          const w = bucketWaitMs(fb, 0, b.fallbackShare, b.windowMs, units);
          if (w === 0) {
            sources.push('fallback');
            continue;
          }
          waitMs = Math.max(waitMs, Math.ceil(w));
        } else if (this.#localOnly) {
          return { ok: false, waitMs: -1 };
        } else {
          waitMs = Math.max(waitMs, this.#probeIntervalMs);
        }
        if (!this.#localOnly) this.#maybeRenew(b, now, this.#inFallback ? 0 : units + b.debt - liveUnits(b));
        sources.push('none');
        continue;
      }
      const need = units + b.debt - liveUnits(b);
      waitMs = Math.max(waitMs, this.#maybeRenew(b, now, need));
      sources.push('none');
    }
    if (waitMs > 0) return { ok: false, waitMs };

    d.buckets.forEach((b, i) => {
      const units = costOf(b, cost);
      const source = sources[i];
      if (source === 'lease') spendFromLots(b.lots, units);
      else if (source === 'fallback') {
        bucketTake(b.fallback as number[], 0, b.windowMs, units);
        if (!this.#localOnly) b.unreconciled = Math.min(b.unreconciled + units, b.capacity / sharedBy(b));
      } else return;
      this.#recordSpend(b, now, units);
      // Low water: renew, asking at least for what the next take of the same size lacks (a smaller
      // grant could not serve it and might expire unused while the node waits for the rest). Never
      // from a small bucket (give-back.ts): its last units may be another node's next request.
      const block = this.#blockSize(b, now);
      if (balanceOf(b) < this.#lowWater * block && mayPrefetch(b.capacity, b.share(), block)) this.#maybeRenew(b, now, Math.max(0, b.lastCost - balanceOf(b)));
    });
    return { ok: true };
  }

  /**
   * Gives back units taken but not used — tokens reserved beyond the actual usage after settlement,
   * or a whole `take` whose request was then refused elsewhere (`requests: 1`): they go to the local
   * balance (repaying debt first), not to Redis, valid for one lease ttl from now.
   * @throws RangeError for an unknown group or units not finite ≥ 0.
   */
  refund(group: string, usage: { readonly requests?: number; readonly tokens: number }): void {
    const now = this.#clock.now();
    const expires = now + this.#ttlMs;
    const t = nonNegative('tokens', usage.tokens);
    const r = nonNegative('requests', usage.requests ?? 0);
    for (const b of this.#group(group).buckets) {
      const units = b.kind === 'tokens' ? t : r;
      if (units <= 0) continue;
      credit(b, units, expires);
      this.#addDeficit(b, b.known, now, -units);
    }
  }

  /**
   * Takes tokens used beyond a `take`'s reservation (actual > reserved) from the local balance,
   * which may go negative (debt repaid by the next renewal's grant).
   * @throws RangeError for an unknown group or tokens not finite ≥ 0.
   */
  debit(group: string, usage: { readonly tokens: number }): void {
    const units = nonNegative('tokens', usage.tokens);
    if (units === 0) return;
    const now = this.#clock.now();
    for (const b of this.#group(group).buckets) {
      if (b.kind !== 'tokens') continue;
      void this.#expire(b, now);
      const fromLots = Math.min(units, liveUnits(b));
      spendFromLots(b.lots, fromLots);
      b.debt += units - fromLots;
      this.#recordSpend(b, now, units);
    }
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
    const now = this.#clock.now();
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
      if (this.#localOnly || this.#held) continue;
      calls.push(
        this.#call(() =>
          this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: drain, force: true, ttlMs: b.windowMs }),
        ).then((r) => (r.ok ? this.#answered(b) : this.#failed(b, this.#clock.now(), r.open))),
      );
    }
    await Promise.all(calls);
  }

  /**
   * After `take` refused with `refused`: when that refusal only means "a renewal is in flight"
   * (waitMs ≤ {@link RENEWAL_WAIT_MS}), waits for the renewals (each bounded by the `call`
   * wrapper's timeout; the group's buckets renew separately) and takes again, up to
   * {@link RENEWAL_WAITS} times. Resolves with the last result (`refused` itself when there was
   * nothing to wait for). @throws RangeError as {@link take}.
   */
  async takeAfterRenewals(group: string, cost: CapCost, refused: CapTakeResult): Promise<CapTakeResult> {
    let taken = refused;
    for (let i = 0; i < RENEWAL_WAITS && !taken.ok && taken.waitMs >= 0 && taken.waitMs <= RENEWAL_WAIT_MS; i++) {
      await this.whenRenewed(group);
      taken = this.take(group, cost);
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
    const now = this.#clock.now();
    return this.#group(group).buckets.map((b) => {
      void this.#expire(b, now);
      let refilled = b.level + ((now - b.levelAt) * b.ratePerSec) / 1000;
      if (this.#inFallback) {
        // Deciding from the local share: what it has left is what this node can still admit.
        const fb = this.#fallbackBucket(b, now);
        refilled = b.fallbackShare - bucketUsed(fb, 0, b.fallbackShare, b.windowMs);
      }
      return {
        kind: b.kind,
        capacity: b.capacity,
        balance: balanceOf(b),
        block: this.#blockSize(b, now),
        ratePerSec: (this.#decayedSpend(b, now) * 1000) / this.#rateWindowMs,
        renewing: b.renewing !== undefined,
        level: Math.floor(Math.min(b.capacity, refilled)),
        knownUsage: this.#deficit(b, b.known, now),
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
    if (this.#localOnly) return false;
    const calls = buckets.map((b, i) => {
      const u = nonNegative('units', units[i] ?? 0);
      if (u === 0) return Promise.resolve(true);
      return this.#call(() => this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: u, force: true, ttlMs: b.windowMs })).then((r) => {
        if (r.ok) this.#seen(b, r.value.level, u);
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
        const r = this.#localOnly
          ? ({ ok: false } as const)
          : await this.#call(() => this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: 0, force: true, ttlMs: b.windowMs }));
        if (r.ok) return r.value.level;
        return Math.min(b.capacity, b.level + ((this.#clock.now() - b.levelAt) * b.ratePerSec) / 1000);
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
    if (this.#closed) return; // the connection closed after close(): nothing to hold
    this.#held = true;
    // No connection is Redis unavailable: decide from the fallback shares until it is back.
    if (!this.#localOnly) this.#setFallback(true);
  }

  /**
   * The connection is back (ioredis `ready`) and was checked: call {@link restored} first when Redis
   * restarted or lost data, so no lease is sent before the buckets are re-seeded.
   */
  reconnected(): void {
    this.#held = false;
    const now = this.#clock.now();
    for (const b of this.#buckets.values()) {
      if (b.renewing === undefined) b.retryAt = -Infinity;
      if (b.reseedFrom !== undefined) this.#maybeRenew(b, now, 0);
    }
  }

  /**
   * Redis lost or regressed its data (restarted empty, restored from an older snapshot, flushed),
   * named by `epoch` (the same on every node, see `reconcile.ts`): every bucket this node has seen a
   * level of is lowered to that level refilled since (`lua/reseed.lua`, never below what Redis
   * holds), before its next lease, now rather than at the next take. Usage this node spent in
   * fallback is charged after. No-op without a `reseed` option, without Redis, or after `close`.
   */
  restored(epoch: string): void {
    if (this.#closed || this.#localOnly || this.#reseed === undefined) return;
    this.#leasedFromLostRedis();
    const now = this.#clock.now();
    for (const b of this.#buckets.values()) {
      const seen = lowestKnown(b, now);
      const known = refilledLevel(b, seen, now);
      if (known >= b.capacity) continue; // no write seen in the window: nothing to tell
      const pending = b.reseedFrom;
      if (pending === undefined || refilledLevel(b, pending, now) > known) b.reseedFrom = { level: seen.level, at: seen.at, epoch };
      else b.reseedFrom = { ...pending, epoch };
      if (b.renewing === undefined) {
        b.retryAt = -Infinity;
        this.#maybeRenew(b, now, 0);
      } else {
        // After the call in flight (its reply does not change what was captured above).
        void b.renewing.then(() => {
          if (b.renewing === undefined && b.reseedFrom !== undefined) {
            b.retryAt = -Infinity;
            this.#maybeRenew(b, this.#clock.now(), 0);
          }
        });
      }
    }
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
    if (this.#closed || this.#localOnly || this.#held || !this.#inFallback) return;
    const now = this.#clock.now();
    const owing = [...this.#buckets.values()].filter((b) => b.unreconciled > 0 || b.reseedFrom !== undefined);
    if (owing.length === 0) {
      this.#setFallback(false);
      return;
    }
    for (const b of owing) {
      // A charge failed or refused earlier may have set a retry time: the probe just proved Redis answers.
      if (b.renewing === undefined) b.retryAt = -Infinity;
      this.#maybeRenew(b, now, 0);
    }
  }

  /**
   * Gives back to Redis the unspent units of expired leases, and all unspent units of buckets with no
   * take for `idleMs` (the periodic sweep calls it every `sweepMs`). Resolves when those calls have
   * settled; never rejects (a failed give-back leaves the units consumed, the safe side). No-op after
   * `close`.
   */
  async sweep(): Promise<void> {
    if (this.#closed) return;
    const now = this.#clock.now();
    const calls: Promise<unknown>[] = [];
    for (const b of this.#buckets.values()) {
      if (b.lots.length === 0) continue;
      const expired = this.#expire(b, now);
      if (expired !== undefined) calls.push(expired);
      if (now - b.lastUseAt >= this.#idleMs && b.renewing === undefined) {
        const idle = this.#giveBack(b, dropReturnable(b.lots));
        if (idle !== undefined) calls.push(idle);
      }
    }
    await Promise.all(calls);
  }

  /**
   * Waits for renewals in flight (and, up to `closeWaitMs`, for grants answered after their call
   * timed out), then returns each bucket's unspent, unexpired balance to Redis (token-bucket call
   * with a negative cost; a negative balance, i.e. debt, is charged with force). Units leased before
   * a Redis restart are not returned. Later calls of `take` throw; the sweep timer stops.
   * Idempotent; never rejects (a failed return leaves the units consumed in Redis, the safe side).
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#sweepTimer !== undefined) clearInterval(this.#sweepTimer);
    const all = [...this.#buckets.values()];
    await Promise.all(all.map((b) => b.renewing));
    if (this.#inFlight.size > 0) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([Promise.all([...this.#inFlight]), new Promise<void>((resolve) => (timer = setTimeout(resolve, this.#closeWaitMs)))]);
      clearTimeout(timer);
    }
    const now = this.#clock.now();
    const calls: Promise<unknown>[] = [];
    for (const b of all) {
      void this.#expire(b, now);
      const balance = dropReturnable(b.lots) - b.debt - b.unreconciled;
      b.lots = [];
      b.debt = 0;
      if (balance === 0 || this.#localOnly || this.#held) continue;
      if (balance > 0) this.givenBack.sent += balance;
      calls.push(
        this.#call(() =>
          this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: -balance, force: true, ttlMs: b.windowMs }),
        ).then((r) => {
          if (r.ok && balance > 0) this.givenBack.answered += balance;
        }),
      );
    }
    await Promise.all(calls);
  }

  #group(name: string): Group {
    if (this.#closed) throw new Error('CapLeases is closed');
    const d = this.#groups.get(name);
    if (d === undefined) throw new RangeError(`unknown group ${JSON.stringify(name)} (not a deployment with a quota, nor defined)`);
    return d;
  }

  /**
   * Redis restarted or was restored from an older snapshot: the units the node holds were leased from
   * a bucket that is gone, so they stay spendable until their leases expire but are never given back
   * (the new bucket never took them).
   */
  #leasedFromLostRedis(): void {
    for (const b of this.#buckets.values()) for (const lot of b.lots) lot.returnable = false;
  }

  /**
   * Drops lots whose lease expired and gives their unspent units back to Redis.
   * @returns the give-back call, if one was sent.
   */
  #expire(b: Bucket, now: number): Promise<unknown> | undefined {
    return this.#giveBack(b, dropExpired(b.lots, now));
  }

  /**
   * Gives `units`, already dropped from the local balance, back to the cluster bucket: first netted
   * against usage Redis has not been told (`unreconciled`), the rest sent as a negative cost.
   * Nothing is sent without Redis or while the connection is held (the units stay consumed).
   * @returns the call, tracked until it settles, if one was sent.
   */
  #giveBack(b: Bucket, units: number): Promise<unknown> | undefined {
    if (units <= 0) return undefined;
    const net = netGiveBack(units, b.unreconciled);
    b.unreconciled = net.unreconciled;
    const send = net.send;
    if (send <= 0 || this.#localOnly || this.#held) return undefined;
    this.givenBack.sent += send;
    const call = this.#call(() =>
      this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: -send, force: true, ttlMs: b.windowMs }),
    ).then((r) => {
      this.#inFlight.delete(call);
      if (!r.ok) return;
      this.givenBack.answered += send;
      this.#seen(b, r.value.level, -send);
    });
    this.#inFlight.add(call);
    return call;
  }

  #decayedSpend(b: Bucket, now: number): number {
    const dt = now - b.spendAt;
    return dt > 0 ? b.spendAcc * Math.exp(-dt / this.#rateWindowMs) : b.spendAcc;
  }

  /** Adds to the exponentially decayed spend counter (≈ rate × rateWindowMs at steady load), and to the known usage. */
  #recordSpend(b: Bucket, now: number, units: number): void {
    b.spendAcc = this.#decayedSpend(b, now) + units;
    if (now > b.spendAt) b.spendAt = now;
    this.#addDeficit(b, b.known, now, units);
  }

  /** A deficit's value now: drained at the node's share of the refill rate (by the largest share seen), never below 0. */
  #deficit(b: Bucket, d: Deficit, now: number): number {
    const dt = Math.max(0, now - d.at);
    return Math.max(0, d.value - (dt * b.ratePerSec) / sharedBy(b) / 1000);
  }

  #addDeficit(b: Bucket, d: Deficit, now: number, units: number): void {
    d.value = Math.max(0, this.#deficit(b, d, now) + units);
    d.at = Math.max(d.at, now);
  }

  /** max(minBlock, last take, rate × blockMs capped at capacity / (4 × share)), integer units. */
  #blockSize(b: Bucket, now: number): number {
    const rateBlock = (this.#decayedSpend(b, now) * this.#blockMs) / this.#rateWindowMs;
    const cap = Math.floor(b.capacity / (4 * Math.max(1, b.share())));
    return Math.max(b.minBlock, Math.ceil(b.lastCost), Math.min(Math.ceil(rateBlock), cap));
  }

  /**
   * Starts a renewal unless one is in flight or the bucket said to wait; returns the ms a refused
   * take should wait. `need`: units the refused take lacks (0 for a low-water renewal). Usage Redis
   * has not been told is charged first (that call then stands in for the renewal).
   */
  #maybeRenew(b: Bucket, now: number, need: number): number {
    if (b.renewing !== undefined) return this.#pendingWaitMs;
    if (this.#held) return this.#probeIntervalMs;
    if (now < b.retryAt) return Math.max(1, Math.ceil(b.retryAt - now));
    if (this.#closed) return this.#pendingWaitMs;
    const reseed = b.reseedFrom;
    if (reseed !== undefined && this.#reseed !== undefined) {
      const fn = this.#reseed;
      b.renewing = this.#call(() =>
        fn(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, knownLevel: reseed.level, ageMs: Math.max(0, this.#clock.now() - reseed.at), epoch: reseed.epoch, ttlMs: b.windowMs }),
      ).then((r) => {
        b.renewing = undefined;
        const at = this.#clock.now();
        if (!r.ok) {
          this.#failed(b, at, r.open);
          return;
        }
        if (b.reseedFrom === reseed) b.reseedFrom = undefined;
        b.level = r.value.level;
        b.levelAt = at;
        b.prior = undefined;
        b.retryAt = -Infinity;
        this.#answered(b);
        // Usage spent in fallback is not in what the node saw: charge it now too.
        if (b.unreconciled > 0) this.#maybeRenew(b, at, 0);
      });
      return this.#pendingWaitMs;
    }
    const unreconciled = b.unreconciled;
    if (unreconciled > 0) {
      const charged = (level: number): void => {
        b.unreconciled = Math.max(0, b.unreconciled - unreconciled);
        this.#seen(b, level, unreconciled);
      };
      b.renewing = this.#call(() =>
        this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: unreconciled, force: true, ttlMs: b.windowMs }),
      ).then((r) => {
        b.renewing = undefined;
        const at = this.#clock.now();
        if (!r.ok) {
          // Charged after all (the answer came late): do not charge it twice.
          r.late?.then((v) => charged(v.level), () => undefined);
          this.#failed(b, at, r.open);
          return;
        }
        charged(r.value.level);
        b.retryAt = -Infinity;
        this.#answered(b);
      });
      return this.#pendingWaitMs;
    }
    // The smallest useful grant: what the refused take lacks (so a denial's wait is that take's real
    // refill time), or a minimum block for a low-water renewal.
    const min = Math.min(b.capacity, need > 0 ? Math.ceil(need) : b.minBlock);
    // A starved bucket is renewed every 2 × blockMs: ask for at least this node's fair part of the
    // refill over that time, so k nodes together can take the whole refill.
    const starvedPart = Math.min(Math.floor(b.capacity / (4 * sharedBy(b))), Math.ceil((b.ratePerSec * 2 * this.#blockMs) / 1000 / sharedBy(b)));
    const block = this.#blockSize(b, now);
    // A small bucket (give-back.ts): lease exactly what is lacking, nothing ahead.
    const want = mayPrefetch(b.capacity, b.share(), block) ? Math.min(b.capacity, Math.max(min, block + Math.ceil(b.debt), b.starved ? starvedPart : 0)) : min;
    const sentAt = now;
    const granted = (g: number, at: number): void => {
      if (this.#closed) {
        // Answered after close (a late grant): the node will never spend it.
        void this.#giveBack(b, g);
        return;
      }
      credit(b, g, sentAt + this.#ttlMs);
      void this.#expire(b, at);
    };
    b.renewing = this.#call(() =>
      this.#scripts.lease(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, want, min, ttlMs: b.windowMs }),
    ).then((r) => {
      b.renewing = undefined;
      const at = this.#clock.now();
      if (!r.ok) {
        // Without Redis every call fails by design: that is not a failed renewal.
        if (!this.#localOnly) this.renewals.failed++;
        // A grant answered after the timeout is still this node's until its lease expires.
        if (r.late !== undefined) {
          const late: Promise<void> = r.late.then(
            (v) => {
              this.#inFlight.delete(late);
              if (v.granted > 0) granted(v.granted, this.#clock.now());
            },
            () => void this.#inFlight.delete(late),
          );
          this.#inFlight.add(late);
        }
        this.#failed(b, at, r.open);
        return;
      }
      this.#seen(b, r.value.level, r.value.granted);
      this.#answered(b);
      if (r.value.granted >= want) this.renewals.granted++;
      else if (r.value.granted > 0) this.renewals.partial++;
      else this.renewals.denied++;
      if (r.value.granted > 0) {
        // A partial grant emptied the cluster bucket: the next renewal waits 2 × blockMs (asking at
        // once would only be denied); units refilled meanwhile wait in Redis.
        b.starved = r.value.granted < want;
        b.retryAt = b.starved ? at + 2 * this.#blockMs : -Infinity;
        granted(r.value.granted, at);
      } else {
        // Denied: ask again when the bucket will hold `min` (the Lua's wait: the refused take's real
        // refill time, which its client is told), and ask then for at least the node's fair part of
        // the refill (starved). Each node sends at most one call per such wait.
        b.starved = true;
        b.retryAt = at + (r.value.waitMs >= 0 ? r.value.waitMs : this.#ttlMs);
      }
    });
    return this.#pendingWaitMs;
  }

  /**
   * A call on `b` failed. A blip (`open` false: the breaker is still closed) leaves the node on its
   * leases: the takes waiting on the call, and those of the next `blipMs`, are served from the
   * fallback share, and the next take may renew at once. Otherwise the node enters fallback and
   * probes again after `probeIntervalMs`.
   */
  #failed(b: Bucket, at: number, open: boolean | undefined): void {
    if (open === false) {
      b.blipUntil = at + this.#blipMs;
      b.retryAt = at;
      return;
    }
    b.retryAt = at + this.#probeIntervalMs;
    this.#setFallback(true);
  }

  /** A reply to this node's call on `b` that took `consumed` units left the bucket at `level`. */
  #seen(b: Bucket, level: number, consumed: number): void {
    noteLevel(b, level, consumed, this.#clock.now(), 2 * this.#probeIntervalMs);
  }

  /** A call on `b` was answered: the node is on its leases (a blip's share is dropped). */
  #answered(b: Bucket): void {
    b.blipUntil = -Infinity;
    if (!this.#inFallback) b.fallback = undefined;
    this.#setFallback(false);
  }

  #fallbackBucket(b: Bucket, now: number): number[] {
    if (b.fallback === undefined) {
      const share = sharedBy(b);
      b.fallbackShare = b.capacity / share;
      b.fallback = new Array<number>(BUCKET_SLOTS).fill(0);
      bucketInit(b.fallback, 0, b.fallbackShare, b.windowMs, now);
      const budget = fallbackBudget(b.capacity, share, this.#deficit(b, b.known, now), refilledLevel(b, lowestKnown(b, now), now));
      const used = b.fallbackShare - budget;
      if (used > 0) bucketAdjust(b.fallback, 0, b.fallbackShare, b.windowMs, used);
      this.#onFallbackShare?.({ bucket: b.key, budget, share: b.fallbackShare });
    } else {
      bucketRefill(b.fallback, 0, b.fallbackShare, b.windowMs, now);
    }
    return b.fallback;
  }

  #setFallback(on: boolean): void {
    if (on === this.#inFallback) return;
    this.#inFallback = on;
    if (!on) {
      // Back on Redis: drop the local shares, and let every bucket renew at once (a bucket whose last
      // probe failed would otherwise refuse takes until its probe time). Units spent from the shares
      // are charged (unreconciled) before each bucket's next lease.
      for (const b of this.#buckets.values()) {
        b.fallback = undefined;
        if (b.renewing === undefined) b.retryAt = -Infinity;
      }
    }
    this.#onFallbackChange?.(on);
  }
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a finite number > 0, got ${value}`);
  return value;
}

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a finite number >= 0, got ${value}`);
  return value;
}

/** Nodes sharing `b`, by the largest count seen (updated here). */
function sharedBy(b: Bucket): number {
  b.maxShare = Math.max(b.maxShare, b.share());
  return b.maxShare;
}

function costOf(b: Bucket, cost: CapCost): number {
  return b.kind === 'requests' ? nonNegative('requests', cost.requests ?? 1) : nonNegative('tokens', cost.tokens);
}

function liveUnits(b: Bucket): number {
  return lotUnits(b.lots);
}

function balanceOf(b: Bucket): number {
  return liveUnits(b) - b.debt;
}

/** Adds units to the balance: repays debt first, the rest becomes a lot expiring at `expiresAt`. */
function credit(b: Bucket, units: number, expiresAt: number): void {
  const repay = Math.min(units, b.debt);
  b.debt -= repay;
  const rest = units - repay;
  if (rest > 0) addLot(b.lots, rest, expiresAt);
}
