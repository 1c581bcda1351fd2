/**
 * What is wrong with a deployment's `base_url` for its provider, checked when a config is loaded
 * (`src/config/load.ts`): each provider's own rule lives in its folder.
 */
import type { Provider } from '../config/schema.ts';
import { azureBaseUrlProblem } from './azure/endpoint.ts';
import { geminiBaseUrlProblem } from './gemini/endpoint.ts';

/** The problem with `baseUrl` as a `provider` deployment's, or undefined when it is usable (a URL the schema accepted). */
export function baseUrlProblem(provider: Provider, baseUrl: string): string | undefined {
  if (provider === 'azure') return azureBaseUrlProblem(baseUrl);
  if (provider === 'gemini') return geminiBaseUrlProblem(baseUrl);
  return undefined;
}
