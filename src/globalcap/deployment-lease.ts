/**
 * A node's leases on the cluster-wide quota of its upstream deployments (issue 4, "Deployment
 * quotas"). Each deployment has up to two token buckets in the global cap (Redis): requests
 * (capacity ⌊rpm × headroom⌋) and tokens (capacity ⌊tpm × headroom⌋), both refilled continuously
 * at capacity / 60 s. The node leases blocks from them, spends the blocks locally and synchronously
 * (`take`, no Redis on that path), and renews in the background before a block runs dry.
 *
 * Safety choices (they err on admitting less, never more, than the cluster quota):
 * - A lease expires `leaseTtlMs` after its lease call was sent. Unspent units of an expired lease
 *   are dropped locally and stay consumed in Redis (they refill there at the bucket's rate).
 * - While Redis is unavailable, each node admits from a local token bucket holding
 *   capacity / live nodes, refilled at that share per 60 s (plus any lease units still valid).
 */
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import { bucketInit, bucketRefill, bucketTake, bucketWaitMs, bucketAdjust, BUCKET_SLOTS } from '../limiter/token-bucket.ts';
import { capKey } from './keys.ts';
import type { CapScripts } from './scripts.ts';

/** Outcome of a Redis call made through {@link CapCall}: the value, or a failure (Redis down, timeout, breaker open). */
export type CapCallResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false };

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

/** Options of {@link DeploymentLeases}. */
export interface DeploymentLeasesOptions {
  /** Cluster name, the namespace of the bucket keys (`capKey(cluster, 'deployment:<name>:rpm' | ':tpm')`). */
  readonly cluster: string;
  /** Quota by deployment name. */
  readonly deployments: Readonly<Record<string, DeploymentQuota>>;
  /** The global cap's scripts (`defineCapScripts(redis)`). */
  readonly scripts: CapScripts;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Wrapper of every Redis call. @default runCapCall (no timeout) */
  readonly call?: CapCall;
  /** Nodes currently live in the cluster (≥ 1), read at each renewal and when entering fallback. @default () => 1 */
  readonly liveNodes?: () => number;
  /** Life of a lease from the moment its call is sent, ms. @default 5000 */
  readonly leaseTtlMs?: number;
  /** A renewal asks for the units spent in this many ms at the recent spend rate. @default 250 */
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
  /** Called with true when the node enters fallback (a Redis call failed) and false when it leaves it (a call succeeded). */
  readonly onFallbackChange?: (inFallback: boolean) => void;
  /**
   * No Redis at all (a node without `cluster.redis`): start in fallback and stay there — each node
   * enforces `capacity / liveNodes()` locally and never calls the scripts. @default false
   */
  readonly localOnly?: boolean;
}

/** What a `take` spends. */
export interface DeploymentCost {
  /** Requests (units of the rpm bucket). @default 1 */
  readonly requests?: number;
  /** Tokens (units of the tpm bucket), e.g. prompt + reserved output. */
  readonly tokens: number;
}

/** A refusal at most this long (ms) means a renewal is in flight: see {@link DeploymentLeases.takeAfterRenewals}. */
export const RENEWAL_WAIT_MS = 20;
/** Renewals a take may await before it is refused. */
export const RENEWAL_WAITS = 3;

/**
 * Result of a `take`: admitted, or refused with the ms to wait before trying again (-1: the cost
 * exceeds a bucket's capacity and can never be admitted).
 */
export type DeploymentTakeResult = { readonly ok: true } | { readonly ok: false; readonly waitMs: number };

/** A bucket's local state, for metrics and tests. */
export interface LeaseBucketView {
  /** Bucket capacity in units (⌊quota × headroom⌋). */
  readonly capacity: number;
  /** Units of unexpired leases minus debt (negative after a debit beyond the balance). */
  readonly balance: number;
  /** Current block size a renewal asks for, units. */
  readonly block: number;
  /** Recent spend rate, units per second. */
  readonly ratePerSec: number;
  /** A lease call is in flight. */
  readonly renewing: boolean;
}

/** Fixed refill window of deployment buckets: quotas are per minute. */
const WINDOW_MS = 60_000;

type BucketKind = 'requests' | 'tokens';

interface Lot {
  units: number;
  /** ms (clock time) when these units expire. */
  readonly expiresAt: number;
}

interface Bucket {
  readonly kind: BucketKind;
  readonly key: string;
  readonly capacity: number;
  readonly ratePerSec: number;
  readonly minBlock: number;
  /** Unexpired leased units, oldest first (expiry order). */
  lots: Lot[];
  /** Units spent beyond the leases (repaid by the next grant). */
  debt: number;
  /** Decayed spend counter (units) and the time it was last decayed to. */
  spendAcc: number;
  spendAt: number;
  /** Units of the last take (a block never covers less than one such take). */
  lastCost: number;
  renewing: Promise<void> | undefined;
  /** No renewal before this time (after a refusal or a failed call), ms. */
  retryAt: number;
  /** Local token bucket used in fallback (BUCKET_SLOTS numbers), and its capacity (units). */
  fallback: number[] | undefined;
  fallbackShare: number;
}

interface Deployment {
  readonly buckets: readonly Bucket[];
}

/**
 * A node's leases on the deployment quotas of the cluster. `take`, `refund` and `debit` are
 * synchronous and local; renewals (one `lease` call per bucket, never two in flight on one bucket)
 * run in the background, triggered when a balance drops below the low-water mark or a take is
 * refused. Block size = max(minBlock, the last take's cost, spend rate × blockMs capped at
 * capacity / (4 × live nodes)), and a refused take's renewal asks at least for what it lacks, so a
 * node at steady load renews about 1000 / blockMs times a second (4 with the defaults). When the
 * cluster bucket runs dry, a partial grant delays the next renewal by blockMs and a denied one by
 * live nodes × the bucket's wait, so starved nodes do not race for every unit of refill.
 */
export class DeploymentLeases {
  readonly #deployments = new Map<string, Deployment>();
  readonly #scripts: CapScripts;
  readonly #clock: Clock;
  readonly #call: CapCall;
  readonly #liveNodes: () => number;
  readonly #ttlMs: number;
  readonly #blockMs: number;
  readonly #lowWater: number;
  readonly #rateWindowMs: number;
  readonly #pendingWaitMs: number;
  readonly #probeIntervalMs: number;
  readonly #onFallbackChange: ((inFallback: boolean) => void) | undefined;
  #inFallback: boolean;
  readonly #localOnly: boolean;
  #closed = false;

  /**
   * @throws RangeError when a quota, headroom or option is out of range, or a name is not a valid
   *   cap key part (empty, braces).
   */
  constructor(options: DeploymentLeasesOptions) {
    this.#scripts = options.scripts;
    this.#clock = options.clock ?? systemClock;
    this.#call = options.call ?? runCapCall;
    this.#liveNodes = options.liveNodes ?? (() => 1);
    this.#ttlMs = positive('leaseTtlMs', options.leaseTtlMs ?? 5_000);
    this.#blockMs = positive('blockMs', options.blockMs ?? 250);
    const minBlockMs = positive('minBlockMs', options.minBlockMs ?? 100);
    this.#lowWater = options.lowWater ?? 0.5;
    if (!(this.#lowWater >= 0 && this.#lowWater <= 1)) throw new RangeError(`lowWater must be in [0, 1], got ${this.#lowWater}`);
    this.#rateWindowMs = positive('rateWindowMs', options.rateWindowMs ?? 1_000);
    this.#pendingWaitMs = positive('pendingWaitMs', options.pendingWaitMs ?? 5);
    this.#probeIntervalMs = positive('probeIntervalMs', options.probeIntervalMs ?? 1_000);
    this.#localOnly = options.localOnly === true;
    this.#inFallback = this.#localOnly;
    this.#onFallbackChange = options.onFallbackChange;
    const now = this.#clock.now();
    for (const [name, quota] of Object.entries(options.deployments)) {
      const headroom = quota.headroom ?? 0.9;
      if (!(headroom > 0 && headroom <= 1)) throw new RangeError(`deployment ${name}: headroom must be in (0, 1], got ${headroom}`);
      const buckets: Bucket[] = [];
      const add = (kind: BucketKind, suffix: string, perMinute: number | undefined): void => {
        if (perMinute === undefined) return;
        if (!Number.isFinite(perMinute) || perMinute <= 0) throw new RangeError(`deployment ${name}: quota.${suffix} must be > 0, got ${perMinute}`);
        const capacity = Math.max(1, Math.floor(perMinute * headroom));
        const ratePerSec = (capacity * 1000) / WINDOW_MS;
        buckets.push({
          kind,
          key: capKey(options.cluster, `deployment:${name}:${suffix}`),
          capacity,
          ratePerSec,
          minBlock: Math.min(capacity, Math.max(1, Math.ceil((ratePerSec * minBlockMs) / 1000))),
          lots: [],
          debt: 0,
          spendAcc: 0,
          spendAt: now,
          lastCost: 0,
          renewing: undefined,
          retryAt: -Infinity,
          fallback: undefined,
          fallbackShare: 0,
        });
      };
      add('requests', 'rpm', quota.rpm);
      add('tokens', 'tpm', quota.tpm);
      this.#deployments.set(name, { buckets });
    }
  }

  /** True while the node decides from its fallback share (the last Redis call failed). */
  get inFallback(): boolean {
    return this.#inFallback;
  }

  /**
   * Spends `cost` from the node's local leases, all-or-nothing across the deployment's buckets.
   * Never touches Redis: a refused take (or a balance left below the low-water mark) starts a
   * background renewal. In fallback, a bucket whose lease cannot cover the cost takes it from the
   * node's share (capacity / live nodes per 60 s).
   * @returns `{ ok: true }`, or `{ ok: false, waitMs }`: ms until the next renewal may cover it
   *   (`pendingWaitMs` while one is in flight, else the bucket's own wait), -1 when the cost exceeds
   *   a bucket's capacity (never admitted).
   * @throws RangeError for an unknown deployment or a cost that is not a finite number ≥ 0;
   *   Error after `close()`.
   */
  take(deployment: string, cost: DeploymentCost): DeploymentTakeResult {
    const d = this.#deployment(deployment);
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
      this.#expire(b, now);
      if (balanceOf(b) >= units) {
        sources.push('lease');
        continue;
      }
      if (this.#inFallback) {
        const fb = this.#fallbackBucket(b, now);
        if (units <= b.fallbackShare) {
          const w = bucketWaitMs(fb, 0, b.fallbackShare, WINDOW_MS, units);
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
        if (!this.#localOnly) this.#maybeRenew(b, now, 0);
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
      if (source === 'lease') spendLots(b, units);
      else if (source === 'fallback') bucketTake(b.fallback as number[], 0, WINDOW_MS, units);
      else return;
      this.#recordSpend(b, now, units);
      // Low water: renew, asking at least for what the next take of the same size lacks (a smaller
      // grant could not serve it and might expire unused while the node waits for the rest).
      if (balanceOf(b) < this.#lowWater * this.#blockSize(b, now)) this.#maybeRenew(b, now, Math.max(0, b.lastCost - balanceOf(b)));
    });
    return { ok: true };
  }

  /**
   * Gives back units taken but not used — tokens reserved beyond the actual usage after settlement,
   * or a whole `take` whose request was then refused by its tenant's limits (`requests: 1`): they go
   * to the local balance (repaying debt first), not to Redis, valid for one lease ttl from now.
   * @throws RangeError for an unknown deployment or units not finite ≥ 0.
   */
  refund(deployment: string, usage: { readonly requests?: number; readonly tokens: number }): void {
    const expires = this.#clock.now() + this.#ttlMs;
    const tokens = this.#bucket(deployment, 'tokens');
    const t = nonNegative('tokens', usage.tokens);
    if (tokens !== undefined && t > 0) credit(tokens, t, expires);
    const requests = this.#bucket(deployment, 'requests');
    const r = nonNegative('requests', usage.requests ?? 0);
    if (requests !== undefined && r > 0) credit(requests, r, expires);
  }

  /**
   * Takes tokens used beyond a `take`'s reservation (actual > reserved) from the local balance,
   * which may go negative (debt repaid by the next renewal's grant).
   * @throws RangeError for an unknown deployment or tokens not finite ≥ 0.
   */
  debit(deployment: string, usage: { readonly tokens: number }): void {
    const b = this.#bucket(deployment, 'tokens');
    const units = nonNegative('tokens', usage.tokens);
    if (b === undefined || units === 0) return;
    const now = this.#clock.now();
    this.#expire(b, now);
    const fromLots = Math.min(units, liveUnits(b));
    spendLots(b, fromLots);
    b.debt += units - fromLots;
    this.#recordSpend(b, now, units);
  }

  /**
   * A provider answered 429 (rate limited) for this deployment: drains the cluster buckets by
   * `retryAfterMs × rate` (token-bucket calls with force, so they may go into debt) and zeroes the
   * node's local balances (leases and debt); in fallback the local share is drained likewise.
   * Do NOT call this for a 429 of type `insufficient_quota` (billing, not rate): it is no reason to
   * slow the cluster down; the caller tells the two apart.
   * @param retryAfterMs the provider's wait (retry-after / reset headers), ms ≥ 0.
   * @throws RangeError for an unknown deployment or a negative/non-finite wait.
   */
  async providerLimited(deployment: string, { retryAfterMs }: { readonly retryAfterMs: number }): Promise<void> {
    const d = this.#deployment(deployment);
    nonNegative('retryAfterMs', retryAfterMs);
    const now = this.#clock.now();
    const calls: Promise<void>[] = [];
    for (const b of d.buckets) {
      b.lots = [];
      b.debt = 0;
      const drain = (retryAfterMs * b.ratePerSec) / 1000;
      if (drain === 0) continue;
      if (b.fallback !== undefined) {
        bucketRefill(b.fallback, 0, b.fallbackShare, WINDOW_MS, now);
        bucketAdjust(b.fallback, 0, b.fallbackShare, WINDOW_MS, (drain * b.fallbackShare) / b.capacity);
      }
      calls.push(
        this.#call(() =>
          this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: drain, force: true, ttlMs: WINDOW_MS }),
        ).then((r) => this.#setFallback(!r.ok)),
      );
    }
    await Promise.all(calls);
  }

  /**
   * After `take` refused with `refused`: when that refusal only means "a renewal is in flight"
   * (waitMs ≤ {@link RENEWAL_WAIT_MS}), waits for the renewals (each bounded by the `call`
   * wrapper's timeout; the requests and tokens buckets renew separately) and takes again, up to
   * {@link RENEWAL_WAITS} times. Resolves with the last result (`refused` itself when there was
   * nothing to wait for). @throws RangeError as {@link take}.
   */
  async takeAfterRenewals(deployment: string, cost: DeploymentCost, refused: DeploymentTakeResult): Promise<DeploymentTakeResult> {
    let taken = refused;
    for (let i = 0; i < RENEWAL_WAITS && !taken.ok && taken.waitMs >= 0 && taken.waitMs <= RENEWAL_WAIT_MS; i++) {
      await this.whenRenewed(deployment);
      taken = this.take(deployment, cost);
    }
    return taken;
  }

  /** Resolves when the deployment's renewals in flight (if any) have settled. Never rejects. */
  async whenRenewed(deployment: string): Promise<void> {
    await Promise.all(this.#deployment(deployment).buckets.map((b) => b.renewing));
  }

  /**
   * The local state of a deployment's buckets (absent when its quota has no rpm / tpm).
   * @throws RangeError for an unknown deployment.
   */
  view(deployment: string): { readonly requests?: LeaseBucketView; readonly tokens?: LeaseBucketView } {
    const now = this.#clock.now();
    const out: { requests?: LeaseBucketView; tokens?: LeaseBucketView } = {};
    for (const b of this.#deployment(deployment).buckets) {
      this.#expire(b, now);
      out[b.kind] = {
        capacity: b.capacity,
        balance: balanceOf(b),
        block: this.#blockSize(b, now),
        ratePerSec: (this.#decayedSpend(b, now) * 1000) / this.#rateWindowMs,
        renewing: b.renewing !== undefined,
      };
    }
    return out;
  }

  /**
   * Waits for renewals in flight, then returns each bucket's unspent, unexpired balance to Redis
   * (token-bucket call with a negative cost; a negative balance, i.e. debt, is charged with force).
   * Later calls of `take` throw. There are no timers to stop: renewals are started by takes.
   * Idempotent; never rejects (a failed return leaves the units consumed in Redis, the safe side).
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const all = [...this.#deployments.values()].flatMap((d) => d.buckets);
    await Promise.all(all.map((b) => b.renewing));
    const now = this.#clock.now();
    const calls: Promise<unknown>[] = [];
    for (const b of all) {
      this.#expire(b, now);
      const balance = balanceOf(b);
      b.lots = [];
      b.debt = 0;
      if (balance === 0) continue;
      calls.push(
        this.#call(() =>
          this.#scripts.tokenBucket(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, cost: -balance, force: true, ttlMs: WINDOW_MS }),
        ),
      );
    }
    await Promise.all(calls);
  }

  #deployment(name: string): Deployment {
    if (this.#closed) throw new Error('DeploymentLeases is closed');
    const d = this.#deployments.get(name);
    if (d === undefined) throw new RangeError(`unknown deployment ${JSON.stringify(name)} (not in the leases' deployments)`);
    return d;
  }

  #bucket(deployment: string, kind: BucketKind): Bucket | undefined {
    return this.#deployment(deployment).buckets.find((b) => b.kind === kind);
  }

  /** Drops lots whose lease expired (their units stay consumed in Redis). */
  #expire(b: Bucket, now: number): void {
    let i = 0;
    while (i < b.lots.length && (b.lots[i] as Lot).expiresAt <= now) i++;
    if (i > 0) b.lots.splice(0, i);
  }

  #decayedSpend(b: Bucket, now: number): number {
    const dt = now - b.spendAt;
    return dt > 0 ? b.spendAcc * Math.exp(-dt / this.#rateWindowMs) : b.spendAcc;
  }

  /** Adds to the exponentially decayed spend counter (≈ rate × rateWindowMs at steady load). */
  #recordSpend(b: Bucket, now: number, units: number): void {
    b.spendAcc = this.#decayedSpend(b, now) + units;
    if (now > b.spendAt) b.spendAt = now;
  }

  /** max(minBlock, last take, rate × blockMs capped at capacity / (4 × live nodes)), integer units. */
  #blockSize(b: Bucket, now: number): number {
    const rateBlock = (this.#decayedSpend(b, now) * this.#blockMs) / this.#rateWindowMs;
    const cap = Math.floor(b.capacity / (4 * Math.max(1, this.#liveNodes())));
    return Math.max(b.minBlock, Math.ceil(b.lastCost), Math.min(Math.ceil(rateBlock), cap));
  }

  /**
   * Starts a renewal unless one is in flight or the bucket said to wait; returns the ms a refused
   * take should wait. `need`: units the refused take lacks (0 for a low-water renewal).
   */
  #maybeRenew(b: Bucket, now: number, need: number): number {
    if (b.renewing !== undefined) return this.#pendingWaitMs;
    if (now < b.retryAt) return Math.max(1, Math.ceil(b.retryAt - now));
    if (this.#closed) return this.#pendingWaitMs;
    const min = Math.min(b.capacity, Math.max(b.minBlock, Math.ceil(need)));
    const want = Math.min(b.capacity, Math.max(min, this.#blockSize(b, now) + Math.ceil(b.debt)));
    const sentAt = now;
    b.renewing = this.#call(() =>
      this.#scripts.lease(b.key, { capacity: b.capacity, ratePerSec: b.ratePerSec, want, min, ttlMs: WINDOW_MS }),
    ).then((r) => {
      b.renewing = undefined;
      const at = this.#clock.now();
      if (!r.ok) {
        b.retryAt = at + this.#probeIntervalMs;
        this.#setFallback(true);
        return;
      }
      this.#setFallback(false);
      if (r.value.granted > 0) {
        // A partial grant emptied the cluster bucket: the next renewal waits one block time
        // (asking at once would only be denied); units refilled meanwhile wait in Redis.
        b.retryAt = r.value.granted < want ? at + this.#blockMs : -Infinity;
        credit(b, r.value.granted, sentAt + this.#ttlMs);
        this.#expire(b, at);
      } else {
        // Denied: the cluster bucket is starved and every live node competes for its refill, so
        // ask again after live nodes × the wait (the grant then takes what accumulated, up to
        // `want`) instead of every node racing for each `min` as it refills.
        b.retryAt = at + (r.value.waitMs >= 0 ? r.value.waitMs * Math.max(1, this.#liveNodes()) : this.#ttlMs);
      }
    });
    return this.#pendingWaitMs;
  }

  #fallbackBucket(b: Bucket, now: number): number[] {
    if (b.fallback === undefined) {
      b.fallbackShare = b.capacity / Math.max(1, this.#liveNodes());
      b.fallback = new Array<number>(BUCKET_SLOTS).fill(0);
      bucketInit(b.fallback, 0, b.fallbackShare, WINDOW_MS, now);
    } else {
      bucketRefill(b.fallback, 0, b.fallbackShare, WINDOW_MS, now);
    }
    return b.fallback;
  }

  #setFallback(on: boolean): void {
    if (on === this.#inFallback) return;
    this.#inFallback = on;
    if (!on) {
      // Back on Redis: drop the local shares, and let every bucket renew at once (a bucket whose last
      // probe failed would otherwise refuse takes until its probe time).
      for (const d of this.#deployments.values()) {
        for (const b of d.buckets) {
          b.fallback = undefined;
          if (b.renewing === undefined) b.retryAt = -Infinity;
        }
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

function costOf(b: Bucket, cost: DeploymentCost): number {
  return b.kind === 'requests' ? nonNegative('requests', cost.requests ?? 1) : nonNegative('tokens', cost.tokens);
}

function liveUnits(b: Bucket): number {
  let sum = 0;
  for (const lot of b.lots) sum += lot.units;
  return sum;
}

function balanceOf(b: Bucket): number {
  return liveUnits(b) - b.debt;
}

/** Spends `units` (≤ the live units) from the oldest lots first. */
function spendLots(b: Bucket, units: number): void {
  let left = units;
  while (left > 0 && b.lots.length > 0) {
    const lot = b.lots[0] as Lot;
    if (lot.units > left) {
      lot.units -= left;
      return;
    }
    left -= lot.units;
    b.lots.shift();
  }
}

/** Adds units to the balance: repays debt first, the rest becomes a lot expiring at `expiresAt`. */
function credit(b: Bucket, units: number, expiresAt: number): void {
  const repay = Math.min(units, b.debt);
  b.debt -= repay;
  const rest = units - repay;
  if (rest <= 0) return;
  const last = b.lots[b.lots.length - 1];
  if (last !== undefined && last.expiresAt === expiresAt) last.units += rest;
  else if (last === undefined || last.expiresAt < expiresAt) b.lots.push({ units: rest, expiresAt });
  else {
    // Older expiry than the newest lot (a grant resolved after a refund): keep expiry order.
    const i = b.lots.findIndex((l) => l.expiresAt > expiresAt);
    b.lots.splice(i, 0, { units: rest, expiresAt });
  }
}
