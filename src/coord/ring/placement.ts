/**
 * Placement: where a tenant's requests are decided, as seen by one node. The owner is the first
 * member of the tenant's range under this node's ring (`src/coord/ring/ring.ts`); its replica, the member
 * that takes over if the owner dies and the one routers route around a suspect owner to, is the
 * second. A node decides for a tenant it owns, or in place of a suspect owner when a router names
 * that owner (`x-quotaring-fallback-for`: the stand-in rule, `src/coord/handoff/stand-in.ts`), never once it
 * is leaving. The ring before the current one names each tenant's previous owner, whose handoff a
 * claim waits for (`src/coord/handoff/claims.ts`).
 */
import { createRing } from './ring.ts';
import type { RingOptions } from './ring.ts';
import type { Member, Ring } from '../types.ts';

/** Where a tenant's requests are decided, as seen by this node. */
export type Placement = { readonly here: true } | { readonly here: false; /** The owner under this node's ring. */ readonly owner: Member | undefined };

/** A node's current and previous ring, and whether it is leaving: see the module comment. */
export class RingPlacement {
  readonly #self: Member;
  readonly #ringOptions: RingOptions;
  /** The ring this node decides by (without itself once leaving). */
  ring: Ring;
  /** The ring before {@link ring}: a tenant's owner under it is its previous owner. */
  previous: Ring;
  /** Set by a graceful leave: from then on this node decides for no tenant. */
  leaving = false;

  /** Starts with an empty ring (and an empty previous one). */
  constructor(self: Member, ringOptions: RingOptions) {
    this.#self = self;
    this.#ringOptions = ringOptions;
    this.ring = createRing([], ringOptions);
    this.previous = this.ring;
  }

  /**
   * Where a tenant's request is decided. Here when this node owns it, or when `fallbackFor` names
   * the owner (a router routes around it as suspect) and this node is not leaving.
   */
  place(tenant: string, fallbackFor?: string): Placement {
    const owner = this.ring.owner(tenant);
    if (owner === undefined) return this.leaving ? { here: false, owner } : { here: true };
    if (owner.id === this.#self.id) return { here: true };
    if (fallbackFor !== undefined && fallbackFor === owner.id && !this.leaving) return { here: true };
    return { here: false, owner };
  }

  /** `ring` without this node (built with the membership's ring options). */
  without(ring: Ring): Ring {
    return createRing(
      ring.members.filter((m) => m.id !== this.#self.id),
      this.#ringOptions,
    );
  }
}
