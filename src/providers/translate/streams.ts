/**
 * Streaming translation, event by event: an Anthropic Messages SSE stream rewritten as OpenAI
 * `chat.completion.chunk` events, and the reverse. Each class takes the upstream's events (as
 * {@link SseSplitter} yields them), returns the text to write to the client, and keeps the usage
 * the upstream reported for settlement.
 *
 * Formats followed:
 * - Anthropic "Streaming Messages" (https://docs.anthropic.com/en/docs/build-with-claude/streaming):
 *   `message_start` (a Message with empty content and usage.input_tokens), per block
 *   `content_block_start` / `content_block_delta` (`text_delta` with `text`, `input_json_delta` with
 *   `partial_json`) / `content_block_stop`, one or more `message_delta` (`delta.stop_reason`,
 *   `delta.stop_sequence`, cumulative `usage.output_tokens`, possibly the input fields again),
 *   `message_stop`; `ping` anywhere; `error` (`{type:'error', error:{type, message}}`). Each event is
 *   `event: <type>\ndata: <json>\n\n`.
 * - OpenAI "The chat completion chunk object" (https://platform.openai.com/docs/api-reference/chat-streaming):
 *   `data: <chunk>\n\n` with `object: 'chat.completion.chunk'`, `choices[0].delta` (`role`, `content`,
 *   `tool_calls[]` with `index`, and on a call's first delta `id`, `type: 'function'`,
 *   `function.name`, then `function.arguments` fragments), `finish_reason` on the last choice chunk;
 *   with `stream_options.include_usage` every chunk has `usage: null` and one more chunk with
 *   `choices: []` and the usage precedes `data: [DONE]`. A mid-stream error is `data: {"error":{…}}`.
 */
import type { SseEvent } from '../sse.ts';
import type { TokenUsage } from '../types.ts';
import { anthropicInputTokens, finishReasonOf, openAIUsageOf } from './anthropic-to-openai.ts';
import { absent, anthropicUsageOf, isObject, num, stopReasonOf, type JsonObject } from './openai-to-anthropic.ts';

function parse(data: string): JsonObject | undefined {
  try {
    const v: unknown = JSON.parse(data);
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** OpenAI `error.type` for an Anthropic error type: 4xx kinds → invalid_request_error, the rest → server_error. */
function openAIErrorType(anthropicType: string): string {
  switch (anthropicType) {
    case 'invalid_request_error':
    case 'authentication_error':
    case 'permission_error':
    case 'not_found_error':
    case 'request_too_large':
      return 'invalid_request_error';
    case 'rate_limit_error':
      return 'rate_limit_error';
    default:
      return 'server_error';
  }
}

/** Anthropic `error.type` for an OpenAI error type. */
function anthropicErrorType(openaiType: string): string {
  if (openaiType === 'invalid_request_error') return 'invalid_request_error';
  if (openaiType === 'rate_limit_error' || openaiType === 'requests' || openaiType === 'tokens') return 'rate_limit_error';
  return 'api_error';
}

/**
 * Anthropic SSE events → OpenAI chat completion chunks. Output per event:
 * - `message_start` → the role chunk (`delta: {role:'assistant', content:''}`);
 * - text `content_block_start` (with initial text) and `text_delta` → `delta.content`;
 * - tool_use `content_block_start` → `delta.tool_calls[{index, id, type:'function', function:{name, arguments:''}}]`,
 *   each non-empty `input_json_delta` → `delta.tool_calls[{index, function:{arguments}}]` (index counts tool calls from 0);
 * - `message_delta` → remembered (stop reason, usage);
 * - `message_stop` → the finish chunk (`delta: {}`, `finish_reason`), the usage chunk when
 *   `includeUsage` (`choices: []`), then `data: [DONE]`;
 * - `error` → `data: {"error":{message, type, param:null, code:<anthropic type>}}` and nothing after;
 * - `ping`, thinking blocks and deltas, `content_block_stop`, unknown events → nothing.
 */
export class AnthropicToOpenAIStream {
  readonly #model: string;
  readonly #includeUsage: boolean;
  readonly #created: number;
  #id: string;
  readonly #idFixed: boolean;
  /** Anthropic block index → OpenAI tool call index, for tool_use blocks. */
  readonly #tools = new Map<number, number>();
  /** Anthropic block indexes of text blocks. */
  readonly #texts = new Set<number>();
  #input = 0;
  #output = 0;
  #stopReason: unknown = null;
  #sawDelta = false;
  #ended = false;

  /**
   * @param opts.model the model name the client sees; `includeUsage`: send the usage chunk (the client
   *   asked for `stream_options.include_usage`); `id` / `created`: chunk identity (default: the
   *   upstream message id, now).
   */
  constructor(opts: { model: string; includeUsage: boolean; id?: string; created?: number }) {
    this.#model = opts.model;
    this.#includeUsage = opts.includeUsage;
    this.#id = opts.id ?? 'chatcmpl-translated';
    this.#created = opts.created ?? Math.floor(Date.now() / 1000);
    this.#idFixed = opts.id !== undefined;
  }

  #chunk(choices: unknown[], usage?: unknown): string {
    const chunk: JsonObject = { id: this.#id, object: 'chat.completion.chunk', created: this.#created, model: this.#model, choices };
    if (this.#includeUsage) chunk.usage = usage ?? null;
    return `data: ${JSON.stringify(chunk)}\n\n`;
  }

  #delta(delta: JsonObject): string {
    return this.#chunk([{ index: 0, delta, logprobs: null, finish_reason: null }]);
  }

  #mergeUsage(usage: unknown): void {
    if (!isObject(usage)) return;
    this.#input = Math.max(this.#input, anthropicInputTokens(usage));
    if (typeof usage.output_tokens === 'number') this.#output = usage.output_tokens;
  }

  /** Translates one Anthropic event; returns the OpenAI SSE text to send ('' for none). */
  push(event: SseEvent): string {
    if (this.#ended) return '';
    const data = parse(event.data);
    if (data === undefined) return '';
    const type = event.event === '' ? data.type : event.event;
    switch (type) {
      case 'message_start': {
        const message = isObject(data.message) ? data.message : {};
        if (!this.#idFixed && typeof message.id === 'string') this.#id = message.id;
        this.#mergeUsage(message.usage);
        return this.#delta({ role: 'assistant', content: '' });
      }
      case 'content_block_start': {
        const index = num(data.index);
        const block = isObject(data.content_block) ? data.content_block : {};
        if (block.type === 'text') {
          this.#texts.add(index);
          return typeof block.text === 'string' && block.text !== '' ? this.#delta({ content: block.text }) : '';
        }
        if (block.type === 'tool_use') {
          const call = this.#tools.size;
          this.#tools.set(index, call);
          return this.#delta({ tool_calls: [{ index: call, id: block.id, type: 'function', function: { name: block.name, arguments: '' } }] });
        }
        return '';
      }
      case 'content_block_delta': {
        const index = num(data.index);
        const delta = isObject(data.delta) ? data.delta : {};
        if (delta.type === 'text_delta' && this.#texts.has(index) && typeof delta.text === 'string' && delta.text !== '') {
          return this.#delta({ content: delta.text });
        }
        const call = this.#tools.get(index);
        if (delta.type === 'input_json_delta' && call !== undefined && typeof delta.partial_json === 'string' && delta.partial_json !== '') {
          return this.#delta({ tool_calls: [{ index: call, function: { arguments: delta.partial_json } }] });
        }
        return '';
      }
      case 'message_delta': {
        const delta = isObject(data.delta) ? data.delta : {};
        if (delta.stop_reason !== undefined && delta.stop_reason !== null) this.#stopReason = delta.stop_reason;
        this.#mergeUsage(data.usage);
        this.#sawDelta = true;
        return '';
      }
      case 'message_stop':
        return this.#finish();
      case 'error': {
        this.#ended = true;
        const err = isObject(data.error) ? data.error : {};
        const anthropicType = typeof err.type === 'string' ? err.type : 'api_error';
        const message = typeof err.message === 'string' ? err.message : 'The upstream provider reported an error mid-stream.';
        return `data: ${JSON.stringify({ error: { message, type: openAIErrorType(anthropicType), param: null, code: anthropicType } })}\n\n`;
      }
      default:
        return '';
    }
  }

  #finish(): string {
    this.#ended = true;
    let out = this.#chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReasonOf(this.#stopReason) }]);
    if (this.#includeUsage) out += this.#chunk([], openAIUsageOf(this.#input, this.#output));
    return `${out}data: [DONE]\n\n`;
  }

  /**
   * The upstream stream ended: when a `message_delta` arrived but no `message_stop`, the finish
   * chunk, usage and `[DONE]`; otherwise '' (a stream cut before its end stays cut: no `[DONE]`).
   */
  end(): string {
    if (this.#ended || !this.#sawDelta) return '';
    return this.#finish();
  }

  /** Usage the upstream reported (input with cache tokens, cumulative output), once `message_delta` arrived. */
  usage(): TokenUsage | undefined {
    return this.#sawDelta ? { input: this.#input, output: this.#output } : undefined;
  }
}

/**
 * OpenAI chat completion chunks → Anthropic SSE events. Output:
 * - the first chunk → `message_start` (empty content, `usage.input_tokens` = `opts.inputTokens` ?? 0,
 *   `output_tokens: 0`);
 * - `delta.content` (and `delta.refusal`) → a text block: `content_block_start` when not open, then `text_delta`;
 * - a `tool_calls` delta with an `id` → closes the open block, `content_block_start` of a `tool_use`
 *   (`input: {}`); `function.arguments` fragments → `input_json_delta` on that call's block;
 * - `finish_reason` and the usage chunk → remembered;
 * - `data: [DONE]` → `content_block_stop` of the open block, `message_delta` (`stop_reason`, usage with
 *   the reported input — correcting message_start — and `output_tokens`), `message_stop`;
 * - `data: {"error":…}` → `event: error` and nothing after.
 * Block indexes count from 0 in order of appearance. Only choice 0 is read (translated requests ask for one).
 */
export class OpenAIToAnthropicStream {
  readonly #model: string;
  readonly #knownInput: number | undefined;
  #id: string;
  readonly #idFixed: boolean;
  #started = false;
  #ended = false;
  /** Index of the next Anthropic block; the open block's index is `#next - 1` when `#open`. */
  #next = 0;
  #open: 'text' | 'tool' | undefined;
  /** OpenAI tool call index → Anthropic block index. */
  readonly #tools = new Map<number, number>();
  #finishReason: unknown = null;
  #usage: JsonObject | undefined;

  /**
   * @param opts.model the model name the client sees; `inputTokens`: prompt tokens when known before
   *   the upstream reports them (else 0 in message_start, corrected in message_delta); `id`: message id
   *   (default: the upstream chunk id).
   */
  constructor(opts: { model: string; inputTokens?: number; id?: string }) {
    this.#model = opts.model;
    this.#knownInput = opts.inputTokens;
    this.#id = opts.id ?? 'msg_translated';
    this.#idFixed = opts.id !== undefined;
  }

  #start(chunk: JsonObject): string {
    if (this.#started) return '';
    this.#started = true;
    if (!this.#idFixed && typeof chunk.id === 'string') this.#id = chunk.id;
    return sse('message_start', {
      type: 'message_start',
      message: {
        id: this.#id,
        type: 'message',
        role: 'assistant',
        model: this.#model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: this.#knownInput ?? 0, output_tokens: 0 },
      },
    });
  }

  #close(): string {
    if (this.#open === undefined) return '';
    this.#open = undefined;
    return sse('content_block_stop', { type: 'content_block_stop', index: this.#next - 1 });
  }

  #text(text: string): string {
    let out = '';
    if (this.#open !== 'text') {
      out += this.#close();
      out += sse('content_block_start', { type: 'content_block_start', index: this.#next, content_block: { type: 'text', text: '' } });
      this.#next++;
      this.#open = 'text';
    }
    return out + sse('content_block_delta', { type: 'content_block_delta', index: this.#next - 1, delta: { type: 'text_delta', text } });
  }

  #toolCall(tc: JsonObject): string {
    let out = '';
    const callIndex = num(tc.index);
    const fn = isObject(tc.function) ? tc.function : {};
    if (typeof tc.id === 'string' && !this.#tools.has(callIndex)) {
      out += this.#close();
      this.#tools.set(callIndex, this.#next);
      out += sse('content_block_start', {
        type: 'content_block_start',
        index: this.#next,
        content_block: { type: 'tool_use', id: tc.id, name: typeof fn.name === 'string' ? fn.name : '', input: {} },
      });
      this.#next++;
      this.#open = 'tool';
    }
    const block = this.#tools.get(callIndex);
    if (block !== undefined && typeof fn.arguments === 'string' && fn.arguments !== '') {
      out += sse('content_block_delta', { type: 'content_block_delta', index: block, delta: { type: 'input_json_delta', partial_json: fn.arguments } });
    }
    return out;
  }

  /** Translates one OpenAI event; returns the Anthropic SSE text to send ('' for none). */
  push(event: SseEvent): string {
    if (this.#ended) return '';
    if (event.data.trim() === '[DONE]') return this.#finish();
    const chunk = parse(event.data);
    if (chunk === undefined) return '';
    if (isObject(chunk.error)) {
      this.#ended = true;
      const err = chunk.error;
      const type = anthropicErrorType(typeof err.type === 'string' ? err.type : '');
      const message = typeof err.message === 'string' ? err.message : 'The upstream provider reported an error mid-stream.';
      return sse('error', { type: 'error', error: { type, message } });
    }
    let out = this.#start(chunk);
    if (isObject(chunk.usage)) this.#usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) ? chunk.choices.find((c) => isObject(c) && num(c.index) === 0) : undefined;
    if (!isObject(choice)) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content !== '') out += this.#text(delta.content);
    if (typeof delta.refusal === 'string' && delta.refusal !== '') out += this.#text(delta.refusal);
    if (Array.isArray(delta.tool_calls)) for (const tc of delta.tool_calls) if (isObject(tc)) out += this.#toolCall(tc);
    if (!absent(choice.finish_reason)) this.#finishReason = choice.finish_reason;
    return out;
  }

  #finish(): string {
    this.#ended = true;
    const u = this.#usage === undefined ? { output_tokens: 0 } : anthropicUsageOf(this.#usage);
    let out = this.#start({});
    out += this.#close();
    out += sse('message_delta', { type: 'message_delta', delta: { stop_reason: stopReasonOf(this.#finishReason), stop_sequence: null }, usage: u });
    return out + sse('message_stop', { type: 'message_stop' });
  }

  /**
   * The upstream stream ended: when a `finish_reason` arrived but no `[DONE]`, the closing events;
   * otherwise '' (a stream cut before its end stays cut: no `message_stop`).
   */
  end(): string {
    if (this.#ended || this.#finishReason === null) return '';
    return this.#finish();
  }

  /** Usage the upstream reported in its usage chunk (prompt, completion), once it arrived. */
  usage(): TokenUsage | undefined {
    if (this.#usage === undefined) return undefined;
    return { input: num(this.#usage.prompt_tokens), output: num(this.#usage.completion_tokens) };
  }
}

function sse(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}
