/** The options a `Limiter` is built with: its clock, its tenants' policies and its wake-up callback. */
import type { Clock } from '../clock.ts';
import type { Policy } from './types.ts';

/** Options of a `Limiter`. */
export interface LimiterOptions {
  /** Source of time (ms). */
  clock: Clock;
  /**
   * The policy of a tenant; undefined = the tenant has no limits (acquire returns ok with
   * `limits: []`). Called on every acquire: it must be cheap (a Map lookup). Returning a
   * different object than before (a config reload) rebuilds the tenant's state.
   */
  policyFor: (tenant: string) => Policy | undefined;
  /** Retry hint for a concurrency refusal, ms: min(this, ms until the earliest lease expires). @default 1000 */
  concurrencyRetryHintMs?: number;
  /**
   * Called (synchronously, after the change) when capacity came back early for a tenant: a slot
   * released, or tokens refunded by a settlement. The admission queue wakes its waiters with it.
   */
  onFreed?: (tenant: string) => void;
}
