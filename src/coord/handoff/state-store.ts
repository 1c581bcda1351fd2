/**
 * Where limiter state waits between owners: one Redis hash per cluster, a field per tenant holding
 * its JSON `TenantSnapshot` and the time it expires, written by an owner's checkpoints and by its
 * handoff when the tenant moves, read by the next owner before its first decision. A handoff is
 * announced on a pub/sub channel once its writes are stored.
 *
 * One hash, not a key per tenant, so that a checkpoint of a thousand tenants is one `HSET` (one
 * command per {@link WRITE_CHUNK} tenants) rather than a thousand `SET`s: Redis commands then scale
 * with nodes and checkpoints, not with active tenants. Redis 7.0 has no per-field expiry, so each
 * value carries its own (`<expiresAtMs> <json>`) and a reader treats an expired value as absent;
 * a value is replaced by the next write and deleted when its tenant goes idle, so the hash holds at
 * most one value per configured tenant.
 */
import { defineScript } from '../../redis/lua-scripts.ts';
import type { Redis } from 'ioredis';
import { MAX_STATE_BYTES } from '../../limiter/snapshot-bounds.ts';

/** A tenant's state to store: the snapshot JSON and how long Redis keeps it (ms). */
export interface StoredState {
  readonly tenant: string;
  readonly json: string;
  /** Redis expiry, ms: at least the tenant's longest window, after which the state is fresh anyway. */
  readonly ttlMs: number;
}

/** "Every tenant `from` gave up under ring `ring` is stored": published after a handoff's writes. */
export interface HandoffDone {
  /** Id of the node that handed off. */
  readonly from: string;
  /** Version of the ring the node handed off for. */
  readonly ring: string;
  /** The tenants whose state was stored, by the id of their new owner (so it can load them at once). */
  readonly tenants?: Readonly<Record<string, readonly string[]>>;
}

/** Key of the hash of tenant states: `qr:{<cluster>}:state` (field: the tenant id). */
export function stateKey(cluster: string): string {
  return `qr:{${cluster}}:state`;
}

/** Most tenants written or deleted by one command (`HSET`/`HDEL` arguments stay a few MB at most). */
const WRITE_CHUNK = 1_000;

/**
 * A stored state over the byte cap ({@link MAX_STATE_BYTES}), left in Redis unread: corrupt to the
 * reader (the tenant starts in the conservative state).
 */
export interface OversizedState {
  /** Length of the stored value, bytes. */
  readonly bytes: number;
}

/**
 * The values of hash `KEYS[1]` at fields `ARGV[2..]`, each read only when at most `ARGV[1]` bytes
 * long (`HSTRLEN` first, O(1)); a longer one answers its length (an integer) instead, so a hostile
 * 80 MB value is never transferred nor parsed. One round trip, as the `HGET`/`HMGET` it replaces.
 */

/** A stored value: `<expiresAtMs> <json>`. */
function storedValue(json: string, expiresAtMs: number): string {
  return `${Math.ceil(expiresAtMs)} ${json}`;
}

/**
 * Splits a stored value into its expiry (epoch ms) and snapshot JSON; undefined when it is not one.
 */
export function parseStoredValue(value: string): { expiresAtMs: number; json: string } | undefined {
  const space = value.indexOf(' ');
  const expiresAtMs = Number(value.slice(0, space));
  if (space <= 0 || !Number.isFinite(expiresAtMs)) return undefined;
  return { expiresAtMs, json: value.slice(space + 1) };
}

/** Channel of handoff announcements: `qr:{<cluster>}:handoff`. */
export function handoffChannel(cluster: string): string {
  return `qr:{${cluster}}:handoff`;
}

/** Parses an announcement; undefined when it is not one. */
function parseDone(message: string): HandoffDone | undefined {
  try {
    const value = JSON.parse(message) as Partial<HandoffDone>;
    if (typeof value.from !== 'string' || typeof value.ring !== 'string') return undefined;
    const tenants = value.tenants;
    const valid =
      typeof tenants === 'object' && tenants !== null && Object.values(tenants).every((list) => Array.isArray(list) && list.every((t) => typeof t === 'string'));
    return valid ? { from: value.from, ring: value.ring, tenants } : { from: value.from, ring: value.ring };
  } catch {
    return undefined;
  }
}

/** Tenant state in Redis for one cluster. Commands go over the given connection; pub/sub over a duplicate of it. */
export class TenantStateStore {
  readonly #redis: Redis;
  readonly #key: string;
  readonly #channel: string;
  readonly #now: () => number;
  #subscriber: Redis | undefined;

  /**
   * @param cluster the cluster name (`cluster.name`), namespace of every key.
   * @param now wall-clock time in epoch ms, for expiries shared by every node. @default Date.now
   */
  constructor(redis: Redis, cluster: string, now: () => number = Date.now) {
    this.#redis = redis;
    this.#key = stateKey(cluster);
    this.#channel = handoffChannel(cluster);
    this.#now = now;
    // The bounded read (`lua/state-read-bounded.lua`): a value over the cap comes back as its length, untransferred.
    defineScript(redis, 'stateReadBounded');
  }

  /**
   * The stored values of `tenants` (null where none), a value over `maxBytes` as its
   * {@link OversizedState} without transferring it (see `lua/state-read-bounded.lua`). @throws the Redis error.
   */
  async #readBounded(tenants: readonly string[], maxBytes: number): Promise<(string | OversizedState | null)[]> {
    const reply = await this.#redis.qrStateReadBounded(this.#key, String(maxBytes), ...tenants);
    if (!Array.isArray(reply)) throw new Error('state read: the script answered no list');
    return tenants.map((_, i): string | OversizedState | null => {
      const v: unknown = reply[i];
      if (typeof v === 'string') return v;
      if (typeof v === 'number') return { bytes: v };
      return null;
    });
  }

  /**
   * Stores states: one `HSET` per {@link WRITE_CHUNK} tenants, pipelined; each value expires
   * `ttlMs` from now.
   * @throws the Redis error of the first failed command.
   */
  async write(states: readonly StoredState[]): Promise<void> {
    if (states.length === 0) return;
    const now = this.#now();
    const pipeline = this.#redis.pipeline();
    for (let i = 0; i < states.length; i += WRITE_CHUNK) {
      const fields: string[] = [];
      for (const s of states.slice(i, i + WRITE_CHUNK)) fields.push(s.tenant, storedValue(s.json, now + Math.max(1, s.ttlMs)));
      pipeline.hset(this.#key, ...fields);
    }
    const replies = (await pipeline.exec()) ?? [];
    for (const [err] of replies) if (err !== null) throw err;
  }

  /**
   * Deletes the stored states of tenants whose state is fresh: one `HDEL` per {@link WRITE_CHUNK}
   * tenants, pipelined.
   * @throws the Redis error of the first failed command.
   */
  async remove(tenants: readonly string[]): Promise<void> {
    if (tenants.length === 0) return;
    const pipeline = this.#redis.pipeline();
    for (let i = 0; i < tenants.length; i += WRITE_CHUNK) pipeline.hdel(this.#key, ...tenants.slice(i, i + WRITE_CHUNK));
    const replies = (await pipeline.exec()) ?? [];
    for (const [err] of replies) if (err !== null) throw err;
  }

  /**
   * The stored states (snapshot JSON, unparsed and untrusted) of several tenants, null where none
   * or expired; a malformed value whole (see `#live`); a value over `maxBytes` as its
   * {@link OversizedState}, never transferred (its expiry unread: corrupt to the caller). One script
   * call (`HSTRLEN`, then `HGET` when within the cap).
   * @param maxBytes longest value read, bytes. @default MAX_STATE_BYTES
   * @throws the Redis error.
   */
  async readMany(tenants: readonly string[], maxBytes: number = MAX_STATE_BYTES): Promise<(string | OversizedState | null)[]> {
    if (tenants.length === 0) return [];
    const values = await this.#readBounded(tenants, maxBytes);
    const now = this.#now();
    return values.map((v) => (typeof v === 'string' ? this.#live(v, now) : v));
  }

  /**
   * The stored state (snapshot JSON, unparsed and untrusted) of a tenant, or null when none or
   * expired; a malformed value whole (see `#live`); a value over `maxBytes` as its
   * {@link OversizedState}, never transferred.
   * @param maxBytes longest value read, bytes. @default MAX_STATE_BYTES
   * @throws the Redis error.
   */
  async read(tenant: string, maxBytes: number = MAX_STATE_BYTES): Promise<string | OversizedState | null> {
    return (await this.readMany([tenant], maxBytes))[0] ?? null;
  }

  /**
   * When the stored state of a tenant expires (epoch ms), or null when none, or when it is over
   * {@link MAX_STATE_BYTES} (not transferred). @throws the Redis error.
   */
  async expiresAt(tenant: string): Promise<number | null> {
    const [value] = await this.#readBounded([tenant], MAX_STATE_BYTES);
    return typeof value === 'string' ? (parseStoredValue(value)?.expiresAtMs ?? null) : null;
  }

  /**
   * The snapshot JSON of a stored value; null when none or expired. A value that is not
   * `<expiresAtMs> <json>` is returned whole: the snapshot parser then rejects it as corrupt (and
   * the tenant starts in the conservative state), where reading it as absent would give the tenant
   * fresh limits.
   */
  #live(value: string | null, now: number): string | null {
    if (value === null) return null;
    const stored = parseStoredValue(value);
    if (stored === undefined) return value;
    return stored.expiresAtMs <= now ? null : stored.json;
  }

  /** Publishes a handoff announcement. @throws the Redis error. */
  async announce(done: HandoffDone): Promise<void> {
    await this.#redis.publish(this.#channel, JSON.stringify(done));
  }

  /**
   * Calls `listener` with every announcement from now on (after the returned promise resolves).
   * After a failure (Redis unreachable at start) call it again to retry: the subscriber connection
   * (reconnecting by itself meanwhile) and the listeners of the first call are kept, only the
   * SUBSCRIBE is sent again.
   * @throws the Redis error when subscribing fails.
   */
  async subscribe(listener: (done: HandoffDone) => void, onError: (err: Error) => void): Promise<void> {
    let subscriber = this.#subscriber;
    if (subscriber === undefined) {
      subscriber = this.#redis.duplicate();
      this.#subscriber = subscriber;
      subscriber.on('error', onError);
      subscriber.on('message', (channel: string, message: string) => {
        if (channel !== this.#channel) return;
        const done = parseDone(message);
        if (done !== undefined) listener(done);
      });
    }
    await subscriber.subscribe(this.#channel);
  }

  /** Closes the subscriber connection (the command connection belongs to the caller). */
  close(): void {
    this.#subscriber?.disconnect();
    this.#subscriber = undefined;
  }
}
