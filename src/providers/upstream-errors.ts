/**
 * Error bodies of OpenAI-compatible providers that do not write OpenAI's shape, rewritten in it
 * (`{"error":{"message","type","param","code"}}`, https://platform.openai.com/docs/guides/error-codes)
 * so an OpenAI client reads them as it reads OpenAI's, and a translated reply (an Anthropic client)
 * finds the message: Gemini's array-wrapped `google.rpc.Status` and vLLM's flat `"object":"error"`.
 * Also the waits that only a body carries (Gemini's RetryInfo). Each provider's rule is its adapter's.
 */
import type { Provider } from '../config/schema.ts';
import { adapterOf } from './adapters.ts';

/**
 * An upstream error body (`status` ≥ 400) in OpenAI's shape: Gemini's and vLLM's rewritten, the
 * code `rate_limit_exceeded` on a 429 (Gemini's own status name, e.g. `RESOURCE_EXHAUSTED`, kept as
 * `status`, and its `details` — quota metric, retry info — kept too); any other body, or a body not
 * of the provider's shape (a proxy's HTML page), unchanged.
 */
export function openAIShapedError(provider: Provider, status: number, text: string): string {
  return adapterOf(provider).openAIShapedError(status, text);
}

/** A 429's wait that the provider gives only in its body, ms: Gemini's RetryInfo; undefined for other providers or none. */
export function bodyRetryWaitMs(provider: Provider, text: string): number | undefined {
  return adapterOf(provider).bodyRetryWaitMs(text);
}
