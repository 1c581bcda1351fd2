/**
 * The units a stand-in takes from each token bucket of the tenants it holds for a suspect owner,
 * net of settlements: what it gives back to the owner (`BucketUsage`, see `usage-delta.ts`).
 */
import type { BucketUsage } from './usage-delta.ts';
import type { Policy } from './types.ts';

/** Adds `units` to the count of limit `name` in `tally` (no tally: nothing). */
export function tallyAdd(tally: Map<string, number> | undefined, name: string, units: number): void {
  if (tally !== undefined) tally.set(name, (tally.get(name) ?? 0) + units);
}

/** Counts per tenant and bucket name; costs one size check for tenants not tallied. */
export class BucketTallies {
  readonly #tallies = new Map<string, Map<string, number>>();

  /** Starts counting for `tenant` (a running count is reset). */
  start(tenant: string): void {
    this.#tallies.set(tenant, new Map());
  }

  /** Stops counting for `tenant`. */
  stop(tenant: string): void {
    this.#tallies.delete(tenant);
  }

  /** The running count of `tenant` (units by bucket name), or undefined when not tallied. */
  of(tenant: string): Map<string, number> | undefined {
    return this.#tallies.size === 0 ? undefined : this.#tallies.get(tenant);
  }

  /** The units taken from each token bucket of `policy` (> 0 only), with each bucket's spec. */
  usage(tenant: string, policy: Policy): BucketUsage[] {
    const tally = this.#tallies.get(tenant);
    if (tally === undefined) return [];
    const out: BucketUsage[] = [];
    for (const spec of policy.limits) {
      const taken = tally.get(spec.name) ?? 0;
      if (spec.kind === 'concurrent' || spec.kind === 'cost' || spec.algorithm !== 'token_bucket' || !(taken > 0)) continue;
      out.push({ name: spec.name, kind: spec.kind, limit: spec.limit, windowMs: spec.windowMs, taken });
    }
    return out;
  }

  /** Takes `sent` (an earlier {@link usage}, counted elsewhere now) off `tenant`'s count; counting goes on. */
  untally(tenant: string, sent: readonly BucketUsage[]): void {
    const tally = this.#tallies.get(tenant);
    for (const b of sent) tallyAdd(tally, b.name, -b.taken);
  }
}
