/**
 * An operator's change of a tenant's budget spend (a top-up, or setting it outright; see
 * `changeSpend` in budget-view.ts), applied to the tenant's state in the limiter.
 */
import type { Budget } from './budget.ts';
import { asBudget, budgetView, changeSpend, type BudgetView, type SpendChange } from './budget-view.ts';
import type { TenantStore } from './tenant-store.ts';

/** The outcome of a spend change: the spend before, pico-dollars, and the budget after. */
export interface SpendChanged {
  readonly beforePico: bigint;
  readonly after: BudgetView;
}

/**
 * Changes the spend of `tenant`'s budget `name` in its current period, creating the tenant's state
 * if it has none; calls `onFreed(tenant)` (before the view is taken) when the spend went down.
 * @returns the spend before (pico-dollars) and the budget after.
 * @throws RangeError when the tenant's policy has no `cost` limit named `name`, or `change.pico` < 0.
 */
export function changeTenantSpend(
  store: TenantStore,
  tenant: string,
  name: string,
  change: SpendChange,
  onFreed: ((tenant: string) => void) | undefined,
): SpendChanged {
  const current = store.current(tenant);
  const i = current?.c.indexByName.get(name) ?? -1;
  const spec = current?.c.limits[i];
  if (current === undefined || spec === undefined || spec.kind !== 'cost') throw new RangeError(`tenant ${tenant} has no cost limit ${name}`);
  const { policy, c, now } = current;
  const st = current.st ?? store.create(tenant, policy, c, now);
  const budget = asBudget(st.objs[i]) as Budget;
  const beforePico = changeSpend(budget, change, now);
  if (budget.spent < beforePico) onFreed?.(tenant);
  return { beforePico, after: budgetView(spec, budget, now) };
}
