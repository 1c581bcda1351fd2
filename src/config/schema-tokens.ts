/**
 * The `tokens:` section: exact token counting's worker pool, merge budget and cache.
 */
import { z } from 'zod';
import { positiveInt } from './units.ts';

/** Token counting settings: worker pool and cache sizes. */
export const TokensSchema = z.strictObject({
  /** Worker threads for exact counting of large prompts. @default 2 */
  pool_size: positiveInt.default(2),
  /**
   * Exact counts of more new (uncached) characters than this run in the worker pool; smaller ones
   * run inline, on the event loop, for at most ~2 µs per character (`npm run bench:tokens`), so
   * the default blocks it for a few ms at worst. @default 2048
   */
  worker_threshold_chars: positiveInt.default(2048),
  /**
   * UTF-8 bytes of pre-tokenizer pieces one request may byte-pair merge in an exact count (pieces
   * that are a single token need no merge and are free). Once a piece does not fit, it and the
   * request's remaining uncounted text are charged their byte length: an upper bound of their
   * tokens, so counts err high, never low. Bounds one request's merging to about 0.5 s of a worker
   * thread at worst (~1 µs per byte). @default 524288
   */
  merge_budget_bytes: positiveInt.default(524_288),
  /** Per-message counts kept in the exact-count cache. @default 50000 */
  cache_entries: positiveInt.default(50_000),
});
