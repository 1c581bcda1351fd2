/**
 * `POST /v1/chat/completions` in OpenAI's wire format: a `chat.completion` JSON body, or a stream
 * of `chat.completion.chunk` events as OpenAI sends them
 * (https://platform.openai.com/docs/api-reference/chat-streaming): a first chunk whose delta
 * carries `role` (and empty content), one chunk per content token, a chunk with an empty delta and
 * `finish_reason`, then `data: [DONE]`. With `stream_options.include_usage`, every chunk carries
 * `"usage": null` and one extra chunk with `choices: []` and the usage comes before `[DONE]`.
 */
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, PreparedRequest, ReplyIdentity } from './prepared-request.ts';
import { headerValue, isFieldError, isJsonObject, readCap } from './request-fields.ts';
import type { StreamPlan } from './reply-writer.ts';

/** Fingerprint reported in every reply. */
const FINGERPRINT = 'fp_quotaring_sim';

/** Prepares a chat completion request (400 when `messages` is not an array or a cap is invalid). */
export const prepareOpenAIChat: Prepare = (body, model, headers, ctx) => {
  if (!Array.isArray(body['messages'])) return { message: "Missing required parameter: 'messages'.", param: 'messages' };
  const cap = readCap(body, ['max_completion_tokens', 'max_tokens']);
  if (isFieldError(cap)) return cap;
  const out = outputLength(headerValue(headers['x-sim-output-tokens']), cap, ctx.defaultOutputTokens);
  if (typeof out === 'string') return { message: out, param: null };
  const promptTokens = ctx.prompts.openAIChat(model, body);
  const stream = body['stream'] === true;
  const so = body['stream_options'];
  const includeUsage = stream && isJsonObject(so) && so['include_usage'] === true;
  const completion = out.tokens;
  const finish = out.hitCap ? 'length' : 'stop';
  const usage = `{"prompt_tokens":${promptTokens},"completion_tokens":${completion},"total_tokens":${promptTokens + completion}}`;
  const modelJson = JSON.stringify(model);
  const prepared: PreparedRequest = {
    model,
    stream,
    promptTokens,
    outputTokens: completion,
    reserveTokens: promptTokens + (cap ?? completion),
    json: (ids: ReplyIdentity) =>
      `{"id":"${ids.id}","object":"chat.completion","created":${ids.created},"model":${modelJson},` +
      `"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(outputText(completion))},"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"${finish}"}],` +
      `"usage":${usage},"service_tier":"default","system_fingerprint":"${FINGERPRINT}"}`,
    plan: (ids: ReplyIdentity): StreamPlan => {
      const pre = `data: {"id":"${ids.id}","object":"chat.completion.chunk","created":${ids.created},"model":${modelJson},"service_tier":"default","system_fingerprint":"${FINGERPRINT}","choices":[`;
      const post = includeUsage ? '],"usage":null}\n\n' : ']}\n\n';
      const tail =
        `${pre}{"index":0,"delta":{},"logprobs":null,"finish_reason":"${finish}"}${post}` +
        (includeUsage ? `${pre}],"usage":${usage}}\n\n` : '') +
        'data: [DONE]\n\n';
      return {
        head: `${pre}{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}${post}`,
        unit: `${pre}{"index":0,"delta":{"content":${JSON.stringify(OUTPUT_UNIT)}},"logprobs":null,"finish_reason":null}${post}`,
        units: completion,
        tail,
      };
    },
  };
  return prepared;
};
