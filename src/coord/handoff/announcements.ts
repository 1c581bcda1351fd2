/**
 * Handoff announcements (`HandoffDone`, published on Redis by `TenantStateStore.announce`): a node
 * that handed tenants over for a ring says so, and a node claiming a tenant whose previous owner is
 * still in the ring waits for that word (up to `waitMs`) before it reads the tenant's state, so it
 * loads the handoff rather than an older checkpoint. This file keeps the announcements seen and the
 * waits; what a claim does once the wait ends is in `src/coord/handoff/claims.ts`.
 */
import type { HandoffDone } from './state-store.ts';

/** Announcements remembered (`from|ring`), oldest forgotten first. */
const SEEN_ANNOUNCEMENTS = 256;

/** The announcements a node has seen and the claims waiting for one. */
export class Announcements {
  readonly #waitMs: number;
  /** `from|ring` of announcements seen, oldest first. */
  readonly #seen = new Set<string>();
  readonly #waiters = new Map<string, Set<() => void>>();

  /** @param waitMs longest wait for an announcement, ms. */
  constructor(waitMs: number) {
    this.#waitMs = waitMs;
  }

  /** True when node `from` announced its handoff for ring version `ring`. */
  has(from: string, ring: string): boolean {
    return this.#seen.has(key(from, ring));
  }

  /** Waits for node `from`'s announcement for ring version `ring`, up to `waitMs`. @returns whether it came. */
  waitFor(from: string, ring: string): Promise<boolean> {
    const k = key(from, ring);
    return new Promise((resolve) => {
      let waiters = this.#waiters.get(k);
      if (waiters === undefined) this.#waiters.set(k, (waiters = new Set()));
      const set = waiters;
      const wake = (): void => {
        clearTimeout(timer);
        set.delete(wake);
        resolve(this.#seen.has(k));
      };
      const timer = setTimeout(wake, this.#waitMs);
      set.add(wake);
    });
  }

  /** Records an announcement and wakes the claims waiting for it. */
  record(done: HandoffDone): void {
    const k = key(done.from, done.ring);
    this.#seen.add(k);
    if (this.#seen.size > SEEN_ANNOUNCEMENTS) {
      const oldest = this.#seen.values().next().value;
      if (oldest !== undefined) this.#seen.delete(oldest);
    }
    const waiters = this.#waiters.get(k);
    if (waiters !== undefined) {
      this.#waiters.delete(k);
      for (const wake of waiters) wake();
    }
  }

  /** Forgets every announcement seen (ring versions repeat when a node dropped from the ring rejoins it). */
  forget(): void {
    this.#seen.clear();
  }

  /** Ends every wait now (each resolves with whether its announcement came). */
  stop(): void {
    for (const waiters of this.#waiters.values()) for (const wake of waiters) wake();
    this.#waiters.clear();
  }
}

function key(from: string, ring: string): string {
  return `${from}|${ring}`;
}
