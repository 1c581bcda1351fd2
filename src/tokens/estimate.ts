/**
 * The character estimate: tokens of a string from one pass over its characters, no tokenizer.
 *
 * Model. Each UTF-16 unit falls in one of nine classes (a-z, A-Z, 0-9, space, other whitespace,
 * ASCII punctuation, U+0080–U+07FF, other BMP, surrogate halves). The estimate is
 * Σ perChar[class] + Σ perRun[class] over maximal runs of one class: runs approximate tiktoken's
 * pre-tokenizer pieces (a word, a number group, a punctuation cluster, a line break), per-char
 * weights the extra tokens of long pieces and of non-Latin scripts. Case changes start a run, so
 * base64 and identifiers cost more than prose.
 *
 * Calibration (measured with js-tiktoken): non-negative least squares on relative error over 250
 * chunks (300–6,000 chars) per category — English docs (fastify, zod, undici, piscina, commander
 * READMEs), JavaScript/TypeScript (fastify, undici, lru-cache, lib.es5/lib.dom.d.ts), JSON, legal
 * English, TypeScript's diagnostics in ten languages, random base64/hex/UUIDs/decimals and emoji
 * chat — English and code weighted 3×, then every weight multiplied by 1.08 so the estimate errs
 * high. `node --import tsx bench/tokens/tokens.ts` re-measures estimate/exact on fresh chunks (same
 * sources): median (p5–p95) [worst chunk]
 *
 * | category | o200k_base | cl100k_base |
 * |---|---|---|
 * | English docs | 1.06 (1.00–1.12) [0.89] | 1.06 (1.00–1.13) [0.91] |
 * | code | 1.12 (1.04–1.22) [0.88] | 1.13 (1.03–1.23) [0.81] |
 * | JSON | 1.02 (0.96–1.17) [0.93] | 1.02 (0.95–1.18) [0.92] |
 * | German / French / Russian | 1.01 / 1.16 / 1.08 [0.88] | 0.92 / 1.19 / 1.07 [0.79] |
 * | Japanese / Chinese / Korean | 1.07 / 1.04 / 1.14 [0.90] | 1.03 / 1.09 / 1.11 [0.89] |
 * | random base64 / hex | 0.89 (0.87–1.11) [0.83] | 0.86 (0.84–1.11) [0.81] |
 *
 * A plain `length / 3.7` rule, by contrast, gives 0.35–0.55 × exact on CJK text and ~1.35 × on
 * English docs.
 */
import type { EncodingName, TextCounter } from './encoding.ts';

/** Class of each ASCII code: 0 a-z, 1 A-Z, 2 0-9, 3 space, 4 tab/CR/LF, 5 other ASCII. */
const ASCII_CLASS = new Uint8Array(128).map((_, c) => {
  if (c >= 97 && c <= 122) return 0;
  if (c >= 65 && c <= 90) return 1;
  if (c >= 48 && c <= 57) return 2;
  if (c === 32) return 3;
  if (c === 9 || c === 10 || c === 13) return 4;
  return 5;
});

/** Fitted weights: 9 per-character then 9 per-run, classes as in {@link ASCII_CLASS} plus 6 U+0080–U+07FF, 7 other BMP, 8 surrogate. */
const WEIGHTS: Readonly<Record<EncodingName, readonly number[]>> = {
  o200k_base: [0.0658, 0.1991, 0.0495, 0.0523, 0, 0, 0.1217, 0.7056, 0.7252, /* runs */ 0.6667, 0.2319, 1.7889, 0, 0.7917, 0.9945, 0.9024, 0.14, 1.0896],
  cl100k_base: [0.0719, 0.1855, 0, 0.0494, 0, 0, 0.1289, 0.9351, 1.6164, /* runs */ 0.6348, 0.2834, 1.9347, 0, 0.7882, 0.9784, 1.992, 0.4768, 0.1042],
};

/**
 * Extra factor for models without a public tokenizer (Claude): the cl100k_base estimate × 1.1.
 * Anthropic publishes no tokenizer; its models are commonly observed to produce somewhat more
 * tokens than OpenAI's for the same text, and a reservation should err high.
 */
export const NO_TOKENIZER_FACTOR = 1.1;

/** Classes, plus the start state before the first character. */
const CLASSES = 9;
const START = CLASSES;

/**
 * Transition table in thousandths of a token: entry `prev * 9 + k` is the cost of a character of
 * class k after one of class `prev` (per-character weight, plus the per-run weight when the class
 * changes). Integer sums and no branch on run boundaries keep the loop at ~1 ns per character.
 */
function transitionTable(perChar: readonly number[], perRun: readonly number[]): Int32Array {
  const table = new Int32Array((CLASSES + 1) * CLASSES);
  for (let prev = 0; prev <= CLASSES; prev++) {
    for (let k = 0; k < CLASSES; k++) table[prev * CLASSES + k] = Math.round(1000 * ((perChar[k] ?? 0) + (prev === k ? 0 : (perRun[k] ?? 0))));
  }
  return table;
}

/** Estimated tokens of `text` in thousandths: one pass, no allocation. */
function weigh(text: string, table: Int32Array): number {
  let n = 0;
  let prev = START;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const k = c < 128 ? (ASCII_CLASS[c] as number) : c < 0x800 ? 6 : c >= 0xd800 && c <= 0xdfff ? 8 : 7;
    n += table[prev * CLASSES + k] as number;
    prev = k;
  }
  return n;
}

const estimators = new Map<string, TextCounter>();

/**
 * Provider-style estimate of the tokens of a string, calibrated per encoding (figures in this
 * file's header). Cost: one pass over the string, about 1–2 ns per character, no regex.
 * @param encoding the model's tokenizer; null for models without a public one (cl100k_base
 *   weights × {@link NO_TOKENIZER_FACTOR}).
 * @returns a shared counter named `estimate:<encoding>` or `estimate:none`; counts are integers
 *   (rounded up), 0 only for the empty string.
 */
export function estimateCounter(encoding: EncodingName | null): TextCounter {
  const key = encoding ?? 'none';
  let counter = estimators.get(key);
  if (counter === undefined) {
    const w = WEIGHTS[encoding ?? 'cl100k_base'];
    const f = encoding === null ? NO_TOKENIZER_FACTOR : 1;
    const table = transitionTable(
      w.slice(0, CLASSES).map((x) => x * f),
      w.slice(CLASSES).map((x) => x * f),
    );
    counter = { name: `estimate:${key}`, count: (text) => (text.length === 0 ? 0 : Math.ceil(weigh(text, table) / 1000)) };
    estimators.set(key, counter);
  }
  return counter;
}
