/**
 * Error bodies of OpenAI-compatible providers that do not write OpenAI's shape, rewritten in it
 * (`{"error":{"message","type","param","code"}}`, https://platform.openai.com/docs/guides/error-codes)
 * so an OpenAI client reads them as it reads OpenAI's, and a translated reply (an Anthropic client)
 * finds the message: Gemini's array-wrapped `google.rpc.Status` and vLLM's flat `"object":"error"`.
 * Also the waits that only a body carries (Gemini's RetryInfo).
 */
import type { Provider } from '../config/schema.ts';
import { geminiRetryDelayMs, parseGeminiError } from './gemini/errors.ts';
import { parseFlatVllmError } from './vllm/errors.ts';

/** OpenAI's error `type` for an HTTP status. */
function openAIType(status: number): string {
  if (status === 429) return 'requests';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

function openAIError(status: number, message: string, code: string | null, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ error: { message, type: openAIType(status), param: null, code: status === 429 ? 'rate_limit_exceeded' : code, ...extra } });
}

/**
 * An upstream error body (`status` ≥ 400) in OpenAI's shape: Gemini's and vLLM's rewritten, the
 * code `rate_limit_exceeded` on a 429 (Gemini's own status name, e.g. `RESOURCE_EXHAUSTED`, kept as
 * `status`, and its `details` — quota metric, retry info — kept too); any other body, or a body not
 * of the provider's shape (a proxy's HTML page), unchanged.
 */
export function openAIShapedError(provider: Provider, status: number, text: string): string {
  if (provider === 'gemini') {
    const e = parseGeminiError(text);
    if (e === undefined) return text;
    const extra: Record<string, unknown> = {};
    if (e.status !== undefined) extra.status = e.status;
    if (e.details.length > 0) extra.details = e.details;
    return openAIError(status, e.message, e.status === undefined ? null : e.status.toLowerCase(), extra);
  }
  if (provider === 'vllm') {
    const e = parseFlatVllmError(text);
    return e === undefined ? text : openAIError(status, e.message, null);
  }
  return text;
}

/** A 429's wait that the provider gives only in its body, ms: Gemini's RetryInfo; undefined for other providers or none. */
export function bodyRetryWaitMs(provider: Provider, text: string): number | undefined {
  return provider === 'gemini' ? geminiRetryDelayMs(text) : undefined;
}
