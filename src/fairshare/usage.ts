/**
 * What one node knows of one tenant on one fair-shared deployment, per bucket kind (requests,
 * tokens): the units it *used* (admitted, corrected at settlement) and the units it *asked* (every
 * request that reached the deployment's quota, admitted or not) over the last window, in one-second
 * slots, and a decayed rate of what it asked (for a tenant that has just started asking).
 *
 * - **Within its share**: the tenant's share bucket (refilled at its share per window, holding a
 *   2 s burst of it or two of its largest requests) covers the request's cost. A bucket rather than
 *   the window's usage, so a tenant whose share just grew, or that was refused by the quota for a
 *   while, cannot spend a window's worth at once within its share and empty the reserve.
 * - **Used**: what was admitted in the window (1 s slots), for views.
 * - **Demand** = max(asked in the window (scaled up while the entry has seen less than a window, over
 *   at least 10 s), decayed ask rate × window) × (1 + margin): the window
 *   keeps a steady tenant's demand steady between its requests; the decayed rate (time constant
 *   `tauMs`) makes a tenant that comes back from idle count within a few τ.
 */

/** One-second slots per window of 60 s. */
const SLOT_MS = 1_000;
/** The shortest span a demand is measured over (a tenant's first asks), ms. */
const MIN_SPAN_MS = 10_000;

/** A ring of per-second sums covering one window. */
class SlotRing {
  readonly #slots: Float64Array;
  /** Index (time / SLOT_MS) of the newest slot written. */
  #head = -Infinity;
  #sum = 0;

  constructor(readonly size: number) {
    this.#slots = new Float64Array(size);
  }

  /** Moves the ring to `slot` (an absolute slot index), clearing slots that left the window. */
  #advance(slot: number): void {
    if (slot <= this.#head) return;
    const steps = Math.min(this.size, this.#head === -Infinity ? this.size : slot - this.#head);
    for (let k = 1; k <= steps; k++) {
      const i = (((slot - steps + k) % this.size) + this.size) % this.size;
      this.#sum -= this.#slots[i] as number;
      this.#slots[i] = 0;
    }
    this.#head = slot;
    if (Math.abs(this.#sum) < 1e-9) this.#sum = 0;
  }

  add(now: number, units: number): void {
    const slot = Math.floor(now / SLOT_MS);
    this.#advance(slot);
    // A unit counted "in the past" (clock behind the head) goes into the newest slot.
    const i = ((Math.max(slot, this.#head) % this.size) + this.size) % this.size;
    this.#slots[i] = (this.#slots[i] as number) + units;
    this.#sum += units;
  }

  /** Units in the window ending at `now` (≥ 0). */
  sum(now: number): number {
    this.#advance(Math.floor(now / SLOT_MS));
    return Math.max(0, this.#sum);
  }
}

/** Settings of the usage tracking. */
export interface UsageTuning {
  /** The quota's window, ms (60 000 for rpm / tpm). */
  readonly windowMs: number;
  /** Time constant of the decayed ask rate, ms. */
  readonly tauMs: number;
  /** Demand published = measured × (1 + margin): room for a steady tenant's jitter. */
  readonly margin: number;
  /** A tenant's share bucket holds this many ms of its share (or two of its largest requests). */
  readonly burstMs: number;
}

/** Default tuning: a 60 s window, τ = 2 s, 25% margin, bursts of 2 s of a share. */
export const DEFAULT_USAGE_TUNING: UsageTuning = { windowMs: 60_000, tauMs: 2_000, margin: 0.25, burstMs: 2_000 };

/** A tenant's usage of one deployment bucket kind on this node. */
export class KindUsage {
  readonly #used: SlotRing;
  readonly #asked: SlotRing;
  #decayed = 0;
  #decayedAt = 0;
  /** Time of the last ask, ms. */
  lastAskAt = -Infinity;
  /** Time of the first ask this entry saw, ms: a window not yet full is a shorter span. */
  #firstAskAt: number | undefined;
  /** The share bucket: units the tenant may still take within its share (refilled at share / window). */
  #level = Infinity;
  #levelAt = 0;
  /** The largest single cost seen (a share bucket always holds two of them). */
  #largest = 0;

  constructor(private readonly tuning: UsageTuning) {
    const slots = Math.max(1, Math.ceil(tuning.windowMs / SLOT_MS));
    this.#used = new SlotRing(slots);
    this.#asked = new SlotRing(slots);
  }

  #decay(now: number): number {
    const dt = now - this.#decayedAt;
    if (dt > 0) {
      this.#decayed *= Math.exp(-dt / this.tuning.tauMs);
      this.#decayedAt = now;
    }
    return this.#decayed;
  }

  /** A request asked for `units` (admitted or not). */
  ask(now: number, units: number): void {
    if (this.#firstAskAt === undefined) this.#firstAskAt = now;
    this.#asked.add(now, units);
    this.#decayed = this.#decay(now) + units;
    this.lastAskAt = now;
  }

  /** `units` were admitted (negative: a correction at settlement, or a take given back). */
  use(now: number, units: number): void {
    this.#used.add(now, units);
  }

  /** A settlement's correction of what was asked and used: `delta` = actual − reserved units. */
  correct(now: number, delta: number): void {
    this.#used.add(now, delta);
    this.#asked.add(now, delta);
    this.#decayed = Math.max(0, this.#decay(now) + delta);
  }

  /**
   * The share bucket refilled to `now` at `share` units per window; its capacity is
   * max(`share` × `burstMs` / window, 2 × the largest cost seen), so a tenant within its share takes
   * at its share's pace with bursts of at most that, however long it was quiet.
   */
  #shareLevel(now: number, share: number): number {
    const capacity = Math.max((share * this.tuning.burstMs) / this.tuning.windowMs, 2 * this.#largest);
    if (this.#level === Infinity) this.#level = capacity;
    const dt = Math.max(0, now - this.#levelAt);
    this.#level = Math.min(capacity, this.#level + (dt * share) / this.tuning.windowMs);
    this.#levelAt = Math.max(this.#levelAt, now);
    return this.#level;
  }

  /** Ms until `cost` is within `share` (the share bucket holds it): 0 when it is now. */
  msUntilWithin(now: number, share: number, cost: number): number {
    this.#largest = Math.max(this.#largest, cost);
    const level = this.#shareLevel(now, share);
    if (level >= cost) return 0;
    if (!(share > 0)) return this.tuning.windowMs;
    return Math.max(1, Math.ceil(((cost - level) * this.tuning.windowMs) / share));
  }

  /** A take within the share: `units` out of the share bucket (negative: given back). */
  spendShare(now: number, share: number, units: number): void {
    this.#shareLevel(now, share);
    this.#level -= units;
  }

  /** Units used in the window ending now. */
  used(now: number): number {
    return this.#used.sum(now);
  }

  /**
   * Units per window this tenant asks for now (with the margin), ≥ 0. What it asked in the window is
   * scaled to a whole window while the entry has seen less than one (at least `MIN_SPAN_MS`), so a
   * steady tenant's first minute does not read as a smaller demand.
   */
  demand(now: number): number {
    const span = Math.min(this.tuning.windowMs, Math.max(MIN_SPAN_MS, now - (this.#firstAskAt ?? now)));
    const window = (this.#asked.sum(now) * this.tuning.windowMs) / span;
    const rate = (this.#decay(now) / this.tuning.tauMs) * this.tuning.windowMs;
    return Math.max(window, rate) * (1 + this.tuning.margin);
  }

  /** No ask for a whole window and nothing used in it: the entry can be dropped. */
  idle(now: number): boolean {
    return now - this.lastAskAt > this.tuning.windowMs && this.#used.sum(now) === 0;
  }
}
