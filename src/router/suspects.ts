/**
 * Members the router currently routes around: marked for a while after a connection failure, or
 * until they answer a health check again after failing one.
 */
import type { Clock } from '../clock.ts';

/** Suspect members by id, with the time (ms since epoch, from the injected clock) each mark ends. */
export class Suspects {
  readonly #until = new Map<string, number>();
  readonly #clock: Clock;

  /** @param clock decides when a timed mark ends. */
  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Marks a member suspect for `ms` milliseconds from now; an existing longer mark is kept. */
  markFor(id: string, ms: number): void {
    const until = this.#clock.now() + ms;
    if ((this.#until.get(id) ?? -Infinity) < until) this.#until.set(id, until);
  }

  /** Marks a member suspect until {@link clear} (a failed health check: suspect until it answers again). */
  markDown(id: string): void {
    this.#until.set(id, Infinity);
  }

  /** Ends any mark of a member (it answered a health check). */
  clear(id: string): void {
    this.#until.delete(id);
  }

  /** Whether a member is suspect now; an expired mark is dropped. */
  has(id: string): boolean {
    if (this.#until.size === 0) return false;
    const until = this.#until.get(id);
    if (until === undefined) return false;
    if (until > this.#clock.now()) return true;
    this.#until.delete(id);
    return false;
  }

  /** Ids suspect now, sorted. */
  list(): string[] {
    return [...this.#until.keys()].filter((id) => this.has(id)).sort();
  }

  /** Forgets marks of members not in `ids` (they left the ring). */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.#until.keys()) if (!ids.has(id)) this.#until.delete(id);
  }
}
