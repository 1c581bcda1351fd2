/**
 * Anthropic Messages → OpenAI Chat Completions: the request a client sent to `/v1/messages`,
 * rewritten for `POST /v1/chat/completions`, and an Anthropic `message` reply rewritten as an
 * OpenAI `chat.completion` (for a client of `/v1/chat/completions` served by an Anthropic deployment).
 *
 * Field names follow the Anthropic API reference, "Messages" (https://docs.anthropic.com/en/api/messages:
 * `system`, `messages`, content blocks `text` / `image` (source `base64` or `url`) / `tool_use` /
 * `tool_result`, `tools` with `input_schema`, `tool_choice` auto/any/tool/none with
 * `disable_parallel_tool_use`, `stop_sequences`, `metadata.user_id`, the `Message` reply with
 * `stop_reason` and `usage`), as typed by `@anthropic-ai/sdk` 1.14; and the OpenAI API reference,
 * "Create chat completion" and "The chat completion object"
 * (https://platform.openai.com/docs/api-reference/chat), as typed by `openai` 6.49
 * (`ChatCompletionMessageParam`, `ChatCompletionContentPartImage`, `ChatCompletionMessageFunctionToolCall`,
 * `ChatCompletionToolMessageParam`, `ChatCompletionStreamOptions.include_usage`, `CompletionUsage`,
 * `stop`: "up to 4 sequences").
 *
 * Not translated (TranslationError): `document`, `search_result` and other non-text/non-image
 * blocks in user messages, images inside `tool_result`, server tools (any `tools[].type` but
 * `custom`), `thinking` enabled, `output_config.format`, `container`, `mcp_servers`, more than 4
 * `stop_sequences`, and a final assistant message (prefill: OpenAI has no way to continue it).
 * Dropped: `top_k` (OpenAI has none), `cache_control`, `tool_result.is_error`, `thinking` and
 * `redacted_thinking` blocks of earlier assistant turns, `service_tier`, and any field not named here.
 */
import {
  TranslationError,
  absent,
  isObject,
  num,
  requireArray,
  requireNumberIn,
  requireObject,
  requirePositiveInt,
  requireString,
  type JsonObject,
} from './openai-to-anthropic.ts';

/** OpenAI content part (the subset this module writes). */
export type OpenAIPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

/** OpenAI tool call of an assistant message. */
export interface OpenAIToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** OpenAI chat message (the subset this module writes). */
export type OpenAIMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | OpenAIPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: OpenAIToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string | { type: 'text'; text: string }[] };

/** Anthropic image block → OpenAI `image_url` part: a base64 source becomes a `data:<media_type>;base64,<data>` URL. */
function imagePart(block: JsonObject, param: string): OpenAIPart {
  const source = requireObject(block.source, `${param}.source`);
  if (source.type === 'base64') {
    const mediaType = requireString(source.media_type, `${param}.source.media_type`);
    return { type: 'image_url', image_url: { url: `data:${mediaType};base64,${requireString(source.data, `${param}.source.data`)}` } };
  }
  if (source.type === 'url') return { type: 'image_url', image_url: { url: requireString(source.url, `${param}.source.url`) } };
  throw new TranslationError(`Image source type "${String(source.type)}" cannot be sent to an OpenAI deployment.`, `${param}.source.type`);
}

/** `tool_result.content` (absent, a string or text blocks) → an OpenAI tool message content. */
function toolResultContent(content: unknown, param: string): string | { type: 'text'; text: string }[] {
  if (absent(content)) return '';
  if (typeof content === 'string') return content;
  return requireArray(content, param).map((b, i) => {
    const block = requireObject(b, `${param}.${i}`);
    if (block.type !== 'text') throw new TranslationError(`A tool result holding "${String(block.type)}" cannot be sent to an OpenAI deployment (text only).`, `${param}.${i}.type`);
    return { type: 'text' as const, text: requireString(block.text, `${param}.${i}.text`) };
  });
}

/** One Anthropic user message → OpenAI `tool` messages (its tool_result blocks, in order) then a user message with the rest, if any. */
function userMessages(content: unknown, param: string): OpenAIMessage[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  const out: OpenAIMessage[] = [];
  const parts: OpenAIPart[] = [];
  requireArray(content, `${param}.content`).forEach((b, i) => {
    const p = `${param}.content.${i}`;
    const block = requireObject(b, p);
    switch (block.type) {
      case 'text':
        parts.push({ type: 'text', text: requireString(block.text, `${p}.text`) });
        break;
      case 'image':
        parts.push(imagePart(block, p));
        break;
      case 'tool_result':
        out.push({ role: 'tool', tool_call_id: requireString(block.tool_use_id, `${p}.tool_use_id`), content: toolResultContent(block.content, `${p}.content`) });
        break;
      default:
        throw new TranslationError(`Content block type "${String(block.type)}" cannot be sent to an OpenAI deployment.`, `${p}.type`);
    }
  });
  if (parts.length > 0) out.push({ role: 'user', content: parts });
  return out;
}

/** One Anthropic assistant message → an OpenAI assistant message: text blocks joined, tool_use → tool_calls (input JSON-stringified). */
function assistantMessage(content: unknown, param: string): OpenAIMessage {
  if (typeof content === 'string') return { role: 'assistant', content };
  let text = '';
  let hasText = false;
  const calls: OpenAIToolCall[] = [];
  requireArray(content, `${param}.content`).forEach((b, i) => {
    const p = `${param}.content.${i}`;
    const block = requireObject(b, p);
    switch (block.type) {
      case 'text':
        text += requireString(block.text, `${p}.text`);
        hasText = true;
        break;
      case 'tool_use':
        calls.push({
          id: requireString(block.id, `${p}.id`),
          type: 'function',
          function: { name: requireString(block.name, `${p}.name`), arguments: JSON.stringify(requireObject(block.input, `${p}.input`)) },
        });
        break;
      case 'thinking':
      case 'redacted_thinking':
        break;
      default:
        throw new TranslationError(`Content block type "${String(block.type)}" cannot be sent to an OpenAI deployment.`, `${p}.type`);
    }
  });
  const message: OpenAIMessage = { role: 'assistant', content: hasText || calls.length === 0 ? text : null };
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}

/** Anthropic `system` (a string or text blocks) → its text; text blocks joined with blank lines. */
function systemText(system: unknown): string {
  if (typeof system === 'string') return system;
  return requireArray(system, 'system')
    .map((b, i) => {
      const block = requireObject(b, `system.${i}`);
      if (block.type !== 'text') throw new TranslationError('System blocks must be text.', `system.${i}.type`);
      return requireString(block.text, `system.${i}.text`);
    })
    .join('\n\n');
}

/** Anthropic `tool_choice` → OpenAI `tool_choice` (auto → auto, any → required, tool → function, none → none) and whether parallel calls are off. */
function toolChoice(v: unknown): { choice: unknown; noParallel: boolean } {
  const c = requireObject(v, 'tool_choice');
  const noParallel = c.disable_parallel_tool_use === true;
  switch (c.type) {
    case 'auto':
      return { choice: 'auto', noParallel };
    case 'any':
      return { choice: 'required', noParallel };
    case 'none':
      return { choice: 'none', noParallel: false };
    case 'tool':
      return { choice: { type: 'function', function: { name: requireString(c.name, 'tool_choice.name') } }, noParallel };
    default:
      throw new TranslationError(`tool_choice type "${String(c.type)}" cannot be sent to an OpenAI deployment.`, 'tool_choice.type');
  }
}

/**
 * An Anthropic Messages request → an OpenAI chat completion request for `opts.model`.
 * - `system` → a first `system` message; user messages → `tool` messages for their tool_result
 *   blocks, then a user message with the text and image parts (base64 images → data URLs).
 * - assistant messages → text joined into `content`, `tool_use` → `tool_calls` (`arguments` = JSON of `input`).
 * - `tools` → function tools (`parameters` = `input_schema`); `tool_choice` mapped;
 *   `disable_parallel_tool_use` → `parallel_tool_calls: false`.
 * - `stop_sequences` → `stop`; `max_tokens` → `max_tokens`; `temperature`, `top_p`, `stream` copied;
 *   `metadata.user_id` → `user`; a stream asks for `stream_options: {include_usage: true}` (usage for settlement).
 * @throws TranslationError for a malformed body or a field listed as not translated in the module doc.
 */
export function anthropicToOpenAIChat(body: unknown, opts: { model: string }): Record<string, unknown> {
  const b = requireObject(body, null);
  if (isObject(b.thinking) && b.thinking.type !== 'disabled') throw new TranslationError('Extended thinking cannot be sent to an OpenAI deployment.', 'thinking');
  if (isObject(b.output_config) && !absent(b.output_config.format)) {
    throw new TranslationError('"output_config.format" cannot be sent to an OpenAI deployment.', 'output_config.format');
  }
  for (const field of ['container', 'mcp_servers']) {
    if (!absent(b[field])) throw new TranslationError(`"${field}" cannot be sent to an OpenAI deployment.`, field);
  }
  const messages: OpenAIMessage[] = [];
  if (!absent(b.system)) {
    const text = systemText(b.system);
    if (text !== '') messages.push({ role: 'system', content: text });
  }
  const input = requireArray(b.messages, 'messages');
  input.forEach((raw, i) => {
    const p = `messages.${i}`;
    const m = requireObject(raw, p);
    if (m.role === 'user') messages.push(...userMessages(m.content, p));
    else if (m.role === 'assistant') {
      if (i === input.length - 1) throw new TranslationError('A final assistant message (prefill) cannot be sent to an OpenAI deployment.', p);
      messages.push(assistantMessage(m.content, p));
    } else throw new TranslationError(`Message role "${String(m.role)}" is not user or assistant.`, `${p}.role`);
  });

  const out: Record<string, unknown> = { model: opts.model, messages, max_tokens: requirePositiveInt(b.max_tokens, 'max_tokens') };
  if (!absent(b.tools)) {
    out.tools = requireArray(b.tools, 'tools').map((t, i) => {
      const tool = requireObject(t, `tools.${i}`);
      if (!absent(tool.type) && tool.type !== 'custom') {
        throw new TranslationError(`Tool type "${String(tool.type)}" cannot be sent to an OpenAI deployment.`, `tools.${i}.type`);
      }
      const fn: JsonObject = { name: requireString(tool.name, `tools.${i}.name`) };
      if (!absent(tool.description)) fn.description = requireString(tool.description, `tools.${i}.description`);
      fn.parameters = requireObject(tool.input_schema, `tools.${i}.input_schema`);
      if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
      return { type: 'function', function: fn };
    });
  }
  if (!absent(b.tool_choice)) {
    const { choice, noParallel } = toolChoice(b.tool_choice);
    out.tool_choice = choice;
    if (noParallel) out.parallel_tool_calls = false;
  }
  if (!absent(b.stop_sequences)) {
    const stop = requireArray(b.stop_sequences, 'stop_sequences').map((s, i) => requireString(s, `stop_sequences.${i}`));
    if (stop.length > 4) throw new TranslationError('An OpenAI deployment takes at most 4 stop sequences.', 'stop_sequences');
    if (stop.length > 0) out.stop = stop;
  }
  if (!absent(b.temperature)) out.temperature = requireNumberIn(b.temperature, 0, 1, 'temperature', '');
  if (!absent(b.top_p)) out.top_p = requireNumberIn(b.top_p, 0, 1, 'top_p', '');
  if (!absent(b.stream)) {
    if (typeof b.stream !== 'boolean') throw new TranslationError('"stream" must be a boolean.', 'stream');
    out.stream = b.stream;
    if (b.stream) out.stream_options = { include_usage: true };
  }
  if (isObject(b.metadata) && typeof b.metadata.user_id === 'string') out.user = b.metadata.user_id;
  return out;
}

/**
 * Anthropic `stop_reason` → OpenAI `finish_reason`: end_turn, stop_sequence, pause_turn → stop;
 * max_tokens, model_context_window_exceeded → length; tool_use → tool_calls; refusal → content_filter.
 */
export function finishReasonOf(stopReason: unknown): 'stop' | 'length' | 'tool_calls' | 'content_filter' {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}

/** Anthropic usage → OpenAI usage: prompt = input + cache creation + cache read tokens; completion = output. */
export function openAIUsageOf(input: number, output: number): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  return { prompt_tokens: input, completion_tokens: output, total_tokens: input + output };
}

/** Input tokens of an Anthropic usage object, cache creation and cache reads included. */
export function anthropicInputTokens(usage: JsonObject): number {
  return num(usage.input_tokens) + num(usage.cache_creation_input_tokens) + num(usage.cache_read_input_tokens);
}

/**
 * An Anthropic `message` reply → an OpenAI `chat.completion`: text blocks joined into
 * `message.content` (null when there is none), `tool_use` → `tool_calls` with JSON-stringified
 * arguments, `stop_reason` → `finish_reason` ({@link finishReasonOf}), usage → prompt (input with
 * cache tokens) / completion / total. Thinking and server-tool blocks are not carried.
 * @param created Unix seconds of the reply. @default now
 * @throws TranslationError when the reply is not a message with a content array.
 */
export function anthropicResponseToOpenAI(json: unknown, model: string, created: number = Math.floor(Date.now() / 1000)): Record<string, unknown> {
  const r = requireObject(json, null);
  let text: string | null = null;
  const calls: OpenAIToolCall[] = [];
  requireArray(r.content, 'content').forEach((b, i) => {
    const block = requireObject(b, `content.${i}`);
    if (block.type === 'text') text = (text ?? '') + requireString(block.text, `content.${i}.text`);
    else if (block.type === 'tool_use') {
      calls.push({
        id: requireString(block.id, `content.${i}.id`),
        type: 'function',
        function: { name: requireString(block.name, `content.${i}.name`), arguments: JSON.stringify(isObject(block.input) ? block.input : {}) },
      });
    }
  });
  const message: JsonObject = { role: 'assistant', content: text, refusal: null };
  if (calls.length > 0) message.tool_calls = calls;
  const usage = isObject(r.usage) ? r.usage : {};
  return {
    id: typeof r.id === 'string' ? r.id : 'chatcmpl-translated',
    object: 'chat.completion',
    created,
    model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReasonOf(r.stop_reason) }],
    usage: openAIUsageOf(anthropicInputTokens(usage), num(usage.output_tokens)),
  };
}
