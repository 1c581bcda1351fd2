/**
 * Provider feedback: what a provider reports it has left on a successful reply corrects the
 * cluster's bucket of that deployment downward, so usage of the same provider key outside quotaring
 * (another region, a batch job) stops causing provider 429s. The rule, for each kind (requests,
 * tokens) the reply reports and the deployment's quota has:
 *
 *   target = remaining + refill × (now − sentAt) − quota × (1 − headroom) − this node's unspent lease
 *
 * where `remaining` is the provider's count when it answered, `refill` is the configured quota per
 * 60 s (the provider's refill, ageing the count from the moment the request was sent: the earliest
 * the provider can have counted, so the count is aged by at least the real time) and
 * `quota × (1 − headroom)` is the margin the headroom keeps below the provider's limit (a bucket of
 * `quota × headroom` refilled at `headroom × quota` a minute stays at least that far below a
 * provider bucket of the quota spending the same; 0 for `sliding_window`, whose bucket never holds
 * more than the provider has left in its 60 s window). When the
 * cluster bucket holds more than the target, `lua/feedback-lower.lua` lowers it toward the target:
 *
 * - never raises a bucket; clamps the target to [0, capacity];
 * - lowers at most `max_outside × capacity` units of a bucket in any 60 s, cluster-wide (a log of
 *   units per second in Redis), so a buggy or hostile upstream that reports 0 left on every reply
 *   costs the deployment at most that many units per window: the bucket refills `capacity` a window,
 *   so it is never held empty by feedback for longer than `max_outside × 60 s` at a stretch;
 * - at most one Redis call per deployment per node every `minIntervalMs` (250 ms): replies within it
 *   keep the lowest target (each aged to the call); a reply whose target is at or above the bucket's
 *   capacity needs no call; no Redis call is made on the request path (the call runs after the
 *   reply's headers, in the background).
 *
 * Bound: units already leased to nodes (at most one block each, `give-back.ts`) and requests in
 * flight to the provider are not lowered and may still be spent, beyond what the provider said it
 * had left; the headroom margin is there to absorb them. Without Redis, or while a node is in
 * fallback, there is nothing to lower: the observation is counted `failed` and dropped.
 */
import type { Clock } from '../clock.ts';
import type { KindReading, ProviderRateLimits } from '../providers/rate-limit-read.ts';
import type { CapCall } from './cap-call.ts';
import type { LowerFn } from './feedback-script.ts';

/** The kinds a provider reports. */
export type FeedbackKind = 'requests' | 'tokens';

/** What one feedback observation or correction came to (label `result` of `quotaring_provider_feedback_total`). */
export type FeedbackResult =
  /** The bucket was lowered to the target. */
  | 'lowered'
  /** Lowered short of the target (or not at all): the 60 s allowance (`max_outside`) was spent. */
  | 'capped'
  /** The bucket held no more than the target (or the target was at or above capacity: no call). */
  | 'unchanged'
  /** The Redis call failed or the node has no Redis: nothing lowered. */
  | 'failed'
  /** A rate-limit header value was present but unusable (garbage, negative, too long, too large). */
  | 'invalid';

/** The results, in the order the metric lists them. */
export const FEEDBACK_RESULTS: readonly FeedbackResult[] = ['lowered', 'capped', 'unchanged', 'failed', 'invalid'];

/** One bucket a deployment's feedback may lower. */
export interface FeedbackBucket {
  readonly kind: FeedbackKind;
  /** The bucket's Redis key (`capKey`) and its lowering log's (`feedbackLogKey`). */
  readonly key: string;
  readonly logKey: string;
  /** Units the bucket holds when full, and its refill, units per second. */
  readonly capacity: number;
  readonly ratePerSec: number;
  /** The bucket key's expiry (its refill window), ms. */
  readonly ttlMs: number;
  /** The configured provider quota of this kind, units per 60 s (the refill that ages a count). */
  readonly quota: number;
  /** Units kept below what the provider has left: quota × (1 − headroom) (0 for a sliding_window quota). */
  readonly margin: number;
  /** Most units lowered in any 60 s: max_outside × capacity. */
  readonly allowance: number;
}

/** Options of {@link ProviderFeedback}. */
export interface ProviderFeedbackOptions {
  readonly clock: Clock;
  /** The lowering script (`defineFeedbackScript(redis)`); absent without Redis (every observation is then `failed`). */
  readonly lower?: LowerFn;
  /** Wrapper of every Redis call (the global cap's guard: timeout and circuit breaker). */
  readonly call: CapCall;
  /** Buckets by deployment name, for the deployments with feedback on. */
  readonly deployments: ReadonlyMap<string, readonly FeedbackBucket[]>;
  /** This node's unspent leased units of a deployment's bucket of `kind` (0 when none). */
  readonly balance: (deployment: string, kind: FeedbackKind) => number;
  /** True while the node decides from fallback shares (no Redis call is made then). @default () => false */
  readonly inFallback?: () => boolean;
  /** Least time between two Redis calls for one deployment, ms. @default 250 */
  readonly minIntervalMs?: number;
}

/** The lowest target seen since the last call, aged to `at`. */
interface Pending {
  value: number;
  at: number;
}

interface DeploymentState {
  readonly buckets: readonly FeedbackBucket[];
  readonly pending: Map<FeedbackKind, Pending>;
  lastCallAt: number;
  timer: ReturnType<typeof setTimeout> | undefined;
  inFlight: Promise<void> | undefined;
}

/**
 * A node's provider feedback: {@link observe} is called with every successful reply's rate-limit
 * headers (synchronous, no I/O); corrections run in the background, rate-limited per deployment.
 */
export class ProviderFeedback {
  readonly #o: ProviderFeedbackOptions;
  readonly #minIntervalMs: number;
  readonly #states = new Map<string, DeploymentState>();
  readonly #counts = new Map<string, number>();
  #stopped = false;

  /** @throws RangeError when `minIntervalMs` is not a finite number ≥ 0. */
  constructor(options: ProviderFeedbackOptions) {
    this.#o = options;
    this.#minIntervalMs = options.minIntervalMs ?? 250;
    if (!(this.#minIntervalMs >= 0 && Number.isFinite(this.#minIntervalMs))) throw new RangeError(`minIntervalMs must be a finite number >= 0, got ${this.#minIntervalMs}`);
    for (const [name, buckets] of options.deployments) {
      this.#states.set(name, { buckets, pending: new Map(), lastCallAt: -Infinity, timer: undefined, inFlight: undefined });
    }
  }

  /** True when `deployment` has feedback on (its replies are worth reading). */
  has(deployment: string): boolean {
    return this.#states.has(deployment);
  }

  /**
   * Takes one successful reply's rate limits into account: a kind whose target (see the file's doc)
   * lies below its bucket's capacity is kept for the next correction, which starts now or, within
   * `minIntervalMs` of the last one, when that has passed. A no-op for a deployment without feedback
   * or after {@link stop}. Never throws.
   * @param sentAt when the request was sent upstream, ms by the node's clock.
   */
  observe(deployment: string, limits: ProviderRateLimits, sentAt: number): void {
    const d = this.#states.get(deployment);
    if (d === undefined || this.#stopped) return;
    const now = this.#o.clock.now();
    let wanted = false;
    for (const b of d.buckets) {
      if (limits.invalid[b.kind] > 0) this.#count(deployment, b.kind, 'invalid', limits.invalid[b.kind]);
      const r: KindReading | undefined = limits[b.kind];
      if (r === undefined) continue;
      const value = r.remaining + Math.max(0, now - sentAt) * (b.quota / 60_000) - b.margin;
      // A target at or above capacity lowers nothing (the node's lease only lowers it: read only then).
      if (value >= b.capacity && value - Math.max(0, this.#o.balance(deployment, b.kind)) >= b.capacity) {
        this.#count(deployment, b.kind, 'unchanged');
        continue;
      }
      const p = d.pending.get(b.kind);
      if (p === undefined) d.pending.set(b.kind, { value, at: now });
      else {
        const aged = p.value + (now - p.at) * (b.quota / 60_000);
        if (value < aged) p.value = value;
        else p.value = aged;
        p.at = now;
      }
      wanted = true;
    }
    if (wanted) this.#schedule(deployment, d);
  }

  /** Cumulative counts by deployment, kind and result (`quotaring_provider_feedback_total`). */
  counts(): { readonly deployment: string; readonly kind: FeedbackKind; readonly result: FeedbackResult; readonly n: number }[] {
    const out: { deployment: string; kind: FeedbackKind; result: FeedbackResult; n: number }[] = [];
    for (const [name, d] of this.#states) {
      for (const b of d.buckets) for (const result of FEEDBACK_RESULTS) out.push({ deployment: name, kind: b.kind, result, n: this.#counts.get(`${name}\u0000${b.kind}\u0000${result}`) ?? 0 });
    }
    return out;
  }

  /** Resolves when the corrections in flight (if any) have settled. Never rejects. */
  async settled(): Promise<void> {
    await Promise.all([...this.#states.values()].map((d) => d.inFlight));
  }

  /** Stops: pending corrections are dropped, later observations ignored. Idempotent. */
  stop(): void {
    this.#stopped = true;
    for (const d of this.#states.values()) {
      if (d.timer !== undefined) clearTimeout(d.timer);
      d.timer = undefined;
      d.pending.clear();
    }
  }

  #count(deployment: string, kind: FeedbackKind, result: FeedbackResult, n = 1): void {
    const k = `${deployment}\u0000${kind}\u0000${result}`;
    this.#counts.set(k, (this.#counts.get(k) ?? 0) + n);
  }

  #schedule(name: string, d: DeploymentState): void {
    if (d.inFlight !== undefined || d.timer !== undefined || this.#stopped) return;
    const wait = d.lastCallAt + this.#minIntervalMs - this.#o.clock.now();
    if (wait <= 0) {
      this.#run(name, d);
      return;
    }
    d.timer = setTimeout(() => {
      d.timer = undefined;
      this.#run(name, d);
    }, wait);
    d.timer.unref();
  }

  /** One correction: a lowering call per kind with a pending target; then the next, if any came meanwhile. */
  #run(name: string, d: DeploymentState): void {
    if (this.#stopped || d.pending.size === 0) return;
    const now = this.#o.clock.now();
    d.lastCallAt = now;
    const calls: Promise<void>[] = [];
    for (const b of d.buckets) {
      const p = d.pending.get(b.kind);
      if (p === undefined) continue;
      d.pending.delete(b.kind);
      const target = p.value + (now - p.at) * (b.quota / 60_000) - this.#o.balance(name, b.kind);
      const lower = this.#o.lower;
      if (lower === undefined || this.#o.inFallback?.() === true) {
        this.#count(name, b.kind, 'failed');
        continue;
      }
      calls.push(
        this.#o.call(() => lower(b.key, b.logKey, { capacity: b.capacity, ratePerSec: b.ratePerSec, target, allowance: b.allowance, ttlMs: b.ttlMs })).then((r) => {
          if (!r.ok) this.#count(name, b.kind, 'failed');
          else this.#count(name, b.kind, r.value.capped ? 'capped' : r.value.lowered > 0 ? 'lowered' : 'unchanged');
        }),
      );
    }
    if (calls.length === 0) return;
    d.inFlight = Promise.all(calls).then(() => {
      d.inFlight = undefined;
      if (d.pending.size > 0) this.#schedule(name, d);
    });
  }
}
