/**
 * The wire format a deployment speaks, which decides whether a client's request goes to it as is or
 * translated: Azure OpenAI speaks OpenAI's (only its URLs and key header differ, see `./azure/endpoint.ts`).
 * Each provider's is its adapter's (`./adapters.ts`).
 */
import type { Provider } from '../config/schema.ts';
import type { WireFormat } from './adapter.ts';
import { adapterOf } from './adapters.ts';

export type { WireFormat } from './adapter.ts';

/**
 * The wire format of a provider's deployments; `bedrock` (Converse) serves clients of either format,
 * always translated (`src/providers/translate/*bedrock*`).
 */
export function wireFormatOf(provider: Provider): WireFormat | 'bedrock' {
  return adapterOf(provider).wireFormat;
}

/** Whether a deployment of `provider` can serve a client request of `format` (as is or translated by its own path). */
export function servesFormat(provider: Provider, format: WireFormat): boolean {
  const own = wireFormatOf(provider);
  return own === format || own === 'bedrock';
}
