/**
 * The one source of time for limiters, leases, queues and heartbeats.
 * Injected everywhere so tests move time instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch (may be fractional). */
  now(): number;
}

/** Wall-clock time from `Date.now()`. */
export const systemClock: Clock = { now: () => Date.now() };

/**
 * Wall time, ms since the epoch, for the few reads that must be wall time whatever clock is
 * injected: stamps another process or a person reads, files that outlive the process, signature
 * windows shared with another process, the offset of Redis `TIME`, and waits that sleep on real
 * timers. Each call says why beside it (`// wall time: ...`); every other time is an injected
 * {@link Clock}'s `now()`.
 */
export function wallNow(): number {
  return Date.now();
}

/** A clock that only moves when told to; for tests and simulations. */
export class ManualClock implements Clock {
  #t: number;

  /** @param startMs initial time in ms since the epoch. @default 1_700_000_000_000 */
  constructor(startMs = 1_700_000_000_000) {
    this.#t = startMs;
  }

  now(): number {
    return this.#t;
  }

  /** Moves time forward by `ms` milliseconds. @throws RangeError when `ms` is negative. */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError(`clock cannot go back (${ms} ms)`);
    this.#t += ms;
  }

  /** Sets the time to `ms` (ms since epoch). @throws RangeError when it would go back. */
  set(ms: number): void {
    this.advance(ms - this.#t);
  }
}
