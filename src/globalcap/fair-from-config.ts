/**
 * Builds a node's fair shares (`src/fairshare/`) from the config: every deployment with a quota and
 * `fair_share` gets its buckets' per-minute refill as the capacity to share, and each tenant's
 * weight and floor come from its `share` (else its plan's; catalogue tenants included).
 */
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import { FairShares } from '../fairshare/shares.ts';
import type { FairDeploymentSpec, TenantShareSpec } from '../fairshare/shares.ts';
import { deploymentBuckets } from './lease-bucket.ts';
import type { DeploymentQuota } from './lease-bucket.ts';

/** The reserve of `fair_share: true`: a tenth of each bucket. */
export const DEFAULT_RESERVE = 0.1;

const EQUAL: TenantShareSpec = { weight: 1, floor: 0 };

/**
 * @param quotas the deployments with a quota, as the leases take them.
 * @returns undefined when no deployment has `fair_share`.
 */
export function fairSharesFromConfig(config: LoadedConfig, quotas: Readonly<Record<string, DeploymentQuota>>, clock: Clock, liveNodes: () => number): FairShares | undefined {
  const specs: FairDeploymentSpec[] = [];
  for (const d of config.config.deployments) {
    const quota = quotas[d.name];
    if (d.fair_share === undefined || d.fair_share === false || quota === undefined) continue;
    const reserve = d.fair_share === true ? DEFAULT_RESERVE : d.fair_share.reserve;
    // A window's worth of refill: what the bucket lets through per minute, after headroom.
    const buckets = deploymentBuckets(d.name, quota).map((b) => ({ kind: b.kind, capacity: (b.capacity * 60_000) / b.windowMs }));
    specs.push({ name: d.name, buckets, reserve });
  }
  if (specs.length === 0) return undefined;
  const catalogue = config.catalogue;
  const tenantSpec = (id: string): TenantShareSpec => {
    const t = catalogue.tenant(id);
    const share = t?.share ?? (t?.plan === undefined ? undefined : catalogue.plan(t.plan)?.share);
    return share ?? EQUAL;
  };
  return new FairShares({ clock, deployments: specs, tenantSpec, liveNodes });
}
