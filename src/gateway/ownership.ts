/**
 * Ownership: in a cluster a node decides only for the tenants it owns under its current ring. A
 * request for another node's tenant (a router with a stale ring, a client calling a node directly,
 * a node that is leaving) is answered 421 `misdirected` before anything is counted, naming the
 * owner, so the router retries there and the request is never decided twice. A request the router
 * sent here because the owner is suspect (`x-quotaring-fallback-for: <owner id>`) is accepted. Before
 * the first decision for a tenant that moved here, its state is loaded (see `Handoff.ready`).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Handoff } from '../coord/handoff.ts';
import { FALLBACK_HEADER, OWNER_HEADER, RING_HEADER } from '../coord/headers.ts';
import type { Member, Membership } from '../coord/types.ts';
import { errorBody } from '../errors.ts';
import { tenantOf } from './auth.ts';

/** A node's place in the cluster. */
export interface NodeCluster {
  /** This node. */
  readonly self: Member;
  /** Source of the ring. */
  readonly membership: Membership;
  /** Ownership and handoff of this node's tenants. */
  readonly handoff: Handoff;
}

export { FALLBACK_HEADER, OWNER_HEADER, RING_HEADER } from '../coord/headers.ts';

/**
 * A `preHandler` hook: passes requests for tenants this node decides for (after loading a moved
 * tenant's state), answers 421 with `x-quotaring-owner` otherwise (503-free: a leaving node keeps
 * answering 421 until it closes).
 */
export function ownershipHook(cluster: NodeCluster) {
  const { handoff } = cluster;
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const tenant = tenantOf(request).id;
    const fallbackFor = request.headers[FALLBACK_HEADER];
    const placed = handoff.place(tenant, typeof fallbackFor === 'string' ? fallbackFor : undefined);
    if (placed.here) {
      const loading = handoff.ready(tenant, fallbackFor !== undefined);
      if (loading !== undefined) await loading;
      return undefined;
    }
    const ring = handoff.ring();
    const dialect = request.url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
    const ownerId = placed.owner?.id ?? 'none';
    return reply
      .code(421)
      .headers({ [OWNER_HEADER]: ownerId, [RING_HEADER]: ring.version, 'x-quotaring-error': 'misdirected' })
      .send(errorBody(dialect, 'misdirected', `Tenant ${tenant} is owned by ${ownerId} under ring ${ring.version}; this is ${cluster.self.id}.`));
  };
}
