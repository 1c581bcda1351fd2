/**
 * What every provider adapter gives the gateway: usage extraction from a JSON reply and a stream
 * observer. No HTTP-framework types here.
 */
import type { SseEvent } from './sse.ts';

/** Tokens a provider reports for one request. The tenant is charged `input + output`. */
export interface TokenUsage {
  /** Prompt / input tokens, cache reads and writes included. */
  readonly input: number;
  /** Completion / output tokens. */
  readonly output: number;
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
