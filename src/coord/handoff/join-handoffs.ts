/**
 * A node that joins the ring waits for its handoffs before it is ready (`/readyz` names `handoff`):
 * the announcements of every member that held tenants before it joined, and the loads they start.
 */
import type { Announcements } from './announcements.ts';
import type { Claims } from './claims.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';

/** Whether a joined node received its handoffs. */
export class JoinHandoffs {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #claims: Claims;
  readonly #announcements: Announcements;
  #received = false;
  #awaiting = false;

  constructor(ctx: HandoffContext, placement: RingPlacement, claims: Claims, announcements: Announcements) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#claims = claims;
    this.#announcements = announcements;
  }

  /**
   * True once, after {@link await}, every member of the ring before this node joined that is still
   * in the ring announced its handoff for the ring it joined (and the states announced for this
   * node are loaded), or `waitMs` passed without an announcement. True as soon as `await()` ran
   * without a store (nothing is handed over) or when nobody held tenants before. False before.
   */
  get received(): boolean {
    return this.#received;
  }

  /** Starts waiting for the handoffs of the ring joined (once; later calls do nothing). */
  await(): void {
    if (this.#awaiting) return;
    this.#awaiting = true;
    const ring = this.#placement.ring;
    const inRing = new Set(ring.members.map((m) => m.id));
    const self = this.#ctx.self;
    const from = this.#ctx.store === undefined ? [] : this.#placement.previous.members.filter((m) => m.id !== self.id && inRing.has(m.id));
    if (from.length === 0) {
      this.#received = true;
      return;
    }
    void Promise.all(from.map((m) => (this.#announcements.has(m.id, ring.version) ? true : this.#announcements.waitFor(m.id, ring.version))))
      // The announcements start loading this node's tenants (prefetch): wait for those loads too.
      .then(() => Promise.allSettled(this.#claims.pending()))
      .then(() => {
        this.#received = true;
      });
  }
}
