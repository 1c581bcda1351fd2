/**
 * Azure OpenAI (see `./endpoint.ts`): OpenAI's wire format, the path below a base URL that holds the
 * API version, the key in `api-key` (or a bearer Entra ID token); the Responses API below the v1
 * API's base URL, not below a classic deployment URL.
 */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';
import { azureAuthHeaders, azureBaseUrlProblem, azurePath } from './endpoint.ts';

/** A classic Azure deployment URL (`/openai/deployments/{name}`): Azure's Responses API is not below it. */
const AZURE_DEPLOYMENT_URL = /\/openai\/deployments\/[^/]+\/?$/;

/** Azure OpenAI's rules (see the module comment). */
export const azureAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  upstreamPath: azurePath,
  authHeaders: (key, d) => azureAuthHeaders(key, d.auth),
  baseUrlProblem: azureBaseUrlProblem,
  servesResponses: (d) => d.responses_api !== 'chat' && !AZURE_DEPLOYMENT_URL.test(new URL(d.base_url).pathname),
};
