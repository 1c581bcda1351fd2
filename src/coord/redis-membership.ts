/**
 * Membership kept in Redis: nodes heartbeat into a sorted set, joins and leaves are announced over
 * pub/sub, and every node and router rebuilds the same ring from the same sorted live list.
 * Redis commands: a handful per heartbeat per process, none per request.
 *
 * Which entries are believed (signature, freshness window, read cap) and the reports of ignored
 * ones: `member-entries.ts`. How a member dropped while cut from Redis learns it: `member-drops.ts`.
 */
import type { Redis } from 'ioredis';
import { systemClock } from '../clock.ts';
import type { Clock } from '../clock.ts';
import { createRing, sortMembers } from './ring.ts';
import type { RingOptions } from './ring.ts';
import type { Member, Membership, RejectedMemberEntry, Ring } from './types.ts';
import type { ClusterSecret } from '../security/cluster-secret.ts';
import { memberJson, signedMemberEntry } from '../security/member-entry.ts';
import { dropSilentMembers, dropsKey } from './member-drops.ts';
import { SyncLoop } from './sync-loop.ts';
import { membershipChannel, membershipNote, parseAnnouncement } from './membership-notes.ts';
import { EntryReports, FUTURE_PRUNE_MS, MAX_ENTRIES_READ, MIN_FUTURE_SKEW_MS, readEntries } from './member-entries.ts';
import type { RedisMembershipStats } from './member-entries.ts';

export { dropsKey } from './member-drops.ts';
export { membershipChannel } from './membership-notes.ts';
export { CAP_REPORT_MS, MAX_ENTRIES_READ, REJECT_REPORT_MS } from './member-entries.ts';
export type { RedisMembershipStats } from './member-entries.ts';

/** Options of {@link RedisMembership}. */
export interface RedisMembershipOptions {
  /**
   * Connection for heartbeats and reads; the membership never closes it (its owner does, after
   * `stop()`). A `duplicate()` of it carries the SUBSCRIBE and is closed by `stop()`.
   */
  readonly redis: Redis;
  /** Cluster name: namespaces the keys. Must not contain `{` or `}` (it is the keys' hash tag). */
  readonly cluster: string;
  /** Signs this node's entry; entries that do not verify under it (or its previous secret) are ignored. */
  readonly secret: ClusterSecret;
  /** This node, when the process is a node; absent on a router (it only watches). */
  readonly self?: Member;
  /** Interval of heartbeats and periodic reads, ms. @default 1000 */
  readonly heartbeatMs?: number;
  /** A member whose last heartbeat (Redis `TIME`) is older than this is out, ms; > heartbeatMs. @default 3000 */
  readonly deadAfterMs?: number;
  /** Measures gaps in contact with Redis and `lastSyncMs()` (member scores use Redis `TIME`). @default systemClock */
  readonly clock?: Clock;
  /** Passed to {@link createRing}. */
  readonly ring?: RingOptions;
  /**
   * Told about Redis faults on the background path (a failed heartbeat or read, a listener that
   * threw); the view is kept and the next heartbeat retries. @default ignore
   */
  readonly onError?: (err: Error) => void;
}

/** @see RedisMembershipOptions.heartbeatMs */
export const DEFAULT_HEARTBEAT_MS = 1_000;
/** @see RedisMembershipOptions.deadAfterMs */
export const DEFAULT_DEAD_AFTER_MS = 3_000;

/** Redis `TIME` is read on the first sync, after a failed one, and every this many syncs; in between, Redis time = wall clock + the measured offset. */
const TIME_EVERY = 10;

/** The sorted set of members: member JSON → last heartbeat, ms of Redis `TIME`. */
export function membersKey(cluster: string): string {
  return `qr:{${cluster}}:members`;
}

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
 * on the first sync, after a failure and every {@link TIME_EVERY} syncs, and in between the wall
 * clock plus the offset last measured: 2 round trips per node heartbeat, not 4 (a router: 1). Several entries with one id (a node restarted on another URL)
 * count once, the newest. The ring is rebuilt and listeners are called only when the sorted list
 * changes.
 *
 * Drops: a process in contact with Redis drops a member without a leave announcement only once it
 * has recorded the drop ({@link dropsKey}) through `lua/drop-members.lua`, which refuses while the
 * member's heartbeat is fresh (`#dropSilent`); every sync reads that hash (one `HGETALL` in the same
 * pipeline), and a recorded member is ignored until it acknowledges its drop (deletes its field,
 * which it does on start and once it has seen the drop: `#rejoin`), so a heartbeat it sent while
 * cut off and delivered late does not bring it back before it knows.
 *
 * Redis unreachable: the last view stays, the next heartbeat retries. A process that lost contact
 * (a failed heartbeat or read, or more than `deadAfterMs - heartbeatMs` since its last successful
 * one, e.g. a stalled Redis) removes no dead member until Redis has answered it for `deadAfterMs`
 * again: after an outage every heartbeat is old, and pruning at once would drop live nodes that
 * have not beaten yet, moving their tenants twice.
 */
export class RedisMembership implements Membership {
  readonly #redis: Redis;
  readonly #self: Member | undefined;
  readonly #selfJson: string | undefined;
  readonly #key: string;
  readonly #dropsKey: string;
  /** Redis time (ms) of this node's last heartbeat that Redis answered, and the clock ms it was sent at. */
  #lastBeat: number | undefined;
  #lastBeatSent: number | undefined;
  /** This node's field in the drops hash is to be deleted (its drop seen, or a fresh start). */
  #dropToAck = true;
  readonly #channel: string;
  readonly #heartbeatMs: number;
  readonly #deadAfterMs: number;
  readonly #clock: Clock;
  readonly #ringOptions: RingOptions;
  readonly #onError: (err: Error) => void;
  readonly #listeners = new Set<(ring: Ring) => void>();
  readonly #secret: ClusterSecret;
  readonly #futureSkewMs: number;
  readonly #reports = new EntryReports();

  #ring: Ring;
  /** The sorted live list as stored JSON lines: the ring is rebuilt only when it changes. */
  #listKey = '';
  #subscriber: Redis | undefined;
  #timer: NodeJS.Timeout | undefined;
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;
  /** Runs the syncs (#syncOnce) one at a time, coalesced, and the `syncNow()` waits. */
  readonly #syncs: SyncLoop;
  /** A heartbeat or read failed since the last success. */
  #failed = false;
  /** Clock ms since which Redis has answered every heartbeat in time; pruning needs `deadAfterMs` of it. */
  #contactSince = -Infinity;
  #lastSync: number | undefined;
  /** Redis `TIME` − `Date.now()`, ms, as last measured; undefined until then and after a failed sync. */
  #redisOffsetMs: number | undefined;
  /** Syncs since Redis `TIME` was last read, and since stale members were last deleted. */
  #sinceTime = 0;
  #sincePrune = 0;
  /** Per member id: its last heartbeat score, and the clock ms when this process saw that score rise. */
  readonly #beats = new Map<string, { score: number; seenAt: number }>();
  /** Ids announced as leaving (gracefully): dropped at once, not kept for `deadAfterMs`. */
  readonly #left = new Set<string>();

  /**
   * @throws RangeError on a cluster name with `{`/`}` or empty, heartbeatMs < 1, or
   *   deadAfterMs ≤ heartbeatMs; from {@link createRing} on a bad `self` weight or empty id.
   */
  constructor(opts: RedisMembershipOptions) {
    const heartbeatMs = opts.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    const deadAfterMs = opts.deadAfterMs ?? DEFAULT_DEAD_AFTER_MS;
    if (opts.cluster === '' || /[{}]/.test(opts.cluster)) throw new RangeError(`cluster name must be non-empty without { or } (got "${opts.cluster}")`);
    if (!(heartbeatMs >= 1)) throw new RangeError(`heartbeatMs must be ≥ 1 (got ${heartbeatMs})`);
    if (!(deadAfterMs > heartbeatMs)) throw new RangeError(`deadAfterMs (${deadAfterMs}) must exceed heartbeatMs (${heartbeatMs})`);
    if (opts.self !== undefined) createRing([opts.self]); // validates id and weight
    this.#redis = opts.redis;
    this.#self = opts.self;
    this.#secret = opts.secret;
    this.#selfJson = opts.self === undefined ? undefined : signedMemberEntry(opts.self, opts.secret);
    this.#key = membersKey(opts.cluster);
    this.#dropsKey = dropsKey(opts.cluster);
    this.#channel = membershipChannel(opts.cluster);
    this.#heartbeatMs = heartbeatMs;
    this.#deadAfterMs = deadAfterMs;
    this.#futureSkewMs = Math.max(MIN_FUTURE_SKEW_MS, 2 * heartbeatMs);
    this.#clock = opts.clock ?? systemClock;
    this.#ringOptions = opts.ring ?? {};
    this.#onError = opts.onError ?? (() => {});
    this.#ring = createRing([], this.#ringOptions);
    this.#syncs = new SyncLoop(() => this.#syncOnce(), () => this.#stopping !== undefined, this.#onError);
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
    const subscriber = this.#redis.duplicate();
    this.#subscriber = subscriber;
    subscriber.on('error', (err: Error) => this.#onError(err));
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.#channel || this.#stopping !== undefined) return;
      const note = parseAnnouncement(message);
      if (note?.type === 'leave') this.#left.add(note.id);
      else if (note?.type === 'join') this.#left.delete(note.id);
      this.#syncs.background();
    });
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
    if (this.#self !== undefined && this.#lastSync !== undefined) {
      const leave = this.#redis
        .pipeline()
        .zrem(this.#key, this.#selfJson ?? '')
        .publish(this.#channel, membershipNote('leave', this.#self.id))
        .exec()
        .then((results) => {
          const failed = results?.find(([err]) => err !== null)?.[0];
          if (failed) throw failed;
        })
        .catch((err: unknown) => this.#onError(asError(err)));
      if ((await within(leave.then(() => true), this.#heartbeatMs)) === undefined) {
        this.#onError(new Error(`membership leave of ${this.#self.id} did not answer within ${this.#heartbeatMs} ms`));
      }
    }
    this.#subscriber?.disconnect();
    this.#subscriber = undefined;
  }

  /** The current ring; empty before the first read. */
  ring(): Ring {
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

  /**
   * Calls `listener` with reports of ignored entries: at most one per {@link REJECT_REPORT_MS} for
   * entries with a missing or bad signature (or not a member at all), `count` = entries newly
   * rejected since the previous report, the entry given being the first of them; and at most one per
   * {@link CAP_REPORT_MS} with problem `too_many_entries`, `count` = reads that hit
   * {@link MAX_ENTRIES_READ} since the previous one. A listener added late first hears the last
   * report. Returns the unsubscribe function.
   */
  onRejectedEntry(listener: (entry: RejectedMemberEntry) => void): () => void {
    return this.#reports.listen(listener);
  }

  /**
   * Member entries ignored so far (unsigned, badly signed, or not a member): an entry is counted when
   * a read finds it and the previous read did not, so one left in Redis counts once.
   */
  rejectedEntries(): number {
    return this.#reports.total;
  }

  /** Work counters (entries checked, reads that hit the cap, reports sent). */
  stats(): RedisMembershipStats {
    return this.#reports.stats();
  }

  /** Clock ms of the last successful read of the member list (undefined before the first). */
  lastSyncMs(): number | undefined {
    return this.#lastSync;
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
    return this.#lastBeatSent;
  }

  /** One heartbeat + read (run by #syncs, one at a time). @throws the Redis error. */
  async #syncOnce(): Promise<void> {
    try {
      if (this.#redisOffsetMs === undefined || this.#sinceTime >= TIME_EVERY) {
        const [sec, usec] = await this.#redis.time();
        this.#redisOffsetMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000) - Date.now();
        this.#sinceTime = 0;
      }
      this.#sinceTime++;
      const sentAt = this.#clock.now();
      const nowMs = Date.now() + this.#redisOffsetMs;
      const p = this.#redis.pipeline();
      const beats = this.#selfJson !== undefined && this.#stopping === undefined;
      // Checked after TIME: stop() may have sent the ZREM meanwhile, and a ZADD now would re-add us.
      if (beats) p.zadd(this.#key, nowMs, this.#selfJson as string);
      // Our drop seen (or a fresh start): acknowledged, so the others take us back (see #rejoin).
      const acking = beats && this.#dropToAck;
      if (acking) p.hdel(this.#dropsKey, (this.#self as Member).id);
      // Stale members are deleted once per deadAfterMs, and only while in contact (the threshold is
      // this send's time: a sync stalled by Redis deletes nothing newer than that).
      const inContact = this.#lastSync !== undefined && !this.#failed && sentAt - this.#lastSync <= this.#deadAfterMs - this.#heartbeatMs;
      if (inContact && sentAt - this.#contactSince >= this.#deadAfterMs && ++this.#sincePrune * this.#heartbeatMs >= this.#deadAfterMs) {
        this.#sincePrune = 0;
        p.zremrangebyscore(this.#key, '-inf', `(${nowMs - this.#deadAfterMs}`);
        p.zremrangebyscore(this.#key, `(${nowMs + Math.max(FUTURE_PRUNE_MS, this.#futureSkewMs)}`, '+inf');
      }
      // Only believable scores, and a bounded number of entries. The read's lower bound is decided
      // before the answer (contact as of the last sync); #apply applies the exact one.
      const maxScore = nowMs + this.#futureSkewMs;
      const readMin = this.#lastSync !== undefined && !this.#failed && sentAt - this.#contactSince >= this.#deadAfterMs ? `${nowMs - this.#deadAfterMs}` : '-inf';
      p.zrangebyscore(this.#key, readMin, `${maxScore}`, 'WITHSCORES', 'LIMIT', 0, MAX_ENTRIES_READ);
      p.hgetall(this.#dropsKey);
      const results = await p.exec();
      if (results === null) throw new Error('membership pipeline was discarded');
      for (const [err] of results) if (err) throw err;
      const flat = results[results.length - 2]?.[1];
      if (!Array.isArray(flat)) throw new Error('membership ZRANGEBYSCORE returned no list');
      const dropsRead = results[results.length - 1]?.[1];
      const drops = typeof dropsRead === 'object' && dropsRead !== null ? (dropsRead as Record<string, string>) : {};
      if (acking) this.#dropToAck = false;
      // Contact is judged when the answer came: a sync that Redis held (a stall) counts as a gap.
      const t = this.#clock.now();
      if (this.#lastSync !== undefined && (this.#failed || t - this.#lastSync > this.#deadAfterMs - this.#heartbeatMs)) this.#contactSince = t;
      // Members older than deadAfterMs are ignored once in contact for deadAfterMs.
      const prune = t - this.#contactSince >= this.#deadAfterMs;
      if (flat.length >= 2 * MAX_ENTRIES_READ) {
        this.#reports.capHit();
      }
      // A process in contact with Redis dropped us after our last answered heartbeat. (Our own
      // entry is no evidence: heartbeats sent during a cut may reach Redis when the link heals,
      // and after a Redis stall or restart every entry is old or gone though no one dropped anyone.)
      const self = this.#self;
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
      const silent = this.#apply(flat as string[], prune ? nowMs - this.#deadAfterMs : -Infinity, maxScore, prune ? nowMs : undefined, drops, rejoined);
      if (rejoined) this.#syncs.again();
      // Acknowledged after a rejoin: the others are told to read the member list now (as on a start).
      if (acking && this.#announceRejoin && self !== undefined) {
        this.#announceRejoin = false;
        this.#redis.publish(this.#channel, membershipNote('join', self.id)).catch((err: unknown) => this.#onError(asError(err)));
      }
      this.#lastSync = this.#clock.now();
      this.#failed = false;
      this.#reports.report(this.#clock.now(), this.#onError);
      if (silent.length > 0) await this.#dropSilent(silent, nowMs, maxScore);
    } catch (err) {
      this.#failed = true;
      this.#redisOffsetMs = undefined;
      throw err;
    }
  }

  /**
   * Takes `[json, score, json, score, ...]`, keeps the newest entry per id scored in `[minScore, maxScore]`, rebuilds
   * on change. A member of the current view missing from the read without a leave announcement (a
   * Redis that restarted empty, or was restored from an old snapshot) stays until `deadAfterMs` after
   * this process last saw its heartbeat rise, or after its contact with Redis began again if later: a
   * Redis restart must not move tenants off live nodes, nor empty a router's ring. A member silent
   * that long and not recorded in `drops` stays too: it leaves once `#dropSilent` has recorded its
   * drop, which a process asks only once in contact for `deadAfterMs` (`dropsAt`, Redis time).
   * @returns those members, to record (empty without `dropsAt`).
   */
  #apply(flat: readonly string[], minScore: number, maxScore: number, dropsAt?: number, drops: Readonly<Record<string, string>> = {}, selfDropped = false): Member[] {
    const now = this.#clock.now();
    // A dropped member's entry is ignored until the member acknowledges its drop; this node's own
    // entry is read regardless, except right after it found its drop (`selfDropped`).
    const newest = readEntries(flat, { minScore, maxScore }, drops, selfDropped ? undefined : this.#self?.id, this.#secret, this.#reports);
    for (const [id, { score }] of newest) {
      const beat = this.#beats.get(id);
      if (beat === undefined || score > beat.score) this.#beats.set(id, { score, seenAt: now });
      this.#left.delete(id);
    }
    const silent: Member[] = [];
    for (const member of this.#ring.members) {
      if (newest.has(member.id) || this.#left.has(member.id)) continue;
      const beat = this.#beats.get(member.id);
      // Silence counts only while this process is in contact with Redis: after a gap (Redis down,
      // restarted empty, or this process stalled) a member gets deadAfterMs from the contact's start
      // to heartbeat again, so a Redis restart longer than deadAfterMs does not empty the ring.
      if (beat !== undefined && now - Math.max(beat.seenAt, this.#contactSince) < this.#deadAfterMs) newest.set(member.id, { member, score: beat.score });
      else if (member.id !== this.#self?.id && !Object.hasOwn(drops, member.id)) {
        // Silent, not recorded as dropped: kept until its drop is (#dropSilent).
        newest.set(member.id, { member, score: beat?.score ?? 0 });
        if (dropsAt !== undefined) silent.push(member);
      }
    }
    for (const id of this.#beats.keys()) if (!newest.has(id)) this.#beats.delete(id);
    this.#setMembers([...newest.values()].map((e) => e.member));
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
    const ids = silent.map((m) => m.id);
    const request = { membersKey: this.#key, dropsKey: this.#dropsKey, minScore: nowMs - this.#deadAfterMs, maxScore, dropsAt: nowMs, maxEntries: MAX_ENTRIES_READ, ids };
    const recorded = await dropSilentMembers(this.#redis, request).catch((err: unknown) => {
      this.#onError(asError(err));
      return [];
    });
    const gone = new Set(recorded);
    if (gone.size > 0) this.#setMembers(this.#ring.members.filter((m) => !gone.has(m.id)));
  }

  /**
   * This node is back in contact with Redis after a gap in which a process in contact dropped it
   * from its ring ({@link dropsKey}, later than this node's last answered heartbeat): the others gave
   * its tenants to other nodes meanwhile, though it never saw that ring. Its listeners see that ring now (this
   * node absent, `Handoff` drops the tenants it decided for: their interim owners hold newer
   * states), then the ring with it again (the read that follows at once, which acknowledges the
   * drop and publishes a `join` note so the others read it now), so its tenants come back by
   * handoff like any moved tenant's. Counted in {@link rejoins}.
   * @returns whether this node was in its ring (and now is not).
   */
  #rejoin(): boolean {
    const self = this.#self;
    if (self === undefined || !this.#ring.members.some((m) => m.id === self.id)) return false;
    this.#rejoins++;
    this.#announceRejoin = true;
    this.#setMembers(this.#ring.members.filter((m) => m.id !== self.id));
    return true;
  }

  /** Set by a rejoin: the sync that acknowledges the drop publishes a `join` note. */
  #announceRejoin = false;

  #rejoins = 0;

  /** Times this node found on reconnecting that the others had dropped it from the ring (see `#rejoin`). */
  rejoins(): number {
    return this.#rejoins;
  }

  /** Rebuilds the ring from `list` and tells the listeners, unless the sorted list is unchanged. */
  #setMembers(list: readonly Member[]): void {
    const members = sortMembers([...list]);
    const listKey = members.map(memberJson).join('\n');
    if (listKey === this.#listKey) return;
    this.#listKey = listKey;
    this.#ring = createRing(members, this.#ringOptions);
    for (const listener of [...this.#listeners]) {
      try {
        listener(this.#ring);
      } catch (err) {
        this.#onError(asError(err));
      }
    }
  }
}
