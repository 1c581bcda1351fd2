/**
 * Token bucket: capacity `limit` units, continuous refill at `limit / windowMs` units per ms.
 * This is the model OpenAI documents for its own rate limits
 * (https://platform.openai.com/docs/guides/rate-limits: limits are "replenished continuously").
 *
 * State is two numbers in a caller-owned `number[]` at offset `o` (a tenant keeps all its
 * numeric state in one array, so a decision touches one cache line, not one object per limit):
 * - `s[o]`: the level scaled by `windowMs` ("unit·ms"). A refill of `dt` ms adds exactly
 *   `dt × limit`, so with integer times and costs every comparison and wait is exact integer
 *   arithmetic (no drift from a fractional rate such as 166.67 tokens/s). May go below zero
 *   after a debit.
 * - `s[o + 1]`: time of the last refill, ms.
 *
 * Every function takes the bucket's `limit` (units, > 0) and `windowMs` (ms, > 0).
 */

/** Slots a bucket uses in the state array. */
export const BUCKET_SLOTS = 2;

/** Writes a full bucket at `o`, last refilled at `nowMs`. */
export function bucketInit(s: number[], o: number, limit: number, windowMs: number, nowMs: number): void {
  s[o] = limit * windowMs;
  s[o + 1] = nowMs;
}

/** Adds the refill earned since the last refill, capped at capacity. Time never goes back. */
export function bucketRefill(s: number[], o: number, limit: number, windowMs: number, nowMs: number): void {
  const dt = nowMs - (s[o + 1] as number);
  if (dt <= 0) return;
  s[o + 1] = nowMs;
  const full = limit * windowMs;
  const level = s[o] as number;
  if (level >= full) return;
  const next = level + dt * limit;
  s[o] = next > full ? full : next;
}

/**
 * Ms until `cost` units fit (0 when they fit now): exactly `(cost − level) / rate`, not
 * rounded. Refill first. `cost` must be ≤ `limit` (else it never fits).
 */
export function bucketWaitMs(s: number[], o: number, limit: number, windowMs: number, cost: number): number {
  const need = cost * windowMs - (s[o] as number);
  return need <= 0 ? 0 : need / limit;
}

/** Removes `cost` units (after `bucketWaitMs` returned 0). */
export function bucketTake(s: number[], o: number, windowMs: number, cost: number): void {
  s[o] = (s[o] as number) - cost * windowMs;
}

/**
 * Applies a settlement: `delta > 0` debits (the level may go below zero), `delta < 0` refunds
 * (never above capacity). Refill first.
 * @param delta units, actual − reserved.
 */
export function bucketAdjust(s: number[], o: number, limit: number, windowMs: number, delta: number): void {
  const next = (s[o] as number) - delta * windowMs;
  const full = limit * windowMs;
  s[o] = delta < 0 && next > full ? full : next;
}

/** Units used: capacity − level (may exceed `limit` after a debit). Refill first. */
export function bucketUsed(s: number[], o: number, limit: number, windowMs: number): number {
  return limit - (s[o] as number) / windowMs;
}

/** Sets the level to `limit − used`, with `used` clamped to `[0, limit]`. */
export function bucketSetUsed(s: number[], o: number, limit: number, windowMs: number, used: number, nowMs: number): void {
  const u = used < 0 ? 0 : used > limit ? limit : used;
  s[o] = (limit - u) * windowMs;
  s[o + 1] = nowMs;
}

/** Units available now, floored, never below 0. Refill first. */
export function bucketRemaining(s: number[], o: number, windowMs: number): number {
  const r = Math.floor((s[o] as number) / windowMs);
  return r > 0 ? r : 0;
}

/** Ms until the bucket is full (exact, not rounded; 0 when full). Refill first. */
export function bucketResetMs(s: number[], o: number, limit: number, windowMs: number): number {
  const missing = limit * windowMs - (s[o] as number);
  return missing <= 0 ? 0 : missing / limit;
}

/** True when the bucket is full at `nowMs` (its state carries no information). Refills. */
export function bucketIsFull(s: number[], o: number, limit: number, windowMs: number, nowMs: number): boolean {
  bucketRefill(s, o, limit, windowMs, nowMs);
  return (s[o] as number) >= limit * windowMs;
}
