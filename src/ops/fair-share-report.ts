/**
 * Fair shares (`src/fairshare/`) for operators, read from a node's `FairShares` views: a tenant's
 * shares per deployment (`fair_share` of `GET /admin/v1/tenants/:id`), the series of the fair-share
 * gauges (tenants with `metrics: true` only), and the trimmed tables of the levels report (the
 * dashboard). Every number is in units per 60 s window, as the views give them. Pure: nothing here
 * changes a share or a count.
 */
import type { DeploymentShareView, FairShares, TenantShareView } from '../fairshare/shares.ts';
import type { FairShareLevel } from './fair-share-metrics.ts';

/** One deployment of a tenant's `fair_share` array: per bucket kind its demand, share and used. */
export interface TenantFairShare {
  readonly deployment: string;
  readonly kinds: TenantShareView['kinds'];
}

/** `fair_share` of a tenant's admin answer: every fair-shared deployment it asks on this node (deployment order). */
export function tenantFairShare(fair: Pick<FairShares, 'tenantViews'>, tenant: string): TenantFairShare[] {
  return fair.tenantViews(tenant).map((v) => ({ deployment: v.deployment, kinds: v.kinds }));
}

/**
 * The gauge series of `quotaring_fair_share` and `quotaring_fair_demand`: one per fair-shared
 * deployment, bucket kind and tenant for which `metered(tenant)` holds (tenants with `metrics: true`).
 */
export function fairShareSeries(views: readonly DeploymentShareView[], metered: (tenant: string) => boolean): FairShareLevel[] {
  const out: FairShareLevel[] = [];
  for (const v of views) {
    for (const t of v.tenants) {
      if (!metered(t.tenant)) continue;
      for (const k of t.kinds) out.push({ deployment: v.deployment, kind: k.kind, tenant: t.tenant, share: k.share, demand: k.demand });
    }
  }
  return out;
}

/**
 * A deployment's table in a node's levels report (the dashboard): at most `maxTenants` tenants,
 * those with the most demand first (summed over kinds; ties by id), and `omitted` the count of the
 * others.
 */
export interface DeploymentShareLevels extends DeploymentShareView {
  readonly omitted: number;
}

/** The views trimmed for the levels report (see {@link DeploymentShareLevels}). */
export function shareLevels(views: readonly DeploymentShareView[], maxTenants: number): DeploymentShareLevels[] {
  return views.map((v) => {
    const demand = (t: TenantShareView): number => t.kinds.reduce((s, k) => s + k.demand, 0);
    const tenants = [...v.tenants].sort((a, b) => demand(b) - demand(a) || a.tenant.localeCompare(b.tenant)).slice(0, Math.max(0, maxTenants));
    return { ...v, tenants, omitted: v.tenants.length - tenants.length };
  });
}

/** Every fair-shared deployment's view now (deployment order). */
export function allShareViews(fair: Pick<FairShares, 'deployments' | 'view'>): DeploymentShareView[] {
  return fair.deployments.flatMap((d) => fair.view(d) ?? []);
}
