/**
 * What every provider adapter gives the gateway: usage extraction from a JSON reply and a stream
 * observer. No HTTP-framework types here.
 */
import type { SseEvent } from './sse.ts';

/**
 * Tokens a provider reports for one request. The tenant's tokens limits are charged `input +
 * output` (weighted per limit by the parts below, see `TokenWeights`); its cost limits the price of
 * each part (`src/pricing/prices.ts`).
 */
export interface TokenUsage {
  /** Prompt / input tokens, cache reads and writes included. */
  readonly input: number;
  /** Completion / output tokens, reasoning included. */
  readonly output: number;
  /** Of `input`: tokens read from the prompt cache (OpenAI `cached_tokens`, Anthropic `cache_read_input_tokens`). */
  readonly cacheRead?: number;
  /** Of `input`: tokens written to the prompt cache (Anthropic `cache_creation_input_tokens`, Bedrock `cacheWriteInputTokens`). */
  readonly cacheWrite?: number;
  /** Of `output`: reasoning tokens (OpenAI `reasoning_tokens`). */
  readonly reasoning?: number;
}

/** A count of `usage` details: a finite number > 0, else undefined (absent, 0, or malformed). */
export function detailCount(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : undefined;
}

/** `usage` with the details that are set (undefined ones left out, for `exactOptionalPropertyTypes`). */
export function withDetails(input: number, output: number, details: { cacheRead?: number | undefined; cacheWrite?: number | undefined; reasoning?: number | undefined }): TokenUsage {
  return {
    input,
    output,
    ...(details.cacheRead === undefined ? {} : { cacheRead: details.cacheRead }),
    ...(details.cacheWrite === undefined ? {} : { cacheWrite: details.cacheWrite }),
    ...(details.reasoning === undefined ? {} : { reasoning: details.reasoning }),
  };
}

/** Watches a provider's SSE stream event by event. */
export interface StreamObserver {
  /** Inspects one event; returns false when the event must not reach the client. */
  onEvent(event: SseEvent): boolean;
  /** The usage the provider reported, or undefined when the stream has not reported it (yet). */
  usage(): TokenUsage | undefined;
  /** Output tokens delivered so far, counted from content events (one per event). */
  readonly deliveredOutput: number;
}
