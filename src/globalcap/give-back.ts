/**
 * Leases that give back: the rules that keep a node's leased-but-unspent units
 * from being lost to the cluster, and that keep prefetching from taking the last units of a small
 * bucket. `lease-give-back.ts`, `lease-renewal.ts` and `lease-spend.ts` apply them; the arithmetic
 * lives here.
 *
 * **Give-back.** A leased unit is consumed in Redis the moment it is granted. Units the node did not
 * spend go back to the bucket (a `token-bucket.lua` call with a negative cost, never above capacity)
 * when
 * - their lease expires (`leaseTtlMs` after the lease call was sent; found by the next take, view or
 *   the periodic sweep, at most `sweepMs` late),
 * - the bucket goes idle (no take for `idleMs`, found by the sweep), or
 * - the node leaves (`close`, which first waits for renewals in flight and grants answered late).
 * The node drops the units from its local balance *before* the call is sent, so a unit is never both
 * spendable locally and back in Redis. A failed give-back leaves the units consumed (the safe side).
 * Units leased from a Redis that has since restarted (empty, or from an older snapshot) are never
 * given back (that Redis never took them); they stay spendable until their lease expires.
 * Given-back units are first netted against usage Redis has not been told yet (`unreconciled`).
 *
 * **Prefetch rule.** A node prefetches (renews at the low-water mark before a take is refused, and
 * asks for a whole block) only while its block is at most `capacity / (PREFETCH_SHARES × share)`,
 * i.e. a quarter of its fair part of the bucket. Otherwise (a *small* bucket: a 2 rpm quota, a
 * `tokens: 10000/1d` limit whose requests take thousands) it never holds units nobody asked for: a
 * refused take leases exactly what it lacks, and nothing is leased after a take. Each request then
 * costs one Redis call, which a small quota can afford.
 *
 * **How stale a node's view can be.** Admission is decided only from units Redis granted atomically
 * (or, while Redis is unavailable, from the node's fallback share), so a stale view can never admit
 * beyond capacity: over any interval, units admitted cluster-wide ≤ capacity + refill over it (+ the
 * fallback shares while Redis is unavailable). Staleness only costs admissions:
 * - units one node holds unspent are invisible to the others until they are spent or given back:
 *   at most one block per node (≤ capacity / (4 × share) when prefetching, else one request's
 *   need), for at most min(idleMs + sweepMs, leaseTtlMs) after the node's last take;
 * - a refused take's retry-after is the bucket's wait for what it lacks at the moment Redis
 *   answered (Lua `wait_ms`); other nodes taking the refill meanwhile can make it optimistic,
 *   never longer than the truth;
 * - the `level` a node shows (headers, metrics) is the cluster level at its last reply refilled
 *   since: it ignores what other nodes leased since, so it may be high by up to their blocks.
 */

/** A node never prefetches more than 1 / PREFETCH_SHARES of its fair part of a bucket. */
export const PREFETCH_SHARES = 4;

/**
 * Whether a node may prefetch from a bucket (see the module doc).
 * @param capacity the bucket's capacity, units.
 * @param share nodes sharing the bucket (≥ 1).
 * @param block the block a prefetch would ask for, units.
 */
export function mayPrefetch(capacity: number, share: number, block: number): boolean {
  return block * PREFETCH_SHARES * Math.max(1, share) <= capacity;
}

/** Leased units of one grant (or refund), spendable until `expiresAt`. */
export interface Lot {
  units: number;
  /** ms (clock time) when these units expire. */
  readonly expiresAt: number;
  /** Given back to Redis when dropped unspent: false for units leased before Redis restarted. */
  returnable: boolean;
}

/** Units of all lots. */
export function lotUnits(lots: readonly Lot[]): number {
  let sum = 0;
  for (const lot of lots) sum += lot.units;
  return sum;
}

/**
 * Drops the lots (oldest first, in expiry order) that expired at `now`.
 * @returns the returnable units dropped (to give back).
 */
export function dropExpired(lots: Lot[], now: number): number {
  let i = 0;
  let back = 0;
  while (i < lots.length && (lots[i] as Lot).expiresAt <= now) {
    const lot = lots[i] as Lot;
    if (lot.returnable) back += lot.units;
    i++;
  }
  if (i > 0) lots.splice(0, i);
  return back;
}

/**
 * Drops every returnable lot (an idle bucket); lots leased before a Redis restart stay until they
 * expire. @returns the units dropped.
 */
export function dropReturnable(lots: Lot[]): number {
  let back = 0;
  for (let i = lots.length - 1; i >= 0; i--) {
    const lot = lots[i] as Lot;
    if (!lot.returnable) continue;
    back += lot.units;
    lots.splice(i, 1);
  }
  return back;
}

/** Spends `units` (≤ the lots' units) from the oldest lots first. */
export function spendLots(lots: Lot[], units: number): void {
  let left = units;
  while (left > 0 && lots.length > 0) {
    const lot = lots[0] as Lot;
    if (lot.units > left) {
      lot.units -= left;
      return;
    }
    left -= lot.units;
    lots.shift();
  }
}

/** Adds a returnable lot of `units` expiring at `expiresAt`, keeping expiry order. */
export function addLot(lots: Lot[], units: number, expiresAt: number): void {
  const last = lots[lots.length - 1];
  if (last !== undefined && last.expiresAt === expiresAt && last.returnable) last.units += units;
  else if (last === undefined || last.expiresAt <= expiresAt) lots.push({ units, expiresAt, returnable: true });
  else {
    // Older expiry than the newest lot (a grant resolved after a refund): keep expiry order.
    const i = lots.findIndex((l) => l.expiresAt > expiresAt);
    lots.splice(i, 0, { units, expiresAt, returnable: true });
  }
}

/**
 * What a give-back of `units` sends once netted against usage Redis has not been told
 * (`unreconciled`: charging u and giving back g is giving back g − u).
 * @returns the units to send back (≥ 0) and the unreconciled usage left.
 */
export function netGiveBack(units: number, unreconciled: number): { readonly send: number; readonly unreconciled: number } {
  const offset = Math.min(units, unreconciled);
  return { send: units - offset, unreconciled: unreconciled - offset };
}

/**
 * The units a node may admit from its fallback share at once when Redis becomes unavailable (its
 * share then refills at `capacity / share` per window). Two caps, each a bound on what the cluster
 * bucket can still give this node:
 * - its part of the window, `capacity / share`, less its own in-window usage (`known`): entering
 *   fallback again and again never hands out a fresh share;
 * - its part of the level it last saw in Redis, refilled since (`seenLevel / share`): a bucket the
 *   cluster had emptied gives no node a fresh share. Without it, nodes that used less than their
 *   part of the window (the load was uneven) would spend the difference while the bucket was empty.
 * Bound: the shares admit at most Σ budgets + refill over the outage; Σ budgets exceeds what Redis
 * held only by what other nodes leased after each node last saw the level (a saturated bucket: one
 * renewal interval of refill) and never by more than Σ (capacity / share − known).
 * @param capacity units; @param share nodes sharing the bucket (≥ 1); @param known units;
 * @param seenLevel units (may be negative: debt). @returns units ≥ 0.
 */
export function fallbackBudget(capacity: number, share: number, known: number, seenLevel: number): number {
  const part = capacity / Math.max(1, share);
  return Math.max(0, Math.min(part - known, Math.max(0, seenLevel) / Math.max(1, share)));
}
