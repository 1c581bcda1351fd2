/**
 * AWS Bedrock `POST /model/{modelId}/converse` and `/converse-stream` (Amazon Bedrock API
 * reference, `API_runtime_Converse` and `API_runtime_ConverseStream`): a Converse JSON reply
 * (`output.message`, `stopReason`, `usage` {`inputTokens`, `outputTokens`, `totalTokens`},
 * `metrics.latencyMs`), or an `application/vnd.amazon.eventstream` reply whose messages are
 * `messageStart`, one `contentBlockDelta` (`delta.text`) per token, `contentBlockStop`,
 * `messageStop` (`stopReason`) and `metadata` (`usage`, `metrics`), each encoded with the AWS
 * event-stream codec. Like the real service, every event payload carries a `p` padding field.
 */
import type { AnthropicBlock, AnthropicPrompt } from '../tokens/index.ts';
import { encodeEvent } from '../providers/bedrock/event-stream.ts';
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, ReplyIdentity } from './prepared-request.ts';
import { headerValue, isJsonObject, type JsonObject } from './request-fields.ts';
import type { StreamPlan } from './reply-writer.ts';

/** The padding field real ConverseStream events carry (its length varies there; fixed here). */
const PADDING = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0';

/** A Bedrock-style validation message. */
function invalid(field: string, constraint: string): { message: string; param: string } {
  return { message: `1 validation error detected: Value at '${field}' failed to satisfy constraint: ${constraint}`, param: field };
}

/** Converse content blocks → Anthropic-shaped blocks, only to count them (the simulator's prompt counter speaks Anthropic). */
function blocksForCounting(content: unknown): AnthropicBlock[] {
  if (!Array.isArray(content)) return [];
  const out: AnthropicBlock[] = [];
  for (const b of content) {
    if (!isJsonObject(b)) continue;
    if (typeof b.text === 'string') out.push({ type: 'text', text: b.text });
    else if (isJsonObject(b.toolUse)) out.push({ type: 'tool_use', name: String(b.toolUse.name ?? ''), input: b.toolUse.input });
    else if (isJsonObject(b.toolResult)) {
      const parts = Array.isArray(b.toolResult.content) ? b.toolResult.content : [];
      out.push({ type: 'tool_result', content: parts.map((p) => ({ type: 'text', text: isJsonObject(p) ? (typeof p.text === 'string' ? p.text : JSON.stringify(p.json ?? '')) : '' })) });
    } else if (isJsonObject(b.image) && isJsonObject(b.image.source)) {
      out.push({ type: 'image', source: { type: 'base64', data: String(b.image.source.bytes ?? '') } });
    } else if (isJsonObject(b.reasoningContent) && isJsonObject(b.reasoningContent.reasoningText)) {
      out.push({ type: 'text', text: String(b.reasoningContent.reasoningText.text ?? '') });
    }
  }
  return out;
}

/** A Converse body as the Anthropic prompt the simulator counts (system, messages, tool specs). */
export function converseForCounting(body: JsonObject): AnthropicPrompt {
  const tools = isJsonObject(body.toolConfig) && Array.isArray(body.toolConfig.tools) ? body.toolConfig.tools : [];
  return {
    system: blocksForCounting(body.system),
    messages: (body.messages as unknown[]).map((m) => (isJsonObject(m) ? { role: String(m.role), content: blocksForCounting(m.content) } : {})),
    tools: tools.flatMap((t) => {
      if (!isJsonObject(t) || !isJsonObject(t.toolSpec)) return [];
      const spec = t.toolSpec;
      return [{ name: String(spec.name ?? ''), ...(typeof spec.description === 'string' ? { description: spec.description } : {}), input_schema: isJsonObject(spec.inputSchema) ? spec.inputSchema.json : {} }];
    }),
  };
}

/** Binary string (one byte per character) of an encoded message, for a `latin1` StreamPlan. */
function frame(type: string, payload: JsonObject): string {
  return Buffer.from(encodeEvent(type, { ...payload, p: PADDING })).toString('latin1');
}

/** Prepares a Converse request; `stream` says which route (ConverseStream) it came on. */
function prepareConverse(stream: boolean): Prepare {
  return (body, model, headers, ctx) => {
    if (!isJsonObject(body)) return invalid('body', 'Member must be a JSON object');
    const messages = body.messages;
    if (!Array.isArray(messages) || messages.length === 0) return invalid('messages', 'Member must not be null or empty');
    for (const [i, m] of messages.entries()) {
      if (!isJsonObject(m) || (m.role !== 'user' && m.role !== 'assistant')) return invalid(`messages.${i + 1}.member.role`, 'Member must satisfy enum value set: [user, assistant]');
      if (!Array.isArray(m.content)) return invalid(`messages.${i + 1}.member.content`, 'Member must not be null');
    }
    const inference = body.inferenceConfig;
    let cap: number | undefined;
    if (inference !== undefined) {
      if (!isJsonObject(inference)) return invalid('inferenceConfig', 'Member must be a structure');
      const max = inference.maxTokens;
      if (max !== undefined) {
        if (typeof max !== 'number' || !Number.isSafeInteger(max) || max < 1) return invalid('inferenceConfig.maxTokens', 'Member must have value greater than or equal to 1');
        cap = max;
      }
    }
    const out = outputLength(headerValue(headers['x-sim-output-tokens']), cap, ctx.defaultOutputTokens);
    if (typeof out === 'string') return { message: out, param: null };
    const input = ctx.prompts.anthropicMessages(model, converseForCounting(body));
    const completion = out.tokens;
    const stop = out.hitCap ? 'max_tokens' : 'end_turn';
    const usage = { inputTokens: input, outputTokens: completion, totalTokens: input + completion };
    return {
      model,
      stream,
      promptTokens: input,
      outputTokens: completion,
      reserveTokens: input + (cap ?? completion),
      json: (_ids: ReplyIdentity) =>
        JSON.stringify({ output: { message: { role: 'assistant', content: [{ text: outputText(completion) }] } }, stopReason: stop, usage, metrics: { latencyMs: 1 } }),
      plan: (_ids: ReplyIdentity): StreamPlan => ({
        head: frame('messageStart', { role: 'assistant' }),
        unit: frame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: OUTPUT_UNIT } }),
        units: completion,
        tail: frame('contentBlockStop', { contentBlockIndex: 0 }) + frame('messageStop', { stopReason: stop }) + frame('metadata', { usage, metrics: { latencyMs: 1 } }),
        encoding: 'latin1',
      }),
    };
  };
}

/** `POST /model/{modelId}/converse`. */
export const prepareBedrockConverse: Prepare = prepareConverse(false);

/** `POST /model/{modelId}/converse-stream`. */
export const prepareBedrockConverseStream: Prepare = prepareConverse(true);
