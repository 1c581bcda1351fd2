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
 * Calibration (measured with js-tiktoken; reproduce with `node --import tsx bench/tokens.ts`):
 * non-negative least squares on relative error over 250 chunks (300–6,000 chars) per category —
 * English docs (fastify, zod, undici, piscina, commander READMEs), JavaScript/TypeScript (fastify,
 * undici, lru-cache, lib.es5/lib.dom.d.ts), JSON and .d.ts API types, legal English, TypeScript's
 * diagnostics in ten languages, random base64/hex/UUIDs/decimals and emoji chat — English and code
 * weighted 3×, then every weight multiplied by 1.08 so the estimate errs high. estimate/exact:
 *
 * | category | o200k_base median (p5–p95) | cl100k_base median (p5–p95) |
 * |---|---|---|
 * | English docs | 1.06 (0.97–1.12) | 1.06 (0.99–1.14) |
 * | code | 1.12 (1.03–1.21) | 1.12 (1.03–1.22) |
 * | JSON / API types | 1.04 (0.95–1.16) | 1.03 (0.94–1.17) |
 * | German / French / Russian | 1.01 / 1.15 / 1.08 | 0.92 / 1.19 / 1.08 |
 * | Japanese / Chinese / Korean | 1.07 / 1.04 / 1.14 | 1.03 / 1.09 / 1.11 |
 * | random base64, hex, numbers | 1.00 (0.88–1.21) | 1.00 (0.85–1.22) |
 *
 * The worst chunk of any category is 0.79 × exact (German, cl100k_base). A plain
 * `length / 3.7` rule, by contrast, gives 0.35–0.55 × exact for CJK text and 1.35 × for English.
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

/** Sum of the per-character and per-run weights over `text`; one pass, no allocation. */
function weigh(text: string, perChar: Float64Array, perRun: Float64Array): number {
  let n = 0;
  let prev = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const k = c < 128 ? (ASCII_CLASS[c] as number) : c < 0x800 ? 6 : c >= 0xd800 && c <= 0xdfff ? 8 : 7;
    n += perChar[k] as number;
    if (k !== prev) {
      n += perRun[k] as number;
      prev = k;
    }
  }
  return n;
}

const estimators = new Map<string, TextCounter>();

/**
 * Provider-style estimate of the tokens of a string, calibrated per encoding (figures in this
 * file's header). Cost: one pass over the string, about 1 ns per character, no regex.
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
    const perChar = Float64Array.from(w.slice(0, 9), (x) => x * f);
    const perRun = Float64Array.from(w.slice(9), (x) => x * f);
    counter = { name: `estimate:${key}`, count: (text) => (text.length === 0 ? 0 : Math.ceil(weigh(text, perChar, perRun))) };
    estimators.set(key, counter);
  }
  return counter;
}
