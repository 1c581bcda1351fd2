/**
 * Contracts of cluster coordination: members, the ring over them, and membership sources.
 * Routers and nodes build the same ring from the same sorted member list, so they agree without
 * talking to each other; the ring's version (a hash of that list) travels with each routed request.
 */

/** A gateway node of the cluster. */
export interface Member {
  /** Stable id, unique in the cluster (e.g. `node-1`). */
  readonly id: string;
  /** Base URL where the node serves clients, e.g. `http://127.0.0.1:8081`. */
  readonly url: string;
  /** Relative capacity for the ring. @default 1 */
  readonly weight?: number;
}

/** Consistent-hash ring of members: who owns a tenant. Immutable; a membership change builds a new one. */
export interface Ring {
  /** Hash of the sorted member list (`id@url*weight`), 12 hex chars; '' for an empty ring. */
  readonly version: string;
  /** Members sorted by id. */
  readonly members: readonly Member[];
  /** The owner of a tenant, or undefined on an empty ring. */
  owner(tenant: string): Member | undefined;
  /** Up to `k` distinct members for a tenant, owner first (for routing around a dead owner and hot tenants). */
  range(tenant: string, k: number): readonly Member[];
}

/** A member entry a membership ignored: its claimed id (when it has one) and why. */
export interface RejectedMemberEntry {
  readonly id?: string;
  /** `unsigned` / `bad_signature`: not signed with the cluster secret; `not_a_member`: not a member's JSON. */
  readonly problem: 'not_a_member' | 'unsigned' | 'bad_signature';
}

/** Where the live member list comes from. Emits the new ring on every change. */
export interface Membership {
  /** Starts heartbeating / watching; resolves once a first member list is known. */
  start(): Promise<void>;
  /** Stops (a node deregisters itself); idempotent. */
  stop(): Promise<void>;
  /** The current ring (never undefined after start). */
  ring(): Ring;
  /** Called with the new ring after each change of the member list. Returns an unsubscribe function. */
  onChange(listener: (ring: Ring) => void): () => void;
  /** Memberships read from a shared store (Redis): called once per entry ignored for a missing or bad signature, those before the call included. */
  onRejectedEntry?(listener: (entry: RejectedMemberEntry) => void): () => void;
  /** Memberships read from a shared store: distinct entries ignored so far. */
  rejectedEntries?(): number;
}
