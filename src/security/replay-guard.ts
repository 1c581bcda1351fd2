/**
 * Refuses a signed call seen before: the MACs of accepted calls are remembered until their
 * timestamp leaves the replay window (after which the signature check refuses them anyway).
 *
 * Memory is bounded: at most `maxEntries` MACs. When full, the oldest remembered call is forgotten
 * and its timestamp becomes a floor: from then on only signatures newer than the floor are accepted,
 * so forgetting never lets a replay through (at worst a legitimate call timestamped at or below the
 * floor is refused, and its sender's retry, signed anew, passes).
 */

/** @see ReplayGuard */
export const DEFAULT_MAX_REMEMBERED = 50_000;

/** Remembers the signatures of accepted internal calls for the replay window. */
export class ReplayGuard {
  readonly #windowMs: number;
  readonly #max: number;
  /** MAC → its signature's timestamp, in insertion order (oldest first). */
  readonly #seen = new Map<string, number>();
  /** Signatures timestamped at or before this are refused (raised when an entry is forgotten early). */
  #floorMs = -Infinity;

  /**
   * @param windowMs the signatures' acceptance window, ms (either way of now).
   * @param maxEntries MACs remembered at most. @default {@link DEFAULT_MAX_REMEMBERED}
   */
  constructor(windowMs: number, maxEntries = DEFAULT_MAX_REMEMBERED) {
    this.#windowMs = windowMs;
    this.#max = Math.max(1, maxEntries);
  }

  /** MACs remembered now. */
  get size(): number {
    return this.#seen.size;
  }

  /**
   * Records the call signed with `mac` at `timestampMs` and tells whether it is new.
   * @param nowMs the receiver's wall clock, ms.
   * @returns false for a MAC already remembered, or a timestamp at or below the floor (refuse the call).
   */
  accept(mac: string, timestampMs: number, nowMs: number): boolean {
    if (timestampMs <= this.#floorMs || this.#seen.has(mac)) return false;
    // Forget what the window refuses by now (mostly the oldest entries: senders' clocks differ a little).
    if (this.#seen.size >= this.#max) {
      for (const [m, t] of this.#seen) {
        if (t < nowMs - this.#windowMs) this.#seen.delete(m);
        else break;
      }
    }
    while (this.#seen.size >= this.#max) {
      const oldest = this.#seen.entries().next().value;
      if (oldest === undefined) break;
      this.#seen.delete(oldest[0]);
      this.#floorMs = Math.max(this.#floorMs, oldest[1]);
    }
    if (timestampMs <= this.#floorMs) return false;
    this.#seen.set(mac, timestampMs);
    return true;
  }

  /** Forgets MACs whose timestamp left the window (call now and then; {@link accept} also does when full). */
  prune(nowMs: number): void {
    for (const [m, t] of this.#seen) if (t < nowMs - this.#windowMs) this.#seen.delete(m);
  }
}
