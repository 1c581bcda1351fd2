/**
 * Members that left the ring recently, as seen by one router. A node whose ring is older than the
 * router's may still name such a member as a tenant's owner in a 421; the router then knows the
 * node's view is the stale one (rather than its own) and asks the node to stand in.
 */
import type { Clock } from '../clock.ts';
import type { Ring } from '../coord/types.ts';

/** Recently departed member ids, each kept `keepMs` after it left. */
export class Departures {
  readonly #clock: Clock;
  readonly #keepMs: number;
  /** Member id → clock ms it left. */
  readonly #left = new Map<string, number>();

  /** @param keepMs how long a departure is remembered, ms. @default 60000 */
  constructor(clock: Clock, keepMs = 60_000) {
    this.#clock = clock;
    this.#keepMs = keepMs;
  }

  /** Records the members of `previous` that are not in `next`, forgets those back in `next` and old departures. */
  update(previous: Ring, next: Ring): void {
    const now = this.#clock.now();
    const present = new Set(next.members.map((m) => m.id));
    for (const m of previous.members) if (!present.has(m.id)) this.#left.set(m.id, now);
    for (const [id, at] of this.#left) if (present.has(id) || now - at > this.#keepMs) this.#left.delete(id);
  }

  /** True when `id` left the ring within the last `keepMs`. */
  has(id: string): boolean {
    const at = this.#left.get(id);
    return at !== undefined && this.#clock.now() - at <= this.#keepMs;
  }
}
