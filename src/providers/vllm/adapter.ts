/** vLLM's OpenAI-compatible server: OpenAI's wire format, its flat `"object":"error"` bodies rewritten in OpenAI's shape, its own Responses API only with `responses_api: native`. */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';
import { openAIError } from '../openai-error-shape.ts';
import { parseFlatVllmError } from './errors.ts';

/** vLLM's rules (see the module comment). */
export const vllmAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  openAIShapedError(status, text) {
    const e = parseFlatVllmError(text);
    return e === undefined ? text : openAIError(status, e.message, null);
  },
  servesResponses: (d) => d.responses_api === 'native',
};
