/**
 * Finds hot tenants on their owner: a tenant whose request rate, as this
 * node sees it, stays above `thresholdRps` for `sustainMs` is promoted (spread over k nodes through
 * the hot set); while it is spread, its owner keeps refreshing the entry as long as the tenant's rate
 * (its share seen here × k) stays above half the threshold, and lets it lapse otherwise.
 *
 * The rate is an exponentially decayed event count with a 1 s time constant: each request adds 1 /
 * 1 s, and it decays by e^(−Δt / 1 s); at a steady r requests/s it converges to r.
 */
import type { Clock } from '../clock.ts';

/** Options of {@link HotDetector}. */
export interface HotDetectorOptions {
  readonly clock: Clock;
  /** Requests per second above which a tenant is hot. */
  readonly thresholdRps: number;
  /** How long the rate must stay above the threshold, ms. */
  readonly sustainMs: number;
  /** Refresh period of a hot tenant's entry, ms (a third of the cooldown is a good value). */
  readonly refreshMs: number;
  /** Makes `tenant` hot (seed the global cap, publish the entry). Called once per crossing; its failure lets the next crossing try again. */
  readonly promote: (tenant: string) => Promise<void>;
  /** Keeps a hot tenant's entry alive. */
  readonly refresh: (tenant: string) => Promise<void>;
}

/** Time constant of the rate estimate, ms. */
const TAU_MS = 1_000;

interface Rate {
  rate: number;
  at: number;
  /** Since when the rate has been above the threshold (undefined: it is not). */
  above: number | undefined;
  busy: boolean;
  /** Promoted during this crossing (cleared when the rate falls below the threshold). */
  promoted: boolean;
  refreshedAt: number;
}

/** Per-tenant rates and the hot decisions of one node. */
export class HotDetector {
  readonly #opts: HotDetectorOptions;
  readonly #rates = new Map<string, Rate>();

  constructor(opts: HotDetectorOptions) {
    if (!(opts.thresholdRps > 0)) throw new RangeError(`thresholdRps must be > 0, got ${opts.thresholdRps}`);
    this.#opts = opts;
  }

  /** The tenant's rate now, requests/s as this node sees them. */
  rate(tenant: string): number {
    const r = this.#rates.get(tenant);
    return r === undefined ? 0 : decayed(r, this.#opts.clock.now());
  }

  /** A request of a tenant this node owns (not spread): may promote it. */
  observe(tenant: string): void {
    const now = this.#opts.clock.now();
    const r = this.#count(tenant, now);
    if (r.rate < this.#opts.thresholdRps) {
      r.above = undefined;
      r.promoted = false;
      return;
    }
    r.above ??= now;
    if (now - r.above < this.#opts.sustainMs || r.busy || r.promoted) return;
    r.busy = true;
    r.refreshedAt = now;
    this.#opts.promote(tenant).then(
      () => {
        r.busy = false;
        r.promoted = true;
      },
      () => {
        r.busy = false;
        r.above = undefined;
      },
    );
  }

  /** A request of a hot tenant this node owns, spread over `k` nodes: refreshes its entry while it stays above half the threshold. */
  observeSpread(tenant: string, k: number): void {
    const now = this.#opts.clock.now();
    const r = this.#count(tenant, now);
    r.above = undefined;
    if (r.rate * k < this.#opts.thresholdRps / 2 || r.busy || now - r.refreshedAt < this.#opts.refreshMs) return;
    r.busy = true;
    r.refreshedAt = now;
    this.#opts.refresh(tenant).then(
      () => (r.busy = false),
      () => (r.busy = false),
    );
  }

  /** Drops the rates of tenants idle for 10 time constants (their rate is below e^−10 of what it was). */
  sweep(): void {
    const now = this.#opts.clock.now();
    for (const [tenant, r] of this.#rates) if (!r.busy && now - r.at > 10 * TAU_MS) this.#rates.delete(tenant);
  }

  #count(tenant: string, now: number): Rate {
    let r = this.#rates.get(tenant);
    if (r === undefined) {
      r = { rate: 0, at: now, above: undefined, busy: false, promoted: false, refreshedAt: -Infinity };
      this.#rates.set(tenant, r);
    }
    r.rate = decayed(r, now) + 1_000 / TAU_MS;
    r.at = Math.max(r.at, now);
    return r;
  }
}

function decayed(r: Rate, now: number): number {
  const dt = now - r.at;
  return dt > 0 ? r.rate * Math.exp(-dt / TAU_MS) : r.rate;
}
