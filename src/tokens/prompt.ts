/**
 * Prompt token counts of request bodies, with any {@link TextCounter} (estimate, exact, or chars).
 * Never throws on odd shapes: what is not where the rules expect it is skipped.
 */
import type { TextCounter } from './encoding.ts';
import { anthropicImageDataTokens, openAIImageUrlTokens } from './images.ts';
import type { AnthropicBlock, AnthropicPrompt, EmbeddingInput, FunctionDefinition, OpenAIChatPrompt, OpenAIContentPart, SchemaProperty } from './types.ts';

/** Tokens per message (`<|start|>{role/name}\n{content}<|end|>\n`), OpenAI cookbook. */
const PER_MESSAGE = 3;
/** Extra token when a message has a `name`, OpenAI cookbook. */
const PER_NAME = 1;
/** Every reply is primed with `<|start|>assistant<|message|>`, OpenAI cookbook. */
const REPLY_PRIMING = 3;
/** Tokens around one tool call in an assistant message (not in the cookbook; approximation). */
const PER_TOOL_CALL = 3;
/** Nested schema levels read by the tool-definition rule. */
const MAX_SCHEMA_DEPTH = 8;

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object';

/**
 * JSON text of a value, or '' when it has none (a cycle cannot come from JSON.parse, but nesting
 * deep enough to overflow the stack can reach here when the body's depth limit is high).
 */
function jsonText(value: unknown): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return '';
  }
}

/**
 * A schema value (`type`, an enum item) as `String()` writes it, without calling anything from the
 * body: `String()` throws on an object whose `toString` is not a function (`{"toString": 1}`).
 */
function valueText(value: unknown, depth = 0): string {
  if (Array.isArray(value)) return depth > MAX_SCHEMA_DEPTH ? '' : value.map((v: unknown) => (v === null || v === undefined ? '' : valueText(v, depth + 1))).join(',');
  if (isObject(value)) return '[object Object]';
  return String(value);
}

function openAIContent(content: unknown, counter: TextCounter): number {
  if (typeof content === 'string') return counter.count(content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const part of content as readonly OpenAIContentPart[]) {
    if (!isObject(part)) continue;
    if (typeof part.text === 'string') n += counter.count(part.text);
    if (typeof part.refusal === 'string') n += counter.count(part.refusal);
    const image = part.image_url;
    if (typeof image === 'string') n += openAIImageUrlTokens(image, undefined);
    else if (isObject(image)) n += openAIImageUrlTokens(typeof image.url === 'string' ? image.url : undefined, typeof image.detail === 'string' ? image.detail : undefined);
  }
  return n;
}

function functionCall(call: unknown, counter: TextCounter): number {
  if (!isObject(call)) return 0;
  return PER_TOOL_CALL + (typeof call.name === 'string' ? counter.count(call.name) : 0) + (typeof call.arguments === 'string' ? counter.count(call.arguments) : 0);
}

const withoutFinalDot = (s: unknown): string => (typeof s !== 'string' ? '' : s.endsWith('.') ? s.slice(0, -1) : s);

/** Cookbook property rule, applied recursively to nested objects and array items (an extension). */
function schemaProperties(props: unknown, counter: TextCounter, depth: number): number {
  if (!isObject(props) || depth > MAX_SCHEMA_DEPTH) return 0;
  const entries = Object.entries(props as Record<string, SchemaProperty>);
  if (entries.length === 0) return 0;
  let n = 3; // prop_init
  for (const [key, p] of entries) {
    n += 3; // prop_key
    if (!isObject(p)) {
      n += counter.count(`${key}::`);
      continue;
    }
    if (Array.isArray(p.enum)) {
      n -= 3; // enum_init
      for (const item of p.enum) n += 3 + counter.count(valueText(item)); // enum_item + item
    }
    n += counter.count(`${key}:${valueText(p.type ?? '')}:${withoutFinalDot(p.description)}`);
    n += schemaProperties(p.properties ?? (isObject(p.items) ? p.items.properties : undefined), counter, depth + 1);
  }
  return n;
}

function toolDefinitions(functions: readonly unknown[], counter: TextCounter): number {
  if (functions.length === 0) return 0;
  const funcInit = counter.name.endsWith('cl100k_base') ? 10 : 7;
  let n = 0;
  for (const f of functions) {
    if (!isObject(f)) continue;
    const def = f as FunctionDefinition;
    n += funcInit + counter.count(`${typeof def.name === 'string' ? def.name : ''}:${withoutFinalDot(def.description)}`);
    n += schemaProperties(isObject(def.parameters) ? def.parameters.properties : undefined, counter, 1);
  }
  return n + 12; // func_end
}

/**
 * Prompt tokens as OpenAI reports `usage.prompt_tokens` for a chat completion body.
 *
 * Rules from the OpenAI cookbook "How to count tokens with tiktoken" (`num_tokens_from_messages`,
 * `num_tokens_for_tools`), which match the API for its examples (129 / 124 tokens for gpt-4 /
 * gpt-4o; 105 / 101 with its weather tool):
 * - 3 tokens per message, every string field of a message counted (role, content, name,
 *   tool_call_id, …), 1 more per `name`, 3 to prime the reply;
 * - tools / functions: per function 7 (o200k_base) or 10 (cl100k_base) + "name:description", 3 for
 *   the property list, per property 3 + "key:type:description", an enum −3 + per item 3 + item;
 *   12 at the end. Beyond the cookbook, nested object properties and array item properties are
 *   counted by the same rule, so deep schemas are not free;
 * - tool calls of assistant messages: 3 + name + arguments each (approximation);
 * - images: {@link openAIImageUrlTokens}. Audio and file parts are not counted.
 * @param counter counts text; its name's `cl100k_base` suffix selects the cl100k tool constants.
 * @returns tokens (≥ 3); never throws.
 */
export function countOpenAIChat(body: OpenAIChatPrompt, counter: TextCounter): number {
  let n = REPLY_PRIMING;
  const messages: unknown = isObject(body) ? body.messages : undefined;
  if (Array.isArray(messages)) {
    for (const m of messages) {
      if (!isObject(m)) continue;
      n += PER_MESSAGE;
      for (const key in m) {
        const value = m[key];
        if (key === 'content') n += openAIContent(value, counter);
        else if (key === 'tool_calls') {
          if (Array.isArray(value)) for (const call of value) n += functionCall(isObject(call) ? call.function : undefined, counter);
        } else if (key === 'function_call') n += functionCall(value, counter);
        else if (typeof value === 'string') n += counter.count(value) + (key === 'name' ? PER_NAME : 0);
      }
    }
  }
  const defs: unknown[] = [];
  const tools: unknown = isObject(body) ? body.tools : undefined;
  const functions: unknown = isObject(body) ? body.functions : undefined;
  if (Array.isArray(tools)) for (const t of tools) if (isObject(t) && isObject(t.function)) defs.push(t.function);
  if (Array.isArray(functions)) defs.push(...(functions as unknown[]));
  return n + toolDefinitions(defs, counter);
}

/**
 * Tokens of Anthropic's tool-use system prompt, added when `tools` is non-empty (Anthropic, "Tool
 * use pricing": a per-model count that depends on `tool_choice`). The values are those listed for
 * Claude 4-era models: 346 for `auto`/`none`, 313 for `any`/`tool`.
 */
export const ANTHROPIC_TOOL_SYSTEM_PROMPT = { auto: 346, any: 313 } as const;

function anthropicBlocks(content: unknown, counter: TextCounter, depth = 0): number {
  if (typeof content === 'string') return counter.count(content);
  if (!Array.isArray(content) || depth > 4) return 0;
  let n = 0;
  for (const block of content as readonly AnthropicBlock[]) {
    if (!isObject(block)) continue;
    if (typeof block.text === 'string') n += counter.count(block.text);
    switch (block.type) {
      case 'image': {
        const data = isObject(block.source) && block.source.type === 'base64' && typeof block.source.data === 'string' ? block.source.data : undefined;
        n += anthropicImageDataTokens(data);
        break;
      }
      case 'tool_use':
        n += (typeof block.name === 'string' ? counter.count(block.name) : 0) + counter.count(jsonText(block.input ?? {}));
        break;
      case 'tool_result':
        n += anthropicBlocks(block.content, counter, depth + 1);
        break;
      case 'document': {
        const source = block.source;
        if (isObject(source) && source.type === 'text' && typeof source.data === 'string') n += counter.count(source.data);
        else if (isObject(source) && source.type === 'content') n += anthropicBlocks(source.content, counter, depth + 1);
        if (typeof block.title === 'string') n += counter.count(block.title);
        if (typeof block.context === 'string') n += counter.count(block.context);
        break;
      }
      default:
    }
  }
  return n;
}

/**
 * Input tokens of an Anthropic /v1/messages body (system, messages, tools, images).
 *
 * Anthropic publishes no tokenizer and no message formula, so: 3 tokens per message and 3 for the
 * reply (as OpenAI's), text of system / messages / tool results / text documents with `counter`,
 * tool_use blocks as name + JSON input, tool definitions as name + description + JSON schema plus
 * {@link ANTHROPIC_TOOL_SYSTEM_PROMPT}, images by {@link anthropicImageDataTokens} (URL images at
 * the assumed size). Base64 PDF documents are not counted (no page count without parsing the PDF).
 * @returns tokens (≥ 3); never throws.
 */
export function countAnthropicMessages(body: AnthropicPrompt, counter: TextCounter): number {
  if (!isObject(body)) return REPLY_PRIMING;
  let n = REPLY_PRIMING + anthropicBlocks(body.system, counter);
  const messages: unknown = body.messages;
  if (Array.isArray(messages)) {
    for (const m of messages) if (isObject(m)) n += PER_MESSAGE + anthropicBlocks(m.content, counter);
  }
  const tools: unknown = body.tools;
  if (Array.isArray(tools) && tools.length > 0) {
    const choice = isObject(body.tool_choice) ? body.tool_choice.type : undefined;
    n += choice === 'any' || choice === 'tool' ? ANTHROPIC_TOOL_SYSTEM_PROMPT.any : ANTHROPIC_TOOL_SYSTEM_PROMPT.auto;
    for (const t of tools) {
      if (!isObject(t)) continue;
      if (typeof t.name === 'string') n += counter.count(t.name);
      if (typeof t.description === 'string') n += counter.count(t.description);
      if (t.input_schema !== undefined) n += counter.count(jsonText(t.input_schema));
    }
  }
  return n;
}

/**
 * Input tokens of an OpenAI /v1/embeddings `input`: texts are counted, token arrays count their
 * length (one number = one token); other items count 0.
 */
export function countEmbeddingInput(input: EmbeddingInput, counter: TextCounter): number {
  if (typeof input === 'string') return counter.count(input);
  if (!Array.isArray(input)) return 0;
  let n = 0;
  for (const item of input as readonly unknown[]) {
    if (typeof item === 'string') n += counter.count(item);
    else if (typeof item === 'number') n += 1;
    else if (Array.isArray(item)) n += item.length;
  }
  return n;
}
