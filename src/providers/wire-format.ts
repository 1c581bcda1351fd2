/**
 * The wire format a deployment speaks, which decides whether a client's request goes to it as is or
 * translated: Azure OpenAI speaks OpenAI's (only its URLs and key header differ, see `./azure/endpoint.ts`).
 */
import type { Provider } from '../config/schema.ts';

/** A wire format of requests and replies: OpenAI's (chat completions, ...) or Anthropic's (messages). */
export type WireFormat = 'openai' | 'anthropic';

/** The wire format of a provider's deployments. */
export function wireFormatOf(provider: Provider): WireFormat {
  return provider === 'anthropic' ? 'anthropic' : 'openai';
}
