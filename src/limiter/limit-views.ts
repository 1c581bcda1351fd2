/**
 * Read-only views of a tenant's limits: the state of each limit now (`LimitState`, as acquire
 * returns it and `Limiter.peek`/`peekAll` show it) and every budget's exact state (`BudgetView`,
 * for the admin API). A view takes nothing; it only brings the limits it reads to now.
 */
import { asBudget, budgetView, type BudgetView } from './budget-view.ts';
import type { CompiledPolicy } from './compiled-policy.ts';
import { limitState, syncLimit } from './tenant-limits.ts';
import type { TenantState } from './tenant-state.ts';
import type { TenantStore } from './tenant-store.ts';
import type { LimitState } from './types.ts';

/** The state at `now` (ms) of limits `applied` (indexes in `st.compiled`) of `st`, in that order; sync them first. */
export function limitStates(st: TenantState, applied: readonly number[], now: number): LimitState[] {
  const out: LimitState[] = [];
  for (let k = 0; k < applied.length; k++) out.push(limitState(st.compiled, st, applied[k] as number, now));
  return out;
}

/**
 * The state now of the limits `pick` chooses (indexes) of `tenant`'s compiled policy, taking
 * nothing: a tenant without state reads as fresh; `[]` when the tenant has no policy.
 */
export function peekLimits(store: TenantStore, tenant: string, pick: (c: CompiledPolicy) => readonly number[]): readonly LimitState[] {
  const current = store.current(tenant);
  if (current === undefined) return [];
  const { st, c, now } = current;
  const picked = pick(c);
  if (st === undefined) return picked.map((i) => limitState(c, undefined, i, now));
  for (const i of picked) syncLimit(c, st, i, now);
  return limitStates(st, picked, now);
}

/**
 * Every budget (`cost` limit) of `tenant`'s policy now, exactly (spend in pico-dollars, see
 * `BudgetView`), taking nothing. A budget without state reads as fresh. `[]` when the tenant has
 * no policy.
 */
export function budgetViews(store: TenantStore, tenant: string): BudgetView[] {
  const current = store.current(tenant);
  if (current === undefined) return [];
  const { st, c, now } = current;
  const out: BudgetView[] = [];
  c.limits.forEach((spec, i) => {
    if (spec.kind === 'cost') out.push(budgetView(spec, asBudget(st?.objs[i]), now));
  });
  return out;
}
