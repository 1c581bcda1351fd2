/**
 * The join/leave notes of `RedisMembership` on Redis pub/sub: a node publishes `join` once it has
 * heartbeat (on start, and after a rejoin) and `leave` on a graceful stop, so that everyone reads
 * the member list at once instead of at its next heartbeat.
 */

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
