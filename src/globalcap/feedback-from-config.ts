/**
 * Builds a node's provider feedback (`provider-feedback.ts`) from the config: every deployment with
 * a quota and `quota.feedback` on (the default) gets its buckets' feedback settings.
 */
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { CapCall } from './cap-call.ts';
import type { CapLeases } from './cap-leases.ts';
import type { LowerFn } from './feedback-script.ts';
import { capKey, feedbackLogKey } from './keys.ts';
import { deploymentBuckets } from './lease-bucket.ts';
import type { DeploymentQuota } from './lease-bucket.ts';
import { ProviderFeedback } from './provider-feedback.ts';
import type { FeedbackBucket } from './provider-feedback.ts';

/** `quota.feedback` as configured → its `max_outside`, or undefined when off. */
export function maxOutsideOf(feedback: boolean | { readonly max_outside: number } | undefined): number | undefined {
  if (feedback === false) return undefined;
  if (feedback === undefined || feedback === true) return 0.5;
  return feedback.max_outside;
}

/**
 * @param deployments the quotas the leases were built from, by deployment name.
 * @returns undefined when no deployment with a quota has feedback on.
 */
export function feedbackFromConfig(
  config: LoadedConfig,
  deployments: Readonly<Record<string, DeploymentQuota>>,
  opts: { readonly clock: Clock; readonly call: CapCall; readonly lower: LowerFn | undefined; readonly leases: CapLeases },
): ProviderFeedback | undefined {
  const cluster = config.config.cluster.name;
  const byName = new Map<string, readonly FeedbackBucket[]>();
  for (const d of config.config.deployments) {
    const quota = deployments[d.name];
    const maxOutside = maxOutsideOf(d.quota.feedback);
    if (quota === undefined || maxOutside === undefined) continue;
    const headroom = quota.headroom ?? 0.9;
    byName.set(
      d.name,
      deploymentBuckets(d.name, quota).map((spec) => {
        const perMinute = (spec.kind === 'requests' ? quota.rpm : quota.tpm) ?? 0;
        return {
          kind: spec.kind,
          key: capKey(cluster, spec.name),
          logKey: feedbackLogKey(cluster, spec.name),
          capacity: spec.capacity,
          ratePerSec: (spec.capacity * 1000) / spec.windowMs,
          ttlMs: spec.windowMs,
          quota: perMinute,
          // A token bucket of quota × headroom stays at least quota × (1 − headroom) below the
          // provider's (same usage, slower refill); a sliding-window bucket never holds more than
          // the provider has left in its window (admitted in the last 60 s + level ≤ the quota).
          margin: quota.algorithm === 'sliding_window' ? 0 : perMinute * (1 - headroom),
          allowance: maxOutside * spec.capacity,
        };
      }),
    );
  }
  if (byName.size === 0) return undefined;
  const leases = opts.leases;
  return new ProviderFeedback({
    clock: opts.clock,
    call: opts.call,
    ...(opts.lower === undefined ? {} : { lower: opts.lower }),
    deployments: byName,
    balance: (deployment, kind) => leases.view(deployment)[kind]?.balance ?? 0,
    inFallback: () => leases.inFallback,
  });
}
