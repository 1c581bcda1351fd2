/**
 * OpenAI `POST /v1/embeddings`: input tokens only, no output.
 * Source: OpenAI API reference, "Create embeddings" (input: string, string[], token array, token arrays).
 */
import { GatewayError } from '../../errors.ts';
import type { EmbeddingInput } from '../../tokens/types.ts';
import { bodyObject, requiredString } from '../fields.ts';

/** What admission needs from an embeddings request. */
export interface EmbeddingsRequest {
  readonly body: Record<string, unknown>;
  readonly model: string;
  readonly input: EmbeddingInput;
}

function isIntArray(value: unknown): value is number[] {
  return Array.isArray(value) && value.length > 0 && value.every((v) => Number.isInteger(v) && (v as number) >= 0);
}

/**
 * Validates `model` and `input`.
 * @throws GatewayError `invalid_request` (400) when input is not a non-empty string, string array,
 * token array or array of token arrays.
 */
export function parseEmbeddingsRequest(raw: unknown): EmbeddingsRequest {
  const body = bodyObject(raw);
  const model = requiredString(body, 'model');
  const input = body.input;
  const ok =
    (typeof input === 'string' && input.length > 0) ||
    (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'string' && s.length > 0)) ||
    isIntArray(input) ||
    (Array.isArray(input) && input.length > 0 && input.every(isIntArray));
  if (!ok) {
    throw new GatewayError('invalid_request', '"input" must be a non-empty string, array of strings, token array or array of token arrays.', 'input');
  }
  return { body, model, input: input as EmbeddingInput };
}
