/**
 * Headers between routers and nodes. Routers drop a client's own values of the request headers.
 */

/** Request header: the version of the ring the router routed by. */
export const RING_HEADER = 'x-quotaring-ring';
/** Request header: the tenant id the router resolved from the key. */
export const TENANT_HEADER = 'x-quotaring-tenant';
/** Response header of a 421: the id of the member that owns the tenant under the node's ring. */
export const OWNER_HEADER = 'x-quotaring-owner';
/**
 * Request header: the id of the member the receiving node may believe owns the tenant, which the
 * router stands the request in for. Set when the router routed around a suspect owner (refused a
 * connection, or fails health checks), and on the retry after a 421 while rings are in transition
 * (naming the node that redirected, or the owner it named when that member is gone). A node accepts
 * the request instead of answering 421 when the header names its own ring's owner of the tenant.
 */
export const FALLBACK_HEADER = 'x-quotaring-fallback-for';
