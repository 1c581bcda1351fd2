/**
 * `POST /v1/embeddings` in OpenAI's wire format: one small deterministic vector (8 floats, unit
 * length, derived from the input item) per input item, as a float array or, with
 * `encoding_format: "base64"` (what the official SDK asks for by default), little-endian float32
 * bytes in base64; usage `{prompt_tokens, total_tokens}`.
 */
import { Mulberry32 } from './faults.ts';
import type { Prepare, ReplyIdentity, PreparedRequest } from './prepared-request.ts';
import type { StreamPlan } from './reply-writer.ts';

/** Floats per vector. */
export const EMBEDDING_DIMENSIONS = 8;

/** FNV-1a 32-bit hash of a string. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The simulator's embedding of one input item (a string, or a token array): 8 float32 values of unit length. */
export function embeddingOf(item: string | readonly number[]): Float32Array {
  const rng = new Mulberry32(fnv1a(typeof item === 'string' ? item : item.join(',')));
  const v = new Float32Array(EMBEDDING_DIMENSIONS);
  let norm = 0;
  for (let i = 0; i < v.length; i++) {
    const x = rng.next() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  const k = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < v.length; i++) v[i] = (v[i] as number) * k;
  return v;
}

/** Input items of `input`, or null when the shape is not one OpenAI accepts. */
function itemsOf(input: unknown): (string | number[])[] | null {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input) || input.length === 0) return null;
  if (input.every((x) => typeof x === 'number')) return [input as number[]];
  if (input.every((x) => typeof x === 'string' || (Array.isArray(x) && x.every((t) => typeof t === 'number')))) {
    return input as (string | number[])[];
  }
  return null;
}

const NO_STREAM: StreamPlan = { head: '', unit: '', units: 0, tail: '' };

/** Prepares an embeddings request (400 when `input` is missing or malformed). */
export const prepareEmbeddings: Prepare = (body, model, _headers, ctx) => {
  const input = body['input'];
  const items = itemsOf(input);
  if (items === null) return { message: "'input' must be a non-empty string, array of strings, or array of token arrays.", param: 'input' };
  const base64 = body['encoding_format'] === 'base64';
  const promptTokens = ctx.prompts.embeddingInput(model, input);
  const prepared: PreparedRequest = {
    model,
    stream: false,
    promptTokens,
    outputTokens: 0,
    reserveTokens: promptTokens,
    json: (_ids: ReplyIdentity) => {
      const data = items.map((item, index) => {
        const v = embeddingOf(item);
        const embedding = base64 ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') : Array.from(v);
        return { object: 'embedding', index, embedding };
      });
      return JSON.stringify({ object: 'list', data, model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
    },
    plan: () => NO_STREAM,
  };
  return prepared;
};
