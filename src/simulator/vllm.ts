/**
 * vLLM's OpenAI-compatible server (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)
 * as the simulator speaks it, below `/vllm/v1/` (`chat/completions`, `completions`, `embeddings`;
 * a quotaring deployment's `base_url` is `http://SIM/vllm`, as a real one is `http://vllm:8000`):
 * OpenAI's bodies and streams (usage in a last `choices: []` chunk only with
 * `stream_options.include_usage`), and what differs:
 * - Key: none needed (a vLLM started without `--api-key`); a request without one is counted
 *   under the key `vllm-no-key`.
 * - Errors: vLLM's flat `ErrorResponse`, `{"object":"error","message","type","param","code"}` with
 *   `code` the HTTP status and `type` an exception name (`BadRequestError`, `InternalServerError`).
 * - No `x-ratelimit-*` headers. vLLM limits nothing itself; the simulator's quota (`--rpm`/`--tpm`)
 *   answers a 429 in vLLM's error shape with no wait (as a limit in front of vLLM may).
 */
import type { ProviderError } from './provider-errors.ts';

/** Prefix of the simulator's vLLM routes (below it: `/v1/...`). */
export const VLLM_PREFIX = '/vllm';

/** The key a keyless vLLM request is counted under. */
export const VLLM_NO_KEY = 'vllm-no-key';

/** A vLLM error: the flat `ErrorResponse`. */
export function vllmError(code: number, type: string, message: string): ProviderError {
  return { status: code, body: JSON.stringify({ object: 'error', message, type, param: null, code }) };
}
