/**
 * Weighted max-min fair shares of one capacity (a deployment bucket's units per window) among the
 * tenants that want it, with reserved floors — the "water-filling" rule:
 *
 * 1. every tenant first gets its floor (its guaranteed part, held whether or not it asks);
 * 2. the rest is poured in by weight: a tenant whose demand beyond its floor is below the water
 *    line (`weight × level`) gets all it asks; the others share what is left in proportion to
 *    their weights;
 * 3. when every demand is met and capacity is left over, the water line rises until the capacity
 *    is spent, so every share is at least its demand (a tenant may then burst above what it asked).
 *
 * Shares sum to exactly the capacity (floors beyond it are scaled down to fit). Pure arithmetic;
 * units are whatever the caller counts (requests or tokens per window).
 */

/** One tenant's claim on a capacity. */
export interface Claim {
  /** The tenant id. */
  readonly id: string;
  /** Units per window it asks for now (≥ 0). */
  readonly demand: number;
  /** Its weight (> 0): with more demand than capacity, shares above floors are in proportion to weights. */
  readonly weight: number;
  /** Units per window reserved for it whether it asks or not (≥ 0). */
  readonly floor: number;
}

/** The result: each claim's share, and the water line (units per unit of weight above floors). */
export interface Shares {
  /** Units per window, by tenant id. */
  readonly share: ReadonlyMap<string, number>;
  /**
   * Units per unit of weight above its floor that a tenant whose demand is not met gets: what a
   * tenant not in the claims (one that has just started asking) may take until it is counted.
   */
  readonly level: number;
}

/**
 * Water-fills `capacity` over `claims`. A repeated id (a spread tenant reported by several nodes) is
 * one claim: its demands added up, the largest of its weights and of its floors.
 * @param capacity units per window (≥ 0).
 * @throws RangeError for a capacity, demand, weight or floor that is not finite, or out of range.
 */
export function waterFill(capacity: number, claims: readonly Claim[]): Shares {
  if (!Number.isFinite(capacity) || capacity < 0) throw new RangeError(`capacity must be a finite number >= 0, got ${capacity}`);
  const merged = new Map<string, { demand: number; weight: number; floor: number }>();
  for (const c of claims) {
    if (!Number.isFinite(c.demand) || c.demand < 0) throw new RangeError(`demand of ${c.id} must be a finite number >= 0, got ${c.demand}`);
    if (!Number.isFinite(c.weight) || c.weight <= 0) throw new RangeError(`weight of ${c.id} must be a finite number > 0, got ${c.weight}`);
    if (!Number.isFinite(c.floor) || c.floor < 0) throw new RangeError(`floor of ${c.id} must be a finite number >= 0, got ${c.floor}`);
    const m = merged.get(c.id);
    if (m === undefined) merged.set(c.id, { demand: c.demand, weight: c.weight, floor: c.floor });
    else {
      m.demand += c.demand;
      m.weight = Math.max(m.weight, c.weight);
      m.floor = Math.max(m.floor, c.floor);
    }
  }
  const share = new Map<string, number>();
  if (merged.size === 0) return { share, level: capacity };
  // 1. Floors, scaled down to fit when they add up to more than the capacity.
  let floors = 0;
  for (const m of merged.values()) floors += m.floor;
  const scale = floors > capacity ? capacity / floors : 1;
  for (const [id, m] of merged) share.set(id, m.floor * scale);
  let left = capacity - floors * scale;
  // 2. Demand beyond floors, met in order of demand per weight while it is below the line.
  const wanting = [...merged].map(([id, m]) => ({ id, want: Math.max(0, m.demand - m.floor * scale), weight: m.weight })).sort((a, b) => a.want / a.weight - b.want / b.weight);
  let weights = 0;
  for (const w of wanting) weights += w.weight;
  let level = weights > 0 ? left / weights : 0;
  let i = 0;
  for (; i < wanting.length; i++) {
    const w = wanting[i] as (typeof wanting)[number];
    if (w.want > w.weight * level) break;
    share.set(w.id, (share.get(w.id) ?? 0) + w.want);
    left -= w.want;
    weights -= w.weight;
    level = weights > 0 ? left / weights : level;
  }
  if (i < wanting.length) {
    // 2'. The rest of the capacity among the unmet, by weight.
    for (; i < wanting.length; i++) {
      const w = wanting[i] as (typeof wanting)[number];
      share.set(w.id, (share.get(w.id) ?? 0) + w.weight * level);
    }
    return { share, level };
  }
  // 3. Every demand is met: the line rises over everyone until the capacity is spent.
  let all = 0;
  for (const m of merged.values()) all += m.weight;
  const extra = left / all;
  for (const [id, m] of merged) share.set(id, (share.get(id) ?? 0) + m.weight * extra);
  const highest = wanting.reduce((h, w) => Math.max(h, w.want / w.weight), 0);
  return { share, level: highest + extra };
}
