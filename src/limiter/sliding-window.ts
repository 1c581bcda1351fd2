/** Shared, never written: the storage of every empty window before its first entry. */
const EMPTY_NUMBERS: number[] = [];
const EMPTY_STRINGS: string[] = [];

/**
 * Exact sliding log: every admission is an entry (timestamp ms, cost, request id); the sum of
 * costs in `(now − windowMs, now]` plus a new cost must be ≤ `limit` to admit it.
 *
 * Entries live in a growable ring buffer addressed by a monotonic sequence number, with a
 * running sum, so add, purge and adjust are O(1) amortised. Only a refusal walks entries (to
 * compute the exact wait), and it walks only the oldest ones that must expire.
 */
export class SlidingWindow {
  /** Discriminant for the limiter's dispatch. */
  readonly algorithm = 'sliding_window' as const;
  /** Units (requests or tokens) per window. */
  limit: number;
  /** Window length, ms. */
  windowMs: number;
  /** Interleaved `[timestamp, cost]` per slot; empty until the first entry. */
  #tc: number[] = EMPTY_NUMBERS;
  #id: string[] = EMPTY_STRINGS;
  /** capacity − 1; capacity is a power of two (capacity 0 while empty: mask −1). */
  #mask = -1;
  /** Sequence number of the oldest live entry. */
  #head = 0;
  /** Sequence number the next entry gets. */
  #tail = 0;
  /** Sum of the costs of live entries. */
  #sum = 0;

  /**
   * @param limit units per window, > 0.
   * @param windowMs window length, ms, > 0.
   */
  constructor(limit: number, windowMs: number) {
    this.limit = limit;
    this.windowMs = windowMs;
  }

  /** Drops entries that left the window: timestamp ≤ `nowMs − windowMs`. */
  purge(nowMs: number): void {
    const edge = nowMs - this.windowMs;
    const tc = this.#tc;
    const mask = this.#mask;
    let h = this.#head;
    while (h < this.#tail && (tc[(h & mask) << 1] as number) <= edge) {
      this.#sum -= tc[((h & mask) << 1) + 1] as number;
      this.#id[h & mask] = '';
      h++;
    }
    this.#head = h;
    if (h === this.#tail) {
      this.#sum = 0; // exact reset, whatever float residue
      if (this.#mask >= 64) this.#shrink();
    }
  }

  /**
   * Ms until `cost` fits (0 when it fits now), exact: the oldest entries are walked until
   * enough cost has expired; the wait is when the last of them leaves the window.
   * Call `purge(now)` first. `cost` must be ≤ `limit` (else it never fits).
   */
  waitMs(nowMs: number, cost: number): number {
    const need = this.#sum + cost - this.limit;
    if (need <= 0) return 0;
    const mask = this.#mask;
    let freed = 0;
    for (let s = this.#head; s < this.#tail; s++) {
      freed += this.#tc[((s & mask) << 1) + 1] as number;
      if (freed >= need) return (this.#tc[(s & mask) << 1] as number) + this.windowMs - nowMs;
    }
    return this.windowMs; // unreachable when cost ≤ limit
  }

  /**
   * Records an admission of `cost` at `nowMs` (call after `waitMs` returned 0).
   * @returns the entry's sequence number, for `adjust`.
   */
  add(nowMs: number, cost: number, id: string): number {
    if (this.#tail - this.#head > this.#mask) this.#grow();
    const seq = this.#tail++;
    const i = seq & this.#mask;
    this.#tc[i << 1] = nowMs;
    this.#tc[(i << 1) + 1] = cost;
    this.#id[i] = id;
    this.#sum += cost;
    return seq;
  }

  /**
   * Settles entry `seq` in place at its original timestamp: its cost changes by `delta`
   * (a debit may take the sum above the limit; the cost never goes below 0).
   * @returns false when the entry already left the window (nothing changes).
   */
  adjust(seq: number, id: string, delta: number): boolean {
    if (seq < this.#head || seq >= this.#tail) return false;
    const i = seq & this.#mask;
    if (this.#id[i] !== id) return false;
    const before = this.#tc[(i << 1) + 1] as number;
    const after = before + delta > 0 ? before + delta : 0;
    this.#tc[(i << 1) + 1] = after;
    this.#sum += after - before;
    return true;
  }

  /** Sum of the costs in the window (may exceed `limit` after debits). Call `purge(now)` first. */
  used(): number {
    return this.#sum;
  }

  /** Units available now, floored, never below 0. Call `purge(now)` first. */
  remaining(): number {
    const r = Math.floor(this.limit - this.#sum);
    return r > 0 ? r : 0;
  }

  /** Ms until the newest entry leaves the window (0 when empty). Call `purge(now)` first. */
  resetMs(nowMs: number): number {
    if (this.#tail === this.#head) return 0;
    return (this.#tc[((this.#tail - 1) & this.#mask) << 1] as number) + this.windowMs - nowMs;
  }

  /** True when no entry is in the window at `nowMs`. */
  isIdle(nowMs: number): boolean {
    this.purge(nowMs);
    return this.#tail === this.#head;
  }

  /**
   * The live entries, oldest first, as `[timestamp ms, cost, request id]` (for a snapshot).
   * Call `purge(now)` first. O(entries); not on the decision path.
   */
  entries(): [ts: number, cost: number, id: string][] {
    const out: [number, number, string][] = [];
    const mask = this.#mask;
    for (let s = this.#head; s < this.#tail; s++) {
      const i = s & mask;
      out.push([this.#tc[i << 1] as number, this.#tc[(i << 1) + 1] as number, this.#id[i] as string]);
    }
    return out;
  }

  /** Changes limit and window; entries are kept at their timestamps (usage is kept). */
  reconfigure(limit: number, windowMs: number): void {
    this.limit = limit;
    this.windowMs = windowMs;
  }

  /** Empty and large: give the memory back (sequence numbers keep counting). */
  #shrink(): void {
    this.#tc = EMPTY_NUMBERS;
    this.#id = EMPTY_STRINGS;
    this.#mask = -1;
  }

  #grow(): void {
    const oldMask = this.#mask;
    const cap = oldMask < 0 ? 2 : (oldMask + 1) * 2;
    const mask = cap - 1;
    const tc = new Array<number>(cap * 2).fill(0);
    const id = new Array<string>(cap).fill('');
    for (let s = this.#head; s < this.#tail; s++) {
      const from = s & oldMask;
      const to = s & mask;
      tc[to << 1] = this.#tc[from << 1] as number;
      tc[(to << 1) + 1] = this.#tc[(from << 1) + 1] as number;
      id[to] = this.#id[from] as string;
    }
    this.#tc = tc;
    this.#id = id;
    this.#mask = mask;
  }
}
