/**
 * Connections from the router to the gateway nodes: one keep-alive undici `Pool` per member URL,
 * closed when its member leaves the ring.
 */
import { Pool } from 'undici';
import type { Member } from '../coord/types.ts';

/** A member's pool and the path prefix of its URL ('' for a bare origin). */
export interface MemberPool {
  readonly pool: Pool;
  readonly prefix: string;
}

/** Pools by member URL; create once per router, `close()` on shutdown. */
export class MemberPools {
  readonly #pools = new Map<string, MemberPool>();

  /** The pool of a member's URL, created on first use. */
  get(member: Member): MemberPool {
    let entry = this.#pools.get(member.url);
    if (entry === undefined) {
      const url = new URL(member.url);
      entry = { pool: new Pool(url.origin, { pipelining: 1 }), prefix: url.pathname.replace(/\/+$/, '') };
      this.#pools.set(member.url, entry);
    }
    return entry;
  }

  /** URLs that have an open pool, sorted. */
  urls(): string[] {
    return [...this.#pools.keys()].sort();
  }

  /**
   * Closes the pools of URLs no member in `members` has (they left the ring). Requests in flight
   * on them finish first; a later {@link get} for such a URL opens a new pool.
   */
  async retain(members: readonly Member[]): Promise<void> {
    const keep = new Set(members.map((m) => m.url));
    const closing: Promise<void>[] = [];
    for (const [url, entry] of this.#pools) {
      if (keep.has(url)) continue;
      this.#pools.delete(url);
      closing.push(entry.pool.close());
    }
    await Promise.all(closing);
  }

  /** Closes every pool, waiting for requests in flight. */
  async close(): Promise<void> {
    await this.retain([]);
  }
}
