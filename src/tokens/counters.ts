/**
 * Text counters: the provider-style character estimate (the default at admission) and exact
 * js-tiktoken counts with a content-hash cache.
 */
import { createHash } from 'node:crypto';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { LRUCache } from 'lru-cache';

/** Tokenizers quotaring can count exactly. */
export type EncodingName = 'o200k_base' | 'cl100k_base';

/** Counts tokens of a plain string. */
export interface TextCounter {
  /** `estimate:<encoding>`, `exact:<encoding>` or `chars`. */
  readonly name: string;
  /** Tokens of `text`. */
  count(text: string): number;
}

/**
 * Characters per token used by the estimate, calibrated on this repository's docs and sources plus
 * fastify's guides (31 files of English and TypeScript): measured medians are 4.04 (o200k_base) and
 * 4.07 (cl100k_base) characters per token, the densest file 3.32 / 3.41. 3.7 over-estimates the
 * median text by ~9% and under-estimates only the densest by ≤ 11%: a reservation errs high, and
 * settlement is exact anyway. Claude's tokenizer is not public and produces more tokens per
 * character than OpenAI's; 3.5 is the usual rule of thumb for it.
 */
export const CHARS_PER_TOKEN: Readonly<Record<EncodingName | 'none', number>> = { o200k_base: 3.7, cl100k_base: 3.7, none: 3.5 };

const estimators = new Map<string, TextCounter>();

/**
 * The provider-style estimate: `ceil(chars / CHARS_PER_TOKEN)`, O(1) per string.
 * @param encoding the model's tokenizer, or null for models without a public one.
 */
export function estimateCounter(encoding: EncodingName | null): TextCounter {
  const key = encoding ?? 'none';
  let counter = estimators.get(key);
  if (counter === undefined) {
    const ratio = CHARS_PER_TOKEN[key];
    counter = { name: `estimate:${key}`, count: (text) => (text.length === 0 ? 0 : Math.ceil(text.length / ratio)) };
    estimators.set(key, counter);
  }
  return counter;
}

/** Counts characters: used to size a prompt before choosing where to count it. */
export const charCounter: TextCounter = { name: 'chars', count: (text) => text.length };

/** Strings shorter than this are not cached whole: hashing them costs about as much as counting. */
const CACHE_MIN_CHARS = 256;
/** Distinct pre-token pieces remembered per encoding before the piece table is cleared. */
const MAX_PIECES = 200_000;

const exactCounters = new Map<EncodingName, TextCounter>();

/**
 * Exact token count of `text` by tiktoken's own two steps: split into pieces with the encoding's
 * pre-tokenizer regex, then byte-pair-encode each piece; the count is the sum over pieces. The regex
 * is compiled once (js-tiktoken's `encode` compiles it on every call, most of its cost for short
 * texts) and piece counts are memoised, since natural text reuses a small vocabulary of words.
 * Special-token text such as `<|endoftext|>` is counted as plain text, never rejected.
 */
function pieceCounter(ranks: { pat_str: string }, tiktoken: Tiktoken): (text: string) => number {
  const pattern = new RegExp(ranks.pat_str, 'gu');
  let pieces = new Map<string, number>();
  return (text) => {
    let n = 0;
    pattern.lastIndex = 0;
    for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
      const piece = m[0];
      let c = pieces.get(piece);
      if (c === undefined) {
        c = tiktoken.encode(piece, [], []).length;
        if (pieces.size >= MAX_PIECES) pieces = new Map();
        pieces.set(piece, c);
      }
      n += c;
    }
    return n;
  };
}

/**
 * Exact counts with js-tiktoken's vocabularies. One table per encoding, built on first use (~100 ms
 * for o200k_base). Strings of 256+ characters are also cached whole by SHA-1 of their content in an
 * LRU, so a chat that resends its history only pays for its new message.
 * @param cacheEntries LRU size for the first call per encoding. @default 50000
 */
export function exactCounter(encoding: EncodingName, cacheEntries = 50_000): TextCounter {
  let counter = exactCounters.get(encoding);
  if (counter === undefined) {
    const ranks = encoding === 'o200k_base' ? o200k : cl100k;
    const countPieces = pieceCounter(ranks, new Tiktoken(ranks));
    const cache = new LRUCache<string, number>({ max: cacheEntries });
    counter = {
      name: `exact:${encoding}`,
      count(text: string): number {
        if (text.length < CACHE_MIN_CHARS) return text.length === 0 ? 0 : countPieces(text);
        const key = createHash('sha1').update(text).digest('base64');
        let n = cache.get(key);
        if (n === undefined) {
          n = countPieces(text);
          cache.set(key, n);
        }
        return n;
      },
    };
    exactCounters.set(encoding, counter);
  }
  return counter;
}

/**
 * Encoding of a model by OpenAI's public mapping: gpt-4o*, gpt-4.1*, gpt-4.5*, gpt-5*, o1*, o3*, o4*
 * → o200k_base; gpt-4*, gpt-3.5*, text-embedding-3*, text-embedding-ada-002 → cl100k_base; else null.
 * Source: tiktoken `model.py` (MODEL_PREFIX_TO_ENCODING).
 */
export function encodingForModel(model: string): EncodingName | null {
  const m = model.toLowerCase();
  if (/^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o|gpt-oss)/.test(m)) return 'o200k_base';
  if (/^(gpt-4|gpt-3\.5|gpt-35|text-embedding-3|text-embedding-ada-002)/.test(m)) return 'cl100k_base';
  return null;
}
