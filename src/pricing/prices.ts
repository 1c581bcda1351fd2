/**
 * What a request costs: a model's (or a deployment's) price table applied to token counts. Exact
 * integer arithmetic in pico-dollars (see `usd.ts`): `tokens × µ$-per-million` is the cost in p$.
 */

/** A price table, integer micro-dollars per million tokens (µ$/M) of each kind. */
export interface PriceTable {
  /** Input (prompt) tokens not read from or written to a cache. */
  readonly input: number;
  /** Input tokens read from the provider's prompt cache (OpenAI "cached input", Anthropic "cache hits"). */
  readonly cachedInput: number;
  /** Input tokens written to the prompt cache (Anthropic "cache writes"; OpenAI has none: = input). */
  readonly cacheWrite: number;
  /** Output (completion) tokens other than reasoning. */
  readonly output: number;
  /** Reasoning tokens (part of the output tokens a provider reports; OpenAI bills them as output). */
  readonly reasoning: number;
}

/**
 * Token counts of one request as a provider reports them. `cacheRead` and `cacheWrite` are parts of
 * `input`; `reasoning` is part of `output` (OpenAI's `prompt_tokens_details.cached_tokens` and
 * `completion_tokens_details.reasoning_tokens`; Anthropic's input is the sum of `input_tokens`,
 * `cache_creation_input_tokens` and `cache_read_input_tokens`).
 */
export interface TokenCounts {
  readonly input: number;
  readonly output: number;
  /** Input tokens read from the prompt cache. @default 0 */
  readonly cacheRead?: number;
  /** Input tokens written to the prompt cache. @default 0 */
  readonly cacheWrite?: number;
  /** Output tokens spent reasoning. @default 0 */
  readonly reasoning?: number;
}

/** A count as a bigint: non-integers rounded up, negatives and non-finite values as 0. */
function count(n: number | undefined): bigint {
  return n === undefined || !(n > 0) || !Number.isFinite(n) ? 0n : BigInt(Math.ceil(n));
}

/**
 * The exact cost of `usage` under `prices`, in pico-dollars:
 * `(input − cacheRead − cacheWrite) × input + cacheRead × cachedInput + cacheWrite × cacheWrite +
 * (output − reasoning) × output + reasoning × reasoning`. Parts larger than their whole are taken
 * as the whole (a part never makes the rest negative).
 */
export function usageCostPico(usage: TokenCounts, prices: PriceTable): bigint {
  const input = count(usage.input);
  const output = count(usage.output);
  const read = minBig(count(usage.cacheRead), input);
  const write = minBig(count(usage.cacheWrite), input - read);
  const reasoning = minBig(count(usage.reasoning), output);
  return (
    (input - read - write) * BigInt(prices.input) +
    read * BigInt(prices.cachedInput) +
    write * BigInt(prices.cacheWrite) +
    (output - reasoning) * BigInt(prices.output) +
    reasoning * BigInt(prices.reasoning)
  );
}

/**
 * What admission reserves, in pico-dollars: `prompt × input + reservedOutput × max(output,
 * reasoning)` — every prompt token at the uncached input price (what is cached is not known yet),
 * every reserved output token at the dearer of the output and reasoning prices. A settlement on
 * the reported usage refunds the difference, or debits it when cache writes cost more than input.
 * @param promptTokens counted or estimated at admission. @param reservedOutput tokens.
 */
export function reservationCostPico(promptTokens: number, reservedOutput: number, prices: PriceTable): bigint {
  const outPrice = prices.reasoning > prices.output ? prices.reasoning : prices.output;
  return count(promptTokens) * BigInt(prices.input) + count(reservedOutput) * BigInt(outPrice);
}

function minBig(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}
