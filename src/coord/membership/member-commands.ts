/**
 * The Redis commands `RedisMembership` sends on the members sorted set ({@link membersKey}): the
 * pipeline of one sync (heartbeat, drop acknowledgement, deletion of stale entries, read of the live
 * list and of the drops hash) and the pipeline of a graceful leave. When each command is sent, and
 * with which scores: `MembershipSync#once` (`membership-sync.ts`) and `RedisMembership#stop`.
 */
import type { Redis } from 'ioredis';
import { MAX_ENTRIES_READ } from './member-entries.ts';
import { membershipNote } from './membership-notes.ts';

/** The sorted set of members: member JSON → last heartbeat, ms of Redis `TIME`. */
export function membersKey(cluster: string): string {
  return `qr:{${cluster}}:members`;
}

/** What one sync sends, in one pipeline ({@link sendSync}). All scores are ms of Redis time. */
export interface SyncCommands {
  /** The members sorted set ({@link membersKey}). */
  readonly membersKey: string;
  /** The drops hash (`dropsKey`; same hash tag as the members set). */
  readonly dropsKey: string;
  /** Redis time of this sync, ms: the heartbeat's score. */
  readonly nowMs: number;
  /** This node's signed entry, heartbeat (ZADD) with score `nowMs`; undefined: no heartbeat (a router, or stopping). */
  readonly entry: string | undefined;
  /** This node's id, whose field in the drops hash is deleted (HDEL: its drop acknowledged); undefined: none. */
  readonly ackId: string | undefined;
  /** When set, entries scored below `staleBelow` and above `futureAbove` are deleted (ZREMRANGEBYSCORE, bounds excluded). */
  readonly prune: { readonly staleBelow: number; readonly futureAbove: number } | undefined;
  /** Lowest score read (ZRANGEBYSCORE, at most `MAX_ENTRIES_READ` entries); undefined: from the oldest. */
  readonly minScore: number | undefined;
  /** Highest score read (the believable future skew). */
  readonly maxScore: number;
}

/** The two reads of a sync: the members set's `[json, score, json, score, ...]` and the drops hash. */
export interface SyncReply {
  /** The live entries, `[json, score, json, score, ...]`. */
  readonly flat: string[];
  /** The drops hash: member id → drop time (Redis time, ms); empty when absent. */
  readonly drops: Record<string, string>;
}

/**
 * Sends one sync's pipeline: ZADD (heartbeat), HDEL (acknowledgement), 2× ZREMRANGEBYSCORE (prune),
 * each only when asked, then ZRANGEBYSCORE ... WITHSCORES LIMIT and HGETALL of the drops hash.
 * @returns the pipeline's results (read them with {@link syncReply}).
 */
export function sendSync(redis: Redis, c: SyncCommands): Promise<[error: Error | null, result: unknown][] | null> {
  const p = redis.pipeline();
  if (c.entry !== undefined) p.zadd(c.membersKey, c.nowMs, c.entry);
  if (c.ackId !== undefined) p.hdel(c.dropsKey, c.ackId);
  if (c.prune !== undefined) {
    p.zremrangebyscore(c.membersKey, '-inf', `(${c.prune.staleBelow}`);
    p.zremrangebyscore(c.membersKey, `(${c.prune.futureAbove}`, '+inf');
  }
  p.zrangebyscore(c.membersKey, c.minScore === undefined ? '-inf' : `${c.minScore}`, `${c.maxScore}`, 'WITHSCORES', 'LIMIT', 0, MAX_ENTRIES_READ);
  p.hgetall(c.dropsKey);
  return p.exec();
}

/**
 * Reads the results of {@link sendSync}: its last two replies.
 * @throws the first command error; Error when the pipeline was discarded or the read returned no list.
 */
export function syncReply(results: [error: Error | null, result: unknown][] | null): SyncReply {
  if (results === null) throw new Error('membership pipeline was discarded');
  for (const [err] of results) if (err) throw err;
  const flat = results[results.length - 2]?.[1];
  if (!Array.isArray(flat)) throw new Error('membership ZRANGEBYSCORE returned no list');
  const dropsRead = results[results.length - 1]?.[1];
  const drops = typeof dropsRead === 'object' && dropsRead !== null ? (dropsRead as Record<string, string>) : {};
  return { flat: flat as string[], drops };
}

/**
 * A node's graceful leave, in one pipeline: removes its `entry` from the members set (ZREM) and
 * publishes the `leave` note of `id` on `channel`, so everyone drops it at once.
 * @throws (as a rejection) the Redis error, or the first command error.
 */
export function sendLeave(redis: Redis, key: string, entry: string, channel: string, id: string): Promise<void> {
  return redis
    .pipeline()
    .zrem(key, entry)
    .publish(channel, membershipNote('leave', id))
    .exec()
    .then((results) => {
      const failed = results?.find(([err]) => err !== null)?.[0];
      if (failed) throw failed;
    });
}
