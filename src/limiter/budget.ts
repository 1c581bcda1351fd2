/**
 * A budget: the state of one `cost` limit. Spend (integer pico-dollars, see `src/pricing/usd.ts`)
 * adds up from the start of the current period and is forgotten when the period ends: a budget
 * renews at a time, it does not trickle back like a token bucket. Admission takes a request's
 * reserved cost when `spent + cost ≤ limit`; settlement applies actual − reserved (a refund never
 * takes the spend below zero; a debit may take it above the limit).
 */
import { periodAt, type BudgetPeriod } from './budget-period.ts';

/** Pico-dollars in a micro-dollar. */
const PICO = 1_000_000n;

/**
 * One `cost` limit's state: `limit` pico-dollars per period, the spend of the current period and its
 * reservations. Methods take pico-dollar bigints and clock ms; see the module doc for the rules.
 */
export class Budget {
  /** Discriminant for the limiter's dispatch. */
  readonly algorithm = 'budget' as const;
  /** Budget per period, pico-dollars. */
  limit: bigint;
  period: BudgetPeriod;
  /** Spend in the current period, pico-dollars (≥ 0). */
  spent = 0n;
  /** Current period, epoch ms: `[start, end)`. */
  start: number;
  end: number;

  /**
   * @param limitMicros budget per period, micro-dollars (a positive safe integer).
   * @param nowMs clock ms: the current period is the one containing it.
   * @throws RangeError for a calendar period in an unknown time zone.
   */
  constructor(limitMicros: number, period: BudgetPeriod, nowMs: number) {
    this.limit = BigInt(limitMicros) * PICO;
    this.period = period;
    const p = periodAt(period, nowMs);
    this.start = p.start;
    this.end = p.end;
  }

  /** Moves to the period containing `nowMs` when the current one ended (spend forgotten). Time never goes back. */
  purge(nowMs: number): void {
    if (nowMs < this.end) return;
    const p = periodAt(this.period, nowMs);
    this.start = p.start;
    this.end = p.end;
    this.spent = 0n;
  }

  /**
   * Ms until `cost` fits (0 when it fits now): the rest of the period, as a budget renews only at
   * its end. Call `purge(now)` first. `cost` must be ≤ `limit` (else it never fits).
   * @param cost pico-dollars. @param keep pico-dollars that must be left after it (a priority floor).
   */
  waitMs(nowMs: number, cost: bigint, keep = 0n): number {
    return this.spent + cost + keep <= this.limit ? 0 : this.end - nowMs;
  }

  /** Adds `cost` pico-dollars to the spend (after `waitMs` returned 0). */
  add(cost: bigint): void {
    this.spent += cost;
  }

  /** Applies a settlement of `delta` pico-dollars (actual − reserved); the spend never goes below 0. */
  adjust(delta: bigint): void {
    const next = this.spent + delta;
    this.spent = next > 0n ? next : 0n;
  }

  /** Micro-dollars left in the period, rounded down, never below 0. Call `purge(now)` first. */
  remaining(): number {
    const left = this.limit - this.spent;
    return left > 0n ? Number(left / PICO) : 0;
  }

  /** Ms until the period ends (when the budget renews). */
  resetMs(nowMs: number): number {
    return Math.max(0, this.end - nowMs);
  }

  /** True when nothing is spent in the period containing `nowMs`. */
  isIdle(nowMs: number): boolean {
    this.purge(nowMs);
    return this.spent === 0n;
  }

  /** Changes the budget and its periods; the spend is kept (a reload keeps usage by name). */
  reconfigure(limitMicros: number, period: BudgetPeriod, nowMs: number): void {
    this.limit = BigInt(limitMicros) * PICO;
    this.period = period;
    const p = periodAt(period, nowMs);
    this.start = p.start;
    this.end = p.end;
  }
}
