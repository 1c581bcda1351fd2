/**
 * The top level of the config file: every section with its schema and default, and the two small
 * ones written inline (`mode:`, `queue:`). `schema.ts` adds the cross-field checks of
 * `cross-checks.ts` to make the whole `ConfigSchema`.
 */
import { z } from 'zod';
import { CatalogueSchema } from './catalogue-schema.ts';
import { AdminSchema } from './schema-admin.ts';
import { ClusterSchema } from './schema-cluster.ts';
import { DeploymentSchema } from './schema-deployments.ts';
import { ModelSchema } from './schema-models.ts';
import { PlanSchema } from './schema-plans.ts';
import { DEFAULT_PRIORITIES, PrioritySchema } from './schema-priorities.ts';
import { RouterSchema } from './schema-router.ts';
import { ServerSchema } from './schema-server.ts';
import { TenantSchema } from './schema-tenants.ts';
import { TokensSchema } from './schema-tokens.ts';

/** Every section of the config file, each checked on its own (the checks across sections come on top, in `schema.ts`). */
export const SectionsSchema = z.strictObject({
  /**
   * `sharded` (default): each tenant's owner decides in RAM. `central`: the comparison baseline —
   * every decision is a Lua call against Redis (`cluster.redis.url`), any node decides for any
   * tenant, routers balance round-robin (issue 5).
   */
  mode: z.enum(['sharded', 'central']).default('sharded'),
  server: ServerSchema.prefault({}),
  tokens: TokensSchema.prefault({}),
  cluster: ClusterSchema.prefault({}),
  router: RouterSchema.prefault({}),
  admin: AdminSchema.prefault({}),
  /** Priority tiers, highest first. @default interactive, batch */
  priorities: z.array(PrioritySchema).min(1, 'priorities: list at least one tier (or leave it out for interactive and batch)').default(DEFAULT_PRIORITIES.map((p) => ({ ...p }))),
  /** Admission queues: each tenant queues at most `max_depth` requests (all tiers). @default 100 */
  queue: z.strictObject({ max_depth: z.number().int().min(1).max(100_000).default(100) }).prefault({}),
  /** Named sets of limits tenants reference (`plan:`), here and in the catalogue. @default [] */
  plans: z.array(PlanSchema).default([]),
  /** Where tenants managed at runtime live (see docs/tenants.md). @default store: none */
  catalogue: CatalogueSchema.prefault({}),
  /** Tenants of the file; at least one unless `catalogue.store` keeps tenants managed at runtime. @default [] */
  tenants: z.array(TenantSchema).default([]),
  models: z.array(ModelSchema).min(1),
  deployments: z.array(DeploymentSchema).min(1),
});

/** The config with every section validated, as the cross-field checks of `cross-checks.ts` see it. */
export type SectionsConfig = z.output<typeof SectionsSchema>;
