/**
 * Anthropic Messages ⇄ AWS Bedrock Converse: a `/v1/messages` request rewritten as a Converse
 * (or ConverseStream) request body, and a Converse reply rewritten as an Anthropic `message`.
 * An OpenAI chat request reaches Bedrock through {@link openAIChatToAnthropic} first (one
 * translation per pair of formats, so failover between all three shares the same rules).
 *
 * Field names follow the Amazon Bedrock API reference (https://docs.aws.amazon.com/bedrock/latest/APIReference/):
 * `API_runtime_Converse` (request: `messages`, `system`, `inferenceConfig` {`maxTokens`,
 * `temperature`, `topP`, `stopSequences`}, `toolConfig` {`tools[].toolSpec` {`name`,
 * `description`, `inputSchema.json`}, `toolChoice` {`auto`|`any`|`tool.name`}},
 * `additionalModelRequestFields`; reply: `output.message`, `stopReason`, `usage` {`inputTokens`,
 * `outputTokens`, `totalTokens`, `cacheReadInputTokens`, `cacheWriteInputTokens`}),
 * `API_runtime_ContentBlock` (`text`, `image` {`format`, `source.bytes`}, `document`, `toolUse`
 * {`toolUseId`, `name`, `input`}, `toolResult` {`toolUseId`, `content`, `status`},
 * `reasoningContent` {`reasoningText` {`text`, `signature`} | `redactedContent`}, `cachePoint`),
 * and `API_runtime_SystemContentBlock`. Blobs (`bytes`) travel as base64 in the JSON protocol.
 *
 * Not translated (TranslationError: the client would silently get something else): URL image
 * sources (Converse takes bytes or S3 only), URL documents, `tool_choice: none`, server tools
 * (web search, code execution, ...), `mcp_servers`, `container`, and content blocks Converse has
 * no equivalent for. Carried in `additionalModelRequestFields` (Anthropic models on Bedrock read
 * them there): `top_k`, `thinking`. Dropped: `metadata`, `service_tier`, `stream` (the path says
 * it), `disable_parallel_tool_use`, and any field not named here. `cache_control` on a block or a
 * tool becomes a `cachePoint` after it.
 */
import { randomUUID } from 'node:crypto';
import { TranslationError, absent, isObject, num, requireArray, requireObject, requirePositiveInt, requireString, type JsonObject } from './openai-to-anthropic.ts';

/** Converse image formats by Anthropic media type (`ImageBlock.format`). */
const IMAGE_FORMATS: Readonly<Record<string, string>> = { 'image/jpeg': 'jpeg', 'image/png': 'png', 'image/gif': 'gif', 'image/webp': 'webp' };

const CACHE_POINT: JsonObject = { cachePoint: { type: 'default' } };

/** Anthropic `image` block → Converse `image` block (base64 sources only). */
function imageOf(block: JsonObject, param: string): JsonObject {
  const source = requireObject(block.source, `${param}.source`);
  if (source.type !== 'base64') throw new TranslationError('Bedrock Converse takes images as bytes: send the image base64-encoded, not by URL.', `${param}.source`);
  const format = IMAGE_FORMATS[requireString(source.media_type, `${param}.source.media_type`)];
  if (format === undefined) throw new TranslationError('Bedrock Converse takes jpeg, png, gif and webp images.', `${param}.source.media_type`);
  return { image: { format, source: { bytes: requireString(source.data, `${param}.source.data`) } } };
}

/** Anthropic `document` block → Converse `document` block (base64 PDF or plain text). */
function documentOf(block: JsonObject, param: string, n: number): JsonObject {
  const source = requireObject(block.source, `${param}.source`);
  const name = typeof block.title === 'string' && block.title !== '' ? block.title : `document-${n}`;
  if (source.type === 'base64' && source.media_type === 'application/pdf') return { document: { format: 'pdf', name, source: { bytes: requireString(source.data, `${param}.source.data`) } } };
  if (source.type === 'text') return { document: { format: 'txt', name, source: { bytes: Buffer.from(requireString(source.data, `${param}.source.data`)).toString('base64') } } };
  throw new TranslationError('Bedrock Converse takes documents as base64 PDF or text, not by URL or file id.', `${param}.source`);
}

/** Anthropic `tool_result.content` → Converse `toolResult.content` (text and image blocks). */
function toolResultContent(content: unknown, param: string): JsonObject[] {
  if (absent(content)) return [];
  if (typeof content === 'string') return [{ text: content }];
  return requireArray(content, param).map((b, i) => {
    const block = requireObject(b, `${param}.${i}`);
    if (block.type === 'text') return { text: requireString(block.text, `${param}.${i}.text`) };
    if (block.type === 'image') return imageOf(block, `${param}.${i}`);
    throw new TranslationError(`A tool result block of type "${String(block.type)}" has no Bedrock Converse equivalent.`, `${param}.${i}.type`);
  });
}

/** One Anthropic content block → Converse content blocks (a `cachePoint` follows a block with `cache_control`). */
function blocksOf(block: JsonObject, param: string, n: number): JsonObject[] {
  let out: JsonObject;
  switch (block.type) {
    case 'text':
      out = { text: requireString(block.text, `${param}.text`) };
      break;
    case 'image':
      out = imageOf(block, param);
      break;
    case 'document':
      out = documentOf(block, param, n);
      break;
    case 'tool_use':
      out = { toolUse: { toolUseId: requireString(block.id, `${param}.id`), name: requireString(block.name, `${param}.name`), input: isObject(block.input) ? block.input : {} } };
      break;
    case 'tool_result':
      out = {
        toolResult: {
          toolUseId: requireString(block.tool_use_id, `${param}.tool_use_id`),
          content: toolResultContent(block.content, `${param}.content`),
          status: block.is_error === true ? 'error' : 'success',
        },
      };
      break;
    case 'thinking':
      out = { reasoningContent: { reasoningText: { text: requireString(block.thinking, `${param}.thinking`), ...(typeof block.signature === 'string' ? { signature: block.signature } : {}) } } };
      break;
    case 'redacted_thinking':
      out = { reasoningContent: { redactedContent: requireString(block.data, `${param}.data`) } };
      break;
    default:
      throw new TranslationError(`A content block of type "${String(block.type)}" has no Bedrock Converse equivalent.`, `${param}.type`);
  }
  return isObject(block.cache_control) ? [out, CACHE_POINT] : [out];
}

/** Anthropic `content` (a string or blocks) → Converse content blocks. */
function contentOf(content: unknown, param: string): JsonObject[] {
  if (typeof content === 'string') return [{ text: content }];
  let documents = 0;
  return requireArray(content, param).flatMap((b, i) => {
    const block = requireObject(b, `${param}.${i}`);
    return blocksOf(block, `${param}.${i}`, block.type === 'document' ? ++documents : 0);
  });
}

/** Anthropic `tools` and `tool_choice` → Converse `toolConfig`, or undefined when there are no tools. */
function toolConfigOf(body: JsonObject): JsonObject | undefined {
  if (absent(body.tools)) {
    if (!absent(body.tool_choice)) throw new TranslationError('"tool_choice" needs "tools".', 'tool_choice');
    return undefined;
  }
  const tools = requireArray(body.tools, 'tools').flatMap((t, i) => {
    const tool = requireObject(t, `tools.${i}`);
    if (tool.type !== undefined && tool.type !== 'custom') throw new TranslationError(`Server tool "${String(tool.type)}" has no Bedrock Converse equivalent.`, `tools.${i}.type`);
    const spec: JsonObject = { name: requireString(tool.name, `tools.${i}.name`), inputSchema: { json: requireObject(tool.input_schema, `tools.${i}.input_schema`) } };
    if (typeof tool.description === 'string') spec.description = tool.description;
    return isObject(tool.cache_control) ? [{ toolSpec: spec }, CACHE_POINT] : [{ toolSpec: spec }];
  });
  if (tools.length === 0) return undefined;
  const config: JsonObject = { tools };
  if (!absent(body.tool_choice)) {
    const choice = requireObject(body.tool_choice, 'tool_choice');
    if (choice.type === 'auto') config.toolChoice = { auto: {} };
    else if (choice.type === 'any') config.toolChoice = { any: {} };
    else if (choice.type === 'tool') config.toolChoice = { tool: { name: requireString(choice.name, 'tool_choice.name') } };
    else throw new TranslationError(`tool_choice "${String(choice.type)}" has no Bedrock Converse equivalent.`, 'tool_choice.type');
  }
  return config;
}

/**
 * An Anthropic Messages request body → a Converse request body (the model id goes in the path).
 * @throws TranslationError naming the field that cannot be said in Converse.
 */
export function anthropicToBedrock(body: unknown): JsonObject {
  const b = requireObject(body, null);
  for (const field of ['mcp_servers', 'container'] as const) {
    if (!absent(b[field])) throw new TranslationError(`"${field}" has no Bedrock Converse equivalent.`, field);
  }
  const out: JsonObject = {
    messages: requireArray(b.messages, 'messages').map((m, i) => {
      const message = requireObject(m, `messages.${i}`);
      const role = message.role;
      if (role !== 'user' && role !== 'assistant') throw new TranslationError('"role" must be user or assistant.', `messages.${i}.role`);
      return { role, content: contentOf(message.content, `messages.${i}.content`) };
    }),
  };
  if (!absent(b.system)) out.system = contentOf(b.system, 'system');
  const inference: JsonObject = { maxTokens: requirePositiveInt(b.max_tokens, 'max_tokens') };
  if (typeof b.temperature === 'number') inference.temperature = b.temperature;
  if (typeof b.top_p === 'number') inference.topP = b.top_p;
  if (!absent(b.stop_sequences)) inference.stopSequences = requireArray(b.stop_sequences, 'stop_sequences').map((s, i) => requireString(s, `stop_sequences.${i}`));
  out.inferenceConfig = inference;
  const tools = toolConfigOf(b);
  if (tools !== undefined) out.toolConfig = tools;
  const extra: JsonObject = {};
  if (typeof b.top_k === 'number') extra.top_k = b.top_k;
  if (isObject(b.thinking)) extra.thinking = b.thinking;
  if (Object.keys(extra).length > 0) out.additionalModelRequestFields = extra;
  return out;
}

/** Anthropic `stop_reason` of a Converse `stopReason`. */
export function anthropicStopReasonOf(stopReason: unknown): string {
  switch (stopReason) {
    case 'tool_use':
    case 'max_tokens':
    case 'stop_sequence':
    case 'model_context_window_exceeded':
      return stopReason;
    case 'guardrail_intervened':
    case 'content_filtered':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

/** Anthropic `usage` of a Converse `usage` (`cacheWriteInputTokens` is Anthropic's cache creation). */
export function anthropicUsageOfBedrock(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  return { input_tokens: num(u.inputTokens), cache_creation_input_tokens: num(u.cacheWriteInputTokens), cache_read_input_tokens: num(u.cacheReadInputTokens), output_tokens: num(u.outputTokens) };
}

/** A Converse content block of a reply → an Anthropic content block; undefined for kinds not carried (citations, images). */
function replyBlockOf(b: unknown, param: string): JsonObject | undefined {
  const block = requireObject(b, param);
  if (typeof block.text === 'string') return { type: 'text', text: block.text };
  if (isObject(block.toolUse)) {
    const use = block.toolUse;
    return { type: 'tool_use', id: requireString(use.toolUseId, `${param}.toolUse.toolUseId`), name: requireString(use.name, `${param}.toolUse.name`), input: isObject(use.input) ? use.input : {} };
  }
  if (isObject(block.reasoningContent)) {
    const r = block.reasoningContent;
    if (isObject(r.reasoningText)) return { type: 'thinking', thinking: requireString(r.reasoningText.text, `${param}.reasoningContent.reasoningText.text`), signature: typeof r.reasoningText.signature === 'string' ? r.reasoningText.signature : '' };
    if (typeof r.redactedContent === 'string') return { type: 'redacted_thinking', data: r.redactedContent };
  }
  return undefined;
}

/**
 * A Converse reply → an Anthropic `message`: text, tool use and reasoning blocks; `stopReason`
 * mapped ({@link anthropicStopReasonOf}); usage with the cache fields.
 * @param model the model name the client sees. @param id the message id. @default a fresh `msg_bdrk_…`
 * @throws TranslationError when the reply has no `output.message.content` array.
 */
export function bedrockResponseToAnthropic(json: unknown, model: string, id = `msg_bdrk_${randomUUID().replaceAll('-', '')}`): JsonObject {
  const r = requireObject(json, null);
  const message = requireObject(requireObject(r.output, 'output').message, 'output.message');
  const content = requireArray(message.content, 'output.message.content')
    .map((b, i) => replyBlockOf(b, `output.message.content.${i}`))
    .filter((b): b is JsonObject => b !== undefined);
  return { id, type: 'message', role: 'assistant', model, content, stop_reason: anthropicStopReasonOf(r.stopReason), stop_sequence: null, usage: anthropicUsageOfBedrock(r.usage) };
}
