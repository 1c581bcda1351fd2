/**
 * OpenAI `POST /v1/chat/completions`: the request fields the gateway needs, the body sent upstream,
 * and usage from JSON replies and SSE streams.
 * Source: OpenAI API reference, "Create chat completion" and "The chat completion chunk object".
 */
import { GatewayError } from '../../errors.ts';
import { DEFAULT_ITEM_LIMITS, atMostItems, bodyObject, optionalBoolean, optionalPositiveInt, requiredObjectArray, requiredString } from '../fields.ts';
import type { ItemLimits } from '../fields.ts';
import type { SseEvent } from '../sse.ts';
import type { StreamObserver, TokenUsage } from '../types.ts';
import { detailCount, withDetails } from '../types.ts';

/** What admission needs from a chat completion request. */
export interface ChatRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
  readonly stream: boolean;
  /** The client asked for the usage chunk (`stream_options.include_usage: true`). */
  readonly clientWantsUsage: boolean;
  /** `max_completion_tokens` ?? `max_tokens`, in tokens; undefined when neither is set. */
  readonly maxOutput: number | undefined;
  /** Choices requested (`n`); output is reserved for each. */
  readonly choices: number;
}

/**
 * Whether an OpenAI request's client asked for the usage chunk (`stream_options.include_usage`).
 * @throws GatewayError `invalid_request` (param `stream_options`) when it is not an object, or
 *   `include_usage` is not a boolean.
 */
export function wantsUsage(body: Record<string, unknown>): boolean {
  const options = body.stream_options;
  if (options === undefined || options === null) return false;
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new GatewayError('invalid_request', '"stream_options" must be an object.', 'stream_options');
  }
  return optionalBoolean(options as Record<string, unknown>, 'include_usage');
}

/**
 * Validates the fields the gateway relies on.
 * @param limits most messages and tool definitions (`tools`, `functions`) accepted.
 * @throws GatewayError `invalid_request` (400) naming the field.
 */
export function parseChatRequest(raw: unknown, limits: ItemLimits = DEFAULT_ITEM_LIMITS): ChatRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  atMostItems(body, 'messages', limits.messages, 'server.max_messages');
  atMostItems(body, 'tools', limits.tools, 'server.max_tools');
  atMostItems(body, 'functions', limits.tools, 'server.max_tools');
  const messages = requiredObjectArray(body, 'messages');
  messages.forEach((m, i) => {
    if (typeof m.role !== 'string') {
      throw new GatewayError('invalid_request', `"messages[${i}].role" is required and must be a string.`, `messages[${i}].role`);
    }
  });
  const maxTokens = optionalPositiveInt(body, 'max_tokens');
  const maxCompletion = optionalPositiveInt(body, 'max_completion_tokens');
  const choices = optionalPositiveInt(body, 'n', 128) ?? 1;
  const stream = optionalBoolean(body, 'stream');
  const clientWantsUsage = wantsUsage(body);
  return { body, model, stream, clientWantsUsage, maxOutput: maxCompletion ?? maxTokens, choices };
}

/**
 * The body to send upstream: the client's, with the deployment's model name and, for streams,
 * `stream_options.include_usage: true` so the provider reports usage for settlement.
 */
export function upstreamChatBody(request: ChatRequest, upstreamModel: string): Record<string, unknown> {
  const body: Record<string, unknown> = { ...request.body, model: upstreamModel };
  if (request.stream) {
    const options = (request.body.stream_options ?? {}) as Record<string, unknown>;
    body.stream_options = { ...options, include_usage: true };
  }
  return body;
}

/**
 * Usage from an OpenAI `usage` object (`prompt_tokens`, `completion_tokens`, `total_tokens`, and
 * the details `prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`,
 * which are parts of them); undefined when absent. The output is `completion_tokens`, or
 * `total_tokens − prompt_tokens` when that is more: Gemini's OpenAI compatibility leaves thinking
 * tokens out of `completion_tokens` but bills them and counts them in `total_tokens` (OpenAI counts
 * reasoning inside `completion_tokens`, where the two agree).
 */
export function openAIUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const u = usage as Record<string, unknown>;
  const input = u.prompt_tokens;
  const output = u.completion_tokens ?? 0;
  if (typeof input !== 'number' || typeof output !== 'number') return undefined;
  const total = u.total_tokens;
  const billed = typeof total === 'number' && Number.isFinite(total) && total - input > output ? total - input : output;
  const inDetails = (u.prompt_tokens_details ?? {}) as Record<string, unknown>;
  const outDetails = (u.completion_tokens_details ?? {}) as Record<string, unknown>;
  // Thinking tokens Gemini leaves out of completion_tokens are reasoning too.
  const reasoning = detailCount(Math.max(detailCount(outDetails?.reasoning_tokens) ?? 0, billed - output));
  return withDetails(input, billed, { cacheRead: detailCount(inDetails?.cached_tokens), reasoning });
}

/**
 * Observes an OpenAI chat SSE stream: records the usage chunk (the last chunk, `choices: []`, sent
 * because the gateway asked for `include_usage`) and hides it from clients that did not ask for it.
 */
export class OpenAIChatStreamObserver implements StreamObserver {
  #usage: TokenUsage | undefined;
  #delivered = 0;
  readonly #forwardUsage: boolean;

  /** @param clientWantsUsage forward the usage chunk to the client. */
  constructor(clientWantsUsage: boolean) {
    this.#forwardUsage = clientWantsUsage;
  }

  onEvent(event: SseEvent): boolean {
    const data = event.data;
    if (data.includes('"usage":{')) {
      try {
        const chunk = JSON.parse(data) as { usage?: unknown; choices?: unknown };
        const usage = openAIUsage(chunk.usage);
        if (usage !== undefined) this.#usage = usage;
        if (Array.isArray(chunk.choices) && chunk.choices.length === 0) return this.#forwardUsage;
      } catch {
        // Not JSON: forward as is; usage stays unknown and settlement falls back to delivered tokens.
      }
    }
    if (this.delivers(data)) this.#delivered++;
    return true;
  }

  /** Whether an event carries one delivered output token: chat's non-empty `content` or tool `arguments`. */
  protected delivers(data: string): boolean {
    return (data.includes('"content":"') && !data.includes('"content":""')) || (data.includes('"arguments":"') && !data.includes('"arguments":""'));
  }

  usage(): TokenUsage | undefined {
    return this.#usage;
  }

  get deliveredOutput(): number {
    return this.#delivered;
  }
}
