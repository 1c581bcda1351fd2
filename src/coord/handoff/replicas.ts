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
import { MAX_STATE_BYTES } from '../../limiter/snapshot-bounds.ts';
import type { OversizedState } from './state-store.ts';

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
  /** Now, epoch ms (a node passes its injected clock). @default Date.now */
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
