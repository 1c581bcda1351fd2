/**
 * Shapes of the live view: what a node reports about itself once a second
 * (`GET /_quotaring/v1/levels` on its service port) and what a router's live stream sends to
 * dashboards and `quotaring top` (WebSocket `GET /admin/v1/live` on the router's admin port).
 */

/** One limit of a tenant now, as `Limiter.peek` reads it (nothing taken). */
export interface LimitLevel {
  /** The limit's name, e.g. `tokens/1m`, `concurrent`, `tokens/1d@gpt-4o`. */
  readonly name: string;
  readonly kind: 'requests' | 'tokens' | 'concurrent' | 'cost';
  /** Capacity (requests, tokens, slots, or micro-dollars per period for a cost limit). */
  readonly limit: number;
  /** Units left now. */
  readonly remaining: number;
  /** ms until the limit is whole again (0 when it is). */
  readonly resetMs: number;
}

/** A tenant on the node deciding for it. Rates are over the node's last whole second. */
export interface TenantLevels {
  readonly tenant: string;
  /** Requests admitted per second. */
  readonly admittedPerSec: number;
  /** Requests refused (429) per second. */
  readonly refusedPerSec: number;
  /** Requests waiting in its admission queue now. */
  readonly queued: number;
  readonly limits: readonly LimitLevel[];
}

/** A fair-shared deployment's table in a node's report: its view, at most {@link TOP_TENANTS} tenants (most demand first), `omitted` the others. */
export interface ShareLevels {
  readonly deployment: string;
  readonly source: 'cluster' | 'local';
  readonly nodes: number;
  readonly reserve: number;
  readonly buckets: readonly { readonly kind: 'requests' | 'tokens'; readonly capacity: number; readonly level: number }[];
  /** Per bucket kind: demand, share and used, units per 60 s window. */
  readonly tenants: readonly { readonly tenant: string; readonly kinds: readonly { readonly kind: 'requests' | 'tokens'; readonly demand: number; readonly share: number; readonly used: number }[] }[];
  readonly omitted: number;
}

/** A node's report (`GET /_quotaring/v1/levels`). */
export interface NodeLevels {
  readonly node: string;
  /** Ring version the node sees (null for a single node). */
  readonly ring: string | null;
  /** Wall clock of the report, ms since the epoch. */
  readonly atMs: number;
  /** Requests admitted and not finished. */
  readonly inFlight: number;
  /** Requests waiting in every tenant queue. */
  readonly queued: number;
  /** Deciding from local fallback shares (Redis unreachable). */
  readonly fallback: boolean;
  readonly admittedPerSec: number;
  readonly refusedPerSec: number;
  /** Up to {@link TOP_TENANTS} tenants, busiest first (admitted + refused per second), then any with a queue. */
  readonly tenants: readonly TenantLevels[];
  /** Fair-shared deployments' tables (absent on a node without any). */
  readonly shares?: readonly ShareLevels[];
}

/** Tenants a node lists in its levels report, busiest first. */
export const TOP_TENANTS = 20;

/** Something that happened in the cluster, as the router saw it between two snapshots. */
export interface LiveEvent {
  /** ms since the epoch. */
  readonly atMs: number;
  readonly kind: 'ring_changed' | 'node_up' | 'node_down' | 'fallback_entered' | 'fallback_left' | 'tenant_hot' | 'tenant_cooled';
  /** Node id, tenant id or ring version the event is about. */
  readonly subject: string;
  /** One readable line. */
  readonly message: string;
}

/** A member of the ring as the router sees it, with its last report (absent when it did not answer). */
export interface LiveNode {
  readonly id: string;
  readonly url: string;
  /** Answered the last levels poll. */
  readonly up: boolean;
  readonly levels?: NodeLevels;
}

/** One message of the live stream, sent once a second to every client. */
export interface LiveSnapshot {
  readonly type: 'snapshot';
  readonly atMs: number;
  /** The router's id (`router-<port>`). */
  readonly router: string;
  readonly ring: { readonly version: string; readonly members: number };
  readonly nodes: readonly LiveNode[];
  /** The busiest tenants across nodes (up to 10), each with the node deciding for it. */
  readonly tenants: readonly (TenantLevels & { readonly node: string })[];
  /** Tenants spread over several nodes now (config `spread` or found hot), with their k. */
  readonly hot: readonly { readonly tenant: string; readonly k: number }[];
  /** Events since the previous snapshot (the first snapshot: the last 50 seen). */
  readonly events: readonly LiveEvent[];
}
