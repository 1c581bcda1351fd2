/**
 * Turns a tenant's configured limits into the limiter's {@link Policy}.
 */
import type { LimitSpec, Policy } from '../limiter/types.ts';
import { windowLabel } from './duration.ts';
import type { LimitConfig } from './schema.ts';

/** Lease TTL of a concurrency slot when the config sets none, in ms. */
export const DEFAULT_LEASE_TTL_MS = 600_000;

/**
 * The name of a configured limit as the limiter, errors, headers and the global cap know it:
 * `requests/1m`, `tokens/1d`, `concurrent`, with `@model` appended for a model-scoped limit.
 */
export function limitName(limit: LimitConfig): string {
  const suffix = limit.model === undefined ? '' : `@${limit.model}`;
  if (limit.concurrent !== undefined) return `concurrent${suffix}`;
  return `${limit.requests !== undefined ? 'requests' : 'tokens'}/${windowLabel(limit.window ?? 60_000)}${suffix}`;
}

/**
 * Builds the limiter policy of a tenant. Limit names are `requests/1m`, `tokens/1d`, `concurrent`,
 * with `@model` appended for model-scoped limits; they appear in errors and metrics.
 */
export function policyFromLimits(limits: readonly LimitConfig[]): Policy {
  const specs = limits.map((limit): LimitSpec => {
    const scope = limit.model === undefined ? {} : { model: limit.model };
    if (limit.concurrent !== undefined) {
      return {
        name: limitName(limit),
        kind: 'concurrent',
        limit: limit.concurrent,
        leaseTtlMs: limit.lease_ttl ?? DEFAULT_LEASE_TTL_MS,
        ...scope,
      };
    }
    const kind = limit.requests !== undefined ? 'requests' : 'tokens';
    const windowMs = limit.window ?? 60_000;
    return {
      name: limitName(limit),
      kind,
      limit: limit.requests ?? limit.tokens ?? 0,
      windowMs,
      algorithm: limit.algorithm ?? 'token_bucket',
      ...scope,
    };
  });
  return Object.freeze({ limits: Object.freeze(specs) });
}
