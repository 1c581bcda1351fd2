/**
 * How `RedisMembership` runs its syncs (one heartbeat + read each): one at a time, callers that ask
 * while one is in flight coalesced into one more right after it, and the callers of `syncNow()`,
 * each waiting for the first sync started after its call (one in flight when it called does not
 * count: its heartbeat may predate what the caller wants to know).
 */

/** Longest timer Node.js arms (2^31 − 1 ms); a longer timeout waits without one. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  /** Number of the last sync started before the call: the one it waits for has a higher number. */
  readonly after: number;
  readonly resolve: (ok: boolean) => void;
  timer: NodeJS.Timeout | undefined;
}

/** Runs one sync function serially, coalescing requests, with waiters for fresh syncs. */
export class SyncLoop {
  readonly #once: () => Promise<void>;
  readonly #stopping: () => boolean;
  readonly #onError: (err: Error) => void;
  #inFlight: Promise<void> | undefined;
  #again = false;
  /** Syncs started so far (the number of the latest). */
  #started = 0;
  readonly #waiting = new Set<Waiter>();

  /**
   * @param once one sync; rejects when it failed.
   * @param stopping true once the owner stops: no sync is repeated then.
   * @param onError told about a failed sync that is retried for waiting callers (not thrown).
   */
  constructor(once: () => Promise<void>, stopping: () => boolean, onError: (err: Error) => void) {
    this.#once = once;
    this.#stopping = stopping;
    this.#onError = onError;
  }

  /** The syncs in flight (the current one and those coalesced after it), if any. */
  get inFlight(): Promise<void> | undefined {
    return this.#inFlight;
  }

  /** Runs one more sync right after the current one (a rejoin's acknowledgement). */
  again(): void {
    this.#again = true;
  }

  /**
   * Runs a sync now, or once more right after the one in flight (the returned promise is then that
   * of the syncs in flight). @throws (as a rejection) the error of the sync that failed; a failure
   * while `syncNow()` callers wait for a later sync is reported to `onError` and the sync retried.
   */
  run(): Promise<void> {
    if (this.#inFlight !== undefined) {
      this.#again = true;
      return this.#inFlight;
    }
    const loop = async (): Promise<void> => {
      try {
        do {
          this.#again = false;
          const seq = ++this.#started;
          try {
            await this.#once();
          } catch (err) {
            this.#settle(seq, false);
            // The callers still waiting called after this sync began: once more for them.
            if (this.#waiting.size === 0 || this.#stopping()) throw err;
            this.#onError(err instanceof Error ? err : new Error(String(err)));
            this.#again = true;
            continue;
          }
          this.#settle(seq, true);
        } while (this.#again && !this.#stopping());
      } finally {
        this.#inFlight = undefined;
      }
    };
    this.#inFlight = loop();
    return this.#inFlight;
  }

  /**
   * Resolves true once a sync started after this call succeeded, false once it failed or
   * `timeoutMs` passed first (NaN or < 0: 0), and asks for that sync ({@link background}). Never
   * rejects.
   */
  waitFresh(timeoutMs: number): Promise<boolean> {
    const done = new Promise<boolean>((resolve) => {
      const waiter: Waiter = { after: this.#started, resolve, timer: undefined };
      this.#waiting.add(waiter);
      const ms = timeoutMs >= 0 ? timeoutMs : 0;
      if (ms <= MAX_TIMER_MS) waiter.timer = setTimeout(() => this.#end(waiter, false), ms);
    });
    this.background();
    return done;
  }

  /** {@link run} with its rejection reported to `onError`. */
  background(): void {
    if (this.#inFlight !== undefined) this.#again = true;
    else this.run().catch((err: unknown) => this.#onError(err instanceof Error ? err : new Error(String(err))));
  }

  /** Every caller still waiting hears false (the owner stopped). */
  clear(): void {
    for (const waiter of [...this.#waiting]) this.#end(waiter, false);
  }

  /** Sync number `seq` ended, successfully when `ok`: every caller waiting for it hears so. */
  #settle(seq: number, ok: boolean): void {
    for (const waiter of [...this.#waiting]) if (waiter.after < seq) this.#end(waiter, ok);
  }

  #end(waiter: Waiter, ok: boolean): void {
    if (!this.#waiting.delete(waiter)) return;
    clearTimeout(waiter.timer);
    waiter.resolve(ok);
  }
}
