/**
 * Token weights of a settlement: the actual tokens of a request as a `tokens` limit with `weights`
 * counts them (cached, cache-write and reasoning tokens each at their weight).
 */
import type { RateLimitSpec, TokenKinds } from './types.ts';

/**
 * `actual` tokens as a weighted `tokens` limit counts them: each cached, cache-write or reasoning
 * token weighs its weight instead of 1 (parts larger than the whole are taken as the whole);
 * rounded up to a whole token, never below 0.
 */
export function weightedTokens(actual: number, kinds: TokenKinds | undefined, spec: RateLimitSpec): number {
  const w = spec.weights;
  if (w === undefined || kinds === undefined) return actual;
  let total = actual;
  const part = (n: number | undefined, weight: number | undefined): void => {
    if (weight === undefined || weight === 1 || n === undefined || !(n > 0)) return;
    const m = Math.min(n, actual);
    total += m * (weight - 1);
  };
  part(kinds.cacheRead, w.cacheRead);
  part(kinds.cacheWrite, w.cacheWrite);
  part(kinds.reasoning, w.reasoning);
  // Weights are decimals (0.1): round a hair of float error down before rounding up.
  const rounded = Math.ceil(total - 1e-9);
  return rounded > 0 ? rounded : 0;
}
