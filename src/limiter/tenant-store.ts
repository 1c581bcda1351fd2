/**
 * The limiter's tenants: each tenant's state by id, the compiled form of each policy object, the
 * rebuild of a tenant onto a reloaded policy, and the sweep of idle tenants. The `Limiter` decides
 * on it; the views, transfers and spend changes (limit-views.ts, tenant-transfer.ts,
 * spend-change.ts) read and write it.
 */
import type { Clock } from '../clock.ts';
import { compilePolicy, type CompiledPolicy } from './compiled-policy.ts';
import { createTenantLimits, limitsIdle, rebuildTenantLimits } from './tenant-limits.ts';
import { purgeReservations, TenantState } from './tenant-state.ts';
import type { Policy } from './types.ts';

/** A tenant as it is now (see {@link TenantStore.current}). */
export interface TenantNow {
  /** The tenant's policy. */
  policy: Policy;
  /** Its state, rebuilt onto `policy` when that changed; undefined when it has none (fresh). */
  st: TenantState | undefined;
  /** `policy` compiled. */
  c: CompiledPolicy;
  /** The clock's now, ms. */
  now: number;
}

/** Every tenant's state in memory, with the policy lookup and clock it lives by. Not thread-safe. */
export class TenantStore {
  /** Source of time (ms). */
  readonly clock: Clock;
  /** The policy of a tenant; undefined = no limits (see `LimiterOptions.policyFor`). */
  readonly policyFor: (tenant: string) => Policy | undefined;
  /** State by tenant id (insertion order). */
  readonly tenants = new Map<string, TenantState>();
  readonly #compiled = new WeakMap<Policy, CompiledPolicy>();

  constructor(clock: Clock, policyFor: (tenant: string) => Policy | undefined) {
    this.clock = clock;
    this.policyFor = policyFor;
  }

  /**
   * `policy` compiled, once per policy object.
   * @throws RangeError when the policy is invalid (see `compilePolicy`).
   */
  compile(policy: Policy): CompiledPolicy {
    let c = this.#compiled.get(policy);
    if (c === undefined) {
      c = compilePolicy(policy);
      this.#compiled.set(policy, c);
    }
    return c;
  }

  /** A reload gave the tenant a new policy object: rebuilds its limits at `now` (ms), keeping usage by name. */
  rebuild(st: TenantState, policy: Policy, now: number): void {
    const c = this.compile(policy);
    st.relimit(policy, c, rebuildTenantLimits(st.compiled, st, c, now));
  }

  /** A fresh state for `tenant` under `policy` (compiled `c`) at `now` (ms), stored and returned. */
  create(tenant: string, policy: Policy, c: CompiledPolicy, now: number): TenantState {
    const st = new TenantState(policy, c, createTenantLimits(c, now));
    this.tenants.set(tenant, st);
    return st;
  }

  /**
   * `tenant`'s policy, its state (rebuilt when the policy changed; undefined when it has none), the
   * compiled policy and the clock now; undefined when the tenant has no policy. Takes nothing.
   */
  current(tenant: string): TenantNow | undefined {
    const policy = this.policyFor(tenant);
    if (policy === undefined) return undefined;
    const now = this.clock.now();
    const st = this.tenants.get(tenant);
    if (st !== undefined && st.policy !== policy) this.rebuild(st, policy, now);
    return { policy, st, c: st === undefined ? this.compile(policy) : st.compiled, now };
  }

  /**
   * Drops the state of every idle tenant (every bucket full, every window empty, no live lease,
   * no open reservation) and of tenants that no longer have a policy. O(tenants).
   * @returns how many tenants were dropped.
   */
  sweep(): number {
    const now = this.clock.now();
    let dropped = 0;
    for (const [tenant, st] of this.tenants) {
      if (this.policyFor(tenant) === undefined || isIdle(st, now)) {
        this.tenants.delete(tenant);
        dropped++;
      }
    }
    return dropped;
  }
}

/** True when `st` carries no information at `now` (ms): no open reservation, every limit idle. */
function isIdle(st: TenantState, now: number): boolean {
  if (now >= (st.num[0] as number)) purgeReservations(st, now);
  if (st.size > 0) return false;
  return limitsIdle(st.compiled, st, now);
}
