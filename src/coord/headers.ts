/**
 * Headers between routers and nodes. Routers drop a client's own values of the request headers.
 */

/** Request header: the version of the ring the router routed by. */
export const RING_HEADER = 'x-quotaring-ring';
/** Request header: the tenant id the router resolved from the key. */
export const TENANT_HEADER = 'x-quotaring-tenant';
/** Response header of a 421: the id of the member that owns the tenant under the node's ring. */
export const OWNER_HEADER = 'x-quotaring-owner';
/** Response header of a 421: the URL of that member (a router that has not seen it join yet can still reach it). */
export const OWNER_URL_HEADER = 'x-quotaring-owner-url';
/**
 * Response header of a 421 from a node a router sent a request to in place of a suspect owner: that
 * owner (its id) woke from a stall and took its tenants back from this node (`src/coord/handoff/fence.ts`),
 * so it is alive and answering. The router stops suspecting it and retries there.
 */
export const OWNER_BACK_HEADER = 'x-quotaring-owner-back';
/**
 * Request header: the id of the tenant's owner (under the ring in {@link RING_HEADER}) that the router
 * routed around because it is suspect (refused a connection, or fails health checks). The receiving
 * node accepts the request instead of answering 421 when the header names its own ring's owner of
 * the tenant, and frees the slots of the requests the dead owner had in flight.
 */
export const FALLBACK_HEADER = 'x-quotaring-fallback-for';
/**
 * Request header of a router's retry after a 421 while rings are in transition: the member the
 * receiving node may still believe owns the tenant (the node that redirected, or the owner it named
 * when that member left the router's ring). The node accepts the request instead of answering 421 again when the
 * header names its own ring's owner of the tenant; nothing is freed (that member is alive, or left
 * gracefully and handed its state over).
 */
export const REDIRECTED_HEADER = 'x-quotaring-redirected-for';
/** Request header of a node-to-node settlement: how many nodes it went through. */
export const HOPS_HEADER = 'x-quotaring-hops';
/** Request header of a node-to-node settlement: the id of the node that sent it. */
export const FROM_HEADER = 'x-quotaring-from';
