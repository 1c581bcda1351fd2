/** Every provider's adapter (see `./adapter.ts`), by the config's provider name. */
import type { Provider } from '../config/schema.ts';
import type { ProviderAdapter } from './adapter.ts';
import { anthropicAdapter } from './anthropic/adapter.ts';
import { azureAdapter } from './azure/adapter.ts';
import { bedrockAdapter } from './bedrock/adapter.ts';
import { geminiAdapter } from './gemini/adapter.ts';
import { openaiAdapter } from './openai/adapter.ts';
import { vllmAdapter } from './vllm/adapter.ts';

const ADAPTERS: Readonly<Record<Provider, ProviderAdapter>> = {
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  azure: azureAdapter,
  bedrock: bedrockAdapter,
  gemini: geminiAdapter,
  vllm: vllmAdapter,
};

/** The adapter of `provider`. */
export function adapterOf(provider: Provider): ProviderAdapter {
  return ADAPTERS[provider];
}
