/**
 * Exact token counts with tiktoken's vocabularies (the ranks js-tiktoken ships), with a
 * content-hash cache so a chat that resends its history only pays for its new message.
 */
import { hash } from 'node:crypto';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { LRUCache } from 'lru-cache';
import { countPiece, rankTable, utf8Binary, type RankTable } from './bpe.ts';
import type { EncodingName, TextCounter } from './encoding.ts';

/** Strings shorter than this are not cached whole: hashing them costs about as much as counting (64 chars ≈ 1 µs either way). */
export const CACHE_MIN_CHARS = 64;
/** Distinct pre-token pieces remembered per encoding before the piece table is cleared. */
const MAX_PIECES = 200_000;
/** Longest piece (chars) remembered in the piece table: longer ones rarely recur and would pin large keys. */
const MAX_MEMO_PIECE_CHARS = 128;

/**
 * Byte-pair merging a request may still do, in UTF-8 bytes of pieces merged, shared by all the
 * texts of one request (inline and in the worker). Decremented as pieces are merged; `spent` once
 * a piece did not fit, after which every text is charged its byte length without being read.
 */
export interface MergeBudget {
  bytes: number;
  spent: boolean;
}

/** A fresh budget of `bytes`. */
export function mergeBudget(bytes: number): MergeBudget {
  return { bytes, spent: false };
}

/** UTF-8 bytes of `text`: an upper bound of its tokens in any byte-level BPE (every token covers ≥ 1 byte). */
export function byteBound(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/** A count, and whether any piece was charged its byte length instead of being merged (budget spent). */
export interface BudgetedCount {
  readonly tokens: number;
  readonly bounded: boolean;
}

/**
 * Counts pieces the way tiktoken does, in its two steps: split with the encoding's pre-tokenizer
 * regex, byte-pair-merge each piece ({@link countPiece}, O(n log n) in the piece's bytes); the
 * count is the sum over pieces. Pieces that are one token (most words) are found in the rank table
 * without merging; short pieces are memoised, since natural text reuses a small vocabulary of
 * words. Special-token text such as `<|endoftext|>` is counted as plain text, never rejected.
 *
 * With a {@link MergeBudget}: when a piece that needs merging has more UTF-8 bytes than the budget
 * has left, the budget is spent, and that piece and the rest of the text are charged their byte
 * length ({@link byteBound}), without reading further. The byte length is an upper bound of the
 * exact count of those pieces (every token of a byte-level BPE vocabulary covers ≥ 1 byte) and
 * pieces are counted independently, so a budgeted count is never below the exact count: it errs
 * high, the conservative side for a limiter. The work is then bounded by the budget's merges plus
 * one regex pass and one table lookup per piece before it ran out. Without a budget, every piece
 * is merged.
 */
function pieceCounter(patStr: string, ranks: RankTable): (text: string, budget?: MergeBudget) => BudgetedCount {
  const pattern = new RegExp(patStr, 'gu');
  let pieces = new Map<string, number>();
  return (text, budget) => {
    if (budget?.spent === true) return { tokens: byteBound(text), bounded: true };
    let n = 0;
    pattern.lastIndex = 0;
    for (;;) {
      let m: RegExpExecArray | null;
      try {
        m = pattern.exec(text);
      } catch (err) {
        // V8's backtracking stack overflows on a piece of a few million characters of some
        // classes (2M+ CJK characters with the o200k and cl100k patterns): charge the rest of the
        // text its byte length (≥ its exact count) rather than fail the request.
        if (!(err instanceof RangeError)) throw err;
        return { tokens: n + byteBound(text.slice(pattern.lastIndex)), bounded: true };
      }
      if (m === null) break;
      const piece = m[0];
      let c = pieces.get(piece);
      if (c === undefined) {
        const bytes = utf8Binary(piece);
        if (bytes.length <= 1 || ranks.has(bytes)) c = 1;
        else if (budget === undefined || bytes.length <= budget.bytes) {
          if (budget !== undefined) budget.bytes -= bytes.length;
          c = countPiece(ranks, bytes);
        } else {
          // Over budget: charge this piece and the rest of the text their byte length (≥ exact).
          budget.spent = true;
          return { tokens: n + byteBound(text.slice(m.index)), bounded: true };
        }
        if (piece.length <= MAX_MEMO_PIECE_CHARS) {
          if (pieces.size >= MAX_PIECES) pieces = new Map();
          pieces.set(piece, c);
        }
      }
      n += c;
    }
    return { tokens: n, bounded: false };
  };
}

/**
 * An exact counter with its cache exposed, so {@link PromptCounter} can find the texts of a prompt
 * that were never counted and count only those (inline or in a worker).
 */
export class ExactCounter implements TextCounter {
  /** `exact:<encoding>`. */
  readonly name: string;
  readonly #countPieces: (text: string, budget?: MergeBudget) => BudgetedCount;
  readonly #cache: LRUCache<string, number>;

  /** @param cacheEntries texts whose counts are kept (LRU). */
  constructor(encoding: EncodingName, cacheEntries: number) {
    const ranks = encoding === 'o200k_base' ? o200k : cl100k;
    this.name = `exact:${encoding}`;
    this.#countPieces = pieceCounter(ranks.pat_str, rankTable(ranks.bpe_ranks));
    this.#cache = new LRUCache<string, number>({ max: cacheEntries });
  }

  /** Tokens of `text`, exactly (no budget); texts of {@link CACHE_MIN_CHARS}+ characters are served from / added to the cache. */
  count(text: string): number {
    return this.countWithin(text, undefined).tokens;
  }

  /**
   * Tokens of `text`, merging at most `budget.bytes` bytes of pieces (decremented); once it is
   * spent, the rest is charged its UTF-8 byte length, so the count is ≥ the exact one (`bounded`
   * then true, and the count is not cached). A cached count is served without touching the budget.
   */
  countWithin(text: string, budget: MergeBudget | undefined): BudgetedCount {
    if (text.length < CACHE_MIN_CHARS) return text.length === 0 ? { tokens: 0, bounded: false } : this.#countPieces(text, budget);
    const key = hash('sha1', text, 'base64');
    const n = this.#cache.get(key);
    if (n !== undefined) return { tokens: n, bounded: false };
    const counted = this.#countPieces(text, budget);
    if (!counted.bounded) this.#cache.set(key, counted.tokens);
    return counted;
  }

  /** The cached count of `text`, or undefined when it would have to be counted (always for short texts). */
  cached(text: string): number | undefined {
    if (text.length === 0) return 0;
    return text.length < CACHE_MIN_CHARS ? undefined : this.#cache.get(hash('sha1', text, 'base64'));
  }

  /** Stores an exact count made elsewhere (a worker thread) for `text`. */
  remember(text: string, tokens: number): void {
    if (text.length >= CACHE_MIN_CHARS) this.#cache.set(hash('sha1', text, 'base64'), tokens);
  }
}

const exactCounters = new Map<EncodingName, ExactCounter>();

/**
 * The process-wide exact counter of an encoding: tiktoken's ranks from
 * `js-tiktoken/ranks/<encoding>`, rank table built on first use (~250 ms for o200k_base). Texts of
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
