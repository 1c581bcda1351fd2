/**
 * Drops: how a member that others dropped while it was cut from Redis learns it (a
 * partition), and at once when it was stalled (fencing). A process in contact with
 * Redis that drops a member from its ring without a leave announcement (its heartbeats stopped)
 * records it in the hash {@link dropsKey}, through `lua/drop-members.lua`, which records it only
 * while the member's heartbeat is still stale (see {@link dropSilentMembers}); every sync of
 * `RedisMembership` reads that hash, and a recorded member is ignored until it acknowledges its drop
 * (deletes its field, which it does on start and once it has seen the drop), so a heartbeat it sent
 * while cut off and delivered late does not bring it back before it knows. A node whose own field
 * is later than its last answered heartbeat was dropped meanwhile: it shows its listeners the ring
 * without itself, then with it (`MembershipSync#rejoin`; what `Handoff` then does:
 * `rejoin.ts`).
 */
import type { Redis } from 'ioredis';
import { LUA_SCRIPTS, defineScript } from '../../redis/lua-scripts.ts';

/** The drops hash expires this long after its last write, ms. */
export const DROPS_TTL_MS = 86_400_000;

/** The script file (in `lua/`; see the registry, `src/redis/lua-scripts.ts`). */
export const DROP_MEMBERS_SCRIPT = LUA_SCRIPTS.dropMembers.file;

/**
 * The hash of drops: member id → the Redis time (ms) when a process in contact with Redis last
 * dropped that member from its ring without a leave announcement (its heartbeats stopped). A node
 * back from a gap reads its own field to learn whether the others dropped it meanwhile (see
 * `MembershipSync#rejoin`). Expires a day after the last write.
 */
export function dropsKey(cluster: string): string {
  return `qr:{${cluster}}:dropped`;
}

/** One call of {@link dropSilentMembers}. */
export interface DropRequest {
  /** The members sorted set (`membersKey`) and the drops hash ({@link dropsKey}); one hash tag. */
  readonly membersKey: string;
  readonly dropsKey: string;
  /** An entry scored at least this is a live heartbeat: the caller's Redis time − `deadAfterMs`, ms. */
  readonly minScore: number;
  /** Entries scored above this are not believed (the readers' window), ms of Redis time. */
  readonly maxScore: number;
  /** The drop time written (the caller's Redis time), ms. */
  readonly dropsAt: number;
  /** Most entries the script scans (the readers' cap, `MAX_ENTRIES_READ`). */
  readonly maxEntries: number;
  /** The member ids to drop. */
  readonly ids: readonly string[];
}

/**
 * Records `ids` in the drops hash as dropped at `dropsAt`, each only if the members set holds no
 * entry of it scored in `[minScore, maxScore]` (among the first `maxEntries` there), atomically
 * (`lua/drop-members.lua`, defined on `redis` once per connection); renews the hash's expiry.
 *
 * Why atomically (fencing): a process drops a silent member from its ring only once this
 * has answered it. A member's own sync pipeline sends its heartbeat (ZADD), then reads the drops
 * (HGETALL), and Redis runs the script between two commands, never inside one: either the script
 * ran before the heartbeat, and the HGETALL of that same sync sees the drop (the member rejoins,
 * `MembershipSync#rejoin`), or after it, and the script finds the fresh entry and refuses (the
 * member stays in the caller's ring). A member woken from a stall longer than `deadAfterMs` thus
 * learns its drop from its first sync, never a heartbeat later while the others have given its
 * tenants away. Recording after the ring change (as before) let the member's heartbeat and read
 * slip in between the caller's read and its HSET.
 * Bound: this holds for a heartbeat that reaches Redis within `deadAfterMs` − (the script's delay
 * after the caller's read) of its score; one held longer (the member stalled between taking its
 * score and sending it, a long cut) may land stale and be read before the script: that sync then
 * answers more than `deadAfterMs` after it was sent, which `lastBeatSentMs()` of the member shows.
 * The script does not verify signatures (Redis has no secret): an entry anyone wrote with a live
 * score and the member's id blocks its drop, one of the faults of a writable Redis (docs/security.md).
 *
 * @returns the ids now recorded (by this call or before it), in the order given; an id missing
 *   has a live heartbeat. Empty `ids`: resolves `[]` without a call.
 * @throws (as a rejection) the Redis error; Error for a reply that is not a subset of `ids`, or
 *   when `lua/drop-members.lua` cannot be read (names its path).
 */
export async function dropSilentMembers(redis: Redis, r: DropRequest): Promise<string[]> {
  if (r.ids.length === 0) return [];
  defineScript(redis, 'dropMembers');
  const args = [r.minScore, r.maxScore, r.dropsAt, DROPS_TTL_MS, r.maxEntries].map((n) => String(Math.floor(n)));
  const reply = await redis.qrDropMembers(r.membersKey, r.dropsKey, ...args, ...r.ids);
  const asked = new Set(r.ids);
  if (Array.isArray(reply) && reply.every((id): id is string => typeof id === 'string' && asked.has(id))) return reply;
  throw new Error(`${DROP_MEMBERS_SCRIPT} answered ${JSON.stringify(reply)}, not a subset of the ids asked`);
}
