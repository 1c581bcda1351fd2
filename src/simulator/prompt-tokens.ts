/**
 * Exact prompt tokens of a request, as the simulator reports them in `usage`: the project's token
 * module with js-tiktoken, encoding = the model's (OpenAI's public mapping) or cl100k_base as a
 * stand-in for models without a public tokenizer (Claude). Texts are memoised, since benchmarks
 * send the same prompts again and again.
 */
import { LRUCache } from 'lru-cache';
import { countAnthropicMessages, countEmbeddingInput, countOpenAIChat, encodingForModel, exactCounter } from '../tokens/index.ts';
import type { AnthropicPrompt, EmbeddingInput, EncodingName, OpenAIChatPrompt, TextCounter } from '../tokens/index.ts';

/** A `TextCounter` that memoises counts in an LRU bounded by total characters (a hit costs ~0.2 µs, a 50-character miss ~25 µs). */
class MemoCounter implements TextCounter {
  readonly name: string;
  readonly #inner: TextCounter;
  readonly #memo: LRUCache<string, number>;

  constructor(inner: TextCounter, maxChars: number) {
    this.name = `${inner.name}+memo`;
    this.#inner = inner;
    this.#memo = new LRUCache<string, number>({ maxSize: maxChars, sizeCalculation: (_v, k) => k.length + 1 });
  }

  count(text: string): number {
    const hit = this.#memo.get(text);
    if (hit !== undefined) return hit;
    const n = this.#inner.count(text);
    this.#memo.set(text, n);
    return n;
  }
}

/** Every encoding the simulator counts with (see {@link PromptTokens.encodingOf}). */
const ENCODINGS: readonly EncodingName[] = ['o200k_base', 'cl100k_base'];

/**
 * Loads every encoding's ranks now (about 400 ms for o200k_base and 200 ms for cl100k_base on an
 * idle core), so that the first requests do not stall the event loop: while it stalls, requests
 * wait in the socket and their arrival times (`GET /sim/arrivals`) come late.
 */
export function warmEncodings(): void {
  for (const enc of ENCODINGS) exactCounter(enc).count('warm');
}

/** Counts prompts of the three model routes exactly; one memoising counter per encoding. */
export class PromptTokens {
  readonly #counters = new Map<EncodingName, TextCounter>();
  readonly #memoChars: number;

  /** @param memoChars total characters of texts whose counts are kept. @default 32_000_000 */
  constructor(memoChars = 32_000_000) {
    this.#memoChars = memoChars;
  }

  /** The encoding the simulator counts `model` with: the model's, else cl100k_base. */
  static encodingOf(model: string): EncodingName {
    try {
      return encodingForModel(model) ?? 'cl100k_base';
    } catch {
      return 'cl100k_base';
    }
  }

  #counter(model: string): TextCounter {
    const enc = PromptTokens.encodingOf(model);
    let c = this.#counters.get(enc);
    if (c === undefined) {
      c = new MemoCounter(exactCounter(enc), this.#memoChars);
      this.#counters.set(enc, c);
    }
    return c;
  }

  /** `usage.prompt_tokens` of an OpenAI chat completion body (validated: has model and messages). */
  openAIChat(model: string, body: object): number {
    return countOpenAIChat(body as OpenAIChatPrompt, this.#counter(model));
  }

  /** `usage.input_tokens` of an Anthropic messages body. */
  anthropicMessages(model: string, body: object): number {
    return countAnthropicMessages(body as AnthropicPrompt, this.#counter(model));
  }

  /** `usage.prompt_tokens` of an OpenAI embeddings `input`. */
  embeddingInput(model: string, input: unknown): number {
    return countEmbeddingInput(input as EmbeddingInput, this.#counter(model));
  }
}
