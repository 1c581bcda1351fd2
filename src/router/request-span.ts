/**
 * The router's span of a forwarded request (`src/http/tracing.ts` starts the tracer): a server span
 * continuing the client's `traceparent` (a malformed one starts a new trace), ended when the
 * response closes; its trace context replaces the client's in the headers sent to the node, so the
 * node's span is its child. `traceparent` and `tracestate` are not signed headers
 * (`src/security/request-signature.ts`): adding them leaves the router's signature as it was.
 */
import type { Span, Tracing } from '../http/tracing.ts';
import { endWithStatus, injectContext, startServerSpan } from '../http/tracing.ts';
import type { ProxyExchange } from './exchange.ts';

/** Names of the trace context headers, dropped from the client's when the router sends its own. */
export const TRACE_HEADERS = ['traceparent', 'tracestate'] as const;

/**
 * Starts the span of a request forwarded for `tenant` and appends its trace context to `headers`
 * (a flat name/value list, the client's trace headers already dropped). The span ends, with the
 * response's status, when the response closes (0 when the client left before a head was sent).
 */
export function traceForward(tracing: Tracing, ex: ProxyExchange, tenant: string, headers: string[]): Span {
  const { req, res } = ex;
  const method = req.method ?? 'GET';
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const span = startServerSpan(tracing, `${method} ${path}`, req.headers, { 'http.request.method': method, 'url.path': path, 'quotaring.tenant': tenant });
  const carrier: Record<string, string> = {};
  injectContext(span, carrier);
  for (const [name, value] of Object.entries(carrier)) headers.push(name, value);
  res.once('close', () => endWithStatus(span, res.headersSent ? res.statusCode : 0));
  return span;
}
