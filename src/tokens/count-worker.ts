/**
 * Piscina worker: exact prompt counts of large bodies, off the gateway's event loop.
 */
import type { EncodingName } from './counters.ts';
import { exactCounter } from './counters.ts';
import { countAnthropicMessages, countEmbeddingInput, countOpenAIChat } from './prompt.ts';
import type { AnthropicPrompt, EmbeddingInput, OpenAIChatPrompt } from './types.ts';

/** A counting job: the body kind, the parsed body and the encoding. */
export interface CountJob {
  readonly kind: 'openai_chat' | 'anthropic_messages' | 'embeddings';
  readonly body: unknown;
  readonly encoding: EncodingName;
}

/** Counts one job exactly; returns tokens. */
export default function count(job: CountJob): number {
  const counter = exactCounter(job.encoding);
  if (job.kind === 'openai_chat') return countOpenAIChat(job.body as OpenAIChatPrompt, counter);
  if (job.kind === 'anthropic_messages') return countAnthropicMessages(job.body as AnthropicPrompt, counter);
  return countEmbeddingInput(job.body as EmbeddingInput, counter);
}
