/** Anthropic's Messages API (https://docs.anthropic.com/en/api/messages): its own wire format, the key in `x-api-key`. */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';

/** Anthropic's rules: its own wire format, the key in `x-api-key`; the rest the defaults. */
export const anthropicAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  wireFormat: 'anthropic',
  authHeaders: (key) => ({ 'x-api-key': key }),
};
