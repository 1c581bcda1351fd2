/**
 * Where limiter state waits between owners: one Redis string per tenant (a JSON `TenantSnapshot`),
 * written by an owner's checkpoints and by its handoff when the tenant moves, read by the next owner
 * before its first decision. A handoff is announced on a pub/sub channel once its writes are stored.
 */
import type { Redis } from 'ioredis';

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

/** Key of a tenant's state: `qr:{<cluster>}:state:<tenant>`. */
export function stateKey(cluster: string, tenant: string): string {
  return `qr:{${cluster}}:state:${tenant}`;
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
  readonly #cluster: string;
  readonly #channel: string;
  #subscriber: Redis | undefined;

  /** @param cluster the cluster name (`cluster.name`), namespace of every key. */
  constructor(redis: Redis, cluster: string) {
    this.#redis = redis;
    this.#cluster = cluster;
    this.#channel = handoffChannel(cluster);
  }

  /**
   * Stores states in one pipeline (`SET key json PX ttl` each).
   * @throws the Redis error of the first failed command.
   */
  async write(states: readonly StoredState[]): Promise<void> {
    if (states.length === 0) return;
    const pipeline = this.#redis.pipeline();
    for (const s of states) pipeline.set(stateKey(this.#cluster, s.tenant), s.json, 'PX', Math.max(1, Math.ceil(s.ttlMs)));
    const replies = (await pipeline.exec()) ?? [];
    for (const [err] of replies) if (err !== null) throw err;
  }

  /**
   * Deletes the stored states of tenants whose state is fresh (one pipeline of `DEL`s).
   * @throws the Redis error of the first failed command.
   */
  async remove(tenants: readonly string[]): Promise<void> {
    if (tenants.length === 0) return;
    const pipeline = this.#redis.pipeline();
    for (const tenant of tenants) pipeline.del(stateKey(this.#cluster, tenant));
    const replies = (await pipeline.exec()) ?? [];
    for (const [err] of replies) if (err !== null) throw err;
  }

  /** The stored states of several tenants (`MGET`), null where none. @throws the Redis error. */
  readMany(tenants: readonly string[]): Promise<(string | null)[]> {
    if (tenants.length === 0) return Promise.resolve([]);
    return this.#redis.mget(tenants.map((t) => stateKey(this.#cluster, t)));
  }

  /** The stored state of a tenant, or null. @throws the Redis error. */
  read(tenant: string): Promise<string | null> {
    return this.#redis.get(stateKey(this.#cluster, tenant));
  }

  /** Publishes a handoff announcement. @throws the Redis error. */
  async announce(done: HandoffDone): Promise<void> {
    await this.#redis.publish(this.#channel, JSON.stringify(done));
  }

  /**
   * Calls `listener` with every announcement from now on (after the returned promise resolves).
   * @throws the Redis error when subscribing fails.
   */
  async subscribe(listener: (done: HandoffDone) => void, onError: (err: Error) => void): Promise<void> {
    const subscriber = this.#redis.duplicate();
    this.#subscriber = subscriber;
    subscriber.on('error', onError);
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.#channel) return;
      const done = parseDone(message);
      if (done !== undefined) listener(done);
    });
    await subscriber.subscribe(this.#channel);
  }

  /** Closes the subscriber connection (the command connection belongs to the caller). */
  close(): void {
    this.#subscriber?.disconnect();
    this.#subscriber = undefined;
  }
}
