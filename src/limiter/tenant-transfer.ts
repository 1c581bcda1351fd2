/**
 * State transfer of a tenant between limiters: the export of its snapshot (a handoff or a
 * checkpoint), the import of one (bounded to the policy first) or of the conservative state, and
 * the absorption of the usage a stand-in node recorded for it (`UsageDelta`).
 */
import type { CompiledPolicy } from './compiled-policy.ts';
import { boundSnapshot, conservativeSnapshot } from './snapshot-bounds.ts';
import type { TenantSnapshot } from './snapshot.ts';
import { restoredState, snapshotOf } from './tenant-snapshot-io.ts';
import { purgeReservations } from './tenant-state.ts';
import type { TenantStore } from './tenant-store.ts';
import type { Policy } from './types.ts';
import { withCarriedRequests, withUsage, type UsageDelta } from './usage-delta.ts';

/**
 * The complete state of `tenant` now, for a handoff to another node or a checkpoint
 * (see `TenantSnapshot`): every limit's state and every open reservation. Expired
 * reservations, window entries and leases are purged first; a tenant whose policy object
 * changed is first rebuilt onto the new one (as its next acquire would). O(state).
 * @returns undefined when the store holds no state for the tenant, which means fresh
 *   (full buckets, empty windows, no lease, no reservation).
 */
export function exportTenant(store: TenantStore, tenant: string): TenantSnapshot | undefined {
  const st = store.tenants.get(tenant);
  if (st === undefined) return undefined;
  const now = store.clock.now();
  const policy = store.policyFor(tenant);
  if (policy !== undefined && st.policy !== policy) store.rebuild(st, policy, now);
  purgeReservations(st, now);
  return snapshotOf(st, now);
}

/**
 * Replaces the state of `tenant` (if any) with `snap` mapped onto the tenant's current
 * policy by limit name, as a policy reload keeps usage (see `restoreLimits`): limits absent
 * from the snapshot, or whose kind or algorithm changed, start fresh; snapshot limits absent
 * from the policy are ignored; entries, leases and reservations already expired now are
 * dropped. Restored reservations settle, release and renew exactly as if admitted here: a
 * settlement adjusts the window entry with the reservation's id at its original timestamp
 * (and the buckets), a release frees the lease with its id. No-op when the tenant has no
 * policy. `snap` must be well-formed (untrusted JSON goes through `parseTenantSnapshot` first);
 * its values are not trusted: each is first clamped to what the policy allows now (see
 * `boundSnapshot`: bucket levels to [−capacity, capacity], times to at most now + clock skew,
 * lease expiries to now + leaseTtlMs, reservations to the policy's capacities and lifetime).
 * @returns how many values were out of range and clamped (0 for any snapshot a limiter exported).
 * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
 */
export function importTenant(store: TenantStore, tenant: string, snap: TenantSnapshot): number {
  const policy = store.policyFor(tenant);
  if (policy === undefined) return 0;
  const now = store.clock.now();
  const c = store.compile(policy);
  const bounded = boundSnapshot(c, snap, now);
  restore(store, tenant, policy, c, bounded.snapshot, now);
  return bounded.clamped;
}

/**
 * Replaces the state of `tenant` (if any) with the conservative state of its policy (see
 * `conservativeSnapshot`): every requests and tokens limit used up now, so nothing is admitted
 * until it refills (bucket) or slides (window), one window at most; no lease, no reservation.
 * For a tenant whose stored state is corrupt: what it used is unknown, so it is taken as all,
 * never as nothing. No-op when the tenant has no policy.
 * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
 */
export function importConservative(store: TenantStore, tenant: string): void {
  const policy = store.policyFor(tenant);
  if (policy === undefined) return;
  const now = store.clock.now();
  const c = store.compile(policy);
  restore(store, tenant, policy, c, conservativeSnapshot(c, now), now);
}

/**
 * Adds usage another node admitted for `tenant` (a stand-in's, see `usage-delta.ts`) to its state
 * here: window entries at their own times, bucket units taken now, and the requests it still runs
 * (their reservations and slots; their settlements are forwarded here). Open reservations, leases
 * and the rest of the state are kept. No-op when the tenant has no policy.
 * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
 */
export function absorbUsage(store: TenantStore, tenant: string, usage: UsageDelta): void {
  if (store.policyFor(tenant) === undefined) return;
  importTenant(store, tenant, withCarriedRequests(withUsage(exportTenant(store, tenant), usage, store.clock.now()), usage.open));
}

/** Stores `snap` (bounded to `c`) as `tenant`'s state at `now` (ms). */
function restore(store: TenantStore, tenant: string, policy: Policy, c: CompiledPolicy, snap: TenantSnapshot, now: number): void {
  store.tenants.set(tenant, restoredState(policy, c, snap, now));
}
