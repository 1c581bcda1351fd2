/**
 * Token bucket: capacity `limit` units, continuous refill at `limit / windowMs` units per ms.
 * This is the model OpenAI documents for its own rate limits
 * (https://platform.openai.com/docs/guides/rate-limits: "replenished continuously").
 *
 * The level is stored scaled by `windowMs` ("unit·ms"): a refill of `dt` ms adds exactly
 * `dt × limit`, so with integer times and costs every comparison and wait is exact integer
 * arithmetic (no drift from a fractional rate such as 166.67 tokens/s).
 */
export class TokenBucket {
  /** Discriminant for the limiter's dispatch. */
  readonly algorithm = 'token_bucket' as const;
  /** Capacity and units per window (requests or tokens). */
  limit: number;
  /** Window in ms; the bucket refills fully from empty in this time. */
  windowMs: number;
  /** Level × windowMs. May be negative after a debit. */
  #scaled: number;
  /** Time of the last refill, ms. */
  #last: number;

  /**
   * Creates a full bucket.
   * @param limit capacity in units (requests or tokens), > 0.
   * @param windowMs ms to refill from empty to full, > 0.
   * @param nowMs current time, ms.
   */
  constructor(limit: number, windowMs: number, nowMs: number) {
    this.limit = limit;
    this.windowMs = windowMs;
    this.#scaled = limit * windowMs;
    this.#last = nowMs;
  }

  /** Adds the refill earned since the last call, capped at capacity. Time never goes back. */
  refill(nowMs: number): void {
    const dt = nowMs - this.#last;
    if (dt <= 0) return;
    this.#last = nowMs;
    const full = this.limit * this.windowMs;
    if (this.#scaled >= full) return;
    const next = this.#scaled + dt * this.limit;
    this.#scaled = next > full ? full : next;
  }

  /**
   * Ms until `cost` units fit (0 when they fit now): exactly `(cost − level) / rate`, not rounded.
   * Call `refill(now)` first. `cost` must be ≤ `limit` (else it never fits).
   */
  waitMs(cost: number): number {
    const need = cost * this.windowMs - this.#scaled;
    return need <= 0 ? 0 : need / this.limit;
  }

  /** Removes `cost` units (call after `waitMs(cost) === 0`). */
  take(cost: number): void {
    this.#scaled -= cost * this.windowMs;
  }

  /**
   * Applies a settlement: `delta > 0` debits (the level may go below zero), `delta < 0`
   * refunds (never above capacity). Call `refill(now)` first.
   * @param delta units, actual − reserved.
   */
  adjust(delta: number): void {
    const next = this.#scaled - delta * this.windowMs;
    const full = this.limit * this.windowMs;
    this.#scaled = delta < 0 && next > full ? full : next;
  }

  /** Current level in units (fractional, may be negative). Call `refill(now)` first. */
  level(): number {
    return this.#scaled / this.windowMs;
  }

  /** Units available now, floored, never below 0. Call `refill(now)` first. */
  remaining(): number {
    const r = Math.floor(this.#scaled / this.windowMs);
    return r > 0 ? r : 0;
  }

  /** Ms until the bucket is full (exact, not rounded; 0 when full). Call `refill(now)` first. */
  resetMs(): number {
    const missing = this.limit * this.windowMs - this.#scaled;
    return missing <= 0 ? 0 : missing / this.limit;
  }

  /** True when the bucket is full at `nowMs` (its state carries no information). */
  isIdle(nowMs: number): boolean {
    this.refill(nowMs);
    return this.#scaled >= this.limit * this.windowMs;
  }

  /**
   * Changes capacity and window keeping the units used (capacity − level), clamped to
   * `[0, limit]`: a debt beyond the new capacity is forgiven down to an empty bucket.
   * @param nowMs the bucket is refilled at the old rate up to this time first.
   */
  reconfigure(limit: number, windowMs: number, nowMs: number): void {
    this.refill(nowMs);
    const used = this.limit - this.#scaled / this.windowMs;
    this.limit = limit;
    this.windowMs = windowMs;
    this.setUsed(used);
  }

  /** Sets the level to `limit − used`, with `used` clamped to `[0, limit]`. */
  setUsed(used: number): void {
    const u = used < 0 ? 0 : used > this.limit ? this.limit : used;
    this.#scaled = (this.limit - u) * this.windowMs;
  }
}
