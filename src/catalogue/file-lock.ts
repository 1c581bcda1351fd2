/**
 * The file store's lock: writers of one catalogue file take turns, one at a time within a process
 * (a queue of promises) and across the processes of the machine (`proper-lockfile`: a directory
 * `<path>.lock`). The lock is waited for at most {@link LOCK_WAIT_MS}, then the write answers
 * {@link CatalogueUnavailable}; a lock not refreshed for {@link LOCK_STALE_MS} belongs to a crashed
 * process and is taken over (writes meanwhile answer 503).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import lockfile from 'proper-lockfile';
import { createFile } from './file-writes.ts';
import { CatalogueUnavailable } from './store.ts';
import { wallNow } from '../clock.ts';

/** Longest wait for the inter-process lock, ms. */
const LOCK_WAIT_MS = 2_000;
/** A lock not refreshed for this long (ms) belongs to a dead process and is taken over (proper-lockfile refreshes it every half of it). */
const LOCK_STALE_MS = 10_000;

/** This process's turn and the inter-process lock of one catalogue file. */
export class FileLock {
  readonly #path: string;
  readonly #onProblem: (problem: string) => void;
  /** Serializes this process's lock holders (the file lock is for other processes). */
  #queue: Promise<void> = Promise.resolve();

  /** `onProblem` is told when the lock held was taken over by another process (this one stalled). */
  constructor(path: string, onProblem: (problem: string) => void) {
    this.#path = path;
    this.#onProblem = onProblem;
  }

  /**
   * Runs `fn` holding this process's turn and the file lock (creating the file first when missing),
   * then releases both.
   * @throws CatalogueUnavailable when the file cannot be created or locked, or stays locked for 2 s.
   */
  async hold<T>(fn: () => T): Promise<T> {
    const previous = this.#queue;
    let done = (): void => {};
    this.#queue = new Promise<void>((resolve) => (done = resolve));
    await previous;
    try {
      const release = await this.#lock();
      try {
        return fn();
      } finally {
        await release().catch(() => {});
      }
    } finally {
      done();
    }
  }

  /** Settles when every holder queued so far is done. */
  idle(): Promise<void> {
    return this.#queue;
  }

  /** The inter-process lock, waited for at most {@link LOCK_WAIT_MS}. @throws CatalogueUnavailable */
  async #lock(): Promise<() => Promise<void>> {
    createFile(this.#path);
    const deadline = wallNow() + LOCK_WAIT_MS; // wall time: the wait sleeps on real timers
    let backoffMs = 2;
    for (;;) {
      try {
        return await lockfile.lock(this.#path, {
          stale: LOCK_STALE_MS,
          realpath: false,
          retries: 0,
          // Default: throw from a timer (a crash). Our lock taken over means we were stalled > 10 s.
          onCompromised: (err) => this.#onProblem(`${this.#path}: lock compromised: ${err.message}`),
        });
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ELOCKED') throw new CatalogueUnavailable(`catalogue store: cannot lock ${this.#path}: ${code ?? String(err)}`);
        if (wallNow() >= deadline) throw new CatalogueUnavailable(`catalogue store: ${this.#path} stayed locked by another process for ${LOCK_WAIT_MS} ms`);
        await sleep(backoffMs * (0.5 + Math.random()));
        backoffMs = Math.min(backoffMs * 2, 50);
      }
    }
  }
}
