/**
 * Counts request prompts for admission without stalling the event loop: estimates inline; exact
 * counts look every text up in the exact-count cache first, count the few new ones inline, and
 * send them to a piscina worker pool when they add up to more than the threshold. Each request has
 * a byte-pair merge budget (`tokens.merge_budget_bytes`); pieces beyond it are charged their byte
 * length, an upper bound, so no request costs more than about budget × 1 µs of merging
 * (figures: `npm run bench:tokens`).
 */
import { Piscina } from 'piscina';
import type { CountJob, CountResult } from './count-worker.ts';
import type { EncodingName, TextCounter } from './encoding.ts';
import { estimateCounter } from './estimate.ts';
import { byteBound, exactCounter, mergeBudget } from './exact.ts';
import { countAnthropicMessages, countEmbeddingInput, countOpenAIChat } from './prompt.ts';
import type { AnthropicPrompt, EmbeddingInput, OpenAIChatPrompt } from './types.ts';

/** Kinds of bodies counted. */
export type PromptKind = 'openai_chat' | 'anthropic_messages' | 'embeddings';

/** Options of {@link PromptCounter}. */
export interface PromptCounterOptions {
  /**
   * An exact count whose uncached texts hold more characters than this runs in the worker pool;
   * up to this many characters are counted inline, on the event loop (worst case ~2 µs per
   * character, so the default blocks it for at most a few ms). @default 2048
   */
  readonly workerThresholdChars?: number;
  /**
   * UTF-8 bytes of pre-tokenizer pieces one request may byte-pair merge (pieces that are one token
   * need no merge and do not count); once spent, the rest is charged its byte length. @default 524288
   */
  readonly mergeBudgetBytes?: number;
  /** Most worker threads; threads start on demand. @default 2 */
  readonly poolSize?: number;
  /** Texts whose exact counts are cached per encoding (used by the first counter of the process). @default 50000 */
  readonly cacheEntries?: number;
  /** Milliseconds an idle worker thread lives. @default 30000 */
  readonly idleTimeoutMs?: number;
}

/** Counts a body of one kind with a text counter. */
function countPrompt(kind: PromptKind, body: unknown, counter: TextCounter): number {
  if (kind === 'openai_chat') return countOpenAIChat(body as OpenAIChatPrompt, counter);
  if (kind === 'anthropic_messages') return countAnthropicMessages(body as AnthropicPrompt, counter);
  return countEmbeddingInput(body as EmbeddingInput, counter);
}

/**
 * Worker file next to this one: `.ts` when running from source (tsx), `.js` once compiled to dist/.
 * A `.ts` worker needs tsx's loader: inherited from the process flags when it was started with it
 * (`node --import tsx`, the `tsx` CLI), else added as `--import tsx`.
 */
function workerFile(): { filename: string; execArgv: string[] } {
  const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
  const filename = new URL(`./count-worker.${ext}`, import.meta.url).href;
  const inherited = [...process.execArgv];
  const hasTsx = inherited.some((a) => a.includes('tsx'));
  return { filename, execArgv: ext === 'ts' && !hasTsx ? [...inherited, '--import', 'tsx'] : inherited };
}

/** Prompt counting for the gateway; one per process. */
export class PromptCounter {
  readonly #threshold: number;
  readonly #mergeBudgetBytes: number;
  readonly #poolSize: number;
  readonly #cacheEntries: number;
  readonly #idleTimeoutMs: number;
  #pool: Piscina | undefined;

  constructor(opts: PromptCounterOptions = {}) {
    this.#threshold = opts.workerThresholdChars ?? 2048;
    this.#mergeBudgetBytes = opts.mergeBudgetBytes ?? 524_288;
    this.#poolSize = opts.poolSize ?? 2;
    this.#cacheEntries = opts.cacheEntries ?? 50_000;
    this.#idleTimeoutMs = opts.idleTimeoutMs ?? 30_000;
  }

  /**
   * Prompt tokens of a body. `estimate` (and any model without an encoding) runs inline, one pass
   * over the text. `exact` looks each text up in the per-encoding cache and counts new texts inline
   * while they total ≤ `workerThresholdChars` characters; the new texts beyond that, and any text
   * longer than that, are counted in the worker pool. Counts are cached either way (texts longer
   * than the threshold in the worker threads' caches), so a chat's next turn only counts its new
   * message.
   * The request's merge budget is spent inline first, then in the worker; once spent, the texts
   * still to count are charged their byte length (≥ exact, not cached), inline, without a worker.
   * @param body the parsed chat/messages body, or the embeddings `input`.
   * @returns tokens. @throws only if a worker thread fails (a bug), never for odd body shapes.
   */
  async count(kind: PromptKind, body: unknown, opts: { encoding: EncodingName | null; mode: 'estimate' | 'exact' }): Promise<number> {
    if (opts.mode === 'estimate' || opts.encoding === null) return countPrompt(kind, body, estimateCounter(opts.encoding));
    const exact = exactCounter(opts.encoding, this.#cacheEntries);
    const threshold = this.#threshold;
    const budget = mergeBudget(this.#mergeBudgetBytes);
    // One walk: cached texts are looked up, new ones counted inline until they total more than the
    // threshold; from then on new texts are only collected, for the worker pool.
    const slots: number[] = [];
    const missing: { slot: number; text: string }[] = [];
    let newChars = 0;
    let total = countPrompt(kind, body, {
      name: exact.name,
      count(text) {
        // A text longer than the threshold goes to the worker unread: even hashing it for the cache
        // costs ~5-10 ms per MB on the event loop; the worker thread looks it up in its own cache.
        let n = text.length > threshold ? undefined : exact.cached(text);
        if (n === undefined && budget.spent) n = byteBound(text);
        if (n === undefined) {
          newChars += text.length;
          if (newChars > threshold) {
            missing.push({ slot: slots.length, text });
            n = 0;
          } else n = exact.countWithin(text, budget).tokens;
        }
        slots.push(n);
        return n;
      },
    });
    if (missing.length > 0) {
      const job: CountJob = { encoding: opts.encoding, texts: missing.map((m) => m.text), mergeBudgetBytes: budget.bytes };
      const result = (await this.#workers().run(job)) as CountResult;
      missing.forEach(({ slot, text }, i) => {
        const n = result.tokens[i];
        if (n === undefined) throw new Error(`count worker answered ${result.tokens.length} counts for ${missing.length} texts`);
        if (result.exact[i] === true && text.length <= threshold) exact.remember(text, n);
        slots[slot] = n;
      });
      // The same walk again, every text now known (the walk is deterministic: same calls, same order).
      let next = 0;
      total = countPrompt(kind, body, { name: exact.name, count: () => slots[next++] ?? 0 });
    }
    return total;
  }

  #workers(): Piscina {
    if (this.#pool === undefined) {
      this.#pool = new Piscina({ ...workerFile(), minThreads: 0, maxThreads: this.#poolSize, idleTimeout: this.#idleTimeoutMs });
    }
    return this.#pool;
  }

  /** Whether the worker pool has been started (it starts on the first large exact count). */
  get poolStarted(): boolean {
    return this.#pool !== undefined;
  }

  /** Destroys the worker pool, if it was started; later large counts start a new one. */
  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = undefined;
    await pool?.destroy();
  }
}
