/**
 * Read-only views of a node for operators and tests (not proxied by routers): a tenant's limits,
 * and the node's handoff counters.
 */
import type { FastifyInstance } from 'fastify';
import type { Handoff } from '../coord/handoff/handoff.ts';
import { sendError } from '../error-reply.ts';
import type { TenantUsage } from '../ops/admin-routes.ts';

/**
 * Registers `GET /_quotaring/v1/handoff` (`{node, ring, claimed, stats}`: see `HandoffStats`) and
 * `GET /_quotaring/v1/tenants/:tenant`: `usage(tenant)` (see `TenantUsage`: every limit's used,
 * remaining and reset where this node decides for the tenant, else `here: false` and the owner);
 * 404 for a tenant not in the config. Routers' admin API reads a tenant's usage here.
 */
export function tenantStateRoutes(app: FastifyInstance, node: () => string, handoff: Handoff | undefined, usage: (tenant: string) => Promise<TenantUsage | undefined>): void {
  app.get<{ Params: { tenant: string } }>('/_quotaring/v1/tenants/:tenant', async (request, reply) => {
    const tenant = request.params.tenant;
    const found = await usage(tenant);
    return found ?? sendError(reply, 'openai', 'not_found', { message: `No tenant ${tenant}.` });
  });
  app.get('/_quotaring/v1/handoff', async () => ({ node: node(), ring: handoff?.ring().version ?? null, claimed: handoff?.claimed().size ?? 0, stats: handoff?.stats ?? null }));
}
