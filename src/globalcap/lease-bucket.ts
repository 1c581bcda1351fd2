/**
 * One leased bucket on a node (`CapLeases` keeps one per cluster bucket it spends from): its state
 * and the arithmetic on it — the balance (unexpired lots minus debt), the spend rate and the block a
 * renewal asks for, and the node's own in-window usage.
 *
 * Safety rules kept here:
 * - **Balance.** Only units Redis granted (lots, each expiring with its lease: `give-back.ts`) are
 *   spendable; a debit beyond them is debt, repaid first by the next grant or refund.
 * - **Block size** = max(minBlock, the last take's cost, spend rate × blockMs capped at
 *   capacity / (4 × share)), so a node at steady load renews about 1000 / blockMs times a second and
 *   never holds more than a quarter of its fair part of the bucket ahead of need.
 * - **Known usage.** Each bucket tracks the node's own in-window usage as a deficit that drains at
 *   the node's share of the refill rate (an upper bound of what that usage still weighs in the
 *   cluster bucket), by the largest share seen, so a view of the members that shrinks for a moment
 *   never drains it faster. Fallback shares and re-seeding read it (`fallback-share.ts`,
 *   `lease-reconcile.ts`).
 */
import { addLot, lotUnits } from './give-back.ts';
import type { Lot } from './give-back.ts';
import type { LevelSeen } from './reconcile.ts';

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
  /**
   * How the provider counts it: `token_bucket` (capacity ⌊quota × headroom⌋, refilled over 60 s) or
   * `sliding_window` (capacity ⌊quota × (1 − headroom)⌋ refilled at quota × headroom a minute, so
   * any 60 s admits at most capacity + refill = the quota; needs headroom < 1).
   * @default token_bucket
   */
  readonly algorithm?: 'token_bucket' | 'sliding_window';
}

/** A `requests` or `tokens` bucket of a group defined with `CapLeases.define`. */
export interface CapBucketSpec {
  readonly kind: 'requests' | 'tokens';
  /** Bucket name in the global cap (the key is `capKey(cluster, name)`); groups naming the same bucket share it. */
  readonly name: string;
  /** Units the bucket holds when full (the limit), integer ≥ 1. */
  readonly capacity: number;
  /** Window over which a full bucket refills, ms (> 0). */
  readonly windowMs: number;
}

/** A group defined with `CapLeases.define`: its buckets, and how many nodes share them. */
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

/** The unit a bucket counts. */
export type BucketKind = 'requests' | 'tokens';

/** A number that drains linearly (at a given rate, never below 0) as time passes. */
export interface Deficit {
  value: number;
  at: number;
}

/** One cluster bucket as this node leases from it (all mutable state is the node's own). */
export interface Bucket {
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
  /** No renewal above a floor (for a take over its fair share) before this time (after such a renewal was denied), ms. */
  overRetryAt: number;
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

/** What one `take` spends from: a deployment's or a hot tenant's buckets. */
export interface Group {
  readonly buckets: readonly Bucket[];
}

/** The settings the spend-rate and block-size arithmetic reads (`CapLeasesOptions`). */
export interface SpendTuning {
  /** A renewal asks for the units spent in this many ms at the recent spend rate. */
  readonly blockMs: number;
  /** Time constant of the spend-rate estimate, ms. */
  readonly rateWindowMs: number;
}

/**
 * A new bucket at `key` (`capKey(cluster, spec.name)`), full and never leased from; `spec` already
 * checked by {@link validBucketSpec}.
 * @param minBlockMs the smallest block, as ms of the bucket's refill (at least 1 unit).
 * @param now clock time, ms.
 */
export function newBucket(key: string, spec: CapBucketSpec, share: () => number, minBlockMs: number, now: number): Bucket {
  const ratePerSec = (spec.capacity * 1000) / spec.windowMs;
  return {
    kind: spec.kind,
    key,
    capacity: spec.capacity,
    windowMs: spec.windowMs,
    ratePerSec,
    minBlock: Math.min(spec.capacity, Math.max(1, Math.ceil((ratePerSec * minBlockMs) / 1000))),
    share,
    maxShare: Math.max(1, share()),
    lots: [],
    debt: 0,
    spendAcc: 0,
    spendAt: now,
    lastCost: 0,
    lastUseAt: now,
    renewing: undefined,
    retryAt: -Infinity,
    overRetryAt: -Infinity,
    fallback: undefined,
    fallbackShare: 0,
    known: { value: 0, at: now },
    unreconciled: 0,
    starved: false,
    blipUntil: -Infinity,
    level: spec.capacity,
    levelAt: now,
    reseedFrom: undefined,
    prior: undefined,
  };
}

/** @throws RangeError for a capacity that is not an integer ≥ 1 or a window not > 0. */
export function validBucketSpec(spec: CapBucketSpec): void {
  if (!Number.isInteger(spec.capacity) || spec.capacity < 1) throw new RangeError(`bucket ${spec.name}: capacity must be an integer >= 1, got ${spec.capacity}`);
  positive(`bucket ${spec.name}: windowMs`, spec.windowMs);
}

/**
 * A deployment's buckets, named `deployment:<name>:rpm|tpm`: with `token_bucket`, requests of
 * capacity ⌊rpm × headroom⌋ and tokens of capacity ⌊tpm × headroom⌋ (at least 1 each), refilled over
 * one minute; with `sliding_window`, capacity ⌊quota × (1 − headroom)⌋ refilled at quota × headroom
 * a minute (the window is then capacity / that rate).
 * @throws RangeError when headroom is not in (0, 1] (in (0, 1) for sliding_window) or rpm / tpm is not > 0.
 */
export function deploymentBuckets(name: string, quota: DeploymentQuota): CapBucketSpec[] {
  const headroom = quota.headroom ?? 0.9;
  if (!(headroom > 0 && headroom <= 1)) throw new RangeError(`deployment ${name}: headroom must be in (0, 1], got ${headroom}`);
  const sliding = quota.algorithm === 'sliding_window';
  if (sliding && headroom === 1) throw new RangeError(`deployment ${name}: a sliding_window quota needs headroom below 1`);
  const buckets: CapBucketSpec[] = [];
  const add = (kind: BucketKind, suffix: string, perMinute: number | undefined): void => {
    if (perMinute === undefined) return;
    if (!Number.isFinite(perMinute) || perMinute <= 0) throw new RangeError(`deployment ${name}: quota.${suffix} must be > 0, got ${perMinute}`);
    if (!sliding) {
      buckets.push({ kind, name: `deployment:${name}:${suffix}`, capacity: Math.max(1, Math.floor(perMinute * headroom)), windowMs: DEPLOYMENT_WINDOW_MS });
      return;
    }
    const capacity = Math.max(1, Math.floor(perMinute * (1 - headroom)));
    // Refilled at perMinute × headroom a minute: capacity + 60 s of refill ≤ perMinute.
    buckets.push({ kind, name: `deployment:${name}:${suffix}`, capacity, windowMs: (capacity * DEPLOYMENT_WINDOW_MS) / (perMinute * headroom) });
  };
  add('requests', 'rpm', quota.rpm);
  add('tokens', 'tpm', quota.tpm);
  return buckets;
}

/** @returns `value`. @throws RangeError unless it is a finite number > 0 (the message names `name`). */
export function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a finite number > 0, got ${value}`);
  return value;
}

/** @returns `value`. @throws RangeError unless it is a finite number ≥ 0 (the message names `name`). */
export function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a finite number >= 0, got ${value}`);
  return value;
}

/** Nodes sharing `b`, by the largest count seen (updated here). */
export function sharedBy(b: Bucket): number {
  b.maxShare = Math.max(b.maxShare, b.share());
  return b.maxShare;
}

/** Units of `b` a take of `cost` spends. @throws RangeError for a cost not finite ≥ 0. */
export function costOf(b: Bucket, cost: CapCost): number {
  return b.kind === 'requests' ? nonNegative('requests', cost.requests ?? 1) : nonNegative('tokens', cost.tokens);
}

/** Units of unexpired lots (expired ones are dropped by `expire`, `lease-give-back.ts`). */
export function liveUnits(b: Bucket): number {
  return lotUnits(b.lots);
}

/** Units the node may spend from its leases: lots minus debt (negative in debt). */
export function balanceOf(b: Bucket): number {
  return liveUnits(b) - b.debt;
}

/** Adds units to the balance: repays debt first, the rest becomes a lot expiring at `expiresAt`. */
export function credit(b: Bucket, units: number, expiresAt: number): void {
  const repay = Math.min(units, b.debt);
  b.debt -= repay;
  const rest = units - repay;
  if (rest > 0) addLot(b.lots, rest, expiresAt);
}

/** A deficit's value now: drained at the node's share of the refill rate (by the largest share seen), never below 0. */
export function deficit(b: Bucket, d: Deficit, now: number): number {
  const dt = Math.max(0, now - d.at);
  return Math.max(0, d.value - (dt * b.ratePerSec) / sharedBy(b) / 1000);
}

/** Adds `units` (negative: removes) to a deficit as of `now`, never below 0. */
export function addDeficit(b: Bucket, d: Deficit, now: number, units: number): void {
  d.value = Math.max(0, deficit(b, d, now) + units);
  d.at = Math.max(d.at, now);
}

/** The spend counter decayed to `now` (≈ rate × rateWindowMs at steady load), units. */
export function decayedSpend(t: SpendTuning, b: Bucket, now: number): number {
  const dt = now - b.spendAt;
  return dt > 0 ? b.spendAcc * Math.exp(-dt / t.rateWindowMs) : b.spendAcc;
}

/** Adds to the exponentially decayed spend counter (≈ rate × rateWindowMs at steady load), and to the known usage. */
export function recordSpend(t: SpendTuning, b: Bucket, now: number, units: number): void {
  b.spendAcc = decayedSpend(t, b, now) + units;
  if (now > b.spendAt) b.spendAt = now;
  addDeficit(b, b.known, now, units);
}

/** max(minBlock, last take, rate × blockMs capped at capacity / (4 × share)), integer units. */
export function blockSize(t: SpendTuning, b: Bucket, now: number): number {
  const rateBlock = (decayedSpend(t, b, now) * t.blockMs) / t.rateWindowMs;
  const cap = Math.floor(b.capacity / (4 * Math.max(1, b.share())));
  return Math.max(b.minBlock, Math.ceil(b.lastCost), Math.min(Math.ceil(rateBlock), cap));
}
