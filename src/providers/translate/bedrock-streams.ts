/**
 * Streaming translation of a Bedrock ConverseStream, event by event, into Anthropic Messages SSE
 * events, and through {@link AnthropicToOpenAIStream} into OpenAI chat completion chunks.
 *
 * The input events are the decoded event-stream messages (see `src/providers/bedrock/event-stream.ts`):
 * `event` is the `:event-type` header (`messageStart`, `contentBlockStart`, `contentBlockDelta`,
 * `contentBlockStop`, `messageStop`, `metadata`) and `data` the JSON payload, as the Amazon Bedrock
 * API reference defines them (`API_runtime_ConverseStreamOutput` and its event types); an exception
 * message (`throttlingException`, `validationException`, ...) arrives as event `error` with data
 * `{"exception": <type>, "message": …}`.
 *
 * Anthropic output ("Streaming Messages"):
 * - `messageStart` → `message_start` (usage unknown yet: zeros; the final `message_delta` carries it);
 * - `contentBlockStart` with `start.toolUse` → `content_block_start` of a `tool_use` block;
 * - `contentBlockDelta`: `delta.text` → `text_delta` (a text block is started on its first delta,
 *   since Converse sends no start for text), `delta.toolUse.input` → `input_json_delta`,
 *   `delta.reasoningContent` `text` / `signature` / `redactedContent` → a thinking block's
 *   `thinking_delta` / `signature_delta`, or a `redacted_thinking` block;
 * - `contentBlockStop` → `content_block_stop`;
 * - `messageStop` → remembered (stop reason);
 * - `metadata` → `message_delta` (stop reason, usage with input, cache and output tokens) and `message_stop`;
 * - an exception → `event: error` (`rate_limit_error`, `overloaded_error`, `invalid_request_error`
 *   or `api_error`) and nothing after.
 */
import type { SseEvent } from '../sse.ts';
import { anthropicStopReasonOf, anthropicUsageOfBedrock } from './anthropic-to-bedrock.ts';
import { isObject, num, type JsonObject } from './openai-to-anthropic.ts';
import { AnthropicToOpenAIStream } from './streams.ts';

function parse(data: string): JsonObject | undefined {
  try {
    const v: unknown = JSON.parse(data);
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

function sse(event: string, data: JsonObject): SseEvent {
  const json = JSON.stringify(data);
  return { raw: `event: ${event}\ndata: ${json}\n\n`, event, data: json };
}

/** Anthropic error type of a Bedrock exception type (ConverseStreamOutput's exception members). */
export function anthropicErrorTypeOfBedrock(exception: string): string {
  switch (exception.replace(/^./, (c) => c.toLowerCase())) {
    case 'throttlingException':
    case 'modelNotReadyException':
      return 'rate_limit_error';
    case 'serviceUnavailableException':
      return 'overloaded_error';
    case 'validationException':
      return 'invalid_request_error';
    case 'accessDeniedException':
      return 'permission_error';
    case 'resourceNotFoundException':
      return 'not_found_error';
    default:
      return 'api_error';
  }
}

/** Bedrock ConverseStream events → Anthropic SSE events (see the module comment). */
export class BedrockToAnthropicStream {
  readonly #model: string;
  readonly #id: string;
  /** Converse block index → the kind of Anthropic block open for it. */
  readonly #open = new Map<number, 'text' | 'tool_use' | 'thinking'>();
  #started = false;
  #stopReason: unknown = undefined;
  #ended = false;

  /** @param opts.model the model name the client sees; `id`: the message id. */
  constructor(opts: { model: string; id?: string }) {
    this.#model = opts.model;
    this.#id = opts.id ?? `msg_bdrk_${Date.now().toString(36)}`;
  }

  #start(): SseEvent[] {
    if (this.#started) return [];
    this.#started = true;
    const usage = { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 };
    return [sse('message_start', { type: 'message_start', message: { id: this.#id, type: 'message', role: 'assistant', model: this.#model, content: [], stop_reason: null, stop_sequence: null, usage } })];
  }

  /** Opens block `index` as `kind` when it is not open yet. */
  #ensure(index: number, kind: 'text' | 'thinking'): SseEvent[] {
    if (this.#open.has(index)) return [];
    this.#open.set(index, kind);
    const block = kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '' };
    return [sse('content_block_start', { type: 'content_block_start', index, content_block: block })];
  }

  #finish(usage: unknown): SseEvent[] {
    this.#ended = true;
    const out = this.#start();
    for (const index of this.#open.keys()) out.push(sse('content_block_stop', { type: 'content_block_stop', index }));
    this.#open.clear();
    out.push(sse('message_delta', { type: 'message_delta', delta: { stop_reason: anthropicStopReasonOf(this.#stopReason), stop_sequence: null }, usage: anthropicUsageOfBedrock(usage) }));
    out.push(sse('message_stop', { type: 'message_stop' }));
    return out;
  }

  /** Translates one Bedrock event into Anthropic events (possibly none). */
  events(event: SseEvent): SseEvent[] {
    if (this.#ended) return [];
    const data = parse(event.data);
    if (data === undefined) return [];
    switch (event.event) {
      case 'messageStart':
        return this.#start();
      case 'contentBlockStart': {
        const index = num(data.contentBlockIndex);
        const start = isObject(data.start) ? data.start : {};
        if (!isObject(start.toolUse)) return this.#start();
        this.#open.set(index, 'tool_use');
        const use = start.toolUse;
        return [...this.#start(), sse('content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: use.toolUseId, name: use.name, input: {} } })];
      }
      case 'contentBlockDelta': {
        const index = num(data.contentBlockIndex);
        const delta = isObject(data.delta) ? data.delta : {};
        const out = this.#start();
        if (typeof delta.text === 'string') {
          out.push(...this.#ensure(index, 'text'), sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: delta.text } }));
        } else if (isObject(delta.toolUse) && typeof delta.toolUse.input === 'string' && this.#open.get(index) === 'tool_use') {
          out.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: delta.toolUse.input } }));
        } else if (isObject(delta.reasoningContent)) {
          const r = delta.reasoningContent;
          if (typeof r.redactedContent === 'string') {
            this.#open.set(index, 'thinking');
            out.push(sse('content_block_start', { type: 'content_block_start', index, content_block: { type: 'redacted_thinking', data: r.redactedContent } }));
          } else {
            out.push(...this.#ensure(index, 'thinking'));
            if (typeof r.text === 'string') out.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: r.text } }));
            if (typeof r.signature === 'string') out.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: r.signature } }));
          }
        }
        return out;
      }
      case 'contentBlockStop': {
        const index = num(data.contentBlockIndex);
        if (!this.#open.delete(index)) return [];
        return [sse('content_block_stop', { type: 'content_block_stop', index })];
      }
      case 'messageStop':
        this.#stopReason = data.stopReason;
        return this.#start();
      case 'metadata':
        return this.#finish(data.usage);
      case 'error': {
        this.#ended = true;
        const exception = typeof data.exception === 'string' ? data.exception : 'internalServerException';
        const message = typeof data.message === 'string' ? data.message : 'The upstream provider reported an error mid-stream.';
        return [sse('error', { type: 'error', error: { type: anthropicErrorTypeOfBedrock(exception), message } })];
      }
      default:
        return [];
    }
  }

  /** The Anthropic SSE text for one Bedrock event ('' for none). */
  push(event: SseEvent): string {
    return this.events(event)
      .map((e) => e.raw)
      .join('');
  }

  /**
   * Events that close a stream the upstream ended: after `messageStop` without `metadata`, the
   * `message_delta` (no usage known: zeros) and `message_stop`; otherwise none (a stream cut
   * before its end stays cut).
   */
  endEvents(): SseEvent[] {
    if (this.#ended || this.#stopReason === undefined) return [];
    return this.#finish(undefined);
  }

  /** The Anthropic SSE text that closes the stream (see {@link endEvents}). */
  end(): string {
    return this.endEvents()
      .map((e) => e.raw)
      .join('');
  }
}

/** Bedrock ConverseStream events → OpenAI chat completion chunks, through the Anthropic events ({@link AnthropicToOpenAIStream}). */
export class BedrockToOpenAIStream {
  readonly #bedrock: BedrockToAnthropicStream;
  readonly #openai: AnthropicToOpenAIStream;

  /** @param opts.model the model name the client sees; `includeUsage`: send the usage chunk (the client asked for it). */
  constructor(opts: { model: string; includeUsage: boolean }) {
    this.#bedrock = new BedrockToAnthropicStream({ model: opts.model, id: `chatcmpl-bdrk${Date.now().toString(36)}` });
    this.#openai = new AnthropicToOpenAIStream({ model: opts.model, includeUsage: opts.includeUsage });
  }

  /** The OpenAI SSE text for one Bedrock event ('' for none). */
  push(event: SseEvent): string {
    return this.#bedrock
      .events(event)
      .map((e) => this.#openai.push(e))
      .join('');
  }

  /** The OpenAI SSE text that closes the stream. */
  end(): string {
    return (
      this.#bedrock
        .endEvents()
        .map((e) => this.#openai.push(e))
        .join('') + this.#openai.end()
    );
  }
}
