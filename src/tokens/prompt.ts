/**
 * Prompt token counts of request bodies, with any {@link TextCounter} (estimate, exact, or chars).
 *
 * OpenAI chat follows the OpenAI cookbook "How to count tokens with tiktoken": 3 tokens per
 * message, every string field of a message counted (role, content, name, tool_call_id), 1 more per
 * `name`, 3 to prime the reply; tool definitions by the cookbook's `num_tokens_for_tools`
 * (function 7 / 10 tokens for o200k / cl100k, property 3, enum −3 + 3 per item, 12 at the end).
 * Tool calls in assistant messages count their name and arguments plus 3 (an approximation the
 * cookbook does not give). Images by {@link openAIImageUrlTokens}.
 *
 * Anthropic publishes no formula: the same per-message overhead, text and tool definitions counted
 * as text (schemas as JSON), images by {@link anthropicImageDataTokens}.
 */
import type { TextCounter } from './counters.ts';
import { anthropicImageDataTokens, openAIImageUrlTokens } from './images.ts';
import type { AnthropicBlock, AnthropicPrompt, EmbeddingInput, FunctionDefinition, OpenAIChatPrompt, OpenAIContentPart } from './types.ts';

const PER_MESSAGE = 3;
const PER_NAME = 1;
const REPLY_PRIMING = 3;

function openAIContent(content: unknown, counter: TextCounter): number {
  if (typeof content === 'string') return counter.count(content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const part of content as readonly OpenAIContentPart[]) {
    if (part === null || typeof part !== 'object') continue;
    if (typeof part.text === 'string') n += counter.count(part.text);
    const image = part.image_url;
    if (image !== undefined) {
      n += typeof image === 'string' ? openAIImageUrlTokens(image, undefined) : openAIImageUrlTokens(image.url, image.detail);
    }
  }
  return n;
}

function functionCall(call: { name?: unknown; arguments?: unknown } | undefined, counter: TextCounter): number {
  if (call === undefined || call === null || typeof call !== 'object') return 0;
  return 3 + (typeof call.name === 'string' ? counter.count(call.name) : 0) + (typeof call.arguments === 'string' ? counter.count(call.arguments) : 0);
}

function toolDefinitions(functions: readonly (FunctionDefinition | undefined)[], counter: TextCounter): number {
  if (functions.length === 0) return 0;
  const funcInit = counter.name.endsWith('cl100k_base') ? 10 : 7;
  let n = 0;
  for (const f of functions) {
    if (f === undefined || f === null || typeof f !== 'object') continue;
    n += funcInit;
    const desc = (f.description ?? '').replace(/\.$/, '');
    n += counter.count(`${f.name ?? ''}:${desc}`);
    const props = f.parameters?.properties;
    if (props !== undefined && props !== null && typeof props === 'object' && Object.keys(props).length > 0) {
      n += 3;
      for (const [key, p] of Object.entries(props)) {
        n += 3;
        if (p !== null && typeof p === 'object' && Array.isArray(p.enum)) {
          n -= 3;
          for (const item of p.enum) n += 3 + counter.count(String(item));
        }
        const pDesc = (typeof p?.description === 'string' ? p.description : '').replace(/\.$/, '');
        n += counter.count(`${key}:${String(p?.type ?? '')}:${pDesc}`);
      }
    }
  }
  return n + 12;
}

/** Prompt tokens as OpenAI reports `usage.prompt_tokens` for a chat completion body. */
export function countOpenAIChat(body: OpenAIChatPrompt, counter: TextCounter): number {
  let n = REPLY_PRIMING;
  for (const m of body.messages ?? []) {
    if (m === null || typeof m !== 'object') continue;
    n += PER_MESSAGE;
    for (const [key, value] of Object.entries(m)) {
      if (key === 'content') n += openAIContent(value, counter);
      else if (key === 'tool_calls' && Array.isArray(value)) for (const call of value) n += functionCall((call as { function?: { name?: unknown } }).function, counter);
      else if (key === 'function_call') n += functionCall(value as { name?: unknown }, counter);
      else if (typeof value === 'string') n += counter.count(value) + (key === 'name' ? PER_NAME : 0);
    }
  }
  const defs: (FunctionDefinition | undefined)[] = [];
  for (const t of body.tools ?? []) defs.push(t?.function);
  for (const f of body.functions ?? []) defs.push(f);
  return n + toolDefinitions(defs, counter);
}

function anthropicBlocks(content: unknown, counter: TextCounter): number {
  if (typeof content === 'string') return counter.count(content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const block of content as readonly AnthropicBlock[]) {
    if (block === null || typeof block !== 'object') continue;
    if (typeof block.text === 'string') n += counter.count(block.text);
    if (block.type === 'image') n += anthropicImageDataTokens(block.source?.data);
    if (block.type === 'tool_use') n += counter.count(block.name ?? '') + counter.count(JSON.stringify(block.input ?? {}));
    if (block.type === 'tool_result') n += anthropicBlocks(block.content, counter);
  }
  return n;
}

/** Input tokens of an Anthropic /v1/messages body (system, messages, tools, images). */
export function countAnthropicMessages(body: AnthropicPrompt, counter: TextCounter): number {
  let n = REPLY_PRIMING + anthropicBlocks(body.system, counter);
  for (const m of body.messages ?? []) {
    if (m === null || typeof m !== 'object') continue;
    n += PER_MESSAGE + anthropicBlocks(m.content, counter);
  }
  for (const t of body.tools ?? []) {
    if (t === null || typeof t !== 'object') continue;
    n += counter.count(t.name ?? '') + counter.count(t.description ?? '') + counter.count(JSON.stringify(t.input_schema ?? {}));
  }
  return n;
}

/** Input tokens of an OpenAI embeddings `input`; token arrays count their length. */
export function countEmbeddingInput(input: EmbeddingInput, counter: TextCounter): number {
  if (typeof input === 'string') return counter.count(input);
  let n = 0;
  for (const item of input) {
    if (typeof item === 'string') n += counter.count(item);
    else if (typeof item === 'number') n += 1;
    else if (Array.isArray(item)) n += item.length;
  }
  return n;
}
