/**
 * Materialization: the full view of one catalogue tenant (its `TenantConfig`, its policy, what each
 * of its keys gives) built from its entry, its plan (the catalogue's, else the YAML file's) and the
 * YAML base's tiers. The catalogue (`catalogue.ts`) builds a view on first use and keeps it in a
 * bounded cache, dropped when the tenant, one of its keys or its plan changes.
 *
 * Rules: limits are the plan's merged with the tenant's own; the tenant's tiers are its own known
 * ones, else its plan's, else every tier; a default tier the tenant may not use is dropped; a key's
 * tiers are its known ones the tenant may use (all the tenant's when none is left) and its default
 * is the first of its own, the tenant's default (else first tier), its first tier that it may use.
 * A tenant with no limits of its own nor on its keys shares its plan's policy object (one compiled
 * policy for every tenant of the plan).
 */
import type { KeyAccess, Tier } from '../config/access.ts';
import { policyFromTenant } from '../config/policy.ts';
import type { LimitConfig, PlanConfig, TenantConfig } from '../config/schema.ts';
import type { Policy } from '../limiter/types.ts';
import { mergeLimits } from './docs.ts';
import type { CatalogueBase, PlanEntry, TenantEntry } from './entries.ts';

/** The full view of one catalogue tenant, built on first use. */
export interface Materialized {
  readonly tenant: TenantConfig;
  readonly policy: Policy;
  readonly access: ReadonlyMap<string, KeyAccess>;
}

function emptyToUndefined<T extends readonly unknown[]>(v: T | undefined): T | undefined {
  return v === undefined || v.length === 0 ? undefined : v;
}

/**
 * Builds the full view of the catalogue tenant `entry` (see the header). A catalogue plan's shared
 * policy is compiled once into its `PlanEntry.policy`; a YAML plan's is kept in `yamlPlanPolicies`
 * (one per plan object: a reload makes new ones).
 */
export function materialize(entry: TenantEntry, plans: ReadonlyMap<string, PlanEntry>, base: CatalogueBase, yamlPlanPolicies: WeakMap<PlanConfig, Policy>): Materialized {
  const planEntry = entry.plan === undefined ? undefined : plans.get(entry.plan);
  const plan = planEntry?.plan ?? (entry.plan === undefined ? undefined : base.config.plans.find((p) => p.name === entry.plan));
  const doc = entry.doc;
  const own: readonly LimitConfig[] = doc?.limits ?? [];
  const limits = mergeLimits(plan?.limits ?? [], own);
  const allTiers = [...base.tiers.keys()];
  const known = (names: readonly string[] | undefined): string[] | undefined => {
    const kept = names?.filter((n) => base.tiers.has(n));
    return kept === undefined || kept.length === 0 ? undefined : kept;
  };
  const priorities = known(doc?.priorities) ?? known(plan?.priorities);
  const tenantTiers = priorities ?? allTiers;
  const askedDefault = doc?.priority ?? plan?.priority;
  const priority = askedDefault !== undefined && tenantTiers.includes(askedDefault) ? askedDefault : undefined;
  const estimator = doc?.estimator ?? plan?.estimator;
  const keys = entry.keys.map((k) => ({
    id: k.id,
    ...(k.doc === undefined ? {} : { limits: k.doc.limits, ...(k.doc.priority === undefined ? {} : { priority: k.doc.priority }), ...(emptyToUndefined(k.doc.priorities) === undefined ? {} : { priorities: k.doc.priorities as string[] }) }),
  }));
  const tenant: TenantConfig = Object.freeze({
    id: entry.id,
    keys,
    limits,
    metrics: doc?.metrics ?? false,
    ...(entry.plan === undefined ? {} : { plan: entry.plan }),
    ...(priority === undefined ? {} : { priority }),
    ...(priorities === undefined ? {} : { priorities }),
    ...(estimator === undefined ? {} : { estimator }),
  });
  // A tenant with nothing of its own shares its plan's policy object (stable while the plan is).
  const keyLimits = entry.keys.some((k) => (k.doc?.limits.length ?? 0) > 0);
  let policy: Policy;
  if (own.length === 0 && !keyLimits && planEntry !== undefined) policy = planEntry.policy ??= policyFromTenant(tenant);
  else if (own.length === 0 && !keyLimits && plan !== undefined) policy = yamlPlanPolicy(yamlPlanPolicies, plan, tenant);
  else policy = policyFromTenant(tenant);
  const access = new Map<string, KeyAccess>();
  const tierOf = (name: string): Tier => base.tiers.get(name) as Tier;
  for (const k of entry.keys) {
    const allowed = known(k.doc?.priorities)?.filter((n) => tenantTiers.includes(n)) ?? tenantTiers;
    const usable = allowed.length === 0 ? tenantTiers : allowed;
    const tenantDefault = priority ?? (tenantTiers[0] as string);
    const keyDefault = k.doc?.priority !== undefined && usable.includes(k.doc.priority) ? k.doc.priority : usable.includes(tenantDefault) ? tenantDefault : (usable[0] as string);
    access.set(k.id, Object.freeze({ tenant, keyId: k.id, tier: tierOf(keyDefault), tiers: new Map(usable.map((n) => [n, tierOf(n)])) }));
  }
  return { tenant, policy, access };
}

/** The shared policy of a YAML plan (one per plan object: a reload makes new ones). */
function yamlPlanPolicy(policies: WeakMap<PlanConfig, Policy>, plan: PlanConfig, tenant: TenantConfig): Policy {
  let p = policies.get(plan);
  if (p === undefined) {
    p = policyFromTenant(tenant);
    policies.set(plan, p);
  }
  return p;
}
