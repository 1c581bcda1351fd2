/**
 * A deployment quota's state as this node sees it, in the limiter's `LimitState` shape, for a quota
 * refusal's message and headers (`refusals.ts`): per bucket (rpm → `requests`, tpm → `tokens`),
 * `limit` = what the cluster may spend a minute (`quota × headroom`, the provider's quota less the
 * headroom), `remaining` = the cluster level at this node's last lease, refilled since, plus the
 * units this node holds (in fallback: what its local share has left), `resetMs` = until the bucket
 * is full again at its refill rate. Like a spread tenant's headers, a node's view, not an exact
 * cluster-wide figure.
 */
import type { ResolvedDeployment } from '../config/load.ts';
import type { ConfiguredQuotas } from '../globalcap/quotas-from-config.ts';
import type { LimitState, Policy } from '../limiter/types.ts';

/** The requests or tokens bucket of a deployment quota, as a `LimitState` named `quota:<deployment>:rpm|tpm`. */
export type QuotaState = LimitState & { readonly kind: 'requests' | 'tokens' };

/** The quota's buckets of `deployment` (none when it has no quota here). */
export function quotaStates(quotas: ConfiguredQuotas | undefined, deployment: ResolvedDeployment): QuotaState[] {
  if (quotas === undefined || deployment.quota === undefined) return [];
  let views;
  try {
    views = quotas.leases.buckets(deployment.name);
  } catch {
    return [];
  }
  const { quota, headroom } = deployment;
  const sliding = quota.algorithm === 'sliding_window';
  const out: QuotaState[] = [];
  for (const v of views) {
    const perMinute = v.kind === 'requests' ? quota.rpm : quota.tpm;
    if (perMinute === undefined) continue;
    // token_bucket: capacity ⌊quota × headroom⌋ refilled over a minute; sliding_window: refilled at quota × headroom a minute.
    const refillPerMs = (sliding ? perMinute * headroom : v.capacity) / 60_000;
    const remaining = Math.max(0, Math.min(v.capacity, Math.floor(v.level + Math.max(0, v.balance))));
    out.push({
      name: `quota:${deployment.name}:${v.kind === 'requests' ? 'rpm' : 'tpm'}`,
      kind: v.kind,
      limit: Math.max(1, Math.floor(perMinute * headroom)),
      remaining,
      resetMs: Math.ceil((v.capacity - remaining) / refillPerMs),
    });
  }
  return out;
}

/**
 * The bucket that refused a request of `cost` tokens (1 request): the requests bucket when it has
 * less than one request left, else the tokens bucket when it has less than `cost`, else the one
 * with the smaller part of its capacity left (a renewal could not cover it in time).
 */
export function refusingBucket(states: readonly QuotaState[], cost: number): QuotaState | undefined {
  const requests = states.find((s) => s.kind === 'requests');
  const tokens = states.find((s) => s.kind === 'tokens');
  if (requests !== undefined && requests.remaining < 1) return requests;
  if (tokens !== undefined && tokens.remaining < cost) return tokens;
  if (requests === undefined || tokens === undefined) return requests ?? tokens;
  return requests.remaining / requests.limit <= tokens.remaining / tokens.limit ? requests : tokens;
}

/** Of `states`, those of a kind the tenant's `policy` has no limit of (its own `x-ratelimit-*` of that kind would say otherwise). */
export function notTheTenants(states: readonly QuotaState[], policy: Policy | undefined): QuotaState[] {
  const own = new Set((policy?.limits ?? []).map((l) => l.kind));
  return states.filter((s) => !own.has(s.kind));
}
