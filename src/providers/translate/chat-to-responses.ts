/**
 * OpenAI Chat Completions replies → OpenAI Responses replies, for a Responses request served by a
 * chat deployment (see `./responses-to-chat.ts`): a `chat.completion` as a Response object, and a
 * stream of `chat.completion.chunk` events as the Responses stream events. An Anthropic deployment's
 * replies go through the chat form first (`anthropicResponseToOpenAI`, `AnthropicToOpenAIStream`).
 *
 * Shapes follow the OpenAI API reference ("The response object", "Streaming events") as typed by
 * the official `openai` SDK 6.49 (`Response`, `ResponseOutputMessage`, `ResponseOutputText`,
 * `ResponseFunctionToolCall`, `ResponseUsage`, `ResponseStreamEvent`). Each stream event is
 * `event: <type>\ndata: <json>\n\n` with a `sequence_number` counting from 0:
 * `response.created`, `response.in_progress`; per text output `response.output_item.added` (a
 * message), `response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
 * `response.content_part.done`, `response.output_item.done`; per tool call `response.output_item.added`
 * (a function_call), `response.function_call_arguments.delta`…, `.done`, `response.output_item.done`;
 * then `response.completed` (or `response.incomplete` when the output hit `max_output_tokens`) with
 * the whole Response and its usage. A chat error chunk becomes an `error` event.
 *
 * The Response's id is the gateway's (`resp_` + random): the upstream holds no Response, so the id
 * cannot be retrieved later nor continued with `previous_response_id`.
 */
import { randomBytes } from 'node:crypto';
import type { SseEvent } from '../sse.ts';
import { SseSplitter } from '../sse.ts';
import { isObject, num, type JsonObject } from './openai-to-anthropic.ts';
import { AnthropicToOpenAIStream } from './streams.ts';

/** An id as OpenAI's look: prefix + 48 hex characters. */
function newId(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

/** A chat `usage` as a Responses `usage` (cached and reasoning details when reported, else 0). */
export function responsesUsageOf(usage: unknown): JsonObject {
  const u = isObject(usage) ? usage : {};
  const input = num(u.prompt_tokens);
  const output = num(u.completion_tokens);
  const inDetails = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const outDetails = isObject(u.completion_tokens_details) ? u.completion_tokens_details : {};
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: num(inDetails.cached_tokens) },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: num(outDetails.reasoning_tokens) },
    total_tokens: input + output,
  };
}

/** The Response fields that echo the request (instructions, tools, sampling, ...). */
function echoed(request: JsonObject): JsonObject {
  const pick = (field: string, fallback: unknown): unknown => (request[field] === undefined ? fallback : request[field]);
  return {
    instructions: pick('instructions', null),
    max_output_tokens: pick('max_output_tokens', null),
    metadata: pick('metadata', {}),
    parallel_tool_calls: pick('parallel_tool_calls', true),
    previous_response_id: null,
    reasoning: pick('reasoning', { effort: null, summary: null }),
    store: pick('store', true),
    temperature: pick('temperature', 1),
    text: pick('text', { format: { type: 'text' } }),
    tool_choice: pick('tool_choice', 'auto'),
    tools: pick('tools', []),
    top_p: pick('top_p', 1),
    truncation: pick('truncation', 'disabled'),
    user: pick('user', null),
  };
}

/** A Response object: the identity, status and echoed request fields; output and usage given. */
function responseObject(id: string, created: number, model: string, request: JsonObject, status: string, output: unknown[], usage: unknown): JsonObject {
  return {
    id,
    object: 'response',
    created_at: created,
    status,
    background: false,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    model,
    output,
    ...echoed(request),
    usage,
  };
}

function messageItem(id: string, text: string, status: string): JsonObject {
  return { id, type: 'message', status, role: 'assistant', content: [{ type: 'output_text', annotations: [], logprobs: [], text }] };
}

function callItem(id: string, callId: unknown, name: unknown, args: string, status: string): JsonObject {
  return { id, type: 'function_call', status, arguments: args, call_id: callId, name };
}

/**
 * A `chat.completion` reply as a Response object: the message text → one `message` item with an
 * `output_text` part, each tool call → a `function_call` item; `finish_reason: length` → status
 * `incomplete` (`max_output_tokens`), else `completed`; usage → Responses usage.
 * @param model the model name the client asked for. @param request the client's Responses body (echoed fields).
 * @param created Unix seconds. @default now
 */
export function chatResponseToResponses(json: unknown, model: string, request: JsonObject, created: number = Math.floor(Date.now() / 1000)): JsonObject {
  const r = isObject(json) ? json : {};
  const choice = Array.isArray(r.choices) && isObject(r.choices[0]) ? r.choices[0] : {};
  const message = isObject(choice.message) ? choice.message : {};
  const output: JsonObject[] = [];
  const text = typeof message.content === 'string' ? message.content : typeof message.refusal === 'string' ? message.refusal : '';
  if (text !== '' || !Array.isArray(message.tool_calls)) output.push(messageItem(newId('msg'), text, 'completed'));
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls as unknown[]) {
      if (!isObject(call)) continue;
      const fn = isObject(call.function) ? call.function : {};
      output.push(callItem(newId('fc'), call.id, fn.name, typeof fn.arguments === 'string' ? fn.arguments : '', 'completed'));
    }
  }
  const status = choice.finish_reason === 'length' ? 'incomplete' : 'completed';
  return responseObject(newId('resp'), created, model, request, status, output, responsesUsageOf(r.usage));
}

/** One tool call being streamed. */
interface OpenCall {
  readonly item: string;
  readonly index: number;
  readonly callId: unknown;
  readonly name: unknown;
  args: string;
}

/**
 * Chat completion chunks → Responses stream events (see the module comment). Only choice 0 is read
 * (translated requests ask for one). A stream cut before `[DONE]` (and before its usage) stays cut:
 * no terminal event.
 */
export class ChatToResponsesStream {
  readonly #model: string;
  readonly #request: JsonObject;
  readonly #created: number;
  readonly #id = newId('resp');
  #seq = 0;
  #started = false;
  #ended = false;
  /** The open message item: its id, output index and text so far. */
  #message: { readonly item: string; readonly index: number; text: string } | undefined;
  readonly #calls = new Map<number, OpenCall>();
  /** Items done, in output order. */
  readonly #output: JsonObject[] = [];
  #finish: unknown = null;
  #usage: unknown;

  /** @param opts.model the model name the client asked for; `request` the client's body (echoed fields); `created` Unix seconds (default now). */
  constructor(opts: { model: string; request: JsonObject; created?: number }) {
    this.#model = opts.model;
    this.#request = opts.request;
    this.#created = opts.created ?? Math.floor(Date.now() / 1000);
  }

  #event(type: string, fields: JsonObject): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields, sequence_number: this.#seq++ })}\n\n`;
  }

  #response(status: string, output: unknown[], usage: unknown): JsonObject {
    return responseObject(this.#id, this.#created, this.#model, this.#request, status, output, usage);
  }

  #start(): string {
    if (this.#started) return '';
    this.#started = true;
    const shell = this.#response('in_progress', [], null);
    return this.#event('response.created', { response: shell }) + this.#event('response.in_progress', { response: shell });
  }

  #nextIndex(): number {
    return this.#output.length + (this.#message === undefined ? 0 : 1) + this.#calls.size;
  }

  #text(delta: string): string {
    let out = '';
    if (this.#message === undefined) {
      const item = newId('msg');
      this.#message = { item, index: this.#nextIndex(), text: '' };
      out += this.#event('response.output_item.added', { output_index: this.#message.index, item: { id: item, type: 'message', status: 'in_progress', role: 'assistant', content: [] } });
      out += this.#event('response.content_part.added', { item_id: item, output_index: this.#message.index, content_index: 0, part: { type: 'output_text', annotations: [], logprobs: [], text: '' } });
    }
    this.#message.text += delta;
    return out + this.#event('response.output_text.delta', { item_id: this.#message.item, output_index: this.#message.index, content_index: 0, delta, logprobs: [] });
  }

  #closeMessage(): string {
    const m = this.#message;
    if (m === undefined) return '';
    this.#message = undefined;
    const part = { type: 'output_text', annotations: [], logprobs: [], text: m.text };
    const item = messageItem(m.item, m.text, 'completed');
    this.#output.push(item);
    return (
      this.#event('response.output_text.done', { item_id: m.item, output_index: m.index, content_index: 0, text: m.text, logprobs: [] }) +
      this.#event('response.content_part.done', { item_id: m.item, output_index: m.index, content_index: 0, part }) +
      this.#event('response.output_item.done', { output_index: m.index, item })
    );
  }

  #toolCall(delta: JsonObject): string {
    const at = num(delta.index);
    const fn = isObject(delta.function) ? delta.function : {};
    let out = '';
    let call = this.#calls.get(at);
    if (call === undefined) {
      out += this.#closeMessage();
      call = { item: newId('fc'), index: this.#nextIndex(), callId: delta.id, name: fn.name, args: '' };
      this.#calls.set(at, call);
      out += this.#event('response.output_item.added', { output_index: call.index, item: callItem(call.item, call.callId, call.name, '', 'in_progress') });
    }
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      call.args += fn.arguments;
      out += this.#event('response.function_call_arguments.delta', { item_id: call.item, output_index: call.index, delta: fn.arguments });
    }
    return out;
  }

  #closeCalls(): string {
    let out = '';
    for (const call of this.#calls.values()) {
      const item = callItem(call.item, call.callId, call.name, call.args, 'completed');
      this.#output.push(item);
      out += this.#event('response.function_call_arguments.done', { item_id: call.item, output_index: call.index, name: call.name, arguments: call.args });
      out += this.#event('response.output_item.done', { output_index: call.index, item });
    }
    this.#calls.clear();
    return out;
  }

  #complete(): string {
    this.#ended = true;
    let out = this.#start() + this.#closeMessage() + this.#closeCalls();
    const status = this.#finish === 'length' ? 'incomplete' : 'completed';
    out += this.#event(status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: this.#response(status, [...this.#output], responsesUsageOf(this.#usage)) });
    return out;
  }

  /** Translates one chat event; returns the Responses SSE text to send ('' for none). */
  push(event: SseEvent): string {
    if (this.#ended) return '';
    const data = event.data.trim();
    if (data === '[DONE]') return this.#complete();
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      return '';
    }
    if (!isObject(chunk)) return '';
    if (isObject(chunk.error)) {
      this.#ended = true;
      const err = chunk.error;
      return this.#event('error', { code: typeof err.code === 'string' ? err.code : typeof err.type === 'string' ? err.type : 'server_error', message: typeof err.message === 'string' ? err.message : 'The upstream provider reported an error mid-stream.', param: null });
    }
    let out = this.#start();
    if (isObject(chunk.usage)) this.#usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (choice === undefined) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content !== '') out += this.#text(delta.content);
    if (typeof delta.refusal === 'string' && delta.refusal !== '') out += this.#text(delta.refusal);
    if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls as unknown[]) if (isObject(call)) out += this.#toolCall(call);
    if (!(choice.finish_reason === null || choice.finish_reason === undefined)) this.#finish = choice.finish_reason;
    return out;
  }

  /** The upstream ended without `[DONE]`: the terminal event when the finish and the usage arrived, else '' (a cut stream stays cut). */
  end(): string {
    if (this.#ended || this.#finish === null || this.#usage === undefined) return '';
    return this.#complete();
  }
}

/** Anthropic Messages events → Responses events: through the chat form (`AnthropicToOpenAIStream`, then {@link ChatToResponsesStream}). */
export class AnthropicToResponsesStream {
  readonly #chat: AnthropicToOpenAIStream;
  readonly #responses: ChatToResponsesStream;
  readonly #splitter = new SseSplitter();
  readonly #encoder = new TextEncoder();

  /** @param opts see {@link ChatToResponsesStream}. */
  constructor(opts: { model: string; request: JsonObject; created?: number }) {
    this.#chat = new AnthropicToOpenAIStream({ model: opts.model, includeUsage: true });
    this.#responses = new ChatToResponsesStream(opts);
  }

  #through(chatText: string): string {
    if (chatText === '') return '';
    let out = '';
    for (const event of this.#splitter.push(this.#encoder.encode(chatText))) out += this.#responses.push(event);
    return out;
  }

  push(event: SseEvent): string {
    return this.#through(this.#chat.push(event));
  }

  end(): string {
    return this.#through(this.#chat.end()) + this.#responses.end();
  }
}
