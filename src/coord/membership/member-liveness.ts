/**
 * Which members `RedisMembership`'s view keeps after a read: those whose entry the read believed
 * (`member-entries.ts`), and those of the current view the read did not find without a leave
 * announcement (a Redis that restarted empty or was restored from an old snapshot, a member gone
 * silent), until they have been silent long enough and their drop is recorded (`member-drops.ts`).
 * Holds, per member, the last heartbeat score seen and when it rose, and the leaves announced.
 */
import type { EntrySeen } from './member-entries.ts';
import type { Member } from '../types.ts';

/** The view that {@link MemberLiveness.view} builds. */
export interface LiveView {
  /** The members of the new view (unsorted). */
  readonly members: Member[];
  /** Members silent for `deadAfterMs` and not recorded as dropped: to record (empty unless asked). */
  readonly silent: Member[];
}

/** What {@link MemberLiveness.view} needs besides the entries read. */
export interface ViewContext {
  /** The members of the current view (the ring's). */
  readonly current: readonly Member[];
  /** Clock ms of the read. */
  readonly now: number;
  /** Clock ms since which this process has been in contact with Redis (`RedisContact.since`). */
  readonly contactSince: number;
  /** This node's id (never kept as silent, never recorded); undefined on a router. */
  readonly selfId: string | undefined;
  /** The drops hash as read: member id → drop time (Redis time, ms). */
  readonly drops: Readonly<Record<string, string>>;
  /** True when the silent members are to be returned (the caller is in contact for `deadAfterMs`). */
  readonly collectSilent: boolean;
}

/** Heartbeats seen and leaves announced, per member id; builds the view after each read. */
export class MemberLiveness {
  readonly #deadAfterMs: number;
  /** Per member id: its last heartbeat score, and the clock ms when this process saw that score rise. */
  readonly #beats = new Map<string, { score: number; seenAt: number }>();
  /** Ids announced as leaving (gracefully): dropped at once, not kept for `deadAfterMs`. */
  readonly #left = new Set<string>();

  /** @param deadAfterMs silence after which a member is out, ms. */
  constructor(deadAfterMs: number) {
    this.#deadAfterMs = deadAfterMs;
  }

  /** Member `id` announced its leave: a read that misses it drops it at once. */
  left(id: string): void {
    this.#left.add(id);
  }

  /** Member `id` announced its join (a leave announced before no longer holds). */
  joined(id: string): void {
    this.#left.delete(id);
  }

  /**
   * The view after a read that believed `newest` (by id; each counts as a heartbeat, seen at `now`
   * when its score rose; `newest` is completed with the members kept). A member of the current
   * view missing from the read without a leave announcement stays until `deadAfterMs` after this
   * process last saw its heartbeat rise, or after its contact with Redis began again if later: a
   * Redis restart must not move tenants off live nodes, nor empty a router's ring. A member silent
   * that long and not recorded in `drops` stays too, and is returned in `silent` (when
   * `collectSilent`) for its drop to be recorded; this node itself is never.
   */
  view(newest: Map<string, EntrySeen>, c: ViewContext): LiveView {
    for (const [id, { score }] of newest) {
      const beat = this.#beats.get(id);
      if (beat === undefined || score > beat.score) this.#beats.set(id, { score, seenAt: c.now });
      this.#left.delete(id);
    }
    const silent: Member[] = [];
    for (const member of c.current) {
      if (newest.has(member.id) || this.#left.has(member.id)) continue;
      const beat = this.#beats.get(member.id);
      // Silence counts only while this process is in contact with Redis: after a gap (Redis down,
      // restarted empty, or this process stalled) a member gets deadAfterMs from the contact's start
      // to heartbeat again, so a Redis restart longer than deadAfterMs does not empty the ring.
      if (beat !== undefined && c.now - Math.max(beat.seenAt, c.contactSince) < this.#deadAfterMs) newest.set(member.id, { member, score: beat.score });
      else if (member.id !== c.selfId && !Object.hasOwn(c.drops, member.id)) {
        // Silent, not recorded as dropped: kept until its drop is (`MembershipSync#dropSilent`).
        newest.set(member.id, { member, score: beat?.score ?? 0 });
        if (c.collectSilent) silent.push(member);
      }
    }
    for (const id of this.#beats.keys()) if (!newest.has(id)) this.#beats.delete(id);
    return { members: [...newest.values()].map((e) => e.member), silent };
  }
}
