/**
 * A tenant's limiter state to and from its snapshot (`TenantSnapshot`, see `snapshot.ts`): what a
 * handoff or checkpoint carries, and what an import rebuilds.
 */
import type { CompiledPolicy } from './compiled-policy.ts';
import { Reservation } from './reservation.ts';
import { restoreLimits, snapshotLimits } from './snapshot-limits.ts';
import type { ReservationSnapshot, TenantSnapshot } from './snapshot.ts';
import { TenantState } from './tenant-state.ts';
import type { LimitSpec, Policy } from './types.ts';

/**
 * The snapshot of `st` at `now` (clock ms): every limit's state and every open reservation, each
 * reservation naming only the limits on which its settlement and release still act. Purge expired
 * reservations and rebuild onto a new policy first (the limiter does).
 */
export function snapshotOf(st: TenantState, now: number): TenantSnapshot {
  const c = st.compiled;
  const reservations: ReservationSnapshot[] = [];
  st.forEach((res, id) => {
    // Only the limits on which settle/release still act: since a reload, the limit of the same
    // name and kind that kept this reservation's window/semaphore object, or is still a bucket.
    const limits: string[] = [];
    for (const i of res.applied) {
      const spec = res.compiled.limits[i] as LimitSpec;
      const j = res.compiled === c ? i : c.indexByName.get(spec.name);
      if (j === undefined || (c.limits[j] as LimitSpec).kind !== spec.kind) continue;
      if ((st.objs[j] ?? null) === (res.objs[i] ?? null)) limits.push(spec.name);
    }
    reservations.push({
      id,
      tokens: res.tokens,
      requests: res.requests,
      expiresAt: res.expiresAt,
      settled: res.settled,
      released: res.released,
      limits,
      // Only a reservation of money needs its admission time (which budget period it counts in).
      ...(res.cost === 0n ? {} : { cost: res.cost.toString(), admittedAt: res.admittedAt }),
    });
  });
  return { v: 1, at: now, limits: snapshotLimits(c, st, now), reservations };
}

/**
 * A tenant's state rebuilt from `snap` (already bounded to `c`'s limits, see `boundSnapshot`) at
 * `now`: its limits mapped by name (`restoreLimits`), its reservations still open re-linked to
 * their window entries and leases, so that they settle, release and renew as if admitted here.
 */
export function restoredState(policy: Policy, c: CompiledPolicy, snap: TenantSnapshot, now: number): TenantState {
  const restored = restoreLimits(c, snap.limits, now);
  const st = new TenantState(policy, c, restored);
  let next = Infinity;
  for (const r of snap.reservations) {
    if (r.expiresAt <= now || (r.settled && r.released)) continue;
    const applied: number[] = [];
    let seqs: number[] | null = null;
    for (const name of r.limits) {
      const i = c.indexByName.get(name);
      if (i === undefined || applied.includes(i)) continue;
      const entries = restored.entryOf[i];
      if (entries !== null && entries !== undefined) {
        (seqs ??= new Array<number>(applied.length).fill(-1)).push(entries.get(r.id) ?? -1);
      } else if (seqs !== null) {
        seqs.push(-1);
      }
      applied.push(i);
    }
    const res = new Reservation(r.tokens, r.requests, c, st.objs, applied, seqs, now, BigInt(r.cost ?? '0'), r.admittedAt ?? Math.min(now, r.expiresAt));
    res.expiresAt = r.expiresAt;
    res.settled = r.settled;
    res.released = r.released;
    st.set(r.id, res);
    if (r.expiresAt < next) next = r.expiresAt;
  }
  st.num[0] = next;
  return st;
}
