/**
 * Checkpoints: every `checkpointMs` an owner writes the state of each tenant it touched since the
 * last checkpoint to its replica (the second member of the tenant's range, the member that takes
 * over if the owner dies; over HTTP, `src/peer/transfer.ts`) and, with Redis, to Redis (one
 * `HSET` per 1,000 tenants), so a crash loses at most about one period of accounting with or
 * without Redis. Stand-in claims are not checkpointed (Redis keeps the owner's state). A tenant
 * swept idle (its state fresh) has its stored state deleted and stays claimed, so a light tenant
 * costs no Redis command per request nor per idle sweep. This file also takes the states other
 * nodes send here (`receive`) and gives every state held here to the local state file (`states`).
 */
import type { Claims } from './claims.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';
import { pushStates } from './push-states.ts';
import type { WireState } from './peer-wire.ts';
import type { StoredState } from './state-store.ts';
import type { Member } from '../types.ts';

/** A node's checkpoints of the tenants it claimed, and the replicas it takes. See the module comment. */
export class Checkpoints {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #claims: Claims;

  /** Builds the checkpoints of `claims` (started by `Handoff.start`, every `checkpointMs`). */
  constructor(ctx: HandoffContext, placement: RingPlacement, claims: Claims) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#claims = claims;
  }

  /** Writes the tenants touched since the last checkpoint (one `HSET` per 1,000 tenants) and sends them to their replicas. Never rejects. */
  async checkpoint(): Promise<void> {
    const { store, tracks, stats, log } = this.#ctx;
    const claims = this.#claims;
    if (!tracks || claims.dirty.size === 0) return;
    const states: StoredState[] = [];
    for (const tenant of claims.dirty) {
      // A stand-in's state is not the owner's: Redis keeps the owner's checkpoint.
      if (!claims.has(tenant) || claims.standIns.has(tenant)) continue;
      const state = claims.state(tenant, 'checkpoint');
      if (state !== undefined) states.push(state);
    }
    claims.dirty.clear();
    const replicated = this.#replicate(states);
    if (store === undefined) return replicated;
    try {
      await store.write(states);
      for (const s of states) if (claims.has(s.tenant)) claims.stored.add(s.tenant);
      stats.checkpointed += states.length;
    } catch (err) {
      log.warn({ err: (err as Error).message, tenants: states.length }, 'checkpoint failed');
    }
    await replicated;
  }

  /**
   * Sends checkpoint `states` to each tenant's replica under the ring: the second member of its
   * range (one push per replica). Never rejects: a replica that cannot be reached misses this
   * checkpoint (logged), and gets the tenant's next one.
   */
  async #replicate(states: readonly StoredState[]): Promise<void> {
    const { peers, clock, self } = this.#ctx;
    if (peers === undefined || states.length === 0) return;
    const byReplica = new Map<string, { member: Member; states: WireState[] }>();
    const at = clock.now();
    for (const s of states) {
      const replica = this.#placement.ring.range(s.tenant, 2)[1];
      if (replica === undefined || replica.id === self.id) continue;
      let group = byReplica.get(replica.id);
      if (group === undefined) byReplica.set(replica.id, (group = { member: replica, states: [] }));
      group.states.push({ tenant: s.tenant, json: s.json, at });
    }
    await Promise.all([...byReplica.values()].map((g) => pushStates(this.#ctx, g.member, 'checkpoint', g.states)));
  }

  /**
   * Stores states another node sent (its handoff or its replicated checkpoint) among this node's
   * replicas, each expiring after the tenant's state TTL; tenants this node claims already keep
   * their own state (what arrives later is older than what they decided since), except a claim made
   * without the handoff of `handedBy` (the sender of a handoff), which merges it
   * (`Claims.lateHandoff`). Tenants `known` rejects (not in the config) are ignored.
   * @returns how many were stored or merged.
   */
  receive(states: readonly WireState[], known: (tenant: string) => boolean, handedBy?: string): number {
    const replicas = this.#ctx.peers?.replicas;
    if (replicas === undefined) return 0;
    let stored = 0;
    const now = this.#ctx.clock.now();
    for (const s of states) {
      if (!known(s.tenant)) continue;
      if (this.#claims.has(s.tenant)) {
        // Claimed here without this handoff (the wait for it ended first): merged, not stored.
        if (handedBy !== undefined && this.#claims.lateHandoff(s.tenant, s.json, handedBy)) stored++;
        continue;
      }
      if (replicas.put({ tenant: s.tenant, json: s.json, at: s.at, expiresAtMs: now + this.#ctx.ttlMs(s.tenant) })) stored++;
    }
    return stored;
  }

  /**
   * Deletes the stored states of claimed tenants the limiter no longer holds (swept idle: their
   * state is fresh): a checkpoint taken while they were busy (an open reservation, a full window)
   * would otherwise be loaded by a later owner. The tenants stay claimed: this node still owns
   * them and their state is fresh, so their next request is decided in RAM without reading Redis
   * (a tenant re-read at every idle sweep cost a command per light tenant every sweep interval).
   * Never rejects; on a Redis error they are tried again at the next sweep.
   */
  async forgetIdle(): Promise<void> {
    const { store, limiter, log } = this.#ctx;
    const claims = this.#claims;
    if (store === undefined) return;
    const idle = [...claims.stored].filter((tenant) => !limiter.hasTenant(tenant) && !claims.standIns.has(tenant));
    if (idle.length === 0) return;
    try {
      await store.remove(idle);
    } catch (err) {
      log.warn({ err: (err as Error).message, tenants: idle.length }, 'deleting the states of idle tenants failed: tried again at the next sweep');
      return;
    }
    for (const tenant of idle) if (!limiter.hasTenant(tenant)) claims.stored.delete(tenant);
  }

  /** The state of every tenant claimed here and of every replica held (for the local state file). */
  states(): WireState[] {
    const { clock, peers, limiter } = this.#ctx;
    const at = clock.now();
    const out: WireState[] = [];
    for (const e of peers?.replicas.entries() ?? []) if (typeof e.json === 'string' && !this.#claims.has(e.tenant)) out.push({ tenant: e.tenant, json: e.json, at: e.at });
    for (const tenant of this.#claims.tenants()) {
      const snapshot = limiter.exportTenant(tenant);
      if (snapshot !== undefined) out.push({ tenant, json: JSON.stringify(snapshot), at });
    }
    return out;
  }
}
