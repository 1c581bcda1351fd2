/**
 * Counting semaphore whose slots are leases `request id → expiresAt` (ms). A lease not
 * released or renewed within `leaseTtlMs` frees itself, so a crashed stream never holds a
 * slot forever. Expired leases are purged lazily: only when the earliest possible expiry has
 * passed, so acquire is O(1) amortised.
 */
export class Semaphore {
  /** Discriminant for the limiter's dispatch. */
  readonly algorithm = 'semaphore' as const;
  /** Slots. */
  limit: number;
  /** Lease lifetime after acquire or renew, ms. */
  leaseTtlMs: number;
  /** Allocated on first lease. */
  #leases: Map<string, number> | null = null;
  /** Lower bound of the earliest lease expiry (Infinity when none). */
  #minExpiry = Infinity;
  /** Upper bound of the latest lease expiry, exact while the latest lease is held. */
  #maxExpiry = 0;

  /**
   * @param limit slots, > 0.
   * @param leaseTtlMs lease lifetime, ms, > 0.
   */
  constructor(limit: number, leaseTtlMs: number) {
    this.limit = limit;
    this.leaseTtlMs = leaseTtlMs;
  }

  /** Drops leases whose expiry is ≤ `nowMs` (cheap unless one may have expired). */
  purge(nowMs: number): void {
    if (nowMs < this.#minExpiry) return;
    const leases = this.#leases;
    let min = Infinity;
    let max = 0;
    if (leases !== null) {
      for (const [id, exp] of leases) {
        if (exp <= nowMs) leases.delete(id);
        else {
          if (exp < min) min = exp;
          if (exp > max) max = exp;
        }
      }
    }
    this.#minExpiry = min;
    this.#maxExpiry = max;
  }

  /** Slots held now. Call `purge(now)` first. */
  held(): number {
    return this.#leases === null ? 0 : this.#leases.size;
  }

  /**
   * Ms until a slot frees by expiry (0 when one is free now): the earliest lease expiry − now.
   * Exact, not rounded. Call `purge(now)` first.
   */
  waitMs(nowMs: number): number {
    const leases = this.#leases;
    if (leases === null || leases.size < this.limit) return 0;
    let min = Infinity;
    for (const exp of leases.values()) if (exp < min) min = exp;
    this.#minExpiry = min;
    return min - nowMs;
  }

  /** Takes a slot for `id` until `nowMs + leaseTtlMs` (call after `waitMs` returned 0). */
  acquire(nowMs: number, id: string): void {
    const exp = nowMs + this.leaseTtlMs;
    (this.#leases ??= new Map()).set(id, exp);
    if (exp < this.#minExpiry) this.#minExpiry = exp;
    if (exp > this.#maxExpiry) this.#maxExpiry = exp;
  }

  /** Frees `id`'s slot. @returns false when it held none (released, expired or unknown). */
  release(nowMs: number, id: string): boolean {
    const leases = this.#leases;
    if (leases === null) return false;
    const exp = leases.get(id);
    if (exp === undefined) return false;
    leases.delete(id);
    if (exp <= nowMs) return false; // had expired: the slot was already free
    if (exp >= this.#maxExpiry) {
      let max = 0;
      for (const e of leases.values()) if (e > max) max = e;
      this.#maxExpiry = max;
    }
    return true;
  }

  /**
   * Extends `id`'s lease to `nowMs + leaseTtlMs`.
   * @returns false when `id` holds no live lease (nothing changes).
   */
  renew(nowMs: number, id: string): boolean {
    const leases = this.#leases;
    if (leases === null) return false;
    const exp = leases.get(id);
    if (exp === undefined || exp <= nowMs) return false;
    const next = nowMs + this.leaseTtlMs;
    leases.set(id, next);
    if (next > this.#maxExpiry) this.#maxExpiry = next;
    return true;
  }

  /** Free slots now, never below 0. Call `purge(now)` first. */
  remaining(): number {
    const r = this.limit - this.held();
    return r > 0 ? r : 0;
  }

  /** Ms until no slot is held (the latest lease expiry − now; 0 when none). Call `purge(now)` first. */
  resetMs(nowMs: number): number {
    return this.held() === 0 ? 0 : this.#maxExpiry - nowMs;
  }

  /** True when no live lease is held at `nowMs`. Releases the map's memory when empty. */
  isIdle(nowMs: number): boolean {
    this.purge(nowMs);
    if (this.held() !== 0) return false;
    this.#leases = null;
    return true;
  }

  /** Changes slots and TTL; existing leases keep their expiry. */
  reconfigure(limit: number, leaseTtlMs: number): void {
    this.limit = limit;
    this.leaseTtlMs = leaseTtlMs;
  }
}
