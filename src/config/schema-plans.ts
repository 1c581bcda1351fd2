/**
 * The `plans:` section: named sets of limits (and default tiers) that tenants reference with `plan:`,
 * here and in the catalogue.
 */
import { z } from 'zod';
import { CATALOGUE_ID } from './catalogue-schema.ts';
import { LimitSchema } from './schema-limits.ts';
import { ESTIMATORS } from './schema-models.ts';
import { ShareSchema } from './schema-tenants.ts';

/**
 * A plan: a named set of limits (and default tiers) that tenants reference with `plan:`, so that many
 * tenants share one compiled policy. A tenant's own `limits` override the plan's limit of the same
 * name (`requests/1m`, `tokens/1d`, …) and add the others.
 */
export const PlanSchema = z.strictObject({
  name: z.string().regex(CATALOGUE_ID, 'plan name: 1-64 of A-Z a-z 0-9 . _ -'),
  limits: z.array(LimitSchema).default([]),
  /** Default tier of the plan's tenants (else the first of their tiers). */
  priority: z.string().min(1).optional(),
  /** Tiers the plan's tenants may ask for. @default every tier */
  priorities: z.array(z.string().min(1)).min(1).optional(),
  /** Overrides the model's estimator for the plan's tenants. */
  estimator: z.enum(ESTIMATORS).optional(),
  /** The plan's tenants' weight and floor in fair-shared deployment quotas (a tenant's own `share` wins). */
  share: ShareSchema.optional(),
});
