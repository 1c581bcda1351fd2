/**
 * A node's operator views on its service port (routers never forward them): `GET /metrics`
 * (Prometheus text, docs/metrics.md), `GET /_quotaring/v1/levels` (the node's live report,
 * polled once a second by routers for their live stream) and `GET /_quotaring/v1/deployments/:name/shares`
 * (a fair-shared deployment's table on this node).
 */
import type { FastifyInstance } from 'fastify';
import { sendError } from '../error-reply.ts';
import type { FairShares } from '../fairshare/shares.ts';
import { allShareViews, shareLevels } from './fair-share-report.ts';
import type { Limiter } from '../limiter/limiter.ts';
import type { AdmissionQueues } from '../gateway/admission-queue.ts';
import type { NodeActivity } from './node-activity.ts';
import { TOP_TENANTS } from './levels.ts';
import type { NodeLevels, TenantLevels } from './levels.ts';
import { wallNow } from '../clock.ts';

/** What {@link nodeLevels} reads. */
export interface LevelSources {
  /** This node's id. */
  node(): string;
  readonly activity: NodeActivity;
  readonly limiter: Limiter;
  readonly queues: AdmissionQueues;
  /** Ring version this node sees (undefined for a single node). */
  ring(): string | undefined;
  /** Whether the node decides from local fallback shares now. */
  fallback(): boolean;
  /** Whether this node decides for the tenant now (its owner, or a spread tenant's node). */
  decidesFor(tenant: string): boolean;
  /** The node's fair shares (absent: no fair-shared deployment). */
  readonly fair?: FairShares;
}

/**
 * The node's report: rates over the last second, in-flight and queued counts, and up to
 * {@link TOP_TENANTS} tenants (busiest first, then any other with a queue) with their limits now.
 */
export function nodeLevels(s: LevelSources, nowMs = wallNow()): NodeLevels {
  const depths = s.queues.depths();
  const busy = s.activity
    .tenantRates()
    .filter((t) => t.admittedPerSec + t.refusedPerSec > 0)
    .sort((a, b) => b.admittedPerSec + b.refusedPerSec - (a.admittedPerSec + a.refusedPerSec) || a.tenant.localeCompare(b.tenant))
    .slice(0, TOP_TENANTS);
  const listed = new Set(busy.map((t) => t.tenant));
  for (const tenant of depths.keys()) {
    if (listed.size >= TOP_TENANTS) break;
    if (!listed.has(tenant)) {
      busy.push({ tenant, admittedPerSec: 0, refusedPerSec: 0 });
      listed.add(tenant);
    }
  }
  let queued = 0;
  for (const n of depths.values()) queued += n;
  const tenants: TenantLevels[] = busy.map((t) => ({
    ...t,
    queued: depths.get(t.tenant) ?? 0,
    limits: s.decidesFor(t.tenant) ? s.limiter.peek(t.tenant).map((l) => ({ name: l.name, kind: l.kind, limit: l.limit, remaining: l.remaining, resetMs: l.resetMs })) : [],
  }));
  const rates = s.activity.nodeRates();
  const shares = s.fair === undefined ? undefined : shareLevels(allShareViews(s.fair), TOP_TENANTS);
  return { node: s.node(), ring: s.ring() ?? null, atMs: nowMs, inFlight: s.activity.inFlight, queued, fallback: s.fallback(), ...rates, tenants, ...(shares === undefined ? {} : { shares }) };
}

/** Registers `GET /metrics`, `GET /_quotaring/v1/levels` and `GET /_quotaring/v1/deployments/:name/shares` on the node's service port. */
export function nodeOpsRoutes(app: FastifyInstance, s: LevelSources): void {
  const registry = s.activity.metrics.registry;
  app.get('/metrics', async (_request, reply) => reply.header('content-type', registry.contentType).send(await registry.metrics()));
  app.get('/_quotaring/v1/levels', async () => nodeLevels(s));
  app.get<{ Params: { name: string } }>('/_quotaring/v1/deployments/:name/shares', async (request, reply) => {
    const view = s.fair?.view(request.params.name);
    return view ?? sendError(reply, 'openai', 'not_found', { message: `No fair-shared deployment ${request.params.name} on this node.` });
  });
}
