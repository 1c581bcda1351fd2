/**
 * OpenAI Responses → OpenAI Chat Completions: a `POST /v1/responses` body rewritten for
 * `POST /v1/chat/completions`, so a Responses request can be served by a deployment without the
 * Responses API (an OpenAI-compatible server, or an Anthropic deployment through the chat →
 * Anthropic translation), and so its prompt can be counted by the chat rules.
 *
 * Field names follow the OpenAI API reference ("Responses", "Chat Completions") as typed by the
 * official `openai` SDK 6.49 (`ResponseCreateParamsBase`, `ResponseInputItem`, `FunctionTool`,
 * `ResponseTextConfig`; `ChatCompletionCreateParamsBase`, `ChatCompletionMessageParam`).
 *
 * Mapping: `instructions` → a `system` message first; `input` text → a user message; message items
 * (`input_text`/`output_text` → text parts, `input_image` by URL → `image_url`, `input_file` by id
 * or data → a `file` part, `refusal` → text) keep their role (`developer` stays `developer`);
 * `function_call` items → an assistant message's `tool_calls` (consecutive calls share one);
 * `function_call_output` → a `tool` message; `reasoning` items are dropped (chat takes none back);
 * function `tools` and `tool_choice`; `max_output_tokens` → `max_completion_tokens`;
 * `text.format` → `response_format`; `text.verbosity` → `verbosity`; `reasoning.effort` →
 * `reasoning_effort`; `temperature`, `top_p`, `parallel_tool_calls`, `user`, `service_tier`,
 * `safety_identifier`, `prompt_cache_key`, `top_logprobs` (with `logprobs: true`) as they are;
 * `stream` with `stream_options.include_usage`.
 *
 * Not translated (TranslationError: only the provider that holds the state can serve them):
 * `previous_response_id`, `conversation`, a stored `prompt`, `background`, `item_reference` items,
 * images by `file_id`, files by `file_url`, built-in tools (web search, file search, code
 * interpreter, MCP, ...) and their call items, tool choices other than auto/none/required/a function.
 * Dropped (no chat equivalent, output unchanged): `store`, `include`, `truncation`, `metadata`,
 * `reasoning.summary`, `max_tool_calls`, `prompt_cache_retention`, `stream_options`.
 *
 * In counting mode ({@link responsesPromptForCounting}) nothing is refused: what cannot be said in
 * chat is approximated (a built-in tool by its JSON, an image by id at the assumed size) and each
 * piece of context stored at the provider is counted in `storedRefs`.
 */
import { TranslationError, absent, isObject, type JsonObject } from './openai-to-anthropic.ts';

/** The chat body of a Responses request, and what it refers to that only the provider holds. */
export interface CountablePrompt {
  /** A chat completions body with the request's messages and tools (never sent anywhere). */
  readonly chat: JsonObject;
  /**
   * Pieces of context stored at the provider the request names: a previous response, a
   * conversation, a stored prompt, each file or image given by `file_id`, each `item_reference`.
   */
  readonly storedRefs: number;
}

type Mode = { readonly strict: true } | { readonly strict: false; refs: number };

function refuse(mode: Mode, message: string, param: string): void {
  if (mode.strict) throw new TranslationError(message, param);
  mode.refs++;
}

/** Text of an item's `output` (a string, or a list of parts). */
function outputText(output: unknown): string {
  if (typeof output === 'string') return output;
  if (!Array.isArray(output)) return '';
  return output.map((p: unknown) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('');
}

/** One content part of a message item as a chat part; undefined when dropped. */
function chatPart(part: unknown, param: string, mode: Mode): JsonObject | undefined {
  if (!isObject(part)) throw new TranslationError(`"${param}" must be an object.`, param);
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      return { type: 'text', text: typeof part.text === 'string' ? part.text : '' };
    case 'refusal':
      return { type: 'text', text: typeof part.refusal === 'string' ? part.refusal : '' };
    case 'input_image': {
      const detail = typeof part.detail === 'string' ? part.detail : 'auto';
      if (typeof part.image_url === 'string') return { type: 'image_url', image_url: { url: part.image_url, detail } };
      refuse(mode, 'An image given by file_id has no chat-completions equivalent.', `${param}.file_id`);
      // Counting: an image of the assumed size.
      return { type: 'image_url', image_url: { url: '', detail } };
    }
    case 'input_file': {
      if (typeof part.file_id === 'string') {
        if (!mode.strict) mode.refs++;
        return { type: 'file', file: { file_id: part.file_id } };
      }
      if (typeof part.file_data === 'string') {
        const file: JsonObject = { file_data: part.file_data };
        if (typeof part.filename === 'string') file.filename = part.filename;
        return { type: 'file', file };
      }
      refuse(mode, 'A file given by file_url has no chat-completions equivalent.', `${param}.file_url`);
      return undefined;
    }
    default:
      if (mode.strict) throw new TranslationError(`A content part of type ${JSON.stringify(part.type)} has no chat-completions equivalent.`, `${param}.type`);
      return { type: 'text', text: JSON.stringify(part) };
  }
}

/** A message item's content as chat content: a string stays one; assistant parts become one string. */
function chatContent(content: unknown, role: string, param: string, mode: Mode): unknown {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new TranslationError(`"${param}" must be a string or an array of content parts.`, param);
  const parts = content.map((p, i) => chatPart(p, `${param}[${i}]`, mode)).filter((p): p is JsonObject => p !== undefined);
  // Chat assistant messages take text (and refusal) parts only: one string.
  if (role === 'assistant') return parts.map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
  return parts;
}

/** `input` items as chat messages, appended to `messages`. */
function inputMessages(input: unknown, messages: JsonObject[], mode: Mode): void {
  if (absent(input)) return;
  if (typeof input === 'string') {
    messages.push({ role: 'user', content: input });
    return;
  }
  if (!Array.isArray(input)) throw new TranslationError('"input" must be a string or an array of input items.', 'input');
  input.forEach((raw: unknown, i) => {
    const param = `input[${i}]`;
    if (!isObject(raw)) throw new TranslationError(`"${param}" must be an object.`, param);
    const type = raw.type ?? 'message';
    switch (type) {
      case 'message': {
        const role = typeof raw.role === 'string' ? raw.role : 'user';
        messages.push({ role, content: chatContent(raw.content, role, `${param}.content`, mode) });
        return;
      }
      case 'function_call': {
        const call = { id: raw.call_id, type: 'function', function: { name: raw.name, arguments: typeof raw.arguments === 'string' ? raw.arguments : '' } };
        const last = messages.at(-1);
        if (last !== undefined && last.role === 'assistant') {
          const calls = Array.isArray(last.tool_calls) ? (last.tool_calls as unknown[]) : [];
          last.tool_calls = [...calls, call];
          if (last.content === '') last.content = null;
        } else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        return;
      }
      case 'function_call_output':
        messages.push({ role: 'tool', tool_call_id: raw.call_id, content: outputText(raw.output) });
        return;
      case 'reasoning':
        return;
      case 'item_reference':
        refuse(mode, 'An item_reference names an item stored at the provider: only a deployment with the Responses API can resolve it.', param);
        return;
      default:
        if (mode.strict) throw new TranslationError(`An input item of type ${JSON.stringify(type)} has no chat-completions equivalent.`, `${param}.type`);
        messages.push({ role: 'user', content: JSON.stringify(raw) });
    }
  });
}

/** Function tools as chat tools. */
function chatTools(tools: unknown, mode: Mode): JsonObject[] | undefined {
  if (absent(tools)) return undefined;
  if (!Array.isArray(tools)) throw new TranslationError('"tools" must be an array.', 'tools');
  return tools.map((t: unknown, i) => {
    if (!isObject(t)) throw new TranslationError(`"tools[${i}]" must be an object.`, `tools[${i}]`);
    if (t.type !== 'function') {
      if (mode.strict) throw new TranslationError(`The ${JSON.stringify(t.type)} tool is built into the Responses API and has no chat-completions equivalent.`, `tools[${i}].type`);
      return { type: 'function', function: { name: String(t.type), description: JSON.stringify(t) } };
    }
    const fn: JsonObject = { name: t.name };
    if (typeof t.description === 'string') fn.description = t.description;
    if (!absent(t.parameters)) fn.parameters = t.parameters;
    if (typeof t.strict === 'boolean') fn.strict = t.strict;
    return { type: 'function', function: fn };
  });
}

function chatToolChoice(choice: unknown): unknown {
  if (typeof choice === 'string') return choice;
  if (isObject(choice) && choice.type === 'function' && typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  throw new TranslationError('Only the auto, none, required and function tool choices have a chat-completions equivalent.', 'tool_choice');
}

function chatResponseFormat(format: unknown): unknown {
  if (!isObject(format) || format.type === 'text') return undefined;
  if (format.type === 'json_object') return { type: 'json_object' };
  if (format.type === 'json_schema') {
    const schema: JsonObject = { name: format.name, schema: format.schema };
    if (typeof format.description === 'string') schema.description = format.description;
    if (typeof format.strict === 'boolean') schema.strict = format.strict;
    return { type: 'json_schema', json_schema: schema };
  }
  throw new TranslationError(`The text format ${JSON.stringify(format.type)} has no chat-completions equivalent.`, 'text.format.type');
}

/** Fields copied as they are. */
const SAME_FIELDS = ['temperature', 'top_p', 'parallel_tool_calls', 'user', 'service_tier', 'safety_identifier', 'prompt_cache_key'] as const;

function convert(raw: unknown, model: string, mode: Mode): JsonObject {
  if (!isObject(raw)) throw new TranslationError('The body must be a JSON object.', null);
  if (mode.strict) {
    for (const field of ['previous_response_id', 'conversation', 'prompt'] as const) {
      if (!absent(raw[field])) throw new TranslationError(`"${field}" names context stored at the provider: only a deployment with the Responses API can serve it.`, field);
    }
    if (raw.background === true) throw new TranslationError('"background" needs a deployment with the Responses API.', 'background');
  } else {
    if (!absent(raw.previous_response_id)) mode.refs++;
    if (!absent(raw.conversation)) mode.refs++;
    if (!absent(raw.prompt)) mode.refs++;
  }
  const messages: JsonObject[] = [];
  if (typeof raw.instructions === 'string') messages.push({ role: 'system', content: raw.instructions });
  else if (Array.isArray(raw.instructions)) inputMessages(raw.instructions, messages, mode);
  inputMessages(raw.input, messages, mode);
  const chat: JsonObject = { model, messages };
  const tools = chatTools(raw.tools, mode);
  if (tools !== undefined && tools.length > 0) chat.tools = tools;
  if (!absent(raw.tool_choice) && mode.strict) chat.tool_choice = chatToolChoice(raw.tool_choice);
  if (!absent(raw.max_output_tokens)) chat.max_completion_tokens = raw.max_output_tokens;
  for (const field of SAME_FIELDS) if (!absent(raw[field])) chat[field] = raw[field];
  if (typeof raw.top_logprobs === 'number' && raw.top_logprobs > 0) {
    chat.logprobs = true;
    chat.top_logprobs = raw.top_logprobs;
  }
  if (isObject(raw.text)) {
    if (mode.strict) {
      const format = chatResponseFormat(raw.text.format);
      if (format !== undefined) chat.response_format = format;
    }
    if (typeof raw.text.verbosity === 'string') chat.verbosity = raw.text.verbosity;
  }
  if (isObject(raw.reasoning) && typeof raw.reasoning.effort === 'string') chat.reasoning_effort = raw.reasoning.effort;
  if (raw.stream === true) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  return chat;
}

/**
 * The chat completions body that asks the same of a chat deployment.
 * @param model the model name to send upstream.
 * @throws TranslationError for what only the Responses API can do (see the module comment).
 */
export function responsesToChat(body: unknown, opts: { model: string }): JsonObject {
  return convert(body, opts.model, { strict: true });
}

/**
 * The request's prompt as a chat body for the chat counting rules, and its stored references.
 * Never throws: a shape the mapping does not know (the provider will judge it) is counted as the
 * JSON text of `instructions` and `input` in one user message.
 */
export function responsesPromptForCounting(body: unknown): CountablePrompt {
  const mode: Mode = { strict: false, refs: 0 };
  try {
    const chat = convert(body, '', mode);
    return { chat, storedRefs: mode.refs };
  } catch {
    const b = isObject(body) ? body : {};
    const text = JSON.stringify([b.instructions ?? null, b.input ?? null]);
    return { chat: { messages: [{ role: 'user', content: text }] }, storedRefs: mode.refs };
  }
}
