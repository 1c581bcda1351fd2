/**
 * The join/leave notes of `RedisMembership` on Redis pub/sub: a node publishes `join` once it has
 * heartbeat (on start, and after a rejoin) and `leave` on a graceful stop, so that everyone reads
 * the member list at once instead of at its next heartbeat. The SUBSCRIBE runs on its own connection
 * ({@link notesSubscriber}).
 */
import type { Redis } from 'ioredis';

/** A join or leave announcement of member `id`. */
export interface MembershipNote {
  readonly type: 'join' | 'leave';
  readonly id: string;
}

/** The pub/sub channel of join/leave announcements (`{"type":"join"|"leave","id":...}`). */
export function membershipChannel(cluster: string): string {
  return `qr:{${cluster}}:membership`;
}

/** The announcement of `id`'s join or leave, as published. */
export function membershipNote(type: 'join' | 'leave', id: string): string {
  return JSON.stringify({ type, id });
}

/** Parses a join/leave announcement; undefined for anything else. */
export function parseAnnouncement(message: string): { type: 'join' | 'leave'; id: string } | undefined {
  try {
    const v = JSON.parse(message) as { type?: unknown; id?: unknown };
    return (v.type === 'join' || v.type === 'leave') && typeof v.id === 'string' ? { type: v.type, id: v.id } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A `duplicate()` of `redis` to carry the SUBSCRIBE of `channel` (not subscribed yet; the caller
 * subscribes and disconnects it): its errors go to `onError`, and every message on `channel` to
 * `onNote`, parsed ({@link parseAnnouncement}: undefined when it is not a note).
 */
export function notesSubscriber(redis: Redis, channel: string, onError: (err: Error) => void, onNote: (note: MembershipNote | undefined) => void): Redis {
  const subscriber = redis.duplicate();
  subscriber.on('error', (err: Error) => onError(err));
  subscriber.on('message', (from: string, message: string) => {
    if (from === channel) onNote(parseAnnouncement(message));
  });
  return subscriber;
}
