/**
 * A process's contact with Redis, as `RedisMembership`'s syncs see it, and what a gap forbids.
 *
 * Redis unreachable: the last view stays, the next heartbeat retries. A process that lost contact
 * (a failed heartbeat or read, or more than `deadAfterMs - heartbeatMs` since its last successful
 * one, e.g. a stalled Redis) removes no dead member until Redis has answered it for `deadAfterMs`
 * again: after an outage every heartbeat is old, and pruning at once would drop live nodes that
 * have not beaten yet, moving their tenants twice. Stale entries are deleted from Redis only then,
 * and once per `deadAfterMs`.
 */

/** Since when Redis has answered every sync in time, and the last success. All times: clock ms. */
export class RedisContact {
  readonly #heartbeatMs: number;
  readonly #deadAfterMs: number;
  #lastSync: number | undefined;
  /** A heartbeat or read failed since the last success. */
  #failed = false;
  /** Clock ms since which Redis has answered every heartbeat in time; pruning needs `deadAfterMs` of it. */
  #since = -Infinity;
  /** Syncs since stale members were last deleted. */
  #sincePrune = 0;

  /** @param heartbeatMs interval of the syncs, ms. @param deadAfterMs silence after which a member is out, ms. */
  constructor(heartbeatMs: number, deadAfterMs: number) {
    this.#heartbeatMs = heartbeatMs;
    this.#deadAfterMs = deadAfterMs;
  }

  /** Clock ms of the last successful sync (undefined before the first). */
  get lastSync(): number | undefined {
    return this.#lastSync;
  }

  /** Clock ms since which Redis has answered every sync in time (-Infinity before any gap). */
  get since(): number {
    return this.#since;
  }

  /**
   * Whether the sync sent at clock ms `sentAt` deletes stale entries: in contact (the last sync
   * succeeded, at most `deadAfterMs - heartbeatMs` before), for `deadAfterMs` already, and once
   * per `deadAfterMs` (each call that gets this far counts a sync).
   */
  pruneDue(sentAt: number): boolean {
    const inContact = this.#lastSync !== undefined && !this.#failed && sentAt - this.#lastSync <= this.#deadAfterMs - this.#heartbeatMs;
    if (inContact && sentAt - this.#since >= this.#deadAfterMs && ++this.#sincePrune * this.#heartbeatMs >= this.#deadAfterMs) {
      this.#sincePrune = 0;
      return true;
    }
    return false;
  }

  /**
   * Whether the sync sent at clock ms `sentAt` reads only scores of the last `deadAfterMs`: in
   * contact for `deadAfterMs` as of the last sync (the exact contact is judged on the answer).
   */
  settled(sentAt: number): boolean {
    return this.#lastSync !== undefined && !this.#failed && sentAt - this.#since >= this.#deadAfterMs;
  }

  /**
   * A sync's answer came at clock ms `t`: a sync that Redis held (a stall) or one after a failure
   * counts as a gap, and the contact starts again at `t`.
   * @returns whether members older than `deadAfterMs` are ignored (in contact for `deadAfterMs`).
   */
  answered(t: number): boolean {
    if (this.#lastSync !== undefined && (this.#failed || t - this.#lastSync > this.#deadAfterMs - this.#heartbeatMs)) this.#since = t;
    return t - this.#since >= this.#deadAfterMs;
  }

  /** A sync succeeded, done at clock ms `t`. */
  succeeded(t: number): void {
    this.#lastSync = t;
    this.#failed = false;
  }

  /** A sync failed. */
  failed(): void {
    this.#failed = true;
  }
}
