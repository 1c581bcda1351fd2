/**
 * What the lease rule files share: a node's lease settings ({@link CapLeasesOptions}, checked and
 * defaulted once by {@link leaseNode}), its buckets and groups, and the node-wide flags (fallback,
 * connection held, closed). `CapLeases` owns one {@link LeaseNode}; `lease-renewal.ts`,
 * `fallback-share.ts`, `lease-give-back.ts` and `lease-reconcile.ts` act on it.
 */
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import { runCapCall } from './cap-call.ts';
import type { CapCall } from './cap-call.ts';
import { nonNegative, positive } from './lease-bucket.ts';
import type { Bucket, DeploymentQuota, Group, SpendTuning } from './lease-bucket.ts';
import { noteLevel } from './reconcile.ts';
import type { ReseedFn } from './reconcile.ts';
import type { CapScripts } from './scripts.ts';

/** Options of `CapLeases`. */
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
   * timer); 0: no timer (call `CapLeases.sweep` yourself, e.g. with a manual clock). @default 250
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

/** Lease renewals by outcome (`quotaring_lease_renewals_total`): in full, partly, denied (bucket empty), failed (Redis). */
export interface RenewalCounts {
  granted: number;
  partial: number;
  denied: number;
  failed: number;
}

/** Unspent units given back to Redis (`quotaring_lease_given_back_units_total`): sent, and answered. */
export interface GivenBackCounts {
  sent: number;
  answered: number;
}

/** {@link CapLeasesOptions} checked, with their defaults (names as in the options; `leaseTtlMs` is `ttlMs`). */
export interface LeaseSettings extends SpendTuning {
  readonly cluster: string;
  readonly scripts: CapScripts;
  readonly clock: Clock;
  readonly call: CapCall;
  readonly liveNodes: () => number;
  readonly ttlMs: number;
  readonly minBlockMs: number;
  readonly lowWater: number;
  readonly pendingWaitMs: number;
  readonly probeIntervalMs: number;
  readonly blipMs: number;
  readonly idleMs: number;
  readonly closeWaitMs: number;
  readonly sweepMs: number;
  readonly localOnly: boolean;
  readonly onFallbackChange: ((inFallback: boolean) => void) | undefined;
  readonly onFallbackShare: ((share: FallbackShare) => void) | undefined;
  readonly reseed: ReseedFn | undefined;
}

/** A node's lease state: its settings, buckets, counters and flags. */
export interface LeaseNode extends LeaseSettings {
  readonly groups: Map<string, Group>;
  /** Every bucket of every group, by key (groups naming the same bucket share one). */
  readonly buckets: Map<string, Bucket>;
  readonly renewals: RenewalCounts;
  readonly givenBack: GivenBackCounts;
  /** Give-back calls in flight, and grants that may still be answered after their call timed out. */
  readonly inFlight: Set<Promise<unknown>>;
  /** The node decides from its fallback shares (the last Redis call failed, or no Redis at all). */
  inFallback: boolean;
  /** The connection to Redis dropped: no Redis call until `reconnected()` says whether Redis restarted. */
  held: boolean;
  closed: boolean;
  sweepTimer: ReturnType<typeof setInterval> | undefined;
}

/**
 * A node's lease state from its options, with no bucket yet and no timer started.
 * @throws RangeError when an option is out of range (names it).
 */
export function leaseNode(options: CapLeasesOptions): LeaseNode {
  const ttlMs = positive('leaseTtlMs', options.leaseTtlMs ?? 5_000);
  const blockMs = positive('blockMs', options.blockMs ?? 500);
  const minBlockMs = positive('minBlockMs', options.minBlockMs ?? 100);
  const lowWater = options.lowWater ?? 0.5;
  if (!(lowWater >= 0 && lowWater <= 1)) throw new RangeError(`lowWater must be in [0, 1], got ${lowWater}`);
  const rateWindowMs = positive('rateWindowMs', options.rateWindowMs ?? 1_000);
  const pendingWaitMs = positive('pendingWaitMs', options.pendingWaitMs ?? 5);
  const probeIntervalMs = positive('probeIntervalMs', options.probeIntervalMs ?? 1_000);
  const blipMs = positive('blipMs', options.blipMs ?? 50);
  const idleMs = positive('idleMs', options.idleMs ?? 1_000);
  const closeWaitMs = nonNegative('closeWaitMs', options.closeWaitMs ?? 1_000);
  const sweepMs = nonNegative('sweepMs', options.sweepMs ?? 250);
  const localOnly = options.localOnly === true;
  return {
    cluster: options.cluster,
    scripts: options.scripts,
    clock: options.clock ?? systemClock,
    call: options.call ?? runCapCall,
    liveNodes: options.liveNodes ?? (() => 1),
    ttlMs,
    blockMs,
    minBlockMs,
    lowWater,
    rateWindowMs,
    pendingWaitMs,
    probeIntervalMs,
    blipMs,
    idleMs,
    closeWaitMs,
    sweepMs,
    localOnly,
    onFallbackChange: options.onFallbackChange,
    onFallbackShare: options.onFallbackShare,
    reseed: options.reseed,
    groups: new Map(),
    buckets: new Map(),
    renewals: { granted: 0, partial: 0, denied: 0, failed: 0 },
    givenBack: { sent: 0, answered: 0 },
    inFlight: new Set(),
    inFallback: localOnly,
    held: false,
    closed: false,
    sweepTimer: undefined,
  };
}

/**
 * A reply to this node's call on `b` that took `consumed` units (negative: gave back) left the bucket
 * at `level`: the node's known level of it (`noteLevel`, `reconcile.ts`), kept for re-seeding.
 */
export function seen(n: LeaseNode, b: Bucket, level: number, consumed: number): void {
  noteLevel(b, level, consumed, n.clock.now(), 2 * n.probeIntervalMs);
}
