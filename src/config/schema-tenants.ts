/**
 * The `tenants:` section: each tenant's id, API keys (with their own limits and tiers), plan, limits,
 * tiers, estimator, spread and metrics.
 */
import { z } from 'zod';
import { LimitSchema } from './schema-limits.ts';
import { ESTIMATORS } from './schema-models.ts';

/**
 * A tenant key: the literal key, or an object with the key (`key`) or the environment variable
 * holding it (`env`, read at start), and optionally the key's own default priority tier and the
 * tiers it may ask for (within the tenant's).
 */
const ApiKeySchema = z.union([
  z.string().min(8),
  z
    .strictObject({
      key: z.string().min(8).optional(),
      env: z.string().min(1).optional(),
      /** A name for this key (never the key itself): its limits are named after it (`tokens/1m#ci`), and so are its headers and errors. Required with `limits`. */
      id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'key id: 1-64 of A-Z a-z 0-9 . _ -').optional(),
      /** This key's own limits, applied on top of its tenant's (any kind; kept with the tenant on its owner). @default [] */
      limits: z.array(LimitSchema).optional(),
      /** Default tier of this key's requests (else the tenant's). */
      priority: z.string().min(1).optional(),
      /** Tiers this key may ask for with `x-quotaring-priority` (else the tenant's). */
      priorities: z.array(z.string().min(1)).min(1).optional(),
    })
    .refine((k) => (k.key === undefined) !== (k.env === undefined), 'give the key itself (key) or the environment variable holding it (env), one of the two')
    .refine((k) => k.limits === undefined || k.limits.length === 0 || k.id !== undefined, { message: 'a key with limits needs an id (a name for it: its limits are named after it)', path: ['id'] }),
]);

/** A tenant's part in fair-shared deployment quotas (`deployments[].fair_share`). */
export const ShareSchema = z.strictObject({
  /** With more demand than quota, shares above floors go in proportion to weights (> 0). @default 1 */
  weight: z.number().gt(0).max(1_000_000).default(1),
  /** Fraction of each fair-shared quota reserved for the tenant whether it asks or not (0..1). @default 0 */
  floor: z.number().min(0).max(1).default(0),
});

/** A tenant: id, API keys, limits, default priority, optional estimator override. */
export const TenantSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'tenant id: 1-64 of A-Z a-z 0-9 . _ -'),
  keys: z.array(ApiKeySchema).min(1),
  /** The plan whose limits and tiers this tenant takes (its own `limits` override those of the same name). */
  plan: z.string().min(1).optional(),
  limits: z.array(LimitSchema).default([]),
  /** Default priority tier of the tenant's requests. @default the first of its tiers (interactive with the default tiers) */
  priority: z.string().min(1).optional(),
  /** Tiers the tenant's keys may ask for (`x-quotaring-priority`). @default every tier */
  priorities: z.array(z.string().min(1)).min(1).optional(),
  /** Overrides the model's estimator for this tenant's requests. */
  estimator: z.enum(ESTIMATORS).optional(),
  /**
   * A hot tenant: routed over this many nodes (`ring.range`), its requests/tokens limits kept in the
   * global cap and leased by each node, its concurrency limits split across them. 2..64.
   */
  spread: z.number().int().min(2).max(64).optional(),
  /** Its weight and floor in fair-shared deployment quotas (else its plan's). @default weight 1, floor 0 */
  share: ShareSchema.optional(),
  /** Export this tenant's remaining and size per limit (`quotaring_tenant_remaining`, `quotaring_tenant_limit`) and its settled spend (`quotaring_tenant_spend_usd_total`; docs/metrics.md). @default false */
  metrics: z.boolean().default(false),
});
