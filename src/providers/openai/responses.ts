/**
 * OpenAI `POST /v1/responses` (the Responses API): the request fields the gateway needs, usage from
 * a Response object and from its SSE stream.
 * Source: OpenAI API reference, "Responses" (https://platform.openai.com/docs/api-reference/responses),
 * as typed by the official `openai` SDK 6.49 (`ResponseCreateParamsBase`, `Response`, `ResponseUsage`,
 * `ResponseStreamEvent`):
 * - `input` is a string or a list of items (messages with `input_text` / `input_image` / `input_file`
 *   parts, `function_call`, `function_call_output`, `reasoning`, `item_reference`, ...);
 * - `max_output_tokens` caps visible output and reasoning tokens together (no cap when absent);
 * - context may live at the provider: `previous_response_id`, `conversation`, a stored `prompt`,
 *   files and images given by `file_id`, `item_reference` items — the gateway cannot count those;
 * - `usage` is `{input_tokens, input_tokens_details.cached_tokens, output_tokens,
 *   output_tokens_details.reasoning_tokens, total_tokens}`; `output_tokens` includes the reasoning
 *   tokens. A stream reports it in the terminal event (`response.completed`, `response.incomplete`
 *   or `response.failed`), whose `response` is the whole Response object; there is no `[DONE]`.
 * - `background: true` answers at once with `status: "queued"` and `usage: null`; the client polls
 *   `GET /v1/responses/{id}` until a terminal status, which carries the usage.
 */
import { GatewayError } from '../../errors.ts';
import { DEFAULT_ITEM_LIMITS, atMostItems, bodyObject, optionalBoolean, optionalPositiveInt, requiredString } from '../fields.ts';
import type { ItemLimits } from '../fields.ts';
import type { SseEvent } from '../sse.ts';
import type { StreamObserver, TokenUsage } from '../types.ts';
import { detailCount, withDetails } from '../types.ts';

/** Statuses after which a Response changes no more (its usage is final). */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set(['completed', 'incomplete', 'failed', 'cancelled']);

/**
 * What a response id may look like: the providers' ids are `resp_` and letters, digits, `_` or `-`
 * (OpenAI's and Azure's). Anything else (`..`, `/`, control characters, unicode, more than 256
 * characters) names no response, and would otherwise reach the provider's URL path with the
 * deployment's key (`GET /v1/responses/..` is `GET /v1/` to a normalising front end).
 */
const RESPONSE_ID = /^[A-Za-z0-9_-]{1,256}$/;

/**
 * Checks a response id from a URL path or `previous_response_id`.
 * @param param the field named in the error. @throws GatewayError `invalid_request` (400) when `id` is not one of {@link RESPONSE_ID}.
 */
export function checkResponseId(id: string, param: string): string {
  if (!RESPONSE_ID.test(id)) {
    throw new GatewayError('invalid_request', `"${param}" is not a response id: ids are 1 to 256 letters, digits, "_" or "-".`, param);
  }
  return id;
}

/** What admission needs from a Responses request. */
export interface ResponsesRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
  readonly stream: boolean;
  /** `background: true`: the provider answers at once and the client polls for the result. */
  readonly background: boolean;
  /** `max_output_tokens`, in tokens; undefined when absent. */
  readonly maxOutput: number | undefined;
  /** `previous_response_id`, when given. */
  readonly previousResponseId: string | undefined;
}

/**
 * Validates the fields the gateway relies on: `model`; `input` a string or an array of objects (at
 * most `limits.messages` items); `tools` at most `limits.tools`; `max_output_tokens`, `stream`,
 * `background`, `previous_response_id` of their types.
 * @throws GatewayError `invalid_request` (400) naming the field.
 */
export function parseResponsesRequest(raw: unknown, limits: ItemLimits = DEFAULT_ITEM_LIMITS): ResponsesRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  const input = body.input;
  if (input !== undefined && input !== null && typeof input !== 'string') {
    if (!Array.isArray(input)) throw new GatewayError('invalid_request', '"input" must be a string or an array of input items.', 'input');
    atMostItems(body, 'input', limits.messages, 'server.max_messages');
    input.forEach((item: unknown, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new GatewayError('invalid_request', `"input[${i}]" must be an object.`, `input[${i}]`);
    });
  }
  atMostItems(body, 'tools', limits.tools, 'server.max_tools');
  const previous = body.previous_response_id;
  if (previous !== undefined && previous !== null && (typeof previous !== 'string' || previous === '')) {
    throw new GatewayError('invalid_request', '"previous_response_id" must be a non-empty string.', 'previous_response_id');
  }
  if (typeof previous === 'string') checkResponseId(previous, 'previous_response_id');
  return {
    body,
    model,
    stream: optionalBoolean(body, 'stream'),
    background: optionalBoolean(body, 'background'),
    maxOutput: optionalPositiveInt(body, 'max_output_tokens'),
    previousResponseId: typeof previous === 'string' ? previous : undefined,
  };
}

/** Usage from a Responses `usage` object (`input_tokens`, `output_tokens`, reasoning included); undefined when absent. */
export function responsesUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const u = usage as Record<string, unknown>;
  const input = u.input_tokens;
  const output = u.output_tokens ?? 0;
  if (typeof input !== 'number' || typeof output !== 'number') return undefined;
  const inDetails = (u.input_tokens_details ?? {}) as Record<string, unknown>;
  const outDetails = (u.output_tokens_details ?? {}) as Record<string, unknown>;
  return withDetails(input, output, { cacheRead: detailCount(inDetails?.cached_tokens), reasoning: detailCount(outDetails?.reasoning_tokens) });
}

/** What a Response object (or a stream's last `response`) says of itself. */
export interface ResponseFacts {
  readonly id: string | undefined;
  readonly status: string | undefined;
  readonly usage: TokenUsage | undefined;
}

/** Id, status and usage of a Response object (parsed JSON). */
export function responseFacts(response: unknown): ResponseFacts {
  if (response === null || typeof response !== 'object') return { id: undefined, status: undefined, usage: undefined };
  const r = response as Record<string, unknown>;
  return {
    id: typeof r.id === 'string' ? r.id : undefined,
    status: typeof r.status === 'string' ? r.status : undefined,
    usage: responsesUsage(r.usage),
  };
}

/** Id, status and usage of a Response object's JSON text (all undefined when it is not JSON). */
export function responseFactsOfText(text: string): ResponseFacts {
  try {
    return responseFacts(JSON.parse(text));
  } catch {
    return { id: undefined, status: undefined, usage: undefined };
  }
}

/** Delta events that carry one piece of generated output each. */
const OUTPUT_DELTA = /^response\.(output_text|refusal|function_call_arguments|reasoning_text|reasoning_summary_text|custom_tool_call_input|code_interpreter_call_code)\.delta$/;
/** Events whose `response` is final: its usage settles the request. */
const TERMINAL_EVENT = /^response\.(completed|incomplete|failed)$/;

/**
 * Observes a Responses SSE stream: every event is passed on; records the response id (from
 * `response.created`), the usage of the terminal event and the output deltas delivered (one token
 * each, for a stream cut before its end).
 */
export class ResponsesStreamObserver implements StreamObserver {
  #usage: TokenUsage | undefined;
  #delivered = 0;
  #id: string | undefined;
  #status: string | undefined;

  onEvent(event: SseEvent): boolean {
    const type = event.event !== '' ? event.event : typeOfData(event.data);
    if (type === undefined) return true;
    if (OUTPUT_DELTA.test(type)) {
      if (!event.data.includes('"delta":""')) this.#delivered++;
      return true;
    }
    if (type === 'response.created' || type === 'response.queued' || TERMINAL_EVENT.test(type)) {
      try {
        const data = JSON.parse(event.data) as { response?: unknown };
        const facts = responseFacts(data.response);
        if (facts.id !== undefined) this.#id = facts.id;
        if (facts.status !== undefined) this.#status = facts.status;
        if (facts.usage !== undefined && TERMINAL_EVENT.test(type)) this.#usage = facts.usage;
      } catch {
        // Not JSON: passed on; usage stays unknown and settlement falls back to delivered tokens.
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

  /** The response id, once `response.created` passed. */
  get responseId(): string | undefined {
    return this.#id;
  }

  /** The last status the stream reported. */
  get status(): string | undefined {
    return this.#status;
  }
}

/** The `type` of an event's JSON data, read without parsing it all (providers put it first). */
function typeOfData(data: string): string | undefined {
  const m = /^\{\s*"type"\s*:\s*"([a-z_.]+)"/.exec(data);
  return m?.[1];
}
