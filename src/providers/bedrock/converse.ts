/**
 * AWS Bedrock `Converse` and `ConverseStream`: the request path, usage from a JSON reply and from
 * the stream's `metadata` event.
 * Source: Amazon Bedrock API reference, `API_runtime_Converse` (`POST /model/{modelId}/converse`),
 * `API_runtime_ConverseStream` (`POST /model/{modelId}/converse-stream`, an
 * `application/vnd.amazon.eventstream` reply), `API_runtime_TokenUsage` (`inputTokens`,
 * `outputTokens`, `totalTokens`, `cacheReadInputTokens`, `cacheWriteInputTokens`; input excludes
 * the cache tokens, total includes them) and `API_runtime_ConverseStreamMetadataEvent`.
 */
import type { SseEvent } from '../sse.ts';
import type { StreamObserver, TokenUsage } from '../types.ts';
import { detailCount, withDetails } from '../types.ts';

/** Content type of a ConverseStream reply (the AWS event-stream encoding). */
export const EVENT_STREAM_CONTENT_TYPE = 'application/vnd.amazon.eventstream';

/** RFC 3986 percent-encoding of a path label, as AWS SDKs encode `{modelId}` (also `!'()*`). */
function encodeLabel(label: string): string {
  return encodeURIComponent(label).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * The path of a Converse call. @param modelId a model id, inference profile id or ARN
 * (e.g. `anthropic.claude-3-5-haiku-20241022-v1:0`); @param stream ConverseStream when true.
 */
export function conversePath(modelId: string, stream: boolean): string {
  return `/model/${encodeLabel(modelId)}/${stream ? 'converse-stream' : 'converse'}`;
}

/** Usage from a Converse `usage` object: input = `inputTokens` + cache reads + cache writes; undefined when absent. */
export function bedrockUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const u = usage as Record<string, unknown>;
  const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  if (typeof u.inputTokens !== 'number' || typeof u.outputTokens !== 'number') return undefined;
  return withDetails(n(u.inputTokens) + n(u.cacheReadInputTokens) + n(u.cacheWriteInputTokens), n(u.outputTokens), { cacheRead: detailCount(u.cacheReadInputTokens), cacheWrite: detailCount(u.cacheWriteInputTokens) });
}

/**
 * Observes a decoded ConverseStream (one event per event-stream message: `event` is its
 * `:event-type`, `data` its JSON payload): usage from `metadata`, delivered output counted from
 * `contentBlockDelta` events. Every event goes on to the translator.
 */
export class BedrockStreamObserver implements StreamObserver {
  #usage: TokenUsage | undefined;
  #delivered = 0;

  onEvent(event: SseEvent): boolean {
    if (event.event === 'contentBlockDelta') this.#delivered++;
    else if (event.event === 'metadata') {
      try {
        this.#usage = bedrockUsage((JSON.parse(event.data) as { usage?: unknown }).usage) ?? this.#usage;
      } catch {
        // Malformed payload: settlement falls back to the delivered tokens.
      }
    }
    return true;
  }

  usage(): TokenUsage | undefined {
    return this.#usage;
  }

  get deliveredOutput(): number {
    return this.#delivered;
  }
}
