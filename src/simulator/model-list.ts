/**
 * `GET /v1/models`: a small fixed list, in OpenAI's shape, or in Anthropic's when the request
 * carries `anthropic-version` (https://docs.anthropic.com/en/api/models-list). The simulator
 * serves any model name; this list is only for clients that ask.
 */

/** Models listed by the simulator. */
export const SIMULATED_MODELS: readonly string[] = ['gpt-4o-mini', 'gpt-4o', 'gpt-4.1-mini', 'text-embedding-3-small', 'claude-sonnet-4-5', 'claude-3-5-haiku-latest'];

/** OpenAI's list shape. @param createdSec Unix seconds reported as each model's `created`. */
export function openAIModelList(createdSec: number): string {
  return JSON.stringify({
    object: 'list',
    data: SIMULATED_MODELS.map((id) => ({ id, object: 'model', created: createdSec, owned_by: id.startsWith('claude') ? 'anthropic' : 'system' })),
  });
}

/** Anthropic's list shape. @param createdIso RFC 3339 time reported as each model's `created_at`. */
export function anthropicModelList(createdIso: string): string {
  const data = SIMULATED_MODELS.map((id) => ({ type: 'model', id, display_name: id, created_at: createdIso }));
  return JSON.stringify({ data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
}
