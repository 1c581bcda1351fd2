/**
 * Replicated checkpoints held in RAM: the limiter states other nodes sent this node (their
 * periodic checkpoints, as the replica of their tenants; a handoff on a graceful leave or ring
 * change; what a stand-in gave back; what the local state file held), latest per tenant, each
 * expiring like a Redis checkpoint (`ttlMs`: the tenant's longest window plus a minute, after which
 * the state is fresh anyway). A node that takes a tenant over (it becomes the owner after the owner
 * died or left, or stands in for it) loads the replica from here, without a Redis read.
 *
 * Bounds: at most `maxTenants` entries and `maxBytes` of JSON in total (the oldest written is
 * evicted first); a single value over {@link MAX_STATE_BYTES} is kept as its length only and loads
 * as corrupt (the conservative state), as a value over the cap in Redis does. Values are untrusted
 * JSON here: the loader parses and clamps them (`parseTenantSnapshot`, `boundSnapshot`).
 */
import { MAX_STATE_BYTES } from '../limiter/snapshot-bounds.ts';
import type { UsageDelta } from '../limiter/usage-delta.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { OversizedState } from './state-store.ts';
import type { Member } from './types.ts';

/** One replicated state. */
export interface ReplicaEntry {
  readonly tenant: string;
  /** The snapshot JSON (untrusted), or the length of a value over the cap (not kept). */
  readonly json: string | OversizedState;
  /** Sender's clock ms when the state was taken: a later entry replaces an earlier one, never the reverse. */
  readonly at: number;
  /** Epoch ms after which the entry is gone (a fresh state). */
  readonly expiresAtMs: number;
}

/** Options of a {@link ReplicaStore}. */
export interface ReplicaStoreOptions {
  /** Most tenants held. @default 100_000 */
  readonly maxTenants?: number;
  /** Most JSON held in total, bytes (UTF-16 length). @default 256 MiB */
  readonly maxBytes?: number;
  /** Wall-clock epoch ms. @default Date.now */
  readonly now?: () => number;
}

/** Counters of a {@link ReplicaStore}. */
export interface ReplicaStats {
  /** Entries stored (new or newer). */
  stored: number;
  /** Entries ignored because an entry as new or newer was held. */
  stale: number;
  /** Entries evicted by the bounds before they expired. */
  evicted: number;
  /** Entries taken by a claim. */
  taken: number;
}

/** See the module comment. */
export class ReplicaStore {
  readonly #maxTenants: number;
  readonly #maxBytes: number;
  readonly #now: () => number;
  /** In write order (a rewrite moves the tenant last), so the first entry is the oldest written. */
  readonly #entries = new Map<string, ReplicaEntry>();
  #bytes = 0;
  readonly stats: ReplicaStats = { stored: 0, stale: 0, evicted: 0, taken: 0 };

  /** @throws RangeError for bounds below 1. */
  constructor(opts: ReplicaStoreOptions = {}) {
    this.#maxTenants = opts.maxTenants ?? 100_000;
    this.#maxBytes = opts.maxBytes ?? 256 * 1024 * 1024;
    this.#now = opts.now ?? Date.now;
    if (!(this.#maxTenants >= 1) || !(this.#maxBytes >= 1)) throw new RangeError('replica store bounds must be ≥ 1');
  }

  /**
   * Stores `entry` unless an entry of the same tenant at least as new (`at`) is held, or it has
   * expired. A JSON value over {@link MAX_STATE_BYTES} is kept as its length (corrupt to the loader).
   * @returns whether it was stored.
   */
  put(entry: ReplicaEntry): boolean {
    if (entry.expiresAtMs <= this.#now()) return false;
    const held = this.#entries.get(entry.tenant);
    if (held !== undefined && held.at >= entry.at && held.expiresAtMs > this.#now()) {
      this.stats.stale++;
      return false;
    }
    const json = typeof entry.json === 'string' && entry.json.length > MAX_STATE_BYTES ? { bytes: entry.json.length } : entry.json;
    this.#delete(entry.tenant);
    this.#entries.set(entry.tenant, { ...entry, json });
    this.#bytes += size(json);
    this.stats.stored++;
    while (this.#entries.size > this.#maxTenants || this.#bytes > this.#maxBytes) {
      const oldest = this.#entries.keys().next().value;
      if (oldest === undefined) break;
      this.#delete(oldest);
      this.stats.evicted++;
    }
    return true;
  }

  /** The live entry of `tenant`, or undefined (an expired one is dropped). */
  get(tenant: string): ReplicaEntry | undefined {
    const entry = this.#entries.get(tenant);
    if (entry === undefined) return undefined;
    if (entry.expiresAtMs <= this.#now()) {
      this.#delete(tenant);
      return undefined;
    }
    return entry;
  }

  /** {@link get}, then forgets the entry (a claim loaded it; a later claim must not load it again). */
  take(tenant: string): ReplicaEntry | undefined {
    const entry = this.get(tenant);
    if (entry !== undefined) {
      this.#delete(tenant);
      this.stats.taken++;
    }
    return entry;
  }

  /** Live entries whose tenant `keep` accepts; the others (and expired ones) are dropped. */
  retain(keep: (tenant: string) => boolean): void {
    const now = this.#now();
    for (const [tenant, entry] of this.#entries) if (entry.expiresAtMs <= now || !keep(tenant)) this.#delete(tenant);
  }

  /** Every live entry (oldest written first). */
  entries(): ReplicaEntry[] {
    const now = this.#now();
    return [...this.#entries.values()].filter((e) => e.expiresAtMs > now);
  }

  /** Entries held (expired ones included until read). */
  get size(): number {
    return this.#entries.size;
  }

  #delete(tenant: string): void {
    const held = this.#entries.get(tenant);
    if (held === undefined) return;
    this.#bytes -= size(held.json);
    this.#entries.delete(tenant);
  }
}

function size(json: string | OversizedState): number {
  return typeof json === 'string' ? json.length : 0;
}

/** A tenant's state on the wire between nodes: snapshot JSON (untrusted) and when it was taken (sender's clock ms). */
export interface WireState {
  readonly tenant: string;
  readonly json: string;
  readonly at: number;
}

/** Why states are sent: a `handoff` (the receiver is or stands in for the new owner) or a replica `checkpoint`. */
export type TransferKind = 'handoff' | 'checkpoint';

/** How nodes send each other tenant states (`src/coord/transfer-http.ts` over signed HTTP). */
export interface PeerTransport {
  /**
   * Sends `states` from `from` to `to`. A `handoff` made for ring version `ring` names it in its last
   * push (sent even without states): the receiver takes that as `from`'s announcement of the handoff.
   * @throws when `to` did not store them.
   */
  push(from: Member, to: Member, kind: TransferKind, states: readonly WireState[], ring?: string): Promise<void>;
  /**
   * Asks `to` to read the member list now: `from` waits for its handoff under ring version `ring`.
   * @throws when `to` cannot be reached or answers other than 200.
   */
  nudge(from: Member, to: Member, ring: string): Promise<void>;
  /**
   * Asks `to` for every state it holds for tenants `from` owns (replicas, stand-in claims it gives back).
   * @throws when `to` cannot be reached or answers other than 200.
   */
  pull(from: Member, to: Member): Promise<WireState[]>;
  /**
   * `from` woke from a stall (it is fenced, `src/coord/fence.ts`): asks `to` to end every claim it
   * holds in place of `from` and send back what it admitted there (`StandIns.reclaim`).
   * @throws when `to` cannot be reached, answers other than 200 or with a reply that is not one.
   */
  reclaim?(from: Member, to: Member): Promise<Reclaimed[]>;
}

/** What a stand-in admitted for one tenant of an owner that took it back: see `StandIns.reclaim`. */
export interface Reclaimed {
  readonly tenant: string;
  readonly usage: UsageDelta;
}

/**
 * Pushes `states` from this node to member `to` over the context's peer transport, counting them
 * (`stats.replicated` for a checkpoint, `stats.pushed` for a handoff). A handoff for ring version
 * `ring` is sent even without states (it announces the handoff to `to`). Never rejects: a failure
 * is logged, and the receiver gets the tenant's next checkpoint or loads it from Redis.
 * @returns whether `to` stored them (true when there is nothing to send or no peers).
 */
export async function pushStates(ctx: HandoffContext, to: Member, kind: TransferKind, states: readonly WireState[], ring?: string): Promise<boolean> {
  if (ctx.peers === undefined || (states.length === 0 && ring === undefined)) return true;
  try {
    await ctx.peers.transport.push(ctx.self, to, kind, states, ring);
    if (kind === 'checkpoint') ctx.stats.replicated += states.length;
    else ctx.stats.pushed += states.length;
    return true;
  } catch (err) {
    ctx.log.warn({ to: to.id, kind, tenants: states.length, err: (err as Error).message }, kind === 'checkpoint' ? 'replica checkpoint not delivered' : 'handoff to a peer not delivered');
    return false;
  }
}
