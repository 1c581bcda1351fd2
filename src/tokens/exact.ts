/**
 * Exact token counts with js-tiktoken's vocabularies, with a content-hash cache so a chat that
 * resends its history only pays for its new message.
 */
import { hash } from 'node:crypto';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { LRUCache } from 'lru-cache';
import type { EncodingName, TextCounter } from './encoding.ts';

/** Strings shorter than this are not cached whole: hashing them costs about as much as counting (64 chars ≈ 1 µs either way). */
export const CACHE_MIN_CHARS = 64;
/** Distinct pre-token pieces remembered per encoding before the piece table is cleared. */
const MAX_PIECES = 200_000;

/**
 * Counts pieces the way tiktoken does, in its two steps: split with the encoding's pre-tokenizer
 * regex, byte-pair-encode each piece; the count is the sum over pieces. The regex is compiled once
 * (js-tiktoken's `encode` compiles it on every call, most of its cost for short texts) and piece
 * counts are memoised, since natural text reuses a small vocabulary of words. Special-token text
 * such as `<|endoftext|>` is counted as plain text, never rejected.
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
 * An exact counter with its cache exposed, so {@link PromptCounter} can find the texts of a prompt
 * that were never counted and count only those (inline or in a worker).
 */
export class ExactCounter implements TextCounter {
  /** `exact:<encoding>`. */
  readonly name: string;
  readonly #countPieces: (text: string) => number;
  readonly #cache: LRUCache<string, number>;

  /** @param cacheEntries texts whose counts are kept (LRU). */
  constructor(encoding: EncodingName, cacheEntries: number) {
    const ranks = encoding === 'o200k_base' ? o200k : cl100k;
    this.name = `exact:${encoding}`;
    this.#countPieces = pieceCounter(ranks, new Tiktoken(ranks));
    this.#cache = new LRUCache<string, number>({ max: cacheEntries });
  }

  /** Tokens of `text`; texts of {@link CACHE_MIN_CHARS}+ characters are served from / added to the cache. */
  count(text: string): number {
    if (text.length < CACHE_MIN_CHARS) return text.length === 0 ? 0 : this.#countPieces(text);
    const key = hash('sha1', text, 'base64');
    let n = this.#cache.get(key);
    if (n === undefined) {
      n = this.#countPieces(text);
      this.#cache.set(key, n);
    }
    return n;
  }

  /** The cached count of `text`, or undefined when it would have to be counted (always for short texts). */
  cached(text: string): number | undefined {
    if (text.length === 0) return 0;
    return text.length < CACHE_MIN_CHARS ? undefined : this.#cache.get(hash('sha1', text, 'base64'));
  }

  /** Stores a count made elsewhere (a worker thread) for `text`. */
  remember(text: string, tokens: number): void {
    if (text.length >= CACHE_MIN_CHARS) this.#cache.set(hash('sha1', text, 'base64'), tokens);
  }
}

const exactCounters = new Map<EncodingName, ExactCounter>();

/**
 * The process-wide exact counter of an encoding: js-tiktoken's ranks from
 * `js-tiktoken/ranks/<encoding>`, tables built on first use (~100 ms for o200k_base). Texts of
 * {@link CACHE_MIN_CHARS}+ characters are cached whole by SHA-1 of their content in an LRU (a
 * chat message is one text, so turn N of a chat only counts its new message).
 * @param cacheEntries LRU size, used by the first call per encoding only. @default 50000
 */
export function exactCounter(encoding: EncodingName, cacheEntries = 50_000): ExactCounter {
  let counter = exactCounters.get(encoding);
  if (counter === undefined) {
    counter = new ExactCounter(encoding, cacheEntries);
    exactCounters.set(encoding, counter);
  }
  return counter;
}
