/**
 * Ownership: in a cluster a node decides only for the tenants it owns under its current ring. A
 * request for another node's tenant (a router with a stale ring, a client calling a node directly)
 * is answered 421 `misdirected` before anything is counted, naming the owner, so the router retries
 * there and the request is never decided twice.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Member, Membership } from '../coord/types.ts';
import { errorBody } from '../errors.ts';
import { tenantOf } from './auth.ts';

/** A node's place in the cluster. */
export interface NodeCluster {
  /** This node. */
  readonly self: Member;
  /** Source of the ring. */
  readonly membership: Membership;
}

/** Header naming the owner in a 421, and the ring version a router routed by. */
export const OWNER_HEADER = 'x-quotaring-owner';
export const RING_HEADER = 'x-quotaring-ring';

/**
 * A `preHandler` hook: passes requests for tenants this node owns (or any request while the ring is
 * empty), answers 421 with `x-quotaring-owner` otherwise.
 */
export function ownershipHook(cluster: NodeCluster) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const ring = cluster.membership.ring();
    const owner = ring.owner(tenantOf(request).id);
    if (owner === undefined || owner.id === cluster.self.id) return undefined;
    const dialect = request.url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
    return reply
      .code(421)
      .headers({ [OWNER_HEADER]: owner.id, [RING_HEADER]: ring.version, 'x-quotaring-error': 'misdirected' })
      .send(errorBody(dialect, 'misdirected', `Tenant ${tenantOf(request).id} is owned by ${owner.id} under ring ${ring.version}; this is ${cluster.self.id}.`));
  };
}
