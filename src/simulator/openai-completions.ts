/**
 * `POST /v1/completions` (legacy) in OpenAI's wire format
 * (https://platform.openai.com/docs/api-reference/completions): `prompt` is a string, an array of
 * strings, a token array or an array of token arrays; each prompt gets `n` choices of at most
 * `max_tokens` tokens (default 16, as OpenAI documents). A `text_completion` JSON body, or a stream
 * of `text_completion` chunks — one per choice per token (`choices[0].text`), a last chunk per
 * choice with `finish_reason`, then, with `stream_options.include_usage`, one chunk with
 * `choices: []` and the usage (every other chunk then carries `"usage": null`), then `data: [DONE]`.
 */
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, PreparedRequest, ReplyIdentity } from './prepared-request.ts';
import { headerValue, isFieldError, isJsonObject, readCap } from './request-fields.ts';
import type { StreamPlan } from './reply-writer.ts';

/** OpenAI's default `max_tokens` of a completion. */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/** Number of prompts in `prompt`, or 0 when its shape is not one OpenAI accepts. */
function promptCount(prompt: unknown): number {
  if (typeof prompt === 'string') return 1;
  if (!Array.isArray(prompt) || prompt.length === 0) return 0;
  if (prompt.every((x) => typeof x === 'number')) return 1;
  if (prompt.every((x) => typeof x === 'string' || (Array.isArray(x) && x.every((t) => typeof t === 'number')))) return prompt.length;
  return 0;
}

/** Prepares a completions request (400 when `prompt` is malformed or a cap is invalid). */
export const prepareOpenAICompletions: Prepare = (body, model, headers, ctx) => {
  const prompt = body['prompt'];
  const prompts = promptCount(prompt);
  if (prompts === 0) return { message: "'prompt' must be a string, an array of strings, a token array or an array of token arrays.", param: 'prompt' };
  const cap = readCap(body, ['max_tokens']);
  if (isFieldError(cap)) return cap;
  const n = readCap(body, ['n']);
  if (isFieldError(n)) return n;
  const choicesPerPrompt = n ?? 1;
  const maxTokens = cap ?? COMPLETIONS_DEFAULT_MAX_TOKENS;
  const out = outputLength(headerValue(headers['x-sim-output-tokens']), maxTokens, ctx.defaultOutputTokens);
  if (typeof out === 'string') return { message: out, param: null };
  const choices = prompts * choicesPerPrompt;
  const promptTokens = ctx.prompts.embeddingInput(model, prompt);
  const stream = body['stream'] === true;
  const so = body['stream_options'];
  const includeUsage = stream && isJsonObject(so) && so['include_usage'] === true;
  const completion = out.tokens * choices;
  const finish = out.hitCap ? 'length' : 'stop';
  const usage = `{"prompt_tokens":${promptTokens},"completion_tokens":${completion},"total_tokens":${promptTokens + completion}}`;
  const modelJson = JSON.stringify(model);
  const indexes = Array.from({ length: choices }, (_v, i) => i);
  const prepared: PreparedRequest = {
    model,
    stream,
    promptTokens,
    outputTokens: completion,
    tokensPerUnit: choices,
    reserveTokens: promptTokens + maxTokens * choices,
    json: (ids: ReplyIdentity) =>
      `{"id":"${ids.id}","object":"text_completion","created":${ids.created},"model":${modelJson},` +
      `"choices":[${indexes.map((i) => `{"text":${JSON.stringify(outputText(out.tokens))},"index":${i},"logprobs":null,"finish_reason":"${finish}"}`).join(',')}],` +
      `"usage":${usage},"system_fingerprint":null}`,
    plan: (ids: ReplyIdentity): StreamPlan => {
      const chunk = (choice: string): string =>
        `data: {"id":"${ids.id}","object":"text_completion","created":${ids.created},"choices":[${choice}],"model":${modelJson},"system_fingerprint":null${includeUsage ? ',"usage":null' : ''}}\n\n`;
      return {
        head: '',
        unit: indexes.map((i) => chunk(`{"text":${JSON.stringify(OUTPUT_UNIT)},"index":${i},"logprobs":null,"finish_reason":null}`)).join(''),
        units: out.tokens,
        tail:
          indexes.map((i) => chunk(`{"text":"","index":${i},"logprobs":null,"finish_reason":"${finish}"}`)).join('') +
          (includeUsage ? `data: {"id":"${ids.id}","object":"text_completion","created":${ids.created},"choices":[],"model":${modelJson},"system_fingerprint":null,"usage":${usage}}\n\n` : '') +
          'data: [DONE]\n\n',
      };
    },
  };
  return prepared;
};
