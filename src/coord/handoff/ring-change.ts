/**
 * What a node does when its membership gives it a new ring: hands over the tenants it no longer
 * owns (`./hand-over.ts`), or, when the ring no longer holds it although it did not leave, stops
 * deciding for every tenant (the others dropped it while it was cut from Redis).
 */
import type { Announcements } from './announcements.ts';
import type { Claims } from './claims.ts';
import type { HandOver } from './hand-over.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';
import type { Membership, Ring } from '../types.ts';

/** The parts of a node's handoff a ring change touches. */
export interface RingChangeParts {
  readonly ctx: HandoffContext;
  readonly placement: RingPlacement;
  readonly claims: Claims;
  readonly announcements: Announcements;
  readonly handOver: HandOver;
  readonly membership: Membership;
}

/**
 * Takes `ring` (the membership's new one): nothing when this node decides by that ring already;
 * {@link dropped} when it is not in it and did not leave; else the replicas it is no longer owner
 * nor replica of are dropped, the previous ring kept (the ring without this node when it joins) and
 * the tenants it no longer owns handed over.
 */
export function ringChanged(p: RingChangeParts, ring: Ring): void {
  const placement = p.placement;
  const self = p.ctx.self;
  const next = placement.leaving ? placement.without(ring) : ring;
  if (next.version === placement.ring.version) return;
  if (!placement.leaving && placement.ring.members.length > 0 && !ring.members.some((m) => m.id === self.id)) {
    dropped(p, ring);
    return;
  }
  // Replicas of tenants this node is no longer owner nor replica of: their new replica gets the owner's next checkpoint.
  p.ctx.peers?.replicas.retain((t) => next.range(t, 2).some((m) => m.id === self.id));
  // The first ring (this node joining): the tenants it gains come from the ring without it.
  placement.previous = placement.ring.members.length === 0 ? placement.without(ring) : placement.ring;
  placement.ring = next;
  p.ctx.log.info({ ring: next.version, members: next.members.map((m) => m.id) }, 'ring changed');
  void p.handOver.handOver(next);
}

/**
 * The membership found that the other nodes dropped this node from their ring while it could not
 * reach Redis (`MembershipSync#rejoin`): they took its tenants over from its checkpoints and
 * have decided for them since. It hands nothing over (its states are the stale ones) and keeps
 * deciding for none of them: every claim is dropped, its state kept aside (`Rejoined`) in
 * case no newer one arrives (no interim owner decided for the tenant, Redis holds none), and the
 * announcements seen are forgotten (ring versions repeat: the ring it rejoins has the version of
 * the one it had), so that when the ring with it comes next each tenant is loaded like any moved
 * tenant's: the interim owner's handoff (waited for), or its checkpoint, whichever is newer than
 * this node's own state.
 */
function dropped(p: RingChangeParts, ring: Ring): void {
  const at = p.membership.lastSyncMs?.() ?? p.ctx.clock.now();
  const kept = p.claims.dropAll(at);
  p.announcements.forget();
  p.placement.previous = p.placement.ring;
  p.placement.ring = ring;
  p.ctx.log.warn({ ring: ring.version, tenants: kept }, 'dropped from the ring while cut from Redis: deciding for no tenant until they are handed back');
}
