/**
 * How many completion tokens the simulator generates, and their text.
 */

/**
 * The text of one output token: `" the"` is a single token in both cl100k_base and o200k_base,
 * and so is every repeat of it (pinned by the unit test), so `n` repeats are exactly `n` tokens.
 */
export const OUTPUT_UNIT = ' the';

/** Completion length and whether it was cut by the caller's cap. */
export interface OutputLength {
  /** Completion tokens to generate. */
  readonly tokens: number;
  /** True when a cap was given and the output reaches it (finish_reason `length`, stop_reason `max_tokens`). */
  readonly hitCap: boolean;
}

/**
 * Completion length: the `x-sim-output-tokens` header when present (capped by `cap`), else `cap`
 * when given, else `defaultTokens`.
 * @param header raw header value; must be a non-negative integer when present.
 * @param cap max_tokens / max_completion_tokens of the body, already validated.
 * @returns the length, or a string describing why the header is invalid.
 */
export function outputLength(header: string | undefined, cap: number | undefined, defaultTokens: number): OutputLength | string {
  let wanted: number;
  if (header === undefined) wanted = cap ?? defaultTokens;
  else {
    if (!/^\d{1,9}$/.test(header)) return `x-sim-output-tokens must be a non-negative integer, got "${header}"`;
    wanted = Number(header);
  }
  const tokens = cap === undefined ? wanted : Math.min(wanted, cap);
  return { tokens, hitCap: cap !== undefined && tokens === cap };
}

/** Text of `n` output tokens. */
export function outputText(n: number): string {
  return OUTPUT_UNIT.repeat(n);
}
