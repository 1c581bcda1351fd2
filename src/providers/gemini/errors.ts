/**
 * Gemini's errors as its OpenAI compatibility writes them: a `google.rpc.Status` in JSON, often
 * wrapped in an array — `[{"error":{"code":429,"message":"…","status":"RESOURCE_EXHAUSTED",
 * "details":[…]}}]` — (https://ai.google.dev/gemini-api/docs/troubleshooting lists the statuses),
 * and the wait of a 429 only in the body: a `google.rpc.RetryInfo` detail
 * (`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"38.601s"}`, a protobuf
 * Duration: decimal seconds with an `s`), no `retry-after` header.
 */

/** The fields quotaring reads from a Gemini error body. */
export interface GeminiError {
  /** HTTP status Gemini wrote in the body (`code`). */
  readonly code: number | undefined;
  readonly message: string;
  /** The `google.rpc.Code` name, e.g. `RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`, `UNAVAILABLE`. */
  readonly status: string | undefined;
  readonly details: readonly unknown[];
}

const RETRY_INFO = 'type.googleapis.com/google.rpc.RetryInfo';
/** A protobuf Duration in JSON: seconds with up to 9 decimals and an `s`. */
const DURATION = /^(\d+)(\.\d{1,9})?s$/;

/** The error of a Gemini error body (bare or in an array), or undefined when `text` is not one. */
export function parseGeminiError(text: string): GeminiError | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (Array.isArray(body)) body = body[0];
  if (body === null || typeof body !== 'object') return undefined;
  const error = (body as { error?: unknown }).error;
  if (error === null || typeof error !== 'object' || Array.isArray(error)) return undefined;
  const e = error as Record<string, unknown>;
  if (typeof e.message !== 'string') return undefined;
  return {
    code: typeof e.code === 'number' ? e.code : undefined,
    message: e.message,
    status: typeof e.status === 'string' ? e.status : undefined,
    details: Array.isArray(e.details) ? e.details : [],
  };
}

/** The wait a Gemini 429 asks for, ms (rounded up), from its RetryInfo detail; undefined when it names none. */
export function geminiRetryDelayMs(text: string): number | undefined {
  const error = parseGeminiError(text);
  if (error === undefined) return undefined;
  for (const detail of error.details) {
    if (detail === null || typeof detail !== 'object') continue;
    const d = detail as Record<string, unknown>;
    if (d['@type'] !== RETRY_INFO || typeof d.retryDelay !== 'string') continue;
    const m = DURATION.exec(d.retryDelay.trim());
    if (m === null) continue;
    return Math.ceil((Number(m[1]) + Number(m[2] ?? 0)) * 1_000);
  }
  return undefined;
}
