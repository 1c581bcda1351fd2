/** OpenAI's API (https://platform.openai.com/docs/api-reference): the default rules, and the Responses API served natively unless `responses_api: chat`. */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';

/** OpenAI's rules: the defaults, and its own Responses API unless `responses_api: chat`. */
export const openaiAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  servesResponses: (d) => d.responses_api !== 'chat',
};
