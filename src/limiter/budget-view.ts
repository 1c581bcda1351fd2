/**
 * Budgets for operators: the exact state of a `cost` limit now (spend in pico-dollars, the current
 * period's bounds), and the runtime changes the admin API makes to a budget's spend (a top-up, or
 * setting the spend outright). Both act on the current period only: the next period starts at 0 as
 * always.
 */
import { Budget } from './budget.ts';
import { periodAt } from './budget-period.ts';
import type { CostLimitSpec } from './types.ts';

/** One budget's exact state now. */
export interface BudgetView {
  /** Limit name, e.g. `cost/month`, `cost/1d#ci`. */
  readonly name: string;
  /** Id of the key the budget belongs to; undefined for the tenant's own. */
  readonly key?: string;
  /** Model the budget is scoped to; undefined when it covers every model. */
  readonly model?: string;
  /** Budget per period, micro-dollars. */
  readonly limitMicros: number;
  /** Spend of the current period, pico-dollars (≥ 0; may exceed the budget: settlements may debit past it). */
  readonly spentPico: bigint;
  /** The current period, epoch ms: `[startMs, endMs)`; the budget renews at `endMs`. */
  readonly startMs: number;
  readonly endMs: number;
}

/**
 * A change of a budget's spend in the current period, pico-dollars (≥ 0):
 * `credit` lowers it by `pico` (a top-up; never below 0), `set` makes it `pico`.
 */
export type SpendChange = { readonly op: 'credit'; readonly pico: bigint } | { readonly op: 'set'; readonly pico: bigint };

/**
 * The view of budget `spec` now: from `budget` (brought to the period containing `nowMs` first),
 * or a fresh budget's (nothing spent, the period containing `nowMs`) when there is none.
 * @throws RangeError for a calendar period in an unknown time zone.
 */
export function budgetView(spec: CostLimitSpec, budget: Budget | undefined, nowMs: number): BudgetView {
  const scope = { ...(spec.key === undefined ? {} : { key: spec.key }), ...(spec.model === undefined ? {} : { model: spec.model }) };
  if (budget === undefined) {
    const p = periodAt(spec.period, nowMs);
    return { name: spec.name, ...scope, limitMicros: spec.limit, spentPico: 0n, startMs: p.start, endMs: p.end };
  }
  budget.purge(nowMs);
  return { name: spec.name, ...scope, limitMicros: spec.limit, spentPico: budget.spent, startMs: budget.start, endMs: budget.end };
}

/**
 * Applies `change` to `budget`'s spend in the period containing `nowMs` (moving to it first).
 * @returns the spend before the change, pico-dollars.
 * @throws RangeError when `change.pico` is negative.
 */
export function changeSpend(budget: Budget, change: SpendChange, nowMs: number): bigint {
  if (change.pico < 0n) throw new RangeError(`a spend change must be ≥ 0, got ${change.pico}`);
  budget.purge(nowMs);
  const before = budget.spent;
  budget.spent = change.op === 'set' ? change.pico : before > change.pico ? before - change.pico : 0n;
  return before;
}

/** `obj` when it is a budget (the state object of a `cost` limit). */
export function asBudget(obj: unknown): Budget | undefined {
  return obj instanceof Budget ? obj : undefined;
}
