/**
 * Gemini's OpenAI compatibility (https://ai.google.dev/gemini-api/docs/openai) as the simulator
 * speaks it, below `/v1beta/openai/` (`chat/completions`, `embeddings`), with what differs from OpenAI:
 * - Key: `Authorization: Bearer <Gemini API key>`; none → 403 `PERMISSION_DENIED`.
 * - Errors: a `google.rpc.Status` wrapped in an array, `[{"error":{"code","message","status"}}]`
 *   (400 `INVALID_ARGUMENT`, 503 `UNAVAILABLE` "The model is overloaded" for the error fault).
 * - 429 `RESOURCE_EXHAUSTED`: the wait only in the body, a `google.rpc.RetryInfo` detail
 *   (`"retryDelay":"12.345s"`) after a `QuotaFailure` and a `Help` link, and "Please retry in …" in
 *   the message; no `retry-after` header, and no `x-ratelimit-*` headers on any reply.
 * - Chat replies: keys in alphabetical order, no `system_fingerprint`; usage's `completion_tokens`
 *   leaves thinking tokens out (`x-sim-reasoning-tokens`, default 0), `total_tokens` counts them.
 * - Streams: no role-only first chunk; one chunk per token; the last chunk carries the
 *   `finish_reason` and the usage, always (with or without `stream_options.include_usage`), and no
 *   chunk has `choices: []`; then `data: [DONE]`.
 */
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, PreparedRequest, ReplyIdentity } from './prepared-request.ts';
import type { ProviderError } from './provider-errors.ts';
import type { StreamPlan } from './reply-writer.ts';
import { headerValue, isFieldError, readCap } from './request-fields.ts';

/** Prefix of the simulator's Gemini routes (Google's OpenAI-compatibility prefix). */
export const GEMINI_PREFIX = '/v1beta/openai';

/** A Gemini error in its OpenAI-compatibility shape: the Status in a one-element array. */
export function geminiError(code: number, status: string, message: string, details?: readonly unknown[]): ProviderError {
  return { status: code, body: JSON.stringify([{ error: { code, message, status, ...(details === undefined ? {} : { details }) } }]) };
}

/** 403 of a request without a key. */
export function geminiMissingKey(): ProviderError {
  return geminiError(403, 'PERMISSION_DENIED', "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.");
}

/** 503 of the error fault. */
export function geminiOverloaded(): ProviderError {
  return geminiError(503, 'UNAVAILABLE', 'The model is overloaded. Please try again later.');
}

/**
 * The 429 of a refused request: `RESOURCE_EXHAUSTED` with a QuotaFailure, a Help link and, when the
 * quota will admit it later, a RetryInfo (`retryDelay` in seconds, 3 decimals).
 */
export function geminiRateLimitError(model: string, kind: 'requests' | 'tokens', limit: number, retryAfterMs: number | undefined): ProviderError {
  const metric = kind === 'tokens' ? 'generate_content_paid_tier_input_token_count' : 'generate_content_paid_tier_requests';
  const quotaId = kind === 'tokens' ? 'GenerateContentPaidTierInputTokensPerModelPerMinute' : 'GenerateRequestsPerMinutePerProjectPerModel';
  const delay = retryAfterMs === undefined ? undefined : `${(retryAfterMs / 1_000).toFixed(3)}s`;
  const message =
    'You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n' +
    `* Quota exceeded for metric: generativelanguage.googleapis.com/${metric}, limit: ${limit}, model: ${model}` +
    (delay === undefined ? '' : `\nPlease retry in ${delay}.`);
  const details: unknown[] = [
    { '@type': 'type.googleapis.com/google.rpc.QuotaFailure', violations: [{ quotaMetric: `generativelanguage.googleapis.com/${metric}`, quotaId, quotaDimensions: { location: 'global', model }, quotaValue: String(limit) }] },
    { '@type': 'type.googleapis.com/google.rpc.Help', links: [{ description: 'Learn more about Gemini API quotas', url: 'https://ai.google.dev/gemini-api/docs/rate-limits' }] },
  ];
  if (delay !== undefined) details.push({ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: delay });
  return geminiError(429, 'RESOURCE_EXHAUSTED', message, details);
}

/** Prepares a chat completion request as Gemini answers it (see the module comment). */
export const prepareGeminiChat: Prepare = (body, model, headers, ctx) => {
  if (!Array.isArray(body['messages'])) return { message: '* GenerateContentRequest.contents: contents is not specified\n', param: 'messages' };
  const cap = readCap(body, ['max_completion_tokens', 'max_tokens']);
  if (isFieldError(cap)) return cap;
  const out = outputLength(headerValue(headers['x-sim-output-tokens']), cap, ctx.defaultOutputTokens);
  if (typeof out === 'string') return { message: out, param: null };
  const thinkingHeader = headerValue(headers['x-sim-reasoning-tokens']);
  if (thinkingHeader !== undefined && !/^\d{1,9}$/.test(thinkingHeader)) return { message: `x-sim-reasoning-tokens must be a non-negative integer, got "${thinkingHeader}"`, param: null };
  // The cap (max_tokens) bounds thinking and visible output together, as Gemini's maxOutputTokens does.
  const thinking = Math.min(Number(thinkingHeader ?? 0), cap ?? Infinity);
  const visible = cap === undefined ? out.tokens : Math.min(out.tokens, cap - thinking);
  const finish = cap !== undefined && thinking + visible >= cap ? 'length' : 'stop';
  const promptTokens = ctx.prompts.openAIChat(model, body);
  const stream = body['stream'] === true;
  const usage = `{"completion_tokens":${visible},"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + visible + thinking}}`;
  const modelJson = JSON.stringify(model);
  const chunk = (ids: ReplyIdentity, choice: string, extra = ''): string =>
    `data: {"choices":[${choice}],"created":${ids.created},"id":"${ids.id}","model":${modelJson},"object":"chat.completion.chunk"${extra}}\n\n`;
  const prepared: PreparedRequest = {
    model,
    stream,
    promptTokens,
    outputTokens: visible + thinking,
    hiddenOutputTokens: thinking,
    reserveTokens: promptTokens + (cap ?? visible + thinking),
    json: (ids: ReplyIdentity) =>
      `{"choices":[{"finish_reason":"${finish}","index":0,"message":{"content":${JSON.stringify(outputText(visible))},"role":"assistant"}}],` +
      `"created":${ids.created},"id":"${ids.id}","model":${modelJson},"object":"chat.completion","usage":${usage}}`,
    plan: (ids: ReplyIdentity): StreamPlan => ({
      head: '',
      unit: chunk(ids, `{"delta":{"content":${JSON.stringify(OUTPUT_UNIT)},"role":"assistant"},"index":0}`),
      units: visible,
      tail: chunk(ids, `{"delta":{"content":"","role":"assistant"},"finish_reason":"${finish}","index":0}`, `,"usage":${usage}`) + 'data: [DONE]\n\n',
    }),
  };
  return prepared;
};
