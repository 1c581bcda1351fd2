/**
 * An error body in OpenAI's shape (`{"error":{"message","type","param","code"}}`,
 * https://platform.openai.com/docs/guides/error-codes), for providers that speak OpenAI's wire
 * format but write their errors otherwise (Gemini, vLLM): an OpenAI client reads them as it reads
 * OpenAI's, and a translated reply (an Anthropic client) finds the message.
 */

/** OpenAI's error `type` for an HTTP status. */
function openAIType(status: number): string {
  if (status === 429) return 'requests';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/** The JSON text of an OpenAI-shaped error: code `rate_limit_exceeded` on a 429, `extra` fields kept beside the four. */
export function openAIError(status: number, message: string, code: string | null, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ error: { message, type: openAIType(status), param: null, code: status === 429 ? 'rate_limit_exceeded' : code, ...extra } });
}
