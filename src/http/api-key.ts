/**
 * The API key a request carries: `Authorization: Bearer <key>` (OpenAI SDK), `x-api-key: <key>`
 * (Anthropic SDK) or `api-key: <key>` (the openai SDK's `AzureOpenAI`). Shared by the gateway node
 * (`src/gateway/auth.ts`) and the router, so both read the same tenant. Keys are never logged.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** A request, as far as its keys go: a fastify request, or node's `IncomingMessage` (the router's fast path). */
export interface KeyedRequest {
  readonly headers: IncomingHttpHeaders;
}

/**
 * The keys a request carries, in the order they are read: `Authorization: Bearer`, `x-api-key`,
 * `api-key` (the openai SDK's AzureOpenAI client sends its key there). Empty values are no key.
 */
function keysOf(request: KeyedRequest): string[] {
  const keys: string[] = [];
  const auth = request.headers.authorization;
  if (typeof auth === 'string' && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ') {
    const bearer = auth.slice(7).trim();
    if (bearer !== '') keys.push(bearer);
  }
  for (const name of ['x-api-key', 'api-key'] as const) {
    const value = request.headers[name];
    if (typeof value === 'string' && value.length > 0) keys.push(value);
  }
  return keys;
}

/**
 * The key a request carries, or undefined when it carries none, or different keys in two of its
 * key headers (which tenant it means is ambiguous: refused, never one picked by header order).
 * Routers and nodes read it with this one function, so they always agree on the tenant.
 */
export function apiKeyOf(request: KeyedRequest): string | undefined {
  const keys = keysOf(request);
  const first = keys[0];
  return keys.every((k) => k === first) ? first : undefined;
}

/** Whether a request carries different keys in two of `Authorization: Bearer`, `x-api-key` and `api-key`. */
export function hasConflictingKeys(request: KeyedRequest): boolean {
  const keys = keysOf(request);
  return keys.some((k) => k !== keys[0]);
}

/** The 401 message for a request with conflicting keys. */
export const CONFLICTING_KEYS_MESSAGE = 'The request carries different API keys in Authorization, x-api-key and api-key: send one key.';
