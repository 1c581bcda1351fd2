/**
 * The limiter's state of one tenant (see {@link TenantState}) and the purge of its expired
 * reservations.
 */
import type { CompiledPolicy } from './compiled-policy.ts';
import { IdTable } from './id-table.ts';
import type { Reservation } from './reservation.ts';
import type { LimitObject, TenantLimits } from './tenant-limits.ts';
import type { Policy } from './types.ts';

/**
 * Everything the limiter keeps for one tenant, in as few objects as possible (a decision on a
 * cold tenant costs a cache miss per object): its open reservations by request id (inherited
 * table: the first one inline), its policy, its limits' numbers in one array (slot 0: a lower
 * bound of the earliest reservation expiry, ms), and its limit objects (the first also in a field).
 */
export class TenantState extends IdTable<Reservation> implements TenantLimits {
  policy: Policy;
  compiled: CompiledPolicy;
  num: number[];
  objs: (LimitObject | null)[];
  first: LimitObject | null;

  constructor(policy: Policy, compiled: CompiledPolicy, limits: TenantLimits) {
    super();
    this.policy = policy;
    this.compiled = compiled;
    this.num = limits.num;
    this.objs = limits.objs;
    this.first = limits.first;
    this.num[0] = Infinity;
  }

  /** Moves the tenant to `policy` (compiled `compiled`) with `limits` built for it (a reload); slot 0 is the caller's. */
  relimit(policy: Policy, compiled: CompiledPolicy, limits: TenantLimits): void {
    this.num = limits.num;
    this.objs = limits.objs;
    this.first = limits.first;
    this.policy = policy;
    this.compiled = compiled;
  }
}

/** Drops the reservations of `st` expired at `now` (clock ms) and sets its earliest expiry (`num[0]`). */
export function purgeReservations(st: TenantState, now: number): void {
  let next = Infinity;
  st.removeWhere((res) => {
    if (res.expiresAt <= now) return true;
    if (res.expiresAt < next) next = res.expiresAt;
    return false;
  });
  st.num[0] = next;
}
