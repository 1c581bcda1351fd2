/**
 * `POST /v1/messages` in Anthropic's wire format (https://docs.anthropic.com/en/api/messages and
 * .../messages-streaming): a `message` JSON body, or the event sequence `message_start` (usage with
 * `input_tokens` and `output_tokens: 1`), `content_block_start`, `ping`, one `content_block_delta`
 * (`text_delta`) per token, `content_block_stop`, `message_delta` (stop_reason and the cumulative
 * `usage.output_tokens`), `message_stop`, each with its `event:` line.
 *
 * Header `x-sim-anthropic-delta-input: repeat|zero` makes `message_delta.usage` also carry the input
 * fields (`input_tokens` and the cache fields) repeated, or with `input_tokens: 0`: real streams do
 * both, and a gateway must settle all three variants the same.
 */
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, ReplyIdentity } from './prepared-request.ts';
import { headerValue, isFieldError, readCap } from './request-fields.ts';
import type { StreamPlan } from './reply-writer.ts';

function event(name: string, data: string): string {
  return `event: ${name}\ndata: ${data}\n\n`;
}

/** Prepares a messages request (400 when `messages` is not an array, `max_tokens` or the delta-input header invalid). */
export const prepareAnthropicMessages: Prepare = (body, model, headers, ctx) => {
  if (!Array.isArray(body['messages'])) return { message: 'messages: Field required', param: 'messages' };
  const cap = readCap(body, ['max_tokens']);
  if (isFieldError(cap)) return { message: 'max_tokens: Input should be an integer ≥ 1', param: 'max_tokens' };
  const variant = headerValue(headers['x-sim-anthropic-delta-input']);
  if (variant !== undefined && variant !== 'repeat' && variant !== 'zero') {
    return { message: `x-sim-anthropic-delta-input must be repeat or zero, got "${variant}"`, param: null };
  }
  const out = outputLength(headerValue(headers['x-sim-output-tokens']), cap, ctx.defaultOutputTokens);
  if (typeof out === 'string') return { message: out, param: null };
  const input = ctx.prompts.anthropicMessages(model, body);
  const completion = out.tokens;
  const stop = out.hitCap ? 'max_tokens' : 'end_turn';
  const modelJson = JSON.stringify(model);
  const inputFields = (n: number): string => `"input_tokens":${n},"cache_creation_input_tokens":0,"cache_read_input_tokens":0`;
  const deltaUsage =
    variant === 'repeat'
      ? `{${inputFields(input)},"output_tokens":${completion}}`
      : variant === 'zero'
        ? `{${inputFields(0)},"output_tokens":${completion}}`
        : `{"output_tokens":${completion}}`;
  return {
    model,
    stream: body['stream'] === true,
    promptTokens: input,
    outputTokens: completion,
    reserveTokens: input + (cap ?? completion),
    json: (ids: ReplyIdentity) =>
      `{"id":"${ids.id}","type":"message","role":"assistant","model":${modelJson},` +
      `"content":[{"type":"text","text":${JSON.stringify(outputText(completion))}}],"stop_reason":"${stop}","stop_sequence":null,` +
      `"usage":{${inputFields(input)},"output_tokens":${completion},"service_tier":"standard"}}`,
    plan: (ids: ReplyIdentity): StreamPlan => ({
      head:
        event(
          'message_start',
          `{"type":"message_start","message":{"id":"${ids.id}","type":"message","role":"assistant","model":${modelJson},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{${inputFields(input)},"output_tokens":1,"service_tier":"standard"}}}`,
        ) +
        event('content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}') +
        event('ping', '{"type": "ping"}'),
      unit: event('content_block_delta', `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(OUTPUT_UNIT)}}}`),
      units: completion,
      tail:
        event('content_block_stop', '{"type":"content_block_stop","index":0}') +
        event('message_delta', `{"type":"message_delta","delta":{"stop_reason":"${stop}","stop_sequence":null},"usage":${deltaUsage}}`) +
        event('message_stop', '{"type":"message_stop"}'),
    }),
  };
};
