/**
 * Tenant authentication: the API key from `Authorization: Bearer <key>` (OpenAI SDK) or
 * `x-api-key: <key>` (Anthropic SDK) selects the tenant. Keys are never logged.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TenantConfig } from '../config/schema.ts';
import { GatewayError } from '../errors.ts';
import type { GatewayContext } from './context.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated tenant; set by the auth hook on every /v1 route. */
    tenant: TenantConfig | null;
  }
}

/** The key a request carries, or undefined. */
export function apiKeyOf(request: FastifyRequest): string | undefined {
  const auth = request.headers.authorization;
  if (typeof auth === 'string' && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ') return auth.slice(7).trim();
  const key = request.headers['x-api-key'];
  return typeof key === 'string' && key.length > 0 ? key : undefined;
}

/**
 * An `onRequest` hook: sets `request.tenant`, before the body is read.
 * @throws GatewayError `invalid_api_key` (401) when the key is missing or unknown.
 */
export function authHook(ctx: GatewayContext) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const key = apiKeyOf(request);
    const tenant = key === undefined ? undefined : ctx.config.tenantByKey.get(key);
    if (tenant === undefined) {
      throw new GatewayError('invalid_api_key', key === undefined ? undefined : 'Incorrect API key provided. Use a key configured for a tenant of this gateway.');
    }
    request.tenant = tenant;
  };
}

/** The authenticated tenant of a /v1 request. @throws Error when the auth hook did not run (a wiring bug). */
export function tenantOf(request: FastifyRequest): TenantConfig {
  if (request.tenant === null) throw new Error('auth hook did not run');
  return request.tenant;
}
