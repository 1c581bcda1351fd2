/**
 * A membership whose ring the test sets: not Redis, not static — for tests of what consumes rings
 * (the router, the handoff).
 */
import type { Membership, Ring } from '../../src/coord/types.ts';

/** A {@link Membership} whose ring changes when the test says so. */
export class TestMembership implements Membership {
  #ring: Ring;
  readonly #listeners = new Set<(ring: Ring) => void>();
  constructor(ring: Ring) {
    this.#ring = ring;
  }
  async start(): Promise<void> {}
  async stop(): Promise<void> {}
  ring(): Ring {
    return this.#ring;
  }
  onChange(listener: (ring: Ring) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
  /** Counted by {@link refresh}; `nextRead`, when set, is the ring that read finds (then cleared). */
  refreshes = 0;
  nextRead: Ring | undefined;
  /** A read of the member list now (a peer's nudge): finds {@link nextRead} when the test set one. */
  refresh(): void {
    this.refreshes++;
    const ring = this.nextRead;
    this.nextRead = undefined;
    if (ring !== undefined) this.set(ring);
  }
  /** Replaces the ring; `emit: false` changes it silently (a reader that re-reads sees it, listeners do not). */
  set(ring: Ring, emit = true): void {
    this.#ring = ring;
    if (emit) for (const l of this.#listeners) l(ring);
  }
}
