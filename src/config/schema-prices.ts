/**
 * Prices of models and deployments (`models[].prices`, `deployments[].prices`): what cost limits
 * charge, in US dollars per million tokens.
 */
import { z } from 'zod';
import type { PriceTable } from '../pricing/prices.ts';
import { usd } from './units.ts';

/**
 * A price table in US dollars per million tokens, e.g. `{input: 2.50, cached_input: 1.25, output:
 * 10.00}`. Output: a {@link PriceTable} in integer micro-dollars per million tokens, with
 * `cached_input` and `cache_write` defaulting to `input` and `reasoning` to `output`.
 */
export const PriceSchema = z
  .strictObject({
    /** Uncached input tokens, USD per million. */
    input: usd,
    /** Output tokens, USD per million. */
    output: usd,
    /** Input tokens read from the prompt cache, USD per million. @default input */
    cached_input: usd.optional(),
    /** Input tokens written to the prompt cache (Anthropic's cache writes), USD per million. @default input */
    cache_write: usd.optional(),
    /** Reasoning tokens, USD per million, where they are priced apart from output. @default output */
    reasoning: usd.optional(),
  })
  .transform((p): PriceTable => ({
    input: p.input,
    cachedInput: p.cached_input ?? p.input,
    cacheWrite: p.cache_write ?? p.input,
    output: p.output,
    reasoning: p.reasoning ?? p.output,
  }));
