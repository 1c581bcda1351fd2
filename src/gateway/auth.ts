/**
 * Tenant authentication on a node: the API key (read by `src/http/api-key.ts`, from
 * `Authorization: Bearer <key>`, `x-api-key: <key>` or `api-key: <key>`) selects the tenant; a
 * request whose headers carry two different keys is refused (401). Keys are never logged.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Tier } from '../config/load.ts';
import type { TenantConfig } from '../config/schema.ts';
import { GatewayError } from '../errors.ts';
import type { GatewayContext } from './context.ts';
import { CONFLICTING_KEYS_MESSAGE, apiKeyOf, hasConflictingKeys } from '../http/api-key.ts';

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
