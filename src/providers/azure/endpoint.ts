/**
 * Where and how quotaring calls an Azure OpenAI deployment. A deployment's `base_url` is the whole
 * prefix of Azure's API paths, query string included, so both of Azure's APIs are one setting:
 * - classic deployment URLs (https://learn.microsoft.com/azure/ai-foundry/openai/reference):
 *   `https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21`
 *   + `/chat/completions` → `…/openai/deployments/DEPLOYMENT/chat/completions?api-version=2024-10-21`
 *   (the deployment in the path picks the model; `api-version` is required);
 * - the v1 API (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle):
 *   `https://RESOURCE.openai.azure.com/openai/v1` + `/chat/completions` (the deployment is the
 *   body's `model`: set `upstream_model`; no `api-version` needed).
 * The key goes in Azure's `api-key` header, or as `Authorization: Bearer` for a Microsoft Entra ID token.
 */

/** The OpenAI API path of a call (`/v1/chat/completions`) as a path below an Azure prefix (`/chat/completions`). */
export function azurePath(openAIPath: string): string {
  return openAIPath.startsWith('/v1/') ? openAIPath.slice(3) : openAIPath;
}

/** The headers that carry a deployment's key to Azure. @param auth @default 'api-key' */
export function azureAuthHeaders(key: string, auth: 'api-key' | 'bearer' | undefined): Record<string, string> {
  return auth === 'bearer' ? { authorization: `Bearer ${key}` } : { 'api-key': key };
}

/**
 * What is wrong with an Azure deployment's `base_url`, or undefined when it is usable: a classic
 * deployment URL needs its `api-version`.
 */
export function azureBaseUrlProblem(baseUrl: string): string | undefined {
  const url = new URL(baseUrl);
  if (/\/openai\/deployments\/[^/]+\/?$/.test(url.pathname) && !url.searchParams.has('api-version')) {
    return 'an Azure deployment URL needs its api-version, e.g. https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21 (or use the v1 API: https://RESOURCE.openai.azure.com/openai/v1)';
  }
  return undefined;
}
