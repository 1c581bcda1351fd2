/**
 * Prompts of an exact token count, for replaying traces whose prompt text is not published.
 * A body is one user message whose content is `" the"` repeated k times: `" the"` is a single token
 * per repeat in both cl100k_base and o200k_base (checked by the unit test), so the chat prompt counts
 * `overhead + k` tokens, where the overhead (3 per message + the role + 3 reply priming, OpenAI's
 * counting rule as implemented by `countOpenAIChat`) is measured, not assumed.
 */
import { LRUCache } from 'lru-cache';
import { countOpenAIChat, encodingForModel, exactCounter } from '../tokens/index.ts';
import type { EncodingName } from '../tokens/index.ts';

/** An OpenAI chat completion body without `max_tokens` (the replayer adds it per request). */
export interface ChatPromptBody {
  readonly model: string;
  readonly messages: readonly [{ readonly role: 'user'; readonly content: string }];
}

/** Options of {@link PromptBuilder}. */
export interface PromptBuilderOptions {
  /** Model name put in the body. */
  readonly model: string;
  /** Tokenizer; by default the model's (`encodingForModel`). */
  readonly encoding?: EncodingName;
  /** Count every new body with `countOpenAIChat` and throw if it is off (slower for long prompts). @default false */
  readonly verify?: boolean;
  /** Total characters of content kept in the cache of bodies by token count. @default 64_000_000 */
  readonly cacheChars?: number;
}

const UNIT = ' the';

/**
 * Builds (and caches by N) chat bodies whose prompt counts exactly N tokens with the model's encoding.
 * The constructor calibrates: it counts bodies of 0, 1, 2 and 1000 repeats and checks that each
 * repeat adds exactly one token.
 */
export class PromptBuilder {
  /** Model name in every body. */
  readonly model: string;
  /** The encoding counted with. */
  readonly encoding: EncodingName;
  /** Tokens of a body with empty content: the smallest N this builder can make. */
  readonly overhead: number;
  readonly #verify: boolean;
  readonly #count: (body: ChatPromptBody) => number;
  readonly #cache: LRUCache<number, ChatPromptBody>;

  /**
   * @throws Error when the model has no known encoding and none is given, or when the calibration
   *   finds that `" the"` is not one token per repeat under this encoding.
   */
  constructor(opts: PromptBuilderOptions) {
    this.model = opts.model;
    let encoding: EncodingName | null | undefined = opts.encoding;
    try {
      encoding ??= encodingForModel(opts.model);
    } catch {
      encoding = null;
    }
    if (encoding === null || encoding === undefined) {
      throw new Error(`model ${opts.model} has no known tokenizer: pass an encoding (cl100k_base or o200k_base)`);
    }
    this.encoding = encoding;
    this.#verify = opts.verify ?? false;
    const counter = exactCounter(encoding);
    this.#count = (body) => countOpenAIChat(body, counter);
    this.#cache = new LRUCache<number, ChatPromptBody>({
      maxSize: opts.cacheChars ?? 64_000_000,
      sizeCalculation: (body) => Math.max(1, body.messages[0].content.length),
    });
    this.overhead = this.#count(this.#make(0));
    for (const k of [1, 2, 1000]) {
      const got = this.#count(this.#make(k));
      if (got !== this.overhead + k) {
        throw new Error(`"${UNIT}" x ${k} counts ${got - this.overhead} tokens under ${encoding}, not ${k}: cannot build exact prompts`);
      }
    }
  }

  #make(repeats: number): ChatPromptBody {
    return { model: this.model, messages: [{ role: 'user', content: UNIT.repeat(repeats) }] };
  }

  /**
   * A body whose prompt counts exactly `tokens` tokens (the same object for the same N while cached;
   * treat it as read-only).
   * @param tokens prompt tokens, an integer >= {@link overhead}.
   * @throws RangeError when `tokens` is below the overhead or not an integer.
   * @throws Error when `verify` is on and the count is off (should never happen after calibration).
   */
  body(tokens: number): ChatPromptBody {
    if (!Number.isInteger(tokens) || tokens < this.overhead) {
      throw new RangeError(`a chat prompt needs an integer >= ${this.overhead} tokens under ${this.encoding} (got ${tokens})`);
    }
    const hit = this.#cache.get(tokens);
    if (hit !== undefined) return hit;
    const body = this.#make(tokens - this.overhead);
    if (this.#verify) {
      const got = this.#count(body);
      if (got !== tokens) throw new Error(`prompt for ${tokens} tokens counts ${got} under ${this.encoding}`);
    }
    this.#cache.set(tokens, body);
    return body;
  }
}
