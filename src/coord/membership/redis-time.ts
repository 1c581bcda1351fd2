/**
 * Redis time as `RedisMembership` estimates it: member scores are Redis `TIME` (one clock for the
 * whole cluster, whatever the hosts' clocks say), but reading `TIME` every heartbeat would cost a
 * round trip. It is read on the first sync, after a failed one, and every {@link TIME_EVERY} syncs;
 * in between, Redis time = wall clock (`Date.now()`) + the offset last measured.
 */
import { wallNow } from '../../clock.ts';

/** Redis `TIME` is read on the first sync, after a failed one, and every this many syncs. */
export const TIME_EVERY = 10;

/** The offset of Redis `TIME` from this host's wall clock, and when to measure it again. */
export class RedisTimeOffset {
  /** Redis `TIME` − `Date.now()`, ms, as last measured; undefined until then and after a failed sync. */
  #offsetMs: number | undefined;
  /** Syncs since Redis `TIME` was last read. */
  #sinceRead = 0;

  /** True when the next sync must read Redis `TIME` first (never measured, forgotten, or {@link TIME_EVERY} syncs since). */
  due(): boolean {
    return this.#offsetMs === undefined || this.#sinceRead >= TIME_EVERY;
  }

  /** Measures the offset from a reply of Redis `TIME` (`[seconds, microseconds]`) received just now. */
  measured(reply: readonly (number | string)[]): void {
    const [sec, usec] = reply;
    this.#offsetMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000) - wallNow(); // wall time: an offset from Redis `TIME`, another process's clock
    this.#sinceRead = 0;
  }

  /**
   * Redis time now, ms (wall clock + offset), for one sync: counts that sync towards the next read.
   * @throws Error when no offset is measured (call {@link measured} when {@link due}).
   */
  syncTime(): number {
    if (this.#offsetMs === undefined) throw new Error('Redis TIME offset not measured');
    this.#sinceRead++;
    return wallNow() + this.#offsetMs; // wall time: estimates Redis `TIME`
  }

  /** Forgets the offset (a sync failed): the next sync reads Redis `TIME` again. */
  forget(): void {
    this.#offsetMs = undefined;
  }
}
