/**
 * One sync of `RedisMembership` (run by its `SyncLoop`, one at a time): a heartbeat and a read of
 * the member list and the drops in one pipeline, the view rebuilt from what the read found, the
 * drops of members gone silent recorded, and this node's rejoin when it finds that the others
 * dropped it while it was cut from Redis. Holds what the syncs carry from one to the next: the ring,
 * the contact with Redis, the Redis clock offset, the heartbeats seen, this node's last answered
 * heartbeat and the state of its drop's acknowledgement.
 */
import type { Redis } from 'ioredis';
import type { Clock } from '../../clock.ts';
import type { ClusterSecret } from '../../security/cluster-secret.ts';
import { dropSilentMembers } from './member-drops.ts';
import { EntryReports, FUTURE_PRUNE_MS, MAX_ENTRIES_READ, MIN_FUTURE_SKEW_MS, readEntries } from './member-entries.ts';
import { sendSync, syncReply } from './member-commands.ts';
import { MemberLiveness } from './member-liveness.ts';
import { membershipNote } from './membership-notes.ts';
import { RedisContact } from './redis-contact.ts';
import { RedisTimeOffset } from './redis-time.ts';
import type { RingOptions } from '../ring/ring.ts';
import type { Member } from '../types.ts';
import { WatchedRing } from './watched-ring.ts';

/** What {@link MembershipSync} works with: the membership's connection, keys, timings and callbacks. */
export interface SyncContext {
  /** Connection for the heartbeats and reads (never closed here). */
  readonly redis: Redis;
  /** This node; undefined on a router (it only reads). */
  readonly self: Member | undefined;
  /** This node's signed entry (`signedMemberEntry`); undefined on a router. */
  readonly selfJson: string | undefined;
  /** The members sorted set (`membersKey`). */
  readonly membersKey: string;
  /** The drops hash (`dropsKey`). */
  readonly dropsKey: string;
  /** The channel of the join/leave notes (`membershipChannel`). */
  readonly channel: string;
  /** Interval of the syncs, ms. */
  readonly heartbeatMs: number;
  /** A member whose last heartbeat is older than this is out, ms. */
  readonly deadAfterMs: number;
  /** Measures gaps in contact with Redis (member scores use Redis `TIME`). */
  readonly clock: Clock;
  /** Verifies the entries read. */
  readonly secret: ClusterSecret;
  /** Passed to `createRing`. */
  readonly ringOptions: RingOptions;
  /** Told about faults that do not fail the sync (a listener that threw, a failed drop or `join` note). */
  readonly onError: (err: Error) => void;
  /** True once the membership stops: no heartbeat is sent then. */
  readonly stopping: () => boolean;
  /** Asks for one more sync right after the current one (a rejoin's acknowledgement). */
  readonly again: () => void;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** The steps of one sync, and the state the syncs carry over. */
export class MembershipSync {
  readonly #c: SyncContext;
  readonly #futureSkewMs: number;
  /** The ring and its listeners. */
  readonly view: WatchedRing;
  /** Counts and reports of the entries ignored. */
  readonly reports = new EntryReports();
  /** Heartbeats seen and leaves announced, per member. */
  readonly liveness: MemberLiveness;
  /** Contact with Redis: the last successful sync, gaps, and when stale members may be deleted. */
  readonly #contact: RedisContact;
  /** Redis `TIME` − `Date.now()`, and when to read `TIME` again. */
  readonly #time = new RedisTimeOffset();
  /** Redis time (ms) of this node's last heartbeat that Redis answered, and the clock ms it was sent at. */
  #lastBeat: number | undefined;
  #lastBeatSent: number | undefined;
  /** This node's field in the drops hash is to be deleted (its drop seen, or a fresh start). */
  #dropToAck = true;
  /** Set by a rejoin: the sync that acknowledges the drop publishes a `join` note. */
  #announceRejoin = false;
  #rejoins = 0;

  /** Starts with an empty ring. */
  constructor(c: SyncContext) {
    this.#c = c;
    this.#futureSkewMs = Math.max(MIN_FUTURE_SKEW_MS, 2 * c.heartbeatMs);
    this.view = new WatchedRing(c.ringOptions, c.onError);
    this.liveness = new MemberLiveness(c.deadAfterMs);
    this.#contact = new RedisContact(c.heartbeatMs, c.deadAfterMs);
  }

  /** Clock ms of the last successful sync (undefined before the first). */
  get lastSync(): number | undefined {
    return this.#contact.lastSync;
  }

  /** Clock ms at which this node sent its last heartbeat that Redis answered (undefined on a router and before the first). */
  get lastBeatSent(): number | undefined {
    return this.#lastBeatSent;
  }

  /** Times this node found on reconnecting that the others had dropped it from the ring (see `#rejoin`). */
  get rejoins(): number {
    return this.#rejoins;
  }

  /** One heartbeat + read. @throws the Redis error. */
  async once(): Promise<void> {
    const c = this.#c;
    try {
      if (this.#time.due()) this.#time.measured(await c.redis.time());
      const sentAt = c.clock.now();
      const nowMs = this.#time.syncTime();
      const beats = c.selfJson !== undefined && !c.stopping();
      // Checked after TIME: stop() may have sent the ZREM meanwhile, and a ZADD now would re-add us.
      // Our drop seen (or a fresh start): acknowledged, so the others take us back (see #rejoin).
      const acking = beats && this.#dropToAck;
      // Stale members are deleted once per deadAfterMs, and only while in contact (the threshold is
      // this send's time: a sync stalled by Redis deletes nothing newer than that).
      const deleteStale = this.#contact.pruneDue(sentAt) ? { staleBelow: nowMs - c.deadAfterMs, futureAbove: nowMs + Math.max(FUTURE_PRUNE_MS, this.#futureSkewMs) } : undefined;
      // Only believable scores, and a bounded number of entries. The read's lower bound is decided
      // before the answer (contact as of the last sync); #apply applies the exact one.
      const maxScore = nowMs + this.#futureSkewMs;
      const minScore = this.#contact.settled(sentAt) ? nowMs - c.deadAfterMs : undefined;
      const entry = beats ? c.selfJson : undefined;
      const ackId = acking ? (c.self as Member).id : undefined;
      const results = await sendSync(c.redis, { membersKey: c.membersKey, dropsKey: c.dropsKey, nowMs, entry, ackId, prune: deleteStale, minScore, maxScore });
      const { flat, drops } = syncReply(results);
      if (acking) this.#dropToAck = false;
      // Contact is judged when the answer came: a sync that Redis held (a stall) counts as a gap.
      // Members older than deadAfterMs are ignored once in contact for deadAfterMs.
      const prune = this.#contact.answered(c.clock.now());
      if (flat.length >= 2 * MAX_ENTRIES_READ) {
        this.reports.capHit();
      }
      // A process in contact with Redis dropped us after our last answered heartbeat. (Our own
      // entry is no evidence: heartbeats sent during a cut may reach Redis when the link heals,
      // and after a Redis stall or restart every entry is old or gone though no one dropped anyone.)
      const self = c.self;
      const ownDrop = self === undefined ? undefined : drops[self.id];
      let rejoined = false;
      if (ownDrop !== undefined && beats) {
        if (Number(ownDrop) > (this.#lastBeat ?? Infinity)) rejoined = this.#rejoin();
        this.#dropToAck = true;
      }
      if (beats) {
        this.#lastBeat = nowMs;
        this.#lastBeatSent = sentAt;
      }
      // Just rejoined: this node stays out of its own ring until its drop is acknowledged (the
      // others take it back only then), so that its claims, which wait for the interim owners'
      // handoffs, start when those owners can see it. The acknowledgement is sent at once.
      const silent = this.#apply(flat, prune ? nowMs - c.deadAfterMs : -Infinity, maxScore, prune ? nowMs : undefined, drops, rejoined);
      if (rejoined) c.again();
      // Acknowledged after a rejoin: the others are told to read the member list now (as on a start).
      if (acking && this.#announceRejoin && self !== undefined) {
        this.#announceRejoin = false;
        c.redis.publish(c.channel, membershipNote('join', self.id)).catch((err: unknown) => c.onError(asError(err)));
      }
      this.#contact.succeeded(c.clock.now());
      this.reports.report(c.clock.now(), c.onError);
      if (silent.length > 0) await this.#dropSilent(silent, nowMs, maxScore);
    } catch (err) {
      this.#contact.failed();
      this.#time.forget();
      throw err;
    }
  }

  /**
   * Takes `[json, score, json, score, ...]`, keeps the newest entry per id scored in `[minScore,
   * maxScore]` (`readEntries`) and the members of the current view that {@link MemberLiveness}
   * keeps; rebuilds on change. A member silent for `deadAfterMs` and not recorded in `drops` stays:
   * it leaves once `#dropSilent` has recorded its drop, which a process asks only once in contact
   * for `deadAfterMs` (`dropsAt`, Redis time).
   * @returns those members, to record (empty without `dropsAt`).
   */
  #apply(flat: readonly string[], minScore: number, maxScore: number, dropsAt?: number, drops: Readonly<Record<string, string>> = {}, selfDropped = false): Member[] {
    const c = this.#c;
    const now = c.clock.now();
    // A dropped member's entry is ignored until the member acknowledges its drop; this node's own
    // entry is read regardless, except right after it found its drop (`selfDropped`).
    const newest = readEntries(flat, { minScore, maxScore }, drops, selfDropped ? undefined : c.self?.id, c.secret, this.reports);
    const context = { current: this.view.ring.members, now, contactSince: this.#contact.since, selfId: c.self?.id, drops, collectSilent: dropsAt !== undefined };
    const { members, silent } = this.liveness.view(newest, context);
    this.view.set(members);
    return silent;
  }

  /**
   * Drops the `silent` members from the ring once {@link dropSilentMembers} has recorded their drop
   * (at Redis time `nowMs`) atomically against their heartbeats, so that a member whose heartbeat
   * arrived meanwhile stays, and one dropped learns it from its next sync (why: `member-drops.ts`).
   * The ring keeps them while the call is in flight; when it fails (reported to `onError`) nothing
   * is dropped this time and the next sync asks again, reading the drops hash after it (serial).
   */
  async #dropSilent(silent: readonly Member[], nowMs: number, maxScore: number): Promise<void> {
    const c = this.#c;
    const ids = silent.map((m) => m.id);
    const request = { membersKey: c.membersKey, dropsKey: c.dropsKey, minScore: nowMs - c.deadAfterMs, maxScore, dropsAt: nowMs, maxEntries: MAX_ENTRIES_READ, ids };
    const recorded = await dropSilentMembers(c.redis, request).catch((err: unknown) => {
      c.onError(asError(err));
      return [];
    });
    const gone = new Set(recorded);
    if (gone.size > 0) this.view.set(this.view.ring.members.filter((m) => !gone.has(m.id)));
  }

  /**
   * This node is back in contact with Redis after a gap in which a process in contact dropped it
   * from its ring (`dropsKey`, later than this node's last answered heartbeat): the others gave
   * its tenants to other nodes meanwhile, though it never saw that ring. Its listeners see that ring now (this
   * node absent, `Handoff` drops the tenants it decided for: their interim owners hold newer
   * states), then the ring with it again (the read that follows at once, which acknowledges the
   * drop and publishes a `join` note so the others read it now), so its tenants come back by
   * handoff like any moved tenant's. Counted in {@link rejoins}.
   * @returns whether this node was in its ring (and now is not).
   */
  #rejoin(): boolean {
    const self = this.#c.self;
    if (self === undefined || !this.view.ring.members.some((m) => m.id === self.id)) return false;
    this.#rejoins++;
    this.#announceRejoin = true;
    this.view.set(this.view.ring.members.filter((m) => m.id !== self.id));
    return true;
  }
}
