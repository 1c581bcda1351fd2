/**
 * Counts request prompts for admission without stalling the event loop: estimates inline, exact
 * counts inline for small prompts (with the per-string cache) and in a piscina worker pool for
 * large ones (js-tiktoken takes ~60 ms for 100 KB of text).
 */
import { Piscina } from 'piscina';
import type { CountJob } from './count-worker.ts';
import { charCounter, estimateCounter, exactCounter } from './counters.ts';
import type { EncodingName, TextCounter } from './counters.ts';
import { countAnthropicMessages, countEmbeddingInput, countOpenAIChat } from './prompt.ts';
import type { AnthropicPrompt, EmbeddingInput, OpenAIChatPrompt } from './types.ts';

/** Kinds of bodies counted. */
export type PromptKind = CountJob['kind'];

/** Options of {@link PromptCounter}. */
export interface PromptCounterOptions {
  /** Prompts with more characters than this are counted exactly in the pool. @default 32768 */
  readonly workerThresholdChars?: number;
  /** Worker threads. @default 2 */
  readonly poolSize?: number;
  /** Entries of each encoding's exact-count cache. @default 50000 */
  readonly cacheEntries?: number;
}

function countWith(kind: PromptKind, body: unknown, counter: TextCounter): number {
  if (kind === 'openai_chat') return countOpenAIChat(body as OpenAIChatPrompt, counter);
  if (kind === 'anthropic_messages') return countAnthropicMessages(body as AnthropicPrompt, counter);
  return countEmbeddingInput(body as EmbeddingInput, counter);
}

/** Prompt counting for the gateway; one per process. */
export class PromptCounter {
  readonly #threshold: number;
  readonly #poolSize: number;
  readonly #cacheEntries: number;
  #pool: Piscina | undefined;

  constructor(opts: PromptCounterOptions = {}) {
    this.#threshold = opts.workerThresholdChars ?? 32_768;
    this.#poolSize = opts.poolSize ?? 2;
    this.#cacheEntries = opts.cacheEntries ?? 50_000;
  }

  /**
   * Prompt tokens of a body. `estimate` (and any model without an encoding) is inline and O(fields);
   * `exact` is inline below the threshold and in the worker pool above it.
   * @param body the parsed chat/messages body, or the embeddings `input`.
   * @returns tokens. @throws only on a worker crash (a bug), never for odd body shapes.
   */
  async count(kind: PromptKind, body: unknown, opts: { encoding: EncodingName | null; mode: 'estimate' | 'exact' }): Promise<number> {
    if (opts.mode === 'estimate' || opts.encoding === null) return countWith(kind, body, estimateCounter(opts.encoding));
    if (countWith(kind, body, charCounter) <= this.#threshold) return countWith(kind, body, exactCounter(opts.encoding, this.#cacheEntries));
    return (await this.#workers().run({ kind, body, encoding: opts.encoding } satisfies CountJob)) as number;
  }

  #workers(): Piscina {
    if (this.#pool === undefined) {
      const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
      this.#pool = new Piscina({
        filename: new URL(`./count-worker.${ext}`, import.meta.url).href,
        minThreads: 0,
        maxThreads: this.#poolSize,
        idleTimeout: 30_000,
      });
    }
    return this.#pool;
  }

  /** Stops the worker pool (if it was started). */
  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = undefined;
    await pool?.destroy();
  }
}
