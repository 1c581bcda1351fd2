/**
 * A handoff that arrives after the claim stopped waiting for it. A node claiming a tenant whose
 * previous owner is still in the ring waits up to `waitMs` for that owner's handoff, then decides
 * from what it has (the replica held here, the last checkpoint in Redis, or fresh limits). The
 * previous owner may still have been deciding then: it sees the new ring only at its next read of
 * the member list. Its handoff, when it comes, holds everything it admitted, and is merged into the
 * state this node has decided from since ({@link mergeLateHandoff}) instead of being ignored:
 *
 * - sliding windows: the handoff's entries this node lacks (by request id) are added, each at its
 *   own admission time with its settled cost: exact;
 * - token buckets: the units the previous owner took since the state this node loaded (that
 *   state's level refilled to the handoff's refill time, less the handoff's level) are taken here:
 *   exact unless the bucket was full in between (then short by the refill it could not hold);
 * - budgets: the spend added since the loaded state, in the same period: exact;
 * - the previous owner's open requests (reservations and concurrency leases) are added, so their
 *   settlements, forwarded here, apply; requests open in the loaded state that the previous owner
 *   ended meanwhile take the cost it settled them at, and their slots are freed.
 * Net refunds to a bucket or budget by the previous owner are not given back (the merge never
 * leaves more room than one limiter that saw both would).
 *
 * Bound (admitted beyond a limit): what this node admitted between the end of its wait and the
 * merge without counting the previous owner's admissions after its last checkpoint, i.e. the
 * previous owner's admissions from its last checkpoint until it saw the ring (routers may send it
 * the tenant's requests until they see the ring too). Nothing after the merge.
 */
import type { TenantSnapshot } from '../../limiter/snapshot.ts';
import { budgetUsageSince, bucketUsageSince, windowUsageSince, withOpenRequests, withUsage } from '../../limiter/usage-delta.ts';

/** Claims that stopped waiting for a previous owner's handoff, by tenant. */
export class LateHandoffs {
  readonly #expected = new Map<string, { readonly from: string; readonly base: TenantSnapshot | undefined }>();

  /** `tenant` was claimed without `from`'s handoff, from `base` (its state as loaded here; undefined: fresh). */
  expect(tenant: string, from: string, base: TenantSnapshot | undefined): void {
    this.#expected.set(tenant, { from, base });
  }

  /** The state loaded when `tenant` was claimed without `from`'s handoff (forgotten here), or null when no such claim is open. */
  take(tenant: string, from: string): { readonly base: TenantSnapshot | undefined } | null {
    const e = this.#expected.get(tenant);
    if (e === undefined || e.from !== from) return null;
    this.#expected.delete(tenant);
    return e;
  }

  /** Forgets `tenant` (unclaimed here: a later handoff of it is loaded as usual). */
  forget(tenant: string): void {
    this.#expected.delete(tenant);
  }

  /** Claims still expecting a late handoff. */
  get size(): number {
    return this.#expected.size;
  }
}

/**
 * `current` (this node's state of the tenant now) with what `handed` (the previous owner's late
 * handoff) admitted since `base` (the state this node loaded when it stopped waiting): see the
 * module comment. Import the result with `Limiter.importTenant` (which clamps it to the policy).
 * @param nowMs clock ms of the merge.
 */
export function mergeLateHandoff(current: TenantSnapshot | undefined, base: TenantSnapshot | undefined, handed: TenantSnapshot, nowMs: number): TenantSnapshot {
  const budgets = budgetUsageSince(base, handed);
  const usage = { windows: windowUsageSince(base, handed), buckets: bucketUsageSince(base, handed), ...(budgets.length === 0 ? {} : { budgets }) };
  const known = new Set([...(base?.reservations ?? []), ...(current?.reservations ?? [])].map((r) => r.id));
  return withClosed(withOpenRequests(withUsage(current, usage, nowMs), handed, known), base, handed);
}

/**
 * `snap` with the requests the previous owner ended after `base` was taken (open in `base`, not in
 * `handed`: settled and released there, their settlements never forwarded here): each window entry
 * takes the cost `handed` settled it at, and its reservation and lease go.
 */
function withClosed(snap: TenantSnapshot, base: TenantSnapshot | undefined, handed: TenantSnapshot): TenantSnapshot {
  const stillOpen = new Set(handed.reservations.map((r) => r.id));
  const closed = new Set((base?.reservations ?? []).map((r) => r.id).filter((id) => !stillOpen.has(id)));
  if (closed.size === 0) return snap;
  const limits = snap.limits.map((l) => {
    if (l.algorithm === 'semaphore') return { ...l, leases: l.leases.filter(([id]) => !closed.has(id)) };
    if (l.algorithm !== 'sliding_window') return l;
    const there = handed.limits.find((h) => h.name === l.name);
    if (there?.algorithm !== 'sliding_window') return l;
    const settled = new Map(there.entries.filter(([, , id]) => closed.has(id)).map(([, cost, id]) => [id, cost]));
    return { ...l, entries: l.entries.map((e): [number, number, string] => [e[0], settled.get(e[2]) ?? e[1], e[2]]) };
  });
  return { ...snap, limits, reservations: snap.reservations.filter((r) => !closed.has(r.id)) };
}
