/**
 * OpenAI `POST /v1/completions` (legacy): the request fields the gateway needs, the body sent
 * upstream, and usage from JSON replies and SSE streams.
 * Source: OpenAI API reference, "Completions" — `prompt` is a string, an array of strings, a token
 * array or an array of token arrays; `max_tokens` defaults to 16; each prompt gets `best_of`
 * completions generated (at least `n`), all of them billed; `stream_options.include_usage` adds a
 * last chunk with `choices: []` and the usage.
 */
import { GatewayError } from '../../errors.ts';
import type { EmbeddingInput } from '../../tokens/types.ts';
import { bodyObject, optionalBoolean, optionalPositiveInt, requiredString } from '../fields.ts';
import { OpenAIChatStreamObserver, wantsUsage } from './chat.ts';

/** OpenAI's default `max_tokens` of a completion, in tokens. */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/** What admission needs from a completions request. */
export interface CompletionsRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
  /** The prompt(s), in the shape the token counter takes for embeddings input. */
  readonly prompt: EmbeddingInput;
  readonly stream: boolean;
  /** The client asked for the usage chunk (`stream_options.include_usage: true`). */
  readonly clientWantsUsage: boolean;
  /** Output tokens the provider may generate in all: `max_tokens` (default 16) × max(`n`, `best_of`) × prompts. */
  readonly maxOutput: number;
}

function isTokenArray(value: unknown): value is number[] {
  return Array.isArray(value) && value.length > 0 && value.every((v) => Number.isInteger(v) && (v as number) >= 0);
}

/** Prompts in a valid `prompt`, or 0 when its shape is not one OpenAI accepts. */
function promptCount(prompt: unknown): number {
  if (typeof prompt === 'string') return 1;
  if (isTokenArray(prompt)) return 1;
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((p) => typeof p === 'string' || isTokenArray(p))) return prompt.length;
  return 0;
}

/**
 * Validates the fields the gateway relies on.
 * @param maxPrompts most prompts in one request (`server.max_messages`).
 * @throws GatewayError `invalid_request` (400) naming the field.
 */
export function parseCompletionsRequest(raw: unknown, maxPrompts = 10_000): CompletionsRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  const prompts = promptCount(body.prompt);
  if (prompts === 0) {
    throw new GatewayError('invalid_request', '"prompt" must be a string, an array of strings, a token array or an array of token arrays.', 'prompt');
  }
  if (prompts > maxPrompts) throw new GatewayError('invalid_request', `"prompt" has ${prompts} prompts; at most ${maxPrompts} are accepted (server.max_messages).`, 'prompt');
  const maxTokens = optionalPositiveInt(body, 'max_tokens') ?? COMPLETIONS_DEFAULT_MAX_TOKENS;
  const n = optionalPositiveInt(body, 'n', 128) ?? 1;
  const bestOf = optionalPositiveInt(body, 'best_of', 128) ?? 1;
  const stream = optionalBoolean(body, 'stream');
  const clientWantsUsage = wantsUsage(body);
  return { body, model, prompt: body.prompt as EmbeddingInput, stream, clientWantsUsage, maxOutput: maxTokens * Math.max(n, bestOf) * prompts };
}

/**
 * The body to send upstream: the client's, with the deployment's model name and, for streams,
 * `stream_options.include_usage: true` so the provider reports usage for settlement.
 */
export function upstreamCompletionsBody(request: CompletionsRequest, upstreamModel: string): Record<string, unknown> {
  const body: Record<string, unknown> = { ...request.body, model: upstreamModel };
  if (request.stream) {
    const options = (request.body.stream_options ?? {}) as Record<string, unknown>;
    body.stream_options = { ...options, include_usage: true };
  }
  return body;
}

/**
 * Observes a completions SSE stream: records the usage chunk (the last chunk, `choices: []`, sent
 * because the gateway asked for `include_usage`) and hides it from clients that did not ask for it.
 * Delivered output: one token per chunk with non-empty `text`.
 */
export class OpenAICompletionsStreamObserver extends OpenAIChatStreamObserver {
  /** One delivered token per chunk with a non-empty `text`. */
  protected override delivers(data: string): boolean {
    return data.includes('"text":"') && !data.includes('"text":""');
  }
}
