/**
 * Where and how quotaring calls Google's Gemini API through its OpenAI compatibility
 * (https://ai.google.dev/gemini-api/docs/openai): OpenAI's request and reply bodies below
 * `https://generativelanguage.googleapis.com/v1beta/openai/` (`chat/completions`, `embeddings`),
 * the Gemini API key as `Authorization: Bearer`.
 *
 * Why a provider (`provider: gemini`) and not a general "path without /v1" option on `openai`
 * deployments: the path is only one of Gemini's differences. Its errors come wrapped in an array
 * (`[{"error":{"code","message","status","details"}}]`), a 429 (`RESOURCE_EXHAUSTED`) gives its wait
 * only in the body (`google.rpc.RetryInfo.retryDelay`, no `retry-after` header), and its usage
 * leaves thinking tokens out of `completion_tokens` (they are in `total_tokens`). A provider name
 * carries all of them, checks the base URL, and tells a reader of the config what is upstream. The
 * path rule is Azure's v1 API's (`azurePath` in `../azure/endpoint.ts`): the base URL is the whole
 * prefix, and the call's `/v1` is dropped.
 */

/** Google's OpenAI-compatibility prefix, the `base_url` of a Gemini deployment. */
export const GEMINI_OPENAI_BASE_URL = 'https://generativelanguage.googleapis.com/v1beta/openai';

/**
 * What is wrong with a Gemini deployment's `base_url`, or undefined when it is usable: on Google's
 * host it must be the OpenAI-compatibility prefix (`/v1beta/openai`), not the native API's root
 * (other hosts — the simulator, a proxy, Vertex AI's `…/endpoints/openapi` — are taken as given).
 */
export function geminiBaseUrlProblem(baseUrl: string): string | undefined {
  const url = new URL(baseUrl);
  if (url.hostname !== 'generativelanguage.googleapis.com') return undefined;
  if (/\/openai\/?$/.test(url.pathname)) return undefined;
  return `a Gemini base_url is the OpenAI-compatibility prefix, ${GEMINI_OPENAI_BASE_URL} (quotaring appends chat/completions, embeddings)`;
}
