/**
 * Membership kept in Redis: nodes heartbeat into a sorted set, joins and leaves are announced over
 * pub/sub, and every node and router rebuilds the same ring from the same sorted live list.
 * Redis commands: a handful per heartbeat per process, none per request. This file holds the
 * `RedisMembership` class: its public API and lifecycle (start, stop, the heartbeat timer).
 *
 * What one sync does, the rejoin included: `membership-sync.ts`, with its parts (commands
 * `member-commands.ts`, Redis clock `redis-time.ts`, contact `redis-contact.ts`, entries believed
 * `member-entries.ts`, members kept `member-liveness.ts`, ring and listeners `watched-ring.ts`,
 * drops `member-drops.ts`). Options: `redis-membership-options.ts`; notes: `membership-notes.ts`;
 * serial syncs and `syncNow()` waits: `sync-loop.ts`.
 */
import type { Redis } from 'ioredis';
import { systemClock } from '../../clock.ts';
import type { Member, Membership, RejectedMemberEntry, Ring } from '../types.ts';
import { signedMemberEntry } from '../../security/member-entry.ts';
import { dropsKey } from './member-drops.ts';
import { SyncLoop } from './sync-loop.ts';
import { membershipChannel, membershipNote, notesSubscriber } from './membership-notes.ts';
import type { RedisMembershipStats } from './member-entries.ts';
import { membersKey, sendLeave } from './member-commands.ts';
import { checkedTimings } from './redis-membership-options.ts';
import type { RedisMembershipOptions } from './redis-membership-options.ts';
import { MembershipSync } from './membership-sync.ts';

export { dropsKey } from './member-drops.ts';
export { membershipChannel } from './membership-notes.ts';
export { CAP_REPORT_MS, MAX_ENTRIES_READ, REJECT_REPORT_MS } from './member-entries.ts';
export type { RedisMembershipStats } from './member-entries.ts';
export { membersKey } from './member-commands.ts';
export { DEFAULT_DEAD_AFTER_MS, DEFAULT_HEARTBEAT_MS } from './redis-membership-options.ts';
export type { RedisMembershipOptions } from './redis-membership-options.ts';

/** Resolves with `p`, or with undefined once `ms` have passed (p keeps running). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
    timer.unref();
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/**
 * A {@link Membership} over Redis.
 *
 * Every heartbeat (and at once on a join/leave announcement), in one pipeline: a node ZADDs itself
 * with the Redis time, everyone ZRANGEs the set and ignores members older than `deadAfterMs`, which
 * are also deleted (ZREMRANGEBYSCORE) once per `deadAfterMs`. The Redis time is Redis `TIME`, read
 * on the first sync, after a failure and every `TIME_EVERY` syncs (`redis-time.ts`), and in between
 * the wall clock plus the offset last measured: 2 round trips per node heartbeat, not 4 (a router:
 * 1). Several entries with one id (a node restarted on another URL) count once, the newest. The
 * ring is rebuilt and listeners are called only when the sorted list changes.
 *
 * Drops: a process in contact with Redis drops a member without a leave announcement only once it
 * has recorded the drop ({@link dropsKey}) through `lua/drop-members.lua`, which refuses while the
 * member's heartbeat is fresh (`MembershipSync#dropSilent`); every sync reads that hash, and a
 * recorded member is ignored until it acknowledges its drop, so a heartbeat it sent while cut off
 * and delivered late does not bring it back before it knows (`MembershipSync#rejoin`).
 *
 * Redis unreachable: the last view stays, the next heartbeat retries; a process that lost contact
 * removes no dead member until Redis has answered it for `deadAfterMs` again (`redis-contact.ts`).
 */
export class RedisMembership implements Membership {
  readonly #redis: Redis;
  readonly #self: Member | undefined;
  readonly #selfJson: string | undefined;
  readonly #key: string;
  readonly #channel: string;
  readonly #heartbeatMs: number;
  readonly #onError: (err: Error) => void;
  #subscriber: Redis | undefined;
  #timer: NodeJS.Timeout | undefined;
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  /** The steps of one sync and the state the syncs carry over (ring, contact, heartbeats seen). */
  readonly #sync: MembershipSync;
  /** Runs the syncs (`#sync.once`) one at a time, coalesced, and the `syncNow()` waits. */
  readonly #syncs: SyncLoop;

  /**
   * @throws RangeError on a cluster name with `{`/`}` or empty, heartbeatMs < 1, or
   *   deadAfterMs ≤ heartbeatMs; from `createRing` on a bad `self` weight or empty id.
   */
  constructor(opts: RedisMembershipOptions) {
    const { heartbeatMs, deadAfterMs } = checkedTimings(opts);
    this.#redis = opts.redis;
    this.#self = opts.self;
    this.#selfJson = opts.self === undefined ? undefined : signedMemberEntry(opts.self, opts.secret);
    this.#key = membersKey(opts.cluster);
    this.#channel = membershipChannel(opts.cluster);
    this.#heartbeatMs = heartbeatMs;
    this.#onError = opts.onError ?? (() => {});
    this.#sync = new MembershipSync({
      redis: opts.redis,
      self: opts.self,
      selfJson: this.#selfJson,
      membersKey: this.#key,
      dropsKey: dropsKey(opts.cluster),
      channel: this.#channel,
      heartbeatMs,
      deadAfterMs,
      clock: opts.clock ?? systemClock,
      secret: opts.secret,
      ringOptions: opts.ring ?? {},
      onError: this.#onError,
      stopping: () => this.#stopping !== undefined,
      again: () => this.#syncs.again(),
    });
    this.#syncs = new SyncLoop(() => this.#sync.once(), () => this.#stopping !== undefined, this.#onError);
  }

  /**
   * Subscribes to announcements, heartbeats (a node) and reads the live list once, then announces
   * the join and heartbeats every `heartbeatMs`. Resolves after that first read; calling it again
   * returns the same promise, or after a failed start tries again (Redis unreachable at start: the
   * caller retries, see `startOrKeepTrying` in `./join.ts`).
   * @throws the Redis error when the first read fails (nothing keeps running then).
   */
  start(): Promise<void> {
    this.#starting ??= this.#start().catch((err: unknown) => {
      this.#starting = undefined;
      throw err;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    if (this.#stopping !== undefined) throw new Error('RedisMembership cannot start after stop()');
    const subscriber = notesSubscriber(this.#redis, this.#channel, this.#onError, (note) => {
      if (this.#stopping !== undefined) return;
      if (note?.type === 'leave') this.#sync.liveness.left(note.id);
      else if (note?.type === 'join') this.#sync.liveness.joined(note.id);
      this.#syncs.background();
    });
    this.#subscriber = subscriber;
    try {
      await subscriber.subscribe(this.#channel);
      await this.#syncs.run();
      if (this.#self !== undefined) await this.#redis.publish(this.#channel, membershipNote('join', this.#self.id));
    } catch (err) {
      subscriber.disconnect();
      this.#subscriber = undefined;
      throw err;
    }
    if (this.#stopping !== undefined) {
      // stop() gave up waiting for this start: close what it could not see yet.
      subscriber.disconnect();
      return;
    }
    this.#timer = setInterval(() => this.#syncs.background(), this.#heartbeatMs);
    this.#timer.unref();
  }

  /**
   * Stops heartbeating and watching; a node then removes itself (ZREM) and announces the leave, so
   * everyone drops it at once instead of after `deadAfterMs`. Waits at most `heartbeatMs` for each
   * Redis step and never throws (an unreachable Redis is reported to `onError`; the entry then
   * expires after `deadAfterMs`). The ring keeps its last view. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#starting !== undefined) await within(this.#starting.catch(() => {}), this.#heartbeatMs);
    const inFlight = this.#syncs.inFlight;
    if (inFlight !== undefined) await within(inFlight.catch(() => {}), this.#heartbeatMs);
    this.#syncs.clear();
    if (this.#self !== undefined && this.#sync.lastSync !== undefined) {
      const leave = sendLeave(this.#redis, this.#key, this.#selfJson ?? '', this.#channel, this.#self.id).catch((err: unknown) => this.#onError(asError(err)));
      if ((await within(leave.then(() => true), this.#heartbeatMs)) === undefined) {
        this.#onError(new Error(`membership leave of ${this.#self.id} did not answer within ${this.#heartbeatMs} ms`));
      }
    }
    this.#subscriber?.disconnect();
    this.#subscriber = undefined;
  }

  /** The current ring; empty before the first read. */
  ring(): Ring {
    return this.#sync.view.ring;
  }

  /** Calls `listener` with each new ring; returns the unsubscribe function. */
  onChange(listener: (ring: Ring) => void): () => void {
    return this.#sync.view.onChange(listener);
  }

  /**
   * Calls `listener` with reports of ignored entries: at most one per {@link REJECT_REPORT_MS} for
   * entries with a missing or bad signature (or not a member at all), `count` = entries newly
   * rejected since the previous report, the entry given being the first of them; and at most one per
   * {@link CAP_REPORT_MS} with problem `too_many_entries`, `count` = reads that hit
   * {@link MAX_ENTRIES_READ} since the previous one. A listener added late first hears the last
   * report. Returns the unsubscribe function.
   */
  onRejectedEntry(listener: (entry: RejectedMemberEntry) => void): () => void {
    return this.#sync.reports.listen(listener);
  }

  /**
   * Member entries ignored so far (unsigned, badly signed, or not a member): an entry is counted when
   * a read finds it and the previous read did not, so one left in Redis counts once.
   */
  rejectedEntries(): number {
    return this.#sync.reports.total;
  }

  /** Work counters (entries checked, reads that hit the cap, reports sent). */
  stats(): RedisMembershipStats {
    return this.#sync.reports.stats();
  }

  /** Clock ms of the last successful read of the member list (undefined before the first). */
  lastSyncMs(): number | undefined {
    return this.#sync.lastSync;
  }

  /** Reads the member list now, or once more right after the read in flight (a peer waits for this node's handoff); no-op before start and once stopping. */
  refresh(): void {
    if (this.#timer === undefined || this.#stopping !== undefined) return;
    this.#syncs.background();
  }

  /**
   * Runs a heartbeat and read now, or right after the one in flight (whose heartbeat may predate
   * this call), and resolves true once a sync started after the call succeeded: its ring changes
   * applied and the listeners called (a rejoin: the ring without this node; the ring with it comes
   * from the next sync, run at once). Resolves false when that sync failed (a failure of the sync in
   * flight is retried once at once), when `timeoutMs` passed first, before `start()` resolved, and
   * once stopping. Never rejects.
   * @param timeoutMs longest wait, ms (NaN or < 0: 0).
   */
  syncNow(timeoutMs: number): Promise<boolean> {
    if (this.#timer === undefined || this.#stopping !== undefined) return Promise.resolve(false);
    return this.#syncs.waitFresh(timeoutMs);
  }

  /**
   * Clock ms (`clock`) at which this node sent its last heartbeat that Redis answered, read just
   * before the heartbeat's score was taken; undefined on a router and before the first. Others drop
   * this node once that heartbeat is `deadAfterMs` old in Redis time.
   */
  lastBeatSentMs(): number | undefined {
    return this.#sync.lastBeatSent;
  }

  /** Times this node found on reconnecting that the others had dropped it from the ring (see `MembershipSync#rejoin`). */
  rejoins(): number {
    return this.#sync.rejoins;
  }
}
