/**
 * The call of a Bedrock deployment for a client of either format: the request in Converse
 * format (an OpenAI chat request through its Anthropic form), the reply — JSON or the
 * event stream — translated back into the client's format, usage from Converse's `usage` and the
 * stream's `metadata` event.
 */
import { BedrockStreamObserver, EVENT_STREAM_CONTENT_TYPE, bedrockUsage, conversePath } from '../providers/bedrock/converse.ts';
import { bedrockEvents } from '../providers/bedrock/event-stream.ts';
import { anthropicResponseToOpenAI } from '../providers/translate/anthropic-to-openai.ts';
import { anthropicToBedrock, bedrockResponseToAnthropic } from '../providers/translate/anthropic-to-bedrock.ts';
import { BedrockToAnthropicStream, BedrockToOpenAIStream } from '../providers/translate/bedrock-streams.ts';
import { openAIChatToAnthropic } from '../providers/translate/openai-to-anthropic.ts';
import type { DeploymentCall, StreamTranslator } from './request.ts';

/** What both client formats share in a Bedrock call. */
function converseCall(modelId: string, stream: boolean, converse: Record<string, unknown>, json: (text: string) => string, translator: () => StreamTranslator): DeploymentCall {
  return {
    path: conversePath(modelId, stream),
    body: JSON.stringify(converse),
    headers: { accept: stream ? EVENT_STREAM_CONTENT_TYPE : 'application/json' },
    usageFromJson: bedrockUsage,
    observer: () => new BedrockStreamObserver(),
    translate: { json, stream: translator },
    framing: { contentType: EVENT_STREAM_CONTENT_TYPE, events: bedrockEvents },
  };
}

/**
 * A `/v1/messages` request sent to a Bedrock deployment.
 * @param body the client's Messages body. @param opts.modelId the Bedrock model id; `model`: the name the client sees.
 * @throws TranslationError when the request cannot be said in Converse.
 */
export function bedrockCallForAnthropic(body: Record<string, unknown>, opts: { modelId: string; model: string; stream: boolean }): DeploymentCall {
  return converseCall(
    opts.modelId,
    opts.stream,
    anthropicToBedrock(body),
    (text) => JSON.stringify(bedrockResponseToAnthropic(JSON.parse(text), opts.model)),
    () => new BedrockToAnthropicStream({ model: opts.model }),
  );
}

/**
 * A `/v1/chat/completions` request sent to a Bedrock deployment (through its Anthropic form).
 * @param opts.defaultMaxTokens `max_tokens` when the client set none (Converse, like Anthropic, bounds every reply);
 *   `includeUsage`: the client asked for the usage chunk.
 * @throws TranslationError when the request cannot be said in Converse.
 */
export function bedrockCallForOpenAI(body: Record<string, unknown>, opts: { modelId: string; model: string; stream: boolean; defaultMaxTokens: number; includeUsage: boolean }): DeploymentCall {
  const anthropic = openAIChatToAnthropic(body, { model: opts.modelId, defaultMaxTokens: opts.defaultMaxTokens });
  return converseCall(
    opts.modelId,
    opts.stream,
    anthropicToBedrock(anthropic),
    (text) => JSON.stringify(anthropicResponseToOpenAI(bedrockResponseToAnthropic(JSON.parse(text), opts.model), opts.model)),
    () => new BedrockToOpenAIStream({ model: opts.model, includeUsage: opts.includeUsage }),
  );
}
