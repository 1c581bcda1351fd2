/**
 * Members the router currently routes around: marked for a while after a connection failure, or
 * until they answer a health check again after failing one.
 *
 * A mark says why: `unreachable` (a connection was refused, reset or timed out: the process is
 * likely gone) or `unresponsive` (health checks went unanswered or answered other than 200: the
 * process is there but slow or unwell). When every member is suspect the router still sends a
 * tenant's requests to its owner unless the owner is unreachable (see `chooseMember`).
 */
import type { Clock } from '../clock.ts';

/** Why a member is suspect. */
export type SuspectKind = 'unreachable' | 'unresponsive';

interface Mark {
  /** End of the mark, ms since epoch (Infinity: until {@link Suspects.clear}). */
  readonly until: number;
  readonly kind: SuspectKind;
}

/** Suspect members by id, with the time (ms since epoch, from the injected clock) each mark ends. */
export class Suspects {
  readonly #marks = new Map<string, Mark>();
  readonly #clock: Clock;

  /** @param clock decides when a timed mark ends. */
  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /**
   * Marks a member unreachable (a connection failure) for `ms` milliseconds from now; an existing
   * longer mark is kept, and becomes `unreachable`.
   */
  markFor(id: string, ms: number): void {
    const until = this.#clock.now() + ms;
    const mark = this.#marks.get(id);
    this.#marks.set(id, { until: Math.max(until, mark?.until ?? -Infinity), kind: 'unreachable' });
  }

  /** Marks a member suspect until {@link clear} (a failed health check: suspect until it answers again). */
  markDown(id: string, kind: SuspectKind = 'unreachable'): void {
    this.#marks.set(id, { until: Infinity, kind });
  }

  /** Ends any mark of a member (it answered a health check). */
  clear(id: string): void {
    this.#marks.delete(id);
  }

  /** Whether a member is suspect now; an expired mark is dropped. */
  has(id: string): boolean {
    return this.kindOf(id) !== undefined;
  }

  /** Why a member is suspect now, or undefined when it is not; an expired mark is dropped. */
  kindOf(id: string): SuspectKind | undefined {
    if (this.#marks.size === 0) return undefined;
    const mark = this.#marks.get(id);
    if (mark === undefined) return undefined;
    if (mark.until > this.#clock.now()) return mark.kind;
    this.#marks.delete(id);
    return undefined;
  }

  /** Whether a member is suspect now because a connection to it failed. */
  unreachable(id: string): boolean {
    return this.kindOf(id) === 'unreachable';
  }

  /** Ids suspect now, sorted. */
  list(): string[] {
    return [...this.#marks.keys()].filter((id) => this.has(id)).sort();
  }

  /** Forgets marks of members not in `ids` (they left the ring). */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.#marks.keys()) if (!ids.has(id)) this.#marks.delete(id);
  }
}
