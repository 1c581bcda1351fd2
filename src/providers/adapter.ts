/**
 * What the gateway needs of a provider, one value per provider (`<provider>/adapter.ts`, looked up
 * by `adapterOf` in `./adapters.ts`): its wire format, where a call goes below the deployment's
 * base URL and how the key is sent, the first wait before retrying a 429 that names none, its error
 * bodies in OpenAI's shape, a wait given only in a 429's body, its base-URL rule, and whether it
 * serves the Responses API itself. The gateway asks the adapter and tests no provider name.
 */
import type { DeploymentConfig } from '../config/schema.ts';

/** A wire format of requests and replies: OpenAI's (chat completions, ...) or Anthropic's (messages). */
export type WireFormat = 'openai' | 'anthropic';

/** One provider's rules. */
export interface ProviderAdapter {
  /** The wire format its deployments speak; `bedrock` (Converse) serves clients of either format, always translated. */
  readonly wireFormat: WireFormat | 'bedrock';
  /** The path below the base URL's for a call's API path (`/v1/chat/completions`). */
  upstreamPath(path: string): string;
  /** The headers that carry deployment `d`'s key. */
  authHeaders(key: string, d: Pick<DeploymentConfig, 'auth'>): Record<string, string>;
  /** First wait before retrying a 429 that names no wait, ms (doubled at each retry); undefined: such a 429 is not retried. */
  readonly defaultRetryBackoffMs: number | undefined;
  /** An error body (`status` ≥ 400) in OpenAI's shape; a body not of the provider's shape unchanged. */
  openAIShapedError(status: number, text: string): string;
  /** A 429's wait that the provider gives only in its body, ms; undefined when it gives none there. */
  bodyRetryWaitMs(text: string): number | undefined;
  /** What is wrong with a deployment's `base_url` (a URL the schema accepted), or undefined when it is usable. */
  baseUrlProblem(baseUrl: string): string | undefined;
  /** Whether deployment `d` serves `/v1/responses` itself (else a Responses request is translated to chat completions). */
  servesResponses(d: Pick<DeploymentConfig, 'responses_api' | 'base_url'>): boolean;
}

/** The rules most providers share: OpenAI's paths, a bearer key, errors already in their own documented shape. */
export const DEFAULT_ADAPTER: ProviderAdapter = {
  wireFormat: 'openai',
  upstreamPath: (path) => path,
  authHeaders: (key) => ({ authorization: `Bearer ${key}` }),
  defaultRetryBackoffMs: undefined,
  openAIShapedError: (_status, text) => text,
  bodyRetryWaitMs: () => undefined,
  baseUrlProblem: () => undefined,
  servesResponses: () => false,
};

