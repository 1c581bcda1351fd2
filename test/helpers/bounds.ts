/**
 * The exact bound of a token bucket, checked on what clients saw: over any interval of length d,
 * a bucket of capacity C refilled at r per second admits at most C + r × d.
 */

/** One admitted request as the client saw it: sent at `start`, answered at `end` (ms), `tokens` used. */
export interface Admitted {
  readonly start: number;
  readonly end: number;
  readonly tokens: number;
}

/** The worst interval found by {@link worstInterval}. */
export interface Worst {
  /** admitted − bound at the worst interval (≤ 0 when the tenant stayed within its limit). */
  readonly excess: number;
  readonly a: number;
  readonly b: number;
  readonly admitted: number;
  readonly bound: number;
}

/**
 * The interval [a, b] (a = some request's start, b = some request's end) where the tokens of the
 * requests lying wholly inside it exceed (or come closest to) capacity + refill × (b − a).
 * O(n² log n): fine for the few thousand requests of an e2e test.
 */
export function worstInterval(admitted: readonly Admitted[], capacity: number, refillPerS: number): Worst {
  const byStart = [...admitted].sort((x, y) => x.start - y.start);
  let worst: Worst = { excess: -Infinity, a: 0, b: 0, admitted: 0, bound: 0 };
  for (let i = 0; i < byStart.length; i++) {
    const a = (byStart[i] as Admitted).start;
    if (i > 0 && (byStart[i - 1] as Admitted).start === a) continue;
    const inside = byStart.slice(i).sort((x, y) => x.end - y.end);
    let sum = 0;
    for (let k = 0; k < inside.length; k++) {
      const s = inside[k] as Admitted;
      sum += s.tokens;
      if (k + 1 < inside.length && (inside[k + 1] as Admitted).end === s.end) continue;
      const bound = capacity + (refillPerS * (s.end - a)) / 1000;
      if (sum - bound > worst.excess) worst = { excess: sum - bound, a, b: s.end, admitted: sum, bound };
    }
  }
  return worst;
}
