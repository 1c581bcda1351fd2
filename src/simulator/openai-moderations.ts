/**
 * OpenAI's moderations as the simulator answers them, `POST /v1/moderations`
 * (https://platform.openai.com/docs/api-reference/moderations; shapes as the `openai` SDKs type
 * `ModerationCreateResponse`): `input` a string, an array of strings, or an array of `text` /
 * `image_url` parts; `model` (default `omni-moderation-latest`). One result per input (one for a
 * list of parts), every category false and its score 0.0001, except that a text containing
 * `[flag]` is flagged `harassment` (score 0.99). Not counted against the key's quota (OpenAI's
 * moderations are free and limited on their own).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { apiKeyOf, sendError } from './model-exchange.ts';
import { badRequest, missingKey } from './provider-errors.ts';
import type { SimulatorState } from './simulator-state.ts';

/** OpenAI's moderation categories, in its order. */
const CATEGORIES = [
  'harassment', 'harassment/threatening', 'hate', 'hate/threatening', 'illicit', 'illicit/violent', 'self-harm',
  'self-harm/intent', 'self-harm/instructions', 'sexual', 'sexual/minors', 'violence', 'violence/graphic',
] as const;

/** The texts (and whether an image came) of each input, or a message for a bad `input`. */
function inputsOf(input: unknown): { texts: string[]; image: boolean }[] | string {
  if (typeof input === 'string') return [{ texts: [input], image: false }];
  if (!Array.isArray(input) || input.length === 0) return "Invalid value for 'input': expected a string, an array of strings, or an array of multi-modal inputs.";
  if (input.every((x) => typeof x === 'string')) return (input as string[]).map((text) => ({ texts: [text], image: false }));
  const texts: string[] = [];
  let image = false;
  for (const part of input as unknown[]) {
    const type = part !== null && typeof part === 'object' ? (part as Record<string, unknown>)['type'] : undefined;
    if (type === 'text' && typeof (part as Record<string, unknown>)['text'] === 'string') texts.push((part as Record<string, string>)['text'] as string);
    else if (type === 'image_url') image = true;
    else return "Invalid value for 'input': each part must be {type: 'text', text} or {type: 'image_url', image_url}.";
  }
  return [{ texts, image }];
}

/** Answers one `POST /v1/moderations`. */
export function serveModeration(state: SimulatorState, req: FastifyRequest, reply: FastifyReply): void {
  const { stats } = state;
  stats.requests++;
  if (apiKeyOf('openai', req.headers) === '') {
    stats.errors++;
    return sendError(reply, missingKey('openai'));
  }
  const body = req.body;
  const fields = body !== null && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
  const inputs = fields === undefined ? 'The request body must be a JSON object.' : inputsOf(fields['input']);
  if (typeof inputs === 'string') {
    stats.errors++;
    return sendError(reply, badRequest('openai', inputs, 'input'));
  }
  const model = typeof fields?.['model'] === 'string' ? (fields['model'] as string) : 'omni-moderation-latest';
  const results = inputs.map(({ texts, image }) => {
    const flagged = texts.some((t) => t.includes('[flag]'));
    const applied = [...(texts.length > 0 ? ['text'] : []), ...(image ? ['image'] : [])];
    const categories: Record<string, boolean> = {};
    const scores: Record<string, number> = {};
    const types: Record<string, string[]> = {};
    for (const c of CATEGORIES) {
      categories[c] = flagged && c === 'harassment';
      scores[c] = flagged && c === 'harassment' ? 0.99 : 0.0001;
      types[c] = applied;
    }
    return { flagged, categories, category_scores: scores, category_applied_input_types: types };
  });
  reply
    .code(200)
    .headers({ 'content-type': 'application/json; charset=utf-8', 'x-request-id': state.nextId('req_sim') })
    .send(JSON.stringify({ id: state.nextId('modr-sim'), model, results }));
}
