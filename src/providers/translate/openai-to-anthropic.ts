/**
 * OpenAI Chat Completions → Anthropic Messages: the request a client sent in OpenAI's format,
 * rewritten for `POST /v1/messages`, and an OpenAI `chat.completion` reply rewritten as an
 * Anthropic `message` (for a client of `/v1/messages` served by an OpenAI deployment).
 * Also home of {@link TranslationError} and the small validators both directions share.
 *
 * Field names follow:
 * - OpenAI API reference, "Create chat completion" (https://platform.openai.com/docs/api-reference/chat/create)
 *   and "The chat completion object", as typed by the official `openai` SDK 6.49
 *   (`ChatCompletionCreateParamsBase`, `ChatCompletionMessageParam`, `ChatCompletionContentPartImage`,
 *   `ChatCompletionToolChoiceOption`, `ChatCompletion`, `CompletionUsage`).
 * - Anthropic API reference, "Messages" (https://docs.anthropic.com/en/api/messages), as typed by
 *   `@anthropic-ai/sdk` 1.14 (`MessageCreateParamsBase`, `ImageBlockParam` with `Base64ImageSource` /
 *   `URLImageSource`, `ToolUseBlockParam`, `ToolResultBlockParam`, `Tool`, `ToolChoice`, `Metadata`,
 *   `Message`, `StopReason`, `Usage`), and the tool-use guide (tool_result blocks come first in the
 *   user message; roles alternate).
 *
 * Not translated (refused with TranslationError, since the client would silently get something
 * else): `n` > 1, `logprobs: true`, `top_logprobs`, `audio`, `modalities` other than text,
 * `response_format` other than text, the deprecated `functions` / `function_call` and the `function`
 * role, `web_search_options`, custom (non-function) tools, `allowed_tools` tool choice, audio and
 * file content parts, `temperature` outside 0..1. Dropped (no Anthropic equivalent, output shape
 * unchanged): `frequency_penalty`, `presence_penalty`, `seed`, `logit_bias`, `prediction`, `store`,
 * `metadata`, `service_tier`, `reasoning_effort`, `verbosity`, `prompt_cache_*`,
 * `safety_identifier`, `stream_options` (Anthropic streams always carry usage), message `name`,
 * image `detail`, and any field not named here.
 */

/** A JSON object. */
export type JsonObject = Record<string, unknown>;

/**
 * A request (or reply) that cannot be expressed in the other wire format. The gateway answers it
 * as a 400 `invalid_request_error`; `param` names the offending field (OpenAI's `error.param`).
 */
export class TranslationError extends Error {
  /** The offending field, e.g. `messages[2].tool_calls[0].function.arguments`; null for the whole body. */
  readonly param: string | null;

  constructor(message: string, param: string | null = null) {
    super(message);
    this.name = 'TranslationError';
    this.param = param;
  }
}

/** True for a non-null, non-array object. */
export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** True for undefined or null (an absent optional field). */
export function absent(v: unknown): v is undefined | null {
  return v === undefined || v === null;
}

/** `v` as an object, else TranslationError naming `param`. */
export function requireObject(v: unknown, param: string | null): JsonObject {
  if (!isObject(v)) throw new TranslationError(`${param === null ? 'The body' : `"${param}"`} must be a JSON object.`, param);
  return v;
}

/** `v` as an array, else TranslationError naming `param`. */
export function requireArray(v: unknown, param: string): unknown[] {
  if (!Array.isArray(v)) throw new TranslationError(`"${param}" must be an array.`, param);
  return v;
}

/** `v` as a string, else TranslationError naming `param`. */
export function requireString(v: unknown, param: string): string {
  if (typeof v !== 'string') throw new TranslationError(`"${param}" must be a string.`, param);
  return v;
}

/** `v` as a positive integer, else TranslationError naming `param`. */
export function requirePositiveInt(v: unknown, param: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new TranslationError(`"${param}" must be an integer ≥ 1.`, param);
  return v;
}

/** `v` as a finite number in [lo, hi], else TranslationError naming `param`. */
export function requireNumberIn(v: unknown, lo: number, hi: number, param: string, why: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi) throw new TranslationError(`"${param}" must be a number from ${lo} to ${hi}${why}.`, param);
  return v;
}

/** A finite number or 0. */
export function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}

/** Anthropic image media types (`Base64ImageSource.media_type`). */
const IMAGE_MEDIA_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/** Anthropic content block param (the subset this module writes). */
export type AnthropicBlock =
  | { type: 'text'; text: string }
  | { type: 'image'; source: { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string } }
  | { type: 'tool_use'; id: string; name: string; input: JsonObject }
  | { type: 'tool_result'; tool_use_id: string; content: string | { type: 'text'; text: string }[] };

/** Anthropic message param. */
export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: string | AnthropicBlock[];
}

/**
 * OpenAI `image_url.url` → Anthropic image source: a `data:<media type>;base64,<data>` URL becomes
 * `{type:'base64', media_type, data}`, an http(s) URL `{type:'url', url}` (Anthropic "Vision": base64
 * and URL image sources; jpeg, png, gif and webp only).
 */
export function imageSourceOfUrl(url: string, param: string): AnthropicBlock & { type: 'image' } {
  if (url.startsWith('data:')) {
    const m = /^data:([^;,]+);base64,(.*)$/s.exec(url);
    if (m === null) throw new TranslationError('An image data URL must be "data:<media type>;base64,<data>".', param);
    const mediaType = (m[1] as string).toLowerCase();
    if (!IMAGE_MEDIA_TYPES.has(mediaType)) {
      throw new TranslationError(`Image media type "${mediaType}" is not supported by the other provider (jpeg, png, gif, webp).`, param);
    }
    return { type: 'image', source: { type: 'base64', media_type: mediaType, data: m[2] as string } };
  }
  if (/^https?:\/\//i.test(url)) return { type: 'image', source: { type: 'url', url } };
  throw new TranslationError('An image URL must be an http(s) URL or a base64 data URL.', param);
}

/** The text of an OpenAI content that may only hold text: a string, or an array of `text` parts (each returned separately). */
function textPieces(content: unknown, param: string, allowRefusal = false): string[] {
  if (typeof content === 'string') return [content];
  if (absent(content)) return [];
  const parts = requireArray(content, param);
  return parts.map((p, i) => {
    const part = requireObject(p, `${param}[${i}]`);
    if (part.type === 'text') return requireString(part.text, `${param}[${i}].text`);
    if (allowRefusal && part.type === 'refusal') return requireString(part.refusal, `${param}[${i}].refusal`);
    throw new TranslationError(`Content part type "${String(part.type)}" is not allowed here.`, `${param}[${i}].type`);
  });
}

/** User content parts → Anthropic blocks (text; image_url). Audio and file parts are refused. */
function userBlocks(content: unknown, param: string): string | AnthropicBlock[] {
  if (typeof content === 'string') return content;
  const parts = requireArray(content, param);
  return parts.map((p, i): AnthropicBlock => {
    const part = requireObject(p, `${param}[${i}]`);
    switch (part.type) {
      case 'text':
        return { type: 'text', text: requireString(part.text, `${param}[${i}].text`) };
      case 'image_url': {
        const image = requireObject(part.image_url, `${param}[${i}].image_url`);
        return imageSourceOfUrl(requireString(image.url, `${param}[${i}].image_url.url`), `${param}[${i}].image_url.url`);
      }
      default:
        throw new TranslationError(`Content part type "${String(part.type)}" cannot be sent to an Anthropic deployment.`, `${param}[${i}].type`);
    }
  });
}

/** Assistant message → blocks: its text (string or text/refusal parts; empty texts skipped) then one tool_use per tool call. */
function assistantContent(m: JsonObject, param: string): string | AnthropicBlock[] {
  if (!absent(m.audio)) throw new TranslationError('Assistant audio cannot be sent to an Anthropic deployment.', `${param}.audio`);
  if (!absent(m.function_call)) throw new TranslationError('The deprecated "function_call" is not translated; use "tool_calls".', `${param}.function_call`);
  const calls = absent(m.tool_calls) ? [] : requireArray(m.tool_calls, `${param}.tool_calls`);
  if (typeof m.content === 'string' && calls.length === 0) return m.content;
  const blocks: AnthropicBlock[] = [];
  for (const text of textPieces(m.content, `${param}.content`, true)) if (text !== '') blocks.push({ type: 'text', text });
  calls.forEach((c, j) => {
    const p = `${param}.tool_calls[${j}]`;
    const call = requireObject(c, p);
    if (call.type !== 'function') throw new TranslationError(`Tool call type "${String(call.type)}" cannot be sent to an Anthropic deployment.`, `${p}.type`);
    const fn = requireObject(call.function, `${p}.function`);
    const args = requireString(fn.arguments, `${p}.function.arguments`);
    let input: unknown;
    try {
      input = JSON.parse(args);
    } catch {
      throw new TranslationError('Tool call arguments are not valid JSON.', `${p}.function.arguments`);
    }
    if (!isObject(input)) throw new TranslationError('Tool call arguments must be a JSON object.', `${p}.function.arguments`);
    blocks.push({ type: 'tool_use', id: requireString(call.id, `${p}.id`), name: requireString(fn.name, `${p}.function.name`), input });
  });
  return blocks;
}

/** Blocks of a content, a string becoming one text block (none when empty). */
function asBlocks(content: string | AnthropicBlock[]): AnthropicBlock[] {
  if (typeof content !== 'string') return content;
  return content === '' ? [] : [{ type: 'text', text: content }];
}

/**
 * Merges consecutive messages of the same role (Anthropic requires user and assistant to
 * alternate) and puts a user message's tool_result blocks before its other blocks (Anthropic's
 * tool-use guide: tool results first). A message standing alone keeps its string content.
 */
function mergeRoles(messages: AnthropicMessage[]): AnthropicMessage[] {
  const out: AnthropicMessage[] = [];
  for (const m of messages) {
    const last = out[out.length - 1];
    if (last !== undefined && last.role === m.role) last.content = [...asBlocks(last.content), ...asBlocks(m.content)];
    else out.push({ role: m.role, content: m.content });
  }
  for (const m of out) {
    if (m.role === 'user' && typeof m.content !== 'string' && m.content.some((b) => b.type === 'tool_result')) {
      m.content = [...m.content.filter((b) => b.type === 'tool_result'), ...m.content.filter((b) => b.type !== 'tool_result')];
    }
  }
  return out;
}

/** OpenAI `tool_choice` → Anthropic `tool_choice`: none → none, auto → auto, required → any, `{type:'function', function:{name}}` → `{type:'tool', name}`. */
function toolChoice(v: unknown): JsonObject {
  if (v === 'none') return { type: 'none' };
  if (v === 'auto') return { type: 'auto' };
  if (v === 'required') return { type: 'any' };
  const choice = requireObject(v, 'tool_choice');
  if (choice.type === 'function') {
    const fn = requireObject(choice.function, 'tool_choice.function');
    return { type: 'tool', name: requireString(fn.name, 'tool_choice.function.name') };
  }
  throw new TranslationError(`tool_choice "${String(choice.type)}" cannot be sent to an Anthropic deployment.`, 'tool_choice');
}

/** OpenAI request fields whose loss would change the reply the client asked for. */
function refuseUntranslatable(b: JsonObject): void {
  if (!absent(b.n) && b.n !== 1) throw new TranslationError('"n" > 1 cannot be sent to an Anthropic deployment (one choice per request).', 'n');
  if (b.logprobs === true) throw new TranslationError('"logprobs" cannot be sent to an Anthropic deployment.', 'logprobs');
  if (!absent(b.top_logprobs)) throw new TranslationError('"top_logprobs" cannot be sent to an Anthropic deployment.', 'top_logprobs');
  if (!absent(b.audio)) throw new TranslationError('Audio output cannot be sent to an Anthropic deployment.', 'audio');
  if (!absent(b.modalities)) {
    const modalities = requireArray(b.modalities, 'modalities');
    if (modalities.some((x) => x !== 'text')) throw new TranslationError('Only the "text" modality can be sent to an Anthropic deployment.', 'modalities');
  }
  if (!absent(b.response_format) && requireObject(b.response_format, 'response_format').type !== 'text') {
    throw new TranslationError('"response_format" other than text cannot be sent to an Anthropic deployment.', 'response_format');
  }
  for (const field of ['functions', 'function_call', 'web_search_options']) {
    if (!absent(b[field])) throw new TranslationError(`"${field}" cannot be sent to an Anthropic deployment.`, field);
  }
}

/**
 * An OpenAI chat completion request → an Anthropic Messages request for `opts.model`.
 * - `system` and `developer` messages (wherever they are) → `system`: their texts joined with blank lines.
 * - user / assistant messages → the same roles; string content stays a string, parts become blocks
 *   (text; image_url with a base64 data URL → base64 image source, an http(s) URL → url source).
 * - assistant `tool_calls` → `tool_use` blocks (`arguments` parsed; not a JSON object → TranslationError).
 * - `tool` messages → `tool_result` blocks in a user message; consecutive same-role messages merged.
 * - `tools` (function) → `{name, description, input_schema, strict}`; `tool_choice` mapped; `parallel_tool_calls: false`
 *   → `disable_parallel_tool_use: true`.
 * - `stop` → `stop_sequences`; `max_completion_tokens ?? max_tokens ?? opts.defaultMaxTokens` → `max_tokens`;
 *   `temperature` (0..1, Anthropic's range), `top_p`, `stream` copied; `user` → `metadata.user_id`.
 * @throws TranslationError for a malformed body or a field listed as not translated in the module doc.
 */
export function openAIChatToAnthropic(body: unknown, opts: { model: string; defaultMaxTokens: number }): Record<string, unknown> {
  const b = requireObject(body, null);
  refuseUntranslatable(b);
  const system: string[] = [];
  const converted: AnthropicMessage[] = [];
  requireArray(b.messages, 'messages').forEach((raw, i) => {
    const p = `messages[${i}]`;
    const m = requireObject(raw, p);
    switch (m.role) {
      case 'system':
      case 'developer':
        system.push(...textPieces(m.content, `${p}.content`));
        break;
      case 'user':
        converted.push({ role: 'user', content: userBlocks(m.content, `${p}.content`) });
        break;
      case 'assistant': {
        const content = assistantContent(m, p);
        if (content.length > 0) converted.push({ role: 'assistant', content });
        break;
      }
      case 'tool': {
        const id = requireString(m.tool_call_id, `${p}.tool_call_id`);
        const content = typeof m.content === 'string' ? m.content : textPieces(m.content, `${p}.content`).map((text) => ({ type: 'text' as const, text }));
        converted.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content }] });
        break;
      }
      default:
        throw new TranslationError(`Message role "${String(m.role)}" cannot be sent to an Anthropic deployment.`, `${p}.role`);
    }
  });
  const messages = mergeRoles(converted);
  if (messages.length === 0) throw new TranslationError('At least one user or assistant message is required.', 'messages');

  const maxCompletion = absent(b.max_completion_tokens) ? undefined : requirePositiveInt(b.max_completion_tokens, 'max_completion_tokens');
  const maxTokens = absent(b.max_tokens) ? undefined : requirePositiveInt(b.max_tokens, 'max_tokens');
  const out: Record<string, unknown> = { model: opts.model, max_tokens: maxCompletion ?? maxTokens ?? opts.defaultMaxTokens, messages };
  if (system.length > 0) out.system = system.join('\n\n');

  if (!absent(b.tools)) {
    out.tools = requireArray(b.tools, 'tools').map((t, i) => {
      const tool = requireObject(t, `tools[${i}]`);
      if (tool.type !== 'function') throw new TranslationError(`Tool type "${String(tool.type)}" cannot be sent to an Anthropic deployment.`, `tools[${i}].type`);
      const fn = requireObject(tool.function, `tools[${i}].function`);
      const def: JsonObject = { name: requireString(fn.name, `tools[${i}].function.name`) };
      if (!absent(fn.description)) def.description = requireString(fn.description, `tools[${i}].function.description`);
      def.input_schema = absent(fn.parameters) ? { type: 'object', properties: {} } : requireObject(fn.parameters, `tools[${i}].function.parameters`);
      if (typeof fn.strict === 'boolean') def.strict = fn.strict;
      return def;
    });
  }
  let choice = absent(b.tool_choice) ? undefined : toolChoice(b.tool_choice);
  if (b.parallel_tool_calls === false && choice?.type !== 'none') choice = { ...(choice ?? { type: 'auto' }), disable_parallel_tool_use: true };
  if (choice !== undefined) out.tool_choice = choice;

  if (typeof b.stop === 'string') out.stop_sequences = [b.stop];
  else if (!absent(b.stop)) out.stop_sequences = requireArray(b.stop, 'stop').map((s, i) => requireString(s, `stop[${i}]`));
  if (!absent(b.temperature)) out.temperature = requireNumberIn(b.temperature, 0, 1, 'temperature', ' on an Anthropic deployment');
  if (!absent(b.top_p)) out.top_p = requireNumberIn(b.top_p, 0, 1, 'top_p', '');
  if (!absent(b.stream)) {
    if (typeof b.stream !== 'boolean') throw new TranslationError('"stream" must be a boolean.', 'stream');
    out.stream = b.stream;
  }
  if (!absent(b.user)) out.metadata = { user_id: requireString(b.user, 'user') };
  return out;
}

/** OpenAI `finish_reason` → Anthropic `stop_reason` (OpenAI does not say whether a stop sequence matched: `stop` → `end_turn`). */
export function stopReasonOf(finish: unknown): string {
  switch (finish) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
    case 'function_call':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

/**
 * OpenAI `usage` → Anthropic usage fields. OpenAI's `prompt_tokens` includes cached tokens
 * (`prompt_tokens_details.cached_tokens`); Anthropic's `input_tokens` excludes cache reads, which it
 * reports as `cache_read_input_tokens`. The sum is preserved.
 */
export function anthropicUsageOf(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  const prompt = num(u.prompt_tokens);
  const cached = Math.min(prompt, num(isObject(u.prompt_tokens_details) ? u.prompt_tokens_details.cached_tokens : 0));
  return { input_tokens: prompt - cached, cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: num(u.completion_tokens) };
}

/**
 * An OpenAI `chat.completion` reply → an Anthropic `message` (first choice): its content (or
 * refusal) → one text block, `tool_calls` → `tool_use` blocks with parsed arguments,
 * `finish_reason` → `stop_reason` (stop → end_turn, length → max_tokens, tool_calls → tool_use,
 * content_filter → refusal), usage → `input_tokens` / cache read / `output_tokens`.
 * @throws TranslationError when the reply has no choice or a tool call's arguments are not a JSON object.
 */
export function openAIResponseToAnthropic(json: unknown, model: string): Record<string, unknown> {
  const r = requireObject(json, null);
  const choice = requireObject(requireArray(r.choices, 'choices')[0], 'choices[0]');
  const message = requireObject(choice.message, 'choices[0].message');
  const content: AnthropicBlock[] = [];
  const text = typeof message.content === 'string' && message.content !== '' ? message.content : typeof message.refusal === 'string' ? message.refusal : '';
  if (text !== '') content.push({ type: 'text', text });
  const calls = assistantContent({ tool_calls: message.tool_calls }, 'choices[0].message');
  if (typeof calls !== 'string') content.push(...calls);
  return {
    id: typeof r.id === 'string' ? r.id : 'msg_translated',
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stopReasonOf(choice.finish_reason),
    stop_sequence: null,
    usage: anthropicUsageOf(r.usage),
  };
}
