/**
 * Anthropic `POST /v1/messages/count_tokens`: the body of a messages request without `max_tokens`
 * (model, messages, system, tools, tool_choice, thinking), answered `{"input_tokens": N}`. Free at
 * Anthropic and limited apart from messages (its own requests-per-minute).
 * Source: Anthropic API reference, "Count Message tokens".
 */
import { DEFAULT_ITEM_LIMITS, atMostItems, bodyObject, requiredObjectArray, requiredString } from '../fields.ts';
import type { ItemLimits } from '../fields.ts';
import type { TokenUsage } from '../types.ts';

/** What the gateway needs from a count_tokens request. */
export interface CountTokensRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
}

/**
 * Validates the fields the gateway relies on (`model`, `messages`; `max_tokens` is not asked for).
 * @throws GatewayError `invalid_request` (400) naming the field.
 */
export function parseCountTokensRequest(raw: unknown, limits: ItemLimits = DEFAULT_ITEM_LIMITS): CountTokensRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  atMostItems(body, 'messages', limits.messages, 'server.max_messages');
  atMostItems(body, 'tools', limits.tools, 'server.max_tools');
  requiredObjectArray(body, 'messages');
  return { body, model };
}

/** A count generates nothing and bills no tokens: settled on zero, whatever the reply says. */
export function countTokensUsage(): TokenUsage {
  return { input: 0, output: 0 };
}
