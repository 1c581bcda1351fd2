/**
 * Ownership: in a cluster a node decides only for the tenants it owns under its current ring. A
 * request for another node's tenant (a router with a stale ring, a client calling a node directly,
 * a node that is leaving) is answered 421 `misdirected` before anything is counted, naming the
 * owner, so the router retries there and the request is never decided twice. A request the router
 * sent here because the owner is suspect (`x-quotaring-fallback-for: <owner id>`), or retried here
 * after a 421 while rings are in transition (`x-quotaring-redirected-for: <owner id>`), is accepted. Before
 * the first decision for a tenant that moved here, its state is loaded (see `Handoff.ready`). A node
 * that has not read its member list yet (Redis unreachable since it started) owns nothing: 503
 * `node_starting`, and routers route around it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ClaimHow, Handoff } from '../coord/handoff/handoff.ts';
import type { Fence } from '../coord/handoff/fence.ts';
import { FALLBACK_HEADER, OWNER_BACK_HEADER, OWNER_HEADER, OWNER_URL_HEADER, REDIRECTED_HEADER, RING_HEADER, TENANT_HEADER } from '../coord/headers.ts';
import type { Member, Membership } from '../coord/types.ts';
import { sendError } from '../error-reply.ts';
import { membersUnread } from '../coord/membership/join.ts';
import { tenantOf } from './auth.ts';
import type { SpreadTenants } from './spread.ts';

/** A node's place in the cluster. */
export interface NodeCluster {
  /** This node. */
  readonly self: Member;
  /** Source of the ring. */
  readonly membership: Membership;
  /** Ownership and handoff of this node's tenants. */
  readonly handoff: Handoff;
  /** Hot tenants: decided by any of their k nodes, never claimed or handed over. */
  readonly spread?: SpreadTenants;
  /** Fencing after a stall (`src/coord/handoff/fence.ts`): decisions wait for its catch-up. */
  readonly fence?: Fence;
}

export { FALLBACK_HEADER, OWNER_HEADER, REDIRECTED_HEADER, RING_HEADER } from '../coord/headers.ts';

/**
 * A `preHandler` hook: passes requests for tenants this node decides for (after loading a moved
 * tenant's state), answers 421 with `x-quotaring-owner` otherwise (503-free: a leaving node keeps
 * answering 421 until it closes).
 */
export function ownershipHook(cluster: NodeCluster) {
  const { handoff, spread } = cluster;
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    // Not in the cluster yet (Redis unreachable since start): no ring, so no tenant is this node's.
    if (membersUnread(cluster.membership)) return sendNodeStarting(request, reply);
    // Woken from a stall: first catch up with what the others did meanwhile (one clock read otherwise).
    const fenced = cluster.fence?.check();
    if (fenced !== undefined) await fenced;
    const tenant = tenantOf(request).id;
    if (spread?.isSpread(tenant) === true) {
      const { members, index } = spread.placement(tenant);
      return index >= 0 ? undefined : sendMisdirected(request, reply, handoff, tenant, members[0]);
    }
    const placed = handoff.place(tenant);
    let how: ClaimHow | undefined = placed.here ? 'owner' : undefined;
    if (how === undefined) {
      // Accepted in place of the owner this node's ring names, when the router says so.
      // The signed tenant must be the key's: a router's signature for one tenant never makes this node stand in for another.
      const owner = placed.here || request.headers[TENANT_HEADER] !== tenant ? undefined : placed.owner?.id;
      if (owner !== undefined && request.headers[FALLBACK_HEADER] === owner && handoff.place(tenant, owner).here) {
        // The owner woke from a stall and took its tenants back: the router is told to route to it.
        if (handoff.ownerBack(owner)) return sendMisdirected(request, reply, handoff, tenant, placed.here ? undefined : placed.owner, true);
        how = 'fallback';
      }
      else if (owner !== undefined && request.headers[REDIRECTED_HEADER] === owner && handoff.place(tenant, owner).here) how = 'handed';
    }
    if (how !== undefined) {
      const loading = handoff.ready(tenant, how);
      if (loading !== undefined) await loading;
      return undefined;
    }
    return sendMisdirected(request, reply, handoff, tenant, placed.here ? undefined : placed.owner);
  };
}

/**
 * Answers 503 `node_starting`: this node has never read its cluster's member list (Redis
 * unreachable since it started), so it decides for no tenant. Routers route around it (`forward.ts`).
 */
function sendNodeStarting(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const dialect = request.url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
  return sendError(reply, dialect, 'node_starting', { headers: { 'retry-after': '1' } });
}

/**
 * Answers 421 `misdirected` naming the tenant's owner under this node's ring (`x-quotaring-owner`,
 * `x-quotaring-ring`), in the route's error shape, once this node's handoffs are stored. Nothing is
 * counted. `ownerBack`: the request stood in for that owner, which woke from a stall and took its
 * tenants back (`x-quotaring-owner-back`: the router routes to it again).
 */
export async function sendMisdirected(request: FastifyRequest, reply: FastifyReply, handoff: Handoff, tenant: string, owner: Member | undefined, ownerBack = false): Promise<FastifyReply> {
  // The owner named here may load the tenant at once on the router's retry: store the handoff first.
  await handoff.settledDown();
  const ring = handoff.ring();
  const dialect = request.url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
  const ownerId = owner?.id ?? 'none';
  return sendError(reply, dialect, 'misdirected', {
    headers: { [OWNER_HEADER]: ownerId, ...(owner === undefined ? {} : { [OWNER_URL_HEADER]: owner.url }), ...(ownerBack ? { [OWNER_BACK_HEADER]: ownerId } : {}), [RING_HEADER]: ring.version },
    message: `Tenant ${tenant} is owned by ${ownerId} under ring ${ring.version}; this is ${handoff.self.id}.`,
  });
}
