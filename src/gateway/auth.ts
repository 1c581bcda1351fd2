/**
 * Tenant authentication: the API key from `Authorization: Bearer <key>` (OpenAI SDK),
 * `x-api-key: <key>` (Anthropic SDK) or `api-key: <key>` (the openai SDK's `AzureOpenAI`) selects the
 * tenant; a request whose headers carry two different keys is refused (401). Keys are never logged.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Tier } from '../config/load.ts';
import type { TenantConfig } from '../config/schema.ts';
import { GatewayError } from '../errors.ts';
import type { GatewayContext } from './context.ts';

import type { RequestTrail } from '../ops/node-activity.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated tenant; set by the auth hook on every /v1 route. */
    tenant: TenantConfig | null;
    /** The request's priority tier (the key's default, or `x-quotaring-priority`); set with `tenant`. */
    tier: Tier | null;
    /** The id of the API key the request came with (selects the key's own limits); null when the key has none. Set with `tenant`. */
    keyId: string | null;
    /** The request's account for metrics and its log line; set by the exchange. */
    trail: RequestTrail | null;
  }
}

/** Request header naming a priority tier (one the key may use). */
export const PRIORITY_HEADER = 'x-quotaring-priority';

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

/**
 * An `onRequest` hook: sets `request.tenant` and `request.tier`, before the body is read.
 * @throws GatewayError `invalid_api_key` (401) when the key is missing or unknown;
 *   `invalid_request` (400, param `x-quotaring-priority`) when the header names a tier that does
 *   not exist or that the key may not use.
 */
export function authHook(ctx: GatewayContext) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const key = apiKeyOf(request);
    const access = key === undefined ? undefined : ctx.config.accessByKey.get(key);
    if (access === undefined) {
      const why = key !== undefined ? 'Incorrect API key provided. Use a key configured for a tenant of this gateway.' : hasConflictingKeys(request) ? CONFLICTING_KEYS_MESSAGE : undefined;
      throw new GatewayError('invalid_api_key', why);
    }
    request.tenant = access.tenant;
    request.keyId = access.keyId ?? null;
    const asked = request.headers[PRIORITY_HEADER];
    if (asked === undefined) {
      request.tier = access.tier;
      return;
    }
    const tier = typeof asked === 'string' ? access.tiers.get(asked.trim()) : undefined;
    if (tier === undefined) {
      const allowed = [...access.tiers.keys()].join(', ');
      const why = typeof asked === 'string' && ctx.config.tiers.has(asked.trim()) ? `this key may not use priority "${asked.trim()}"` : `there is no priority "${String(asked)}"`;
      throw new GatewayError('invalid_request', `${PRIORITY_HEADER}: ${why}; this key may use ${allowed}.`, PRIORITY_HEADER);
    }
    request.tier = tier;
  };
}

/** The priority tier of a /v1 request. @throws Error when the auth hook did not run (a wiring bug). */
export function tierOf(request: FastifyRequest): Tier {
  if (request.tier === null) throw new Error('auth hook did not run');
  return request.tier;
}

/** The authenticated tenant of a /v1 request. @throws Error when the auth hook did not run (a wiring bug). */
export function tenantOf(request: FastifyRequest): TenantConfig {
  if (request.tenant === null) throw new Error('auth hook did not run');
  return request.tenant;
}
