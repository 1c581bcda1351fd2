/** Slots a semaphore uses in a state array: [solo lease expiry, min expiry, max expiry]. */
export const SEMAPHORE_SLOTS = 3;

/**
 * Counting semaphore whose slots are leases `request id → expiresAt` (ms). A lease not
 * released or renewed within `leaseTtlMs` frees itself, so a crashed stream never holds a
 * slot forever. Expired leases are purged lazily, only once the earliest possible expiry has
 * passed, so acquire is O(1) amortised.
 *
 * Layout, for cache locality: the first lease lives in fields (most tenants hold one slot at
 * a time), further leases in a `Map` allocated on demand; the numbers (the first lease's
 * expiry, a lower bound of the earliest expiry, the latest expiry) live in a `number[]`
 * that the limiter shares across a tenant's limits (`SEMAPHORE_SLOTS` slots at an offset).
 */
export class Semaphore {
  /** Discriminant for the limiter's dispatch. */
  readonly algorithm = 'semaphore' as const;
  /** Slots. */
  limit: number;
  /** Lease lifetime after acquire or renew, ms. */
  leaseTtlMs: number;
  #s: number[];
  #o: number;
  #soloId: string | null = null;
  #more: Map<string, number> | null = null;

  /**
   * @param limit slots, > 0.
   * @param leaseTtlMs lease lifetime, ms, > 0.
   * @param storage state array holding `SEMAPHORE_SLOTS` numbers at `offset`. @default a new one
   * @param offset @default 0
   */
  constructor(limit: number, leaseTtlMs: number, storage: number[] = new Array<number>(SEMAPHORE_SLOTS).fill(0.5), offset = 0) {
    this.limit = limit;
    this.leaseTtlMs = leaseTtlMs;
    this.#s = storage;
    this.#o = offset;
    storage[offset] = 0;
    storage[offset + 1] = Infinity;
    storage[offset + 2] = 0;
  }

  /** Moves the numeric state to `storage` at `offset` (a tenant's state array was rebuilt). */
  rebind(storage: number[], offset: number): void {
    for (let k = 0; k < SEMAPHORE_SLOTS; k++) storage[offset + k] = this.#s[this.#o + k] as number;
    this.#s = storage;
    this.#o = offset;
  }

  /** Drops leases whose expiry is ≤ `nowMs` (cheap unless one may have expired). */
  purge(nowMs: number): void {
    const s = this.#s;
    const o = this.#o;
    if (nowMs < (s[o + 1] as number)) return;
    let min = Infinity;
    let max = 0;
    if (this.#soloId !== null) {
      const exp = s[o] as number;
      if (exp <= nowMs) this.#soloId = null;
      else min = max = exp;
    }
    const more = this.#more;
    if (more !== null) {
      for (const [id, exp] of more) {
        if (exp <= nowMs) more.delete(id);
        else {
          if (exp < min) min = exp;
          if (exp > max) max = exp;
        }
      }
      if (more.size === 0) this.#more = null;
    }
    s[o + 1] = min;
    s[o + 2] = max;
  }

  /** Slots held (live or not yet purged). */
  held(): number {
    return (this.#soloId === null ? 0 : 1) + (this.#more === null ? 0 : this.#more.size);
  }

  /**
   * Ms until a slot frees by expiry (0 when one is free now): the earliest lease expiry − now.
   * Exact, not rounded. Call `purge(now)` first.
   */
  waitMs(nowMs: number): number {
    if (this.held() < this.limit) return 0;
    const s = this.#s;
    const o = this.#o;
    let min = this.#soloId === null ? Infinity : (s[o] as number);
    if (this.#more !== null) for (const exp of this.#more.values()) if (exp < min) min = exp;
    s[o + 1] = min;
    return min - nowMs;
  }

  /** Takes a slot for `id` until `nowMs + leaseTtlMs` (call after `waitMs` returned 0). */
  acquire(nowMs: number, id: string): void {
    const s = this.#s;
    const o = this.#o;
    const exp = nowMs + this.leaseTtlMs;
    if (this.#soloId === null || this.#soloId === id) {
      this.#soloId = id;
      s[o] = exp;
    } else {
      (this.#more ??= new Map()).set(id, exp);
    }
    if (exp < (s[o + 1] as number)) s[o + 1] = exp;
    if (exp > (s[o + 2] as number)) s[o + 2] = exp;
  }

  /** Expiry of `id`'s lease, or undefined when it holds none. */
  #expiry(id: string): number | undefined {
    if (this.#soloId === id) return this.#s[this.#o] as number;
    return this.#more === null ? undefined : this.#more.get(id);
  }

  /** Frees `id`'s slot. @returns false when it held none (released, expired or unknown). */
  release(nowMs: number, id: string): boolean {
    const exp = this.#expiry(id);
    if (exp === undefined) return false;
    if (this.#soloId === id) this.#soloId = null;
    else if (this.#more !== null) {
      this.#more.delete(id);
      if (this.#more.size === 0) this.#more = null;
    }
    const s = this.#s;
    const o = this.#o;
    if (this.held() === 0) {
      s[o + 1] = Infinity;
      s[o + 2] = 0;
    } else if (exp >= (s[o + 2] as number)) {
      let max = this.#soloId === null ? 0 : (s[o] as number);
      if (this.#more !== null) for (const e of this.#more.values()) if (e > max) max = e;
      s[o + 2] = max;
    }
    return exp > nowMs; // an expired lease had already freed its slot
  }

  /**
   * Extends `id`'s lease to `nowMs + leaseTtlMs`.
   * @returns false when `id` holds no live lease (nothing changes).
   */
  renew(nowMs: number, id: string): boolean {
    const exp = this.#expiry(id);
    if (exp === undefined || exp <= nowMs) return false;
    const next = nowMs + this.leaseTtlMs;
    if (this.#soloId === id) this.#s[this.#o] = next;
    else (this.#more as Map<string, number>).set(id, next);
    if (next > (this.#s[this.#o + 2] as number)) this.#s[this.#o + 2] = next;
    return true;
  }

  /** Free slots now, never below 0. Call `purge(now)` first. */
  remaining(): number {
    const r = this.limit - this.held();
    return r > 0 ? r : 0;
  }

  /** Ms until no slot is held (the latest lease expiry − now; 0 when none). Call `purge(now)` first. */
  resetMs(nowMs: number): number {
    return this.held() === 0 ? 0 : (this.#s[this.#o + 2] as number) - nowMs;
  }

  /** True when no live lease is held at `nowMs`. */
  isIdle(nowMs: number): boolean {
    this.purge(nowMs);
    return this.held() === 0;
  }

  /**
   * The leases held, as `[request id, expiresAt ms]` (for a snapshot). Call `purge(now)` first
   * to leave out expired ones. O(leases); not on the decision path.
   */
  leases(): [id: string, expiresAt: number][] {
    const out: [string, number][] = [];
    if (this.#soloId !== null) out.push([this.#soloId, this.#s[this.#o] as number]);
    if (this.#more !== null) for (const lease of this.#more) out.push(lease);
    return out;
  }

  /**
   * Gives `id` a lease that expires at `expiresAt` (ms), as taken on another limiter
   * (restoring a snapshot); replaces `id`'s lease if it holds one. Ignores the slot count.
   */
  restore(id: string, expiresAt: number): void {
    const s = this.#s;
    const o = this.#o;
    if (this.#soloId === id || (this.#soloId === null && (this.#more === null || !this.#more.has(id)))) {
      this.#soloId = id;
      s[o] = expiresAt;
    } else {
      (this.#more ??= new Map()).set(id, expiresAt);
    }
    if (expiresAt < (s[o + 1] as number)) s[o + 1] = expiresAt;
    if (expiresAt > (s[o + 2] as number)) s[o + 2] = expiresAt;
  }

  /** Changes slots and TTL; existing leases keep their expiry. */
  reconfigure(limit: number, leaseTtlMs: number): void {
    this.limit = limit;
    this.leaseTtlMs = leaseTtlMs;
  }
}
