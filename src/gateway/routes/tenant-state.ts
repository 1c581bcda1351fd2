/**
 * Read-only views of a node for operators and tests (not proxied by routers): a tenant's limits,
 * and the node's handoff counters.
 */
import type { FastifyInstance } from 'fastify';
import type { Handoff } from '../../coord/handoff.ts';
import type { LoadedConfig } from '../../config/load.ts';
import { errorBody } from '../../errors.ts';
import type { Limiter } from '../../limiter/limiter.ts';
import type { AdmissionQueues } from '../admission-queue.ts';

/**
 * Registers `GET /_quotaring/v1/handoff` (`{node, ring, claimed, stats}`: see `HandoffStats`) and
 * `GET /_quotaring/v1/tenants/:tenant`: `{tenant, node, here, owner, limits, queued}` where `limits`
 * is `Limiter.peek` (every limit's remaining and reset, nothing taken) when this node decides for the
 * tenant, else `[]` and `owner` names the member that does; `queued` counts its requests waiting
 * here for capacity. 404 for a tenant not in the config.
 */
export function tenantStateRoutes(app: FastifyInstance, config: LoadedConfig, limiter: Limiter, queues: AdmissionQueues, node: string, handoff: Handoff | undefined): void {
  app.get<{ Params: { tenant: string } }>('/_quotaring/v1/tenants/:tenant', async (request, reply) => {
    const tenant = request.params.tenant;
    if (!config.policies.has(tenant)) {
      return reply.code(404).header('x-quotaring-error', 'not_found').send(errorBody('openai', 'not_found', `No tenant ${tenant}.`));
    }
    const placed = handoff?.place(tenant) ?? { here: true as const };
    if (!placed.here) return { tenant, node, here: false, owner: placed.owner?.id ?? null, limits: [], queued: queues.depth(tenant) };
    await handoff?.ready(tenant);
    return { tenant, node, here: true, owner: node, limits: limiter.peek(tenant), queued: queues.depth(tenant) };
  });
  app.get('/_quotaring/v1/handoff', async () => ({ node, ring: handoff?.ring().version ?? null, claimed: handoff?.claimed().size ?? 0, stats: handoff?.stats ?? null }));
}
