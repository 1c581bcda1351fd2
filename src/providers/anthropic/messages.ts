/**
 * Anthropic `POST /v1/messages`: the request fields the gateway needs and usage from JSON replies
 * and SSE streams.
 * Source: Anthropic API reference, "Messages" and "Streaming Messages" (message_start carries the
 * input usage; message_delta carries the cumulative output_tokens and may repeat input fields).
 */
import { GatewayError } from '../../errors.ts';
import { DEFAULT_ITEM_LIMITS, atMostItems, bodyObject, optionalBoolean, optionalPositiveInt, requiredObjectArray, requiredString } from '../fields.ts';
import type { ItemLimits } from '../fields.ts';
import type { SseEvent } from '../sse.ts';
import type { StreamObserver, TokenUsage } from '../types.ts';
import { detailCount, withDetails } from '../types.ts';

/** What admission needs from a messages request. */
export interface MessagesRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
  readonly stream: boolean;
  /** `max_tokens` (required by Anthropic), in tokens. */
  readonly maxOutput: number;
}

/**
 * Validates the fields the gateway relies on.
 * @param limits most messages and tool definitions accepted.
 * @throws GatewayError `invalid_request` (400) naming the field; `max_tokens` is required, as Anthropic requires it.
 */
export function parseMessagesRequest(raw: unknown, limits: ItemLimits = DEFAULT_ITEM_LIMITS): MessagesRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  atMostItems(body, 'messages', limits.messages, 'server.max_messages');
  atMostItems(body, 'tools', limits.tools, 'server.max_tools');
  const messages = requiredObjectArray(body, 'messages');
  messages.forEach((m, i) => {
    if (typeof m.role !== 'string') {
      throw new GatewayError('invalid_request', `messages.${i}.role: Field required`, `messages.${i}.role`);
    }
  });
  const maxOutput = optionalPositiveInt(body, 'max_tokens');
  if (maxOutput === undefined) throw new GatewayError('invalid_request', 'max_tokens: Field required', 'max_tokens');
  return { body, model, stream: optionalBoolean(body, 'stream'), maxOutput };
}

/** Largest-of and last-of merge of Anthropic usage objects, per the rules of the streaming docs. */
class UsageAccumulator {
  #input = 0;
  #cacheCreation = 0;
  #cacheRead = 0;
  #output = 0;
  #seen = false;

  /** Input fields take the largest value seen; output is the last cumulative value (never summed). */
  merge(usage: unknown): void {
    if (usage === null || typeof usage !== 'object') return;
    const u = usage as Record<string, unknown>;
    const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
    this.#input = Math.max(this.#input, num(u.input_tokens));
    this.#cacheCreation = Math.max(this.#cacheCreation, num(u.cache_creation_input_tokens));
    this.#cacheRead = Math.max(this.#cacheRead, num(u.cache_read_input_tokens));
    if (typeof u.output_tokens === 'number') this.#output = u.output_tokens;
    this.#seen = true;
  }

  get usage(): TokenUsage | undefined {
    if (!this.#seen) return undefined;
    return withDetails(this.#input + this.#cacheCreation + this.#cacheRead, this.#output, { cacheRead: detailCount(this.#cacheRead), cacheWrite: detailCount(this.#cacheCreation) });
  }
}

/** Usage from the `usage` object of a non-stream Message reply: input, cache creation and cache read tokens count as input. */
export function anthropicUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const acc = new UsageAccumulator();
  acc.merge(usage);
  return acc.usage;
}

/**
 * Observes an Anthropic SSE stream: usage from `message_start` and every `message_delta`
 * (the final usage is known once the last `message_delta` passed); every event is forwarded.
 */
export class AnthropicStreamObserver implements StreamObserver {
  readonly #acc = new UsageAccumulator();
  #final = false;
  #delivered = 0;

  onEvent(event: SseEvent): boolean {
    switch (event.event) {
      case 'content_block_delta':
        this.#delivered++;
        break;
      case 'message_start':
        this.#merge(event.data, (o) => (o.message as Record<string, unknown> | undefined)?.usage);
        break;
      case 'message_delta':
        this.#merge(event.data, (o) => o.usage);
        this.#final = true;
        break;
      default:
        break;
    }
    return true;
  }

  #merge(data: string, pick: (o: Record<string, unknown>) => unknown): void {
    try {
      this.#acc.merge(pick(JSON.parse(data) as Record<string, unknown>));
    } catch {
      // Malformed event: forwarded untouched; settlement falls back to delivered tokens.
    }
  }

  usage(): TokenUsage | undefined {
    return this.#final ? this.#acc.usage : undefined;
  }

  get deliveredOutput(): number {
    return this.#delivered;
  }
}
