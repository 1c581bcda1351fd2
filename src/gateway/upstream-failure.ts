/**
 * An upstream's failure in the client's terms: an undici error before any response as a
 * `GatewayError` (504 `upstream_timeout` or 502 `upstream_unavailable`), and the provider's own error
 * message for a reply re-written in the client's format.
 */
import { GatewayError } from '../errors.ts';

/** The provider's error message from an error body (OpenAI's, Anthropic's, or AWS's `{"message"}`), for a reply in the client's format. */
export function upstreamMessage(text: string, deployment: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown }; message?: unknown };
    if (typeof body.error?.message === 'string') return `Deployment ${deployment}: ${body.error.message}`;
    if (typeof body.message === 'string') return `Deployment ${deployment}: ${body.message}`;
  } catch {
    // not JSON: fall through
  }
  return `Deployment ${deployment} refused the request.`;
}

/** Maps an undici failure before any response to a client error. */
export function upstreamError(err: unknown): GatewayError {
  const code = (err as { code?: string }).code ?? '';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new GatewayError('upstream_timeout');
  }
  return new GatewayError('upstream_unavailable', `The upstream provider could not be reached (${code || 'connection failed'}).`);
}
