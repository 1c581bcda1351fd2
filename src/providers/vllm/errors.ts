/**
 * vLLM's errors (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html, its
 * `ErrorResponse`): up to vLLM 0.10 a flat object, `{"object":"error","message":"…","type":
 * "BadRequestError","param":null,"code":400}` (`code` the HTTP status, `type` a Python exception's
 * name); later versions nest the same fields under `error`, OpenAI's way. A stream's error is
 * `data: {"error":{…}}`. vLLM itself limits nothing: a 429 comes from what is in front of it.
 */

/** The fields quotaring reads from a vLLM error body. */
export interface VllmError {
  readonly message: string;
  /** vLLM's type, e.g. `BadRequestError`, `NotFoundError`, `InternalServerError`. */
  readonly type: string | undefined;
}

/** The error of a flat vLLM error body (`"object":"error"`), or undefined when `text` is not one (a nested body is OpenAI's shape already). */
export function parseFlatVllmError(text: string): VllmError | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  const b = body as Record<string, unknown>;
  if (b.object !== 'error' || typeof b.message !== 'string' || b.error !== undefined) return undefined;
  return { message: b.message, type: typeof b.type === 'string' ? b.type : undefined };
}
