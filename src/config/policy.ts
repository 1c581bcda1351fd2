/**
 * Turns a tenant's configured limits (its own and its keys') into the limiter's {@link Policy}.
 */
import type { BudgetPeriod } from '../limiter/budget-period.ts';
import type { LimitSpec, Policy, TokenWeights } from '../limiter/types.ts';
import { windowLabel } from './duration.ts';
import type { LimitConfig, TenantConfig } from './schema.ts';

/** Lease TTL of a concurrency slot when the config sets none, in ms. */
export const DEFAULT_LEASE_TTL_MS = 600_000;

/**
 * The name of a configured limit as the limiter, errors, headers and the global cap know it:
 * `requests/1m`, `tokens/1d`, `concurrent`, `cost/1d`, `cost/month`, with `@model` appended for a
 * model-scoped limit and `#key` for a limit of one key (its id).
 */
export function limitName(limit: LimitConfig, key?: string): string {
  const suffix = (limit.model === undefined ? '' : `@${limit.model}`) + (key === undefined ? '' : `#${key}`);
  if (limit.concurrent !== undefined) return `concurrent${suffix}`;
  if (limit.usd !== undefined) return `cost/${limit.period ?? windowLabel(limit.window ?? 86_400_000)}${suffix}`;
  return `${limit.requests !== undefined ? 'requests' : 'tokens'}/${windowLabel(limit.window ?? 60_000)}${suffix}`;
}

/** The period of a configured cost limit: its calendar period in its time zone (UTC by default), or its window. */
export function budgetPeriod(limit: LimitConfig): BudgetPeriod {
  return limit.period !== undefined ? { kind: 'calendar', unit: limit.period, timeZone: limit.time_zone ?? 'UTC' } : { kind: 'window', ms: limit.window ?? 86_400_000 };
}

/** Weights of a tokens limit in the limiter's terms; undefined when every kind weighs 1. */
function weightsOf(limit: LimitConfig): TokenWeights | undefined {
  const w = limit.weights;
  if (w === undefined) return undefined;
  const out: { cacheRead?: number; cacheWrite?: number; reasoning?: number } = {};
  if (w.cache_read !== undefined && w.cache_read !== 1) out.cacheRead = w.cache_read;
  if (w.cache_write !== undefined && w.cache_write !== 1) out.cacheWrite = w.cache_write;
  if (w.reasoning !== undefined && w.reasoning !== 1) out.reasoning = w.reasoning;
  return Object.keys(out).length === 0 ? undefined : out;
}

/** The limiter's spec of one configured limit (`key`: the id of the key it belongs to). */
function specOf(limit: LimitConfig, key?: string): LimitSpec {
  const scope = { ...(limit.model === undefined ? {} : { model: limit.model }), ...(key === undefined ? {} : { key }) };
  const name = limitName(limit, key);
  if (limit.concurrent !== undefined) {
    return { name, kind: 'concurrent', limit: limit.concurrent, leaseTtlMs: limit.lease_ttl ?? DEFAULT_LEASE_TTL_MS, ...scope };
  }
  if (limit.usd !== undefined) return { name, kind: 'cost', limit: limit.usd, period: budgetPeriod(limit), ...scope };
  const weights = limit.tokens !== undefined ? weightsOf(limit) : undefined;
  return {
    name,
    kind: limit.requests !== undefined ? 'requests' : 'tokens',
    limit: limit.requests ?? limit.tokens ?? 0,
    windowMs: limit.window ?? 60_000,
    algorithm: limit.algorithm ?? 'token_bucket',
    ...scope,
    ...(weights === undefined ? {} : { weights }),
  };
}

/**
 * Builds a limiter policy from limits. Limit names are `requests/1m`, `tokens/1d`, `concurrent`,
 * `cost/month`, with `@model` appended for model-scoped limits; they appear in errors and metrics.
 */
export function policyFromLimits(limits: readonly LimitConfig[]): Policy {
  return Object.freeze({ limits: Object.freeze(limits.map((limit) => specOf(limit))) });
}

/**
 * The policy of a tenant: its own limits, then each key's limits scoped to that key (named with
 * `#<key id>`), so that a key's limits live in its tenant's state (same owner, same handoff, same
 * checkpoints) and apply on top of the tenant's.
 */
export function policyFromTenant(tenant: TenantConfig): Policy {
  const specs = tenant.limits.map((limit) => specOf(limit));
  for (const key of tenant.keys) {
    if (typeof key === 'string' || key.id === undefined) continue;
    for (const limit of key.limits ?? []) specs.push(specOf(limit, key.id));
  }
  return Object.freeze({ limits: Object.freeze(specs) });
}
