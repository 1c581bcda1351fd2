/**
 * Membership from a fixed list (config or command line): the embedded default, with no Redis.
 * The ring always holds every listed member; routers health-check nodes on their own and route
 * around dead ones with `ring.range()`.
 */
import { createRing } from '../ring/ring.ts';
import type { RingOptions } from '../ring/ring.ts';
import type { Member, Membership, Ring } from '../types.ts';

/** A {@link Membership} over a fixed member list; `onChange` never fires. */
export class StaticMembership implements Membership {
  readonly #ring: Ring;

  /**
   * @param members the cluster's nodes, any order.
   * @param ringOptions passed to {@link createRing}.
   * @throws RangeError from {@link createRing} on a duplicate id or a bad weight.
   */
  constructor(members: readonly Member[], ringOptions: RingOptions = {}) {
    this.#ring = createRing(members, ringOptions);
  }

  /** Nothing to watch: resolves at once. */
  start(): Promise<void> {
    return Promise.resolve();
  }

  /** Nothing to deregister: resolves at once. */
  stop(): Promise<void> {
    return Promise.resolve();
  }

  /** The ring over all listed members (available before `start()` too). */
  ring(): Ring {
    return this.#ring;
  }

  /** The list never changes, so the listener is never called; returns a no-op unsubscribe. */
  onChange(_listener: (ring: Ring) => void): () => void {
    return () => {};
  }
}
