/**
 * Drops: how a member that others dropped while it was cut from Redis learns it (issue 13,
 * partitions). A process in contact with Redis that drops a member from its ring without a leave
 * announcement (its heartbeats stopped) records it in the hash {@link dropsKey}; every sync of
 * `RedisMembership` reads that hash, and a recorded member is ignored until it acknowledges its drop
 * (deletes its field, which it does on start and once it has seen the drop), so a heartbeat it sent
 * while cut off and delivered late does not bring it back before it knows. A node whose own field
 * is later than its last answered heartbeat was dropped meanwhile: it shows its listeners the ring
 * without itself, then with it (`RedisMembership`, `#rejoin`; what `Handoff` then does:
 * `rejoin.ts`).
 */
import type { Redis } from 'ioredis';
import type { Member } from './types.ts';

/** The drops hash expires this long after its last write, ms. */
const DROPS_TTL_MS = 86_400_000;

/**
 * The hash of drops: member id → the Redis time (ms) when a process in contact with Redis last
 * dropped that member from its ring without a leave announcement (its heartbeats stopped). A node
 * back from a gap reads its own field to learn whether the others dropped it meanwhile (see
 * `RedisMembership`, `#rejoin`). Expires a day after the last write.
 */
export function dropsKey(cluster: string): string {
  return `qr:{${cluster}}:dropped`;
}

/**
 * Records `dropped` in the drops hash at `key` as dropped at `dropsAt` (Redis time, ms), and renews
 * the hash's expiry. In the background: a failure goes to `onError`.
 */
export function recordDrops(redis: Redis, key: string, dropped: readonly Member[], dropsAt: number, onError: (err: Error) => void): void {
  const p = redis.pipeline();
  for (const m of dropped) p.hset(key, m.id, String(dropsAt));
  p.pexpire(key, DROPS_TTL_MS);
  p.exec().catch((err: unknown) => onError(err instanceof Error ? err : new Error(String(err))));
}
