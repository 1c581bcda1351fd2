/**
 * Deterministic tenant assignment for traces that carry no tenant id: a seeded Zipf draw per row.
 * Row `index` always maps to the same tenant for a given (keys, s, seed), whatever rows a replay
 * selects, because each draw hashes (seed, index) instead of advancing a shared generator.
 */

/** Options of {@link ZipfAssigner}. */
export interface ZipfOptions {
  /** Zipf exponent: tenant of rank r (1-based, in key order) has weight 1 / r^s; 0 is uniform. @default 1.1 */
  readonly s?: number;
  /** Seed of the draw (an integer; taken modulo 2^32). @default 42 */
  readonly seed?: number;
}

/** 32-bit finaliser of MurmurHash3 (Appleby): a bijection on uint32 with full avalanche. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * A uniform number in [0, 1) from (seed, index): two rounds of fmix32 over a Weyl sequence, 32-bit
 * resolution. Deterministic across platforms (integer arithmetic only).
 */
export function uniformOf(seed: number, index: number): number {
  const lo = index >>> 0;
  const hi = Math.floor(index / 2 ** 32) >>> 0;
  const h = fmix32(fmix32((seed >>> 0) ^ Math.imul(lo + 1, 0x9e3779b9)) ^ Math.imul(hi + 1, 0x7f4a7c15));
  return h / 2 ** 32;
}

/**
 * Assigns a tenant key to each trace row by a seeded Zipf draw over the keys (first key = rank 1,
 * the hottest). `P(rank r) = r^-s / sum_k k^-s` (Zipf's law, the usual model of skewed tenant load).
 */
export class ZipfAssigner {
  /** The keys, in rank order. */
  readonly keys: readonly string[];
  /** The exponent s. */
  readonly s: number;
  /** The seed (uint32). */
  readonly seed: number;
  /** Probability of each key, same order as `keys`; sums to 1. */
  readonly probabilities: readonly number[];
  readonly #cdf: number[];

  /**
   * @param keys tenant API keys, hottest first; non-empty, no duplicates.
   * @throws RangeError for no keys, duplicate keys, a negative or non-finite `s`, or a non-integer seed.
   */
  constructor(keys: readonly string[], opts: ZipfOptions = {}) {
    const { s = 1.1, seed = 42 } = opts;
    if (keys.length === 0) throw new RangeError('at least one tenant key is needed');
    if (new Set(keys).size !== keys.length) throw new RangeError('tenant keys must be distinct');
    if (!Number.isFinite(s) || s < 0) throw new RangeError(`Zipf exponent s must be a finite number >= 0 (got ${s})`);
    if (!Number.isInteger(seed)) throw new RangeError(`seed must be an integer (got ${seed})`);
    this.keys = [...keys];
    this.s = s;
    this.seed = seed >>> 0;
    const weights = keys.map((_, r) => (r + 1) ** -s);
    const total = weights.reduce((a, b) => a + b, 0);
    this.probabilities = weights.map((w) => w / total);
    let acc = 0;
    this.#cdf = this.probabilities.map((p) => (acc += p));
    this.#cdf[this.#cdf.length - 1] = 1;
  }

  /** The rule, for reports: `zipf(s=1.1, seed=42) over 5 tenants`. */
  get rule(): string {
    return `zipf(s=${this.s}, seed=${this.seed}) over ${this.keys.length} tenant${this.keys.length === 1 ? '' : 's'}`;
  }

  /** Rank (0-based index into `keys`) drawn for trace row `index` (a non-negative integer). */
  rankOf(index: number): number {
    const u = uniformOf(this.seed, index);
    // Binary search for the first cdf entry > u.
    let lo = 0;
    let hi = this.#cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.#cdf[mid] as number) > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  /** Tenant key drawn for trace row `index`. */
  tenantOf(index: number): string {
    return this.keys[this.rankOf(index)] as string;
  }
}
