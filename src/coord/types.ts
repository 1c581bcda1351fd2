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

/** A report of member entries a membership ignored: the claimed id of one (when it has one), why, and how many. */
export interface RejectedMemberEntry {
  readonly id?: string;
  /**
   * `unsigned` / `bad_signature`: not signed with the cluster secret; `not_a_member`: not a member's
   * JSON; `too_many_entries`: reads found more entries than they take (junk in Redis).
   */
  readonly problem: 'not_a_member' | 'unsigned' | 'bad_signature' | 'too_many_entries';
  /** Entries (reads, for `too_many_entries`) since the previous report of this kind; 1 when absent. */
  readonly count?: number;
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
  /** Memberships read from a shared store (Redis): called with rate-limited reports of ignored entries (see {@link RejectedMemberEntry}); a late listener hears the last one. */
  onRejectedEntry?(listener: (entry: RejectedMemberEntry) => void): () => void;
  /** Memberships read from a shared store: entries ignored so far (one left in the store counts once). */
  rejectedEntries?(): number;
  /** Memberships read from a shared store: clock ms of the last successful read (undefined before the first). */
  lastSyncMs?(): number | undefined;
  /** Memberships read from a shared store: reads the member list now (coalesced with a read in flight); never rejects. */
  refresh?(): void;
  /**
   * Memberships read from a shared store: heartbeats and reads the member list now, or right after
   * the read in flight; resolves true once a read sent after the call succeeded (its ring changes,
   * a rejoin's included, applied and listeners called), false when it failed, when `timeoutMs` (ms)
   * passed first, before start and once stopping. Never rejects.
   */
  syncNow?(timeoutMs: number): Promise<boolean>;
  /**
   * Memberships read from a shared store, on a node: clock ms at which its last heartbeat that the
   * store answered was sent (undefined on a router and before the first). The others drop the node
   * once that heartbeat is `dead_after` old.
   */
  lastBeatSentMs?(): number | undefined;
}
