/**
 * Gemini through its OpenAI compatibility (see `./endpoint.ts`): OpenAI's wire format below a base
 * URL that holds the version (the call's `/v1` dropped), errors array-wrapped `google.rpc.Status`
 * rewritten in OpenAI's shape (its status name kept as `status`, its `details` kept), a 429's wait
 * only in the body (RetryInfo); no Responses API.
 */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';
import { azurePath } from '../azure/endpoint.ts';
import { openAIError } from '../openai-error-shape.ts';
import { geminiBaseUrlProblem } from './endpoint.ts';
import { geminiRetryDelayMs, parseGeminiError } from './errors.ts';

/** Gemini's rules (see the module comment). */
export const geminiAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  upstreamPath: azurePath,
  openAIShapedError(status, text) {
    const e = parseGeminiError(text);
    if (e === undefined) return text;
    const extra: Record<string, unknown> = {};
    if (e.status !== undefined) extra.status = e.status;
    if (e.details.length > 0) extra.details = e.details;
    return openAIError(status, e.message, e.status === undefined ? null : e.status.toLowerCase(), extra);
  },
  bodyRetryWaitMs: geminiRetryDelayMs,
  baseUrlProblem: geminiBaseUrlProblem,
};
