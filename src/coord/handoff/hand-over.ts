/**
 * Handing tenants over: on a ring change (or a graceful leave, under the ring without this node) a
 * node exports every claimed tenant it no longer owns, drops it from its limiter and stops deciding
 * for it. The states go straight to each new owner first (over HTTP, `src/peer/transfer.ts`:
 * it loads them without a Redis read; the push names the ring and is this node's announcement to
 * that owner, sent to every member new in the ring even with no state), then to Redis in one
 * pipeline, and the handoff is announced
 * (`HandoffDone`, listing the tenants by new owner so each loads its share at once: `Claims.prefetch`).
 * Handoffs run one after another, so states are written in ring order.
 *
 * A stand-in claim still standing in for the same owner is not handed over (it is given back to
 * the owner with its usage: `src/coord/handoff/stand-in.ts`); one whose owner the ring replaced with this
 * node keeps its usage aside (`Claims.carry`) and loads the owner's state like any moved tenant's.
 */
import type { Claims } from './claims.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';
import { pushStates } from './push-states.ts';
import type { StoredState } from './state-store.ts';
import type { Ring } from '../types.ts';

/** A node's handoffs, one after another. See the module comment. */
export class HandOver {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #claims: Claims;
  /** Handoffs run one after another, so states are written in ring order. */
  #chain: Promise<void> = Promise.resolve();

  /** Builds a node's handoffs of `claims` (run by `Handoff` on each ring change and on leave). */
  constructor(ctx: HandoffContext, placement: RingPlacement, claims: Claims) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#claims = claims;
  }

  /** Resolves once every handoff started so far is done (stored, or given up and logged). */
  idle(): Promise<void> {
    return this.#chain;
  }

  /**
   * Exports, drops and stores every claimed tenant not owned here under `ring`, then announces.
   * The claims are dropped at once; the states are sent after the handoffs before this one.
   * Never rejects: a failed push, write or announcement is logged (new owners then start from the
   * replica or checkpoint they have).
   */
  handOver(ring: Ring): Promise<void> {
    const { store, clock, limiter, self, peers, stats, log, onMoved } = this.#ctx;
    const claims = this.#claims;
    const leaving = this.#placement.leaving;
    const started = clock.now();
    const states: StoredState[] = [];
    const byOwner: Record<string, string[]> = {};
    for (const tenant of claims.tenants()) {
      const owner = ring.owner(tenant)?.id;
      if (!leaving && owner === self.id) {
        const standIn = claims.standIns.get(tenant);
        if (standIn !== undefined) {
          // Held in place of an owner the ring has now replaced with this node: the owner's state
          // (its handoff, or its last checkpoint if it died) is loaded like any moved tenant's,
          // and what was admitted here as its stand-in is added to it then.
          const current = limiter.exportTenant(tenant);
          claims.carry(tenant, {
            usage: claims.standIns.usageSince(tenant, standIn.base, current),
            current,
            base: new Set(standIn.base?.reservations.map((r) => r.id)),
          });
          claims.unclaim(tenant);
        }
        continue;
      }
      const standIn = claims.standIns.get(tenant);
      // Still standing in for the same owner: given back to it with its usage, not handed over.
      if (!leaving && standIn !== undefined && standIn.owner === owner) continue;
      const state = claims.state(tenant, 'handoff');
      if (state !== undefined) {
        states.push(state);
        if (owner !== undefined) (byOwner[owner] ??= []).push(tenant);
      }
      // Its state in Redis (handed over now, or an older checkpoint) is the new owner's to delete.
      claims.unclaim(tenant);
    }
    claims.keepCarried((tenant) => !leaving && ring.owner(tenant)?.id === self.id);
    // Members new in this ring: their claims wait for this node's announcement (`Claims`).
    const before = new Set(this.#placement.previous.members.map((m) => m.id));
    const joiners = leaving ? [] : ring.members.filter((m) => m.id !== self.id && !before.has(m.id)).map((m) => m.id);
    if (store === undefined && peers === undefined) return this.#chain;
    const run = async (): Promise<void> => {
      // Straight to each new owner first (it loads without a Redis read), then to Redis.
      // Each push names the ring: the receiver takes it as this node's announcement, so a member that
      // joined (and waits for this node's handoff before deciding) gets one even with no state.
      const at = clock.now();
      const json = new Map(states.map((s) => [s.tenant, s.json]));
      const to = new Set(Object.keys(byOwner));
      for (const id of joiners) to.add(id);
      const pushes = [...to].map((id) => {
        const member = ring.members.find((m) => m.id === id);
        const wire = (byOwner[id] ?? []).flatMap((t) => { const j = json.get(t); return j === undefined ? [] : [{ tenant: t, json: j, at }]; });
        return member === undefined ? Promise.resolve(false) : pushStates(this.#ctx, member, 'handoff', wire, ring.version);
      });
      await Promise.all(pushes);
      if (store === undefined) {
        stats.handedOff += states.length;
        stats.lastHandoffMs = clock.now() - started;
        onMoved?.('out', stats.lastHandoffMs, states.length);
        return;
      }
      try {
        await store.write(states);
        stats.handedOff += states.length;
      } catch (err) {
        log.warn({ err: (err as Error).message, tenants: states.length }, 'handoff write failed: new owners start from checkpoints');
      }
      try {
        await store.announce({ from: self.id, ring: ring.version, tenants: byOwner });
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'handoff announcement failed');
      }
      stats.lastHandoffMs = clock.now() - started;
      log.info({ ring: ring.version, tenants: states.length, ms: stats.lastHandoffMs }, 'handed off');
      onMoved?.('out', stats.lastHandoffMs, states.length);
    };
    this.#chain = this.#chain.then(run);
    return this.#chain;
  }
}
