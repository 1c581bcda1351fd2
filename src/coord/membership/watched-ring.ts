/**
 * The ring of a membership read from Redis and its listeners: rebuilt from a member list only when
 * the sorted list changed (as stored JSON lines), each new ring given to every listener (one that
 * throws is reported to `onError`; the others still hear it).
 */
import { memberJson } from '../../security/member-entry.ts';
import { createRing, sortMembers } from '../ring/ring.ts';
import type { RingOptions } from '../ring/ring.ts';
import type { Member, Ring } from '../types.ts';

/** A ring rebuilt on change of its member list, with listeners. */
export class WatchedRing {
  readonly #options: RingOptions;
  readonly #onError: (err: Error) => void;
  readonly #listeners = new Set<(ring: Ring) => void>();
  #ring: Ring;
  /** The sorted list as stored JSON lines: the ring is rebuilt only when it changes. */
  #listKey = '';

  /**
   * Starts with an empty ring.
   * @param options passed to {@link createRing}.
   * @param onError told about a listener that threw.
   */
  constructor(options: RingOptions, onError: (err: Error) => void) {
    this.#options = options;
    this.#onError = onError;
    this.#ring = createRing([], options);
  }

  /** The current ring. */
  get ring(): Ring {
    return this.#ring;
  }

  /** Calls `listener` with each new ring; returns the unsubscribe function. */
  onChange(listener: (ring: Ring) => void): () => void {
    const wrapped = (ring: Ring): void => listener(ring);
    this.#listeners.add(wrapped);
    return () => {
      this.#listeners.delete(wrapped);
    };
  }

  /** Rebuilds the ring from `list` and tells the listeners, unless the sorted list is unchanged. */
  set(list: readonly Member[]): void {
    const members = sortMembers([...list]);
    const listKey = members.map(memberJson).join('\n');
    if (listKey === this.#listKey) return;
    this.#listKey = listKey;
    this.#ring = createRing(members, this.#options);
    for (const listener of [...this.#listeners]) {
      try {
        listener(this.#ring);
      } catch (err) {
        this.#onError(err instanceof Error ? err : new Error(String(err)));
      }
    }
  }
}
