/**
 * Azure OpenAI as the simulator speaks it: OpenAI's bodies on Azure's paths, with Azure's key,
 * errors, rate-limit headers and content filter.
 * - Paths (https://learn.microsoft.com/azure/ai-foundry/openai/reference): classic
 *   `/openai/deployments/{deployment}/chat/completions?api-version=2024-10-21` (the deployment in
 *   the path names the model; a missing `api-version` is a 404 `Resource not found`), and the v1 API
 *   `/openai/v1/chat/completions` (the deployment in `model`; `api-version` optional).
 * - Key: `api-key: K`, or `Authorization: Bearer <Entra ID token>`; neither → 401 `{"error":{"code":"401",…}}`.
 * - 429: `{"error":{"code":"429","message":"Requests to the … Operation under Azure OpenAI API version
 *   … have exceeded token rate limit … Please retry after N seconds…"}}` with `retry-after` (s),
 *   `retry-after-ms` and `x-ms-retry-after-ms`; every reply carries `x-ratelimit-remaining-requests`
 *   and `x-ratelimit-remaining-tokens` (no reset headers).
 * - Content filter (https://learn.microsoft.com/azure/ai-foundry/openai/concepts/content-filter): a
 *   filtered prompt is a 400 with `code: "content_filter"`, `param: "prompt"` and `innererror.code:
 *   "ResponsibleAIPolicyViolation"`; a served reply carries `prompt_filter_results` (JSON), or a
 *   first chunk with `choices: []` and `prompt_filter_results` (stream).
 * Header `x-sim-fault: content-filter` makes the simulator filter the prompt.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { LimitState } from '../limiter/index.ts';
import type { HeaderMap } from '../providers/rate-limit-headers.ts';
import type { PreparedRequest, ReplyIdentity } from './prepared-request.ts';
import type { ProviderError } from './provider-errors.ts';
import type { StreamPlan } from './reply-writer.ts';
import { headerValue } from './request-fields.ts';

/** Which Azure API a route is: a classic deployment URL or the v1 API. */
export type AzureApi = 'deployment' | 'v1';

/** The `x-sim-fault` value that filters the prompt. */
export const CONTENT_FILTER_FAULT = 'content-filter';

/** An `api-version` Azure knows the shape of: a date (optionally `-preview`), `preview` or `latest`. */
const API_VERSION = /^(\d{4}-\d{2}-\d{2}(-preview)?|preview|latest)$/;

function azureError(status: number, code: string, message: string): ProviderError {
  return { status, body: JSON.stringify({ error: { code, message } }) };
}

/** The key of an Azure request: `api-key`, else a bearer token; '' when neither. */
export function azureKeyOf(headers: IncomingHttpHeaders): string {
  const key = headerValue(headers['api-key']);
  if (key !== undefined && key !== '') return key;
  const auth = headers.authorization;
  if (auth === undefined || auth.length < 8 || auth.slice(0, 7).toLowerCase() !== 'bearer ') return '';
  return auth.slice(7).trim();
}

/** 404 of a path Azure does not serve. */
export function azureNotFound(): ProviderError {
  return azureError(404, '404', 'Resource not found');
}

/** 401 of a request without `api-key` or bearer token. */
export function azureMissingKey(): ProviderError {
  return azureError(
    401,
    '401',
    'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
  );
}

/**
 * The `api-version` problem of a request, or undefined when it is fine: required on classic
 * deployment URLs, optional on the v1 API; when given, of a known shape.
 */
export function apiVersionError(api: AzureApi, version: string | undefined): ProviderError | undefined {
  if (version === undefined) return api === 'deployment' ? azureError(404, '404', 'Resource not found') : undefined;
  if (!API_VERSION.test(version)) return azureError(400, 'BadRequest', 'API version not supported');
  return undefined;
}

/** The 429 of a refused request, in Azure's words. @param operation e.g. `ChatCompletions_Create`. */
export function azureRateLimitError(operation: string, apiVersion: string, kind: 'requests' | 'tokens', retryAfterMs: number): ProviderError {
  const seconds = Math.max(1, Math.ceil(retryAfterMs / 1_000));
  const what = kind === 'tokens' ? 'token rate limit' : 'call rate limit';
  return azureError(
    429,
    '429',
    `Requests to the ${operation} Operation under Azure OpenAI API version ${apiVersion} have exceeded ${what} of your current OpenAI S0 pricing tier. Please retry after ${seconds} seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.`,
  );
}

/** Azure's rate-limit headers: `x-ratelimit-remaining-requests|tokens` of the configured limits. */
export function azureRateLimitHeaders(limits: readonly LimitState[]): HeaderMap {
  const headers: HeaderMap = {};
  for (const l of limits) if (l.kind === 'requests' || l.kind === 'tokens') headers[`x-ratelimit-remaining-${l.kind}`] = String(l.remaining);
  return headers;
}

/** Azure's wait headers of a 429: `retry-after` (whole s, rounded up), `retry-after-ms`, `x-ms-retry-after-ms`. */
export function azureRetryHeaders(retryAfterMs: number): HeaderMap {
  const ms = Math.max(0, Math.ceil(retryAfterMs));
  return { 'retry-after': String(Math.max(1, Math.ceil(ms / 1_000))), 'retry-after-ms': String(ms), 'x-ms-retry-after-ms': String(ms) };
}

const SAFE = '{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}';

/** The 400 of a filtered prompt (`content_filter`, `ResponsibleAIPolicyViolation`, hate filtered at high severity). */
export function contentFilterError(): ProviderError {
  return {
    status: 400,
    body: JSON.stringify({
      error: {
        message:
          "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        type: null,
        param: 'prompt',
        code: 'content_filter',
        status: 400,
        innererror: {
          code: 'ResponsibleAIPolicyViolation',
          content_filter_result: {
            hate: { filtered: true, severity: 'high' },
            self_harm: { filtered: false, severity: 'safe' },
            sexual: { filtered: false, severity: 'safe' },
            violence: { filtered: false, severity: 'safe' },
          },
        },
      },
    }),
  };
}

/** Whether a request asks for its prompt to be filtered. */
export function wantsContentFilter(headers: IncomingHttpHeaders): boolean {
  return headerValue(headers['x-sim-fault']) === CONTENT_FILTER_FAULT;
}

/**
 * `prepared` as Azure serves it: its JSON with `prompt_filter_results` first, its stream with a
 * first chunk of `choices: []` and `prompt_filter_results` (no usage: a gateway must not take it
 * for the usage chunk).
 */
export function withPromptFilterResults(prepared: PreparedRequest): PreparedRequest {
  const results = `"prompt_filter_results":[{"prompt_index":0,"content_filter_results":${SAFE}}]`;
  return {
    ...prepared,
    json: (ids: ReplyIdentity) => `{${results},${prepared.json(ids).slice(1)}`,
    plan: (ids: ReplyIdentity): StreamPlan => {
      const plan = prepared.plan(ids);
      return { ...plan, head: `data: {"choices":[],"created":0,"id":"","model":"","object":"",${results}}\n\n${plan.head}` };
    },
  };
}

/** Azure's name of an operation, as its 429 messages give it. */
export function azureOperation(path: string): string {
  if (path.endsWith('/chat/completions')) return 'ChatCompletions_Create';
  if (path.endsWith('/responses')) return 'Responses_Create';
  if (path.endsWith('/completions')) return 'Completions_Create';
  return 'Embeddings_Create';
}
