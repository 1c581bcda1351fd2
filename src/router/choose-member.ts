/**
 * Which member a request goes to: the tenant's owner on the ring, or, when the owner is suspect or
 * excluded, the next member of the tenant's range that is not; when every member is suspect, the
 * owner anyway unless it is unreachable (a suspect is not known dead, and the owner decides from its
 * own state: routing there splits nothing, while a 503 refuses every tenant of a live cluster whose
 * health checks stalled, e.g. under a CPU burst on every node).
 */
import type { Member, Ring } from '../coord/types.ts';

/**
 * The first member of `ring.range(tenant, all)` that is not suspect and not `excludeId`; when there
 * is none, the owner itself if it is not `excludeId` and `isUnreachable` says it is not unreachable
 * (suspect only because it was slow to answer health checks).
 * The owner is tried first without computing the range (the common case costs one ring lookup).
 * @param isUnreachable whether a suspect member is suspect because a connection to it failed;
 *   without it, an all-suspect ring gives undefined.
 * @returns undefined when the ring is empty, or every member is suspect or excluded and the owner is
 *   excluded or unreachable.
 */
export function chooseMember(ring: Ring, tenant: string, isSuspect: (id: string) => boolean, excludeId?: string, isUnreachable?: (id: string) => boolean): Member | undefined {
  const owner = ring.owner(tenant);
  if (owner === undefined) return undefined;
  if (owner.id !== excludeId && !isSuspect(owner.id)) return owner;
  for (const member of ring.range(tenant, ring.members.length)) {
    if (member.id !== excludeId && !isSuspect(member.id)) return member;
  }
  if (isUnreachable === undefined || owner.id === excludeId || isUnreachable(owner.id)) return undefined;
  return owner;
}

/**
 * The owner a request to `target` stands in for: the tenant's owner on `ring` when `target` is not
 * that owner and the owner is suspect (so {@link chooseMember} skipped it). The router sends it as
 * `x-quotaring-fallback-for` so the node can accept a tenant it does not own instead of answering 421.
 * @returns the owner's id, or undefined when `target` is the owner or the owner is not suspect
 *   (e.g. it was only excluded because it answered 421).
 */
export function fallbackFor(ring: Ring, tenant: string, target: Member, isSuspect: (id: string) => boolean): string | undefined {
  const owner = ring.owner(tenant);
  if (owner === undefined || owner.id === target.id || !isSuspect(owner.id)) return undefined;
  return owner.id;
}

let spreadTurn = 0;

/**
 * A member for a spread (hot) tenant: its `ring.range(tenant, k)` in turn (round-robin over the
 * router's requests), skipping suspect members and `excludeId`; when every one of them is out, the
 * single-owner rule of {@link chooseMember} (the node then answers 421 unless it is in the range).
 */
export function chooseSpreadMember(ring: Ring, tenant: string, k: number, isSuspect: (id: string) => boolean, excludeId?: string, isUnreachable?: (id: string) => boolean): Member | undefined {
  const range = ring.range(tenant, k);
  const n = range.length;
  spreadTurn = (spreadTurn + 1) % 1_000_000_007;
  for (let i = 0; i < n; i++) {
    const member = range[(spreadTurn + i) % n] as Member;
    if (member.id !== excludeId && !isSuspect(member.id)) return member;
  }
  return chooseMember(ring, tenant, isSuspect, excludeId, isUnreachable);
}
