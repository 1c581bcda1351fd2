/**
 * The one config schema: it validates the YAML and gives the TypeScript types (`z.output`).
 * Unknown keys are refused everywhere (strict objects); defaults sit beside each field.
 *
 * Each section has its own file (`schema-<section>.ts`; the units in `units.ts`), the top level
 * is `schema-sections.ts`, and the checks across fields and sections are in `cross-checks.ts`;
 * this file assembles them into {@link ConfigSchema} and re-exports what the rest of the code imports.
 */
import type { z } from 'zod';
import {
  bedrockRegions,
  centralModeHasRedis,
  hotDetectionHasRedis,
  keysAndLimits,
  listenerTimeouts,
  modelWeightsAndDeployments,
  oneMembership,
  providerOptions,
  spreadConcurrency,
  tenantPlansExist,
  tenantsOrCatalogueStore,
  tenantTiers,
  uniqueDeploymentNames,
  fairShareNeedsQuota,
  uniqueMemberIds,
  uniqueModelNames,
  uniquePlanNames,
  uniqueTenantIds,
  uniqueTierNames,
} from './cross-checks.ts';
import { SectionsSchema } from './schema-sections.ts';

export { AdminSchema } from './schema-admin.ts';
export { ClusterSchema, MemberSchema } from './schema-cluster.ts';
export { DeploymentSchema, PROVIDERS } from './schema-deployments.ts';
export type { Provider } from './schema-deployments.ts';
export { ALGORITHMS, BUDGET_PERIODS, LimitSchema } from './schema-limits.ts';
export { ENCODINGS, ESTIMATORS, ModelSchema } from './schema-models.ts';
export { PlanSchema } from './schema-plans.ts';
export { PriceSchema } from './schema-prices.ts';
export { DEFAULT_PRIORITIES, PrioritySchema } from './schema-priorities.ts';
export { RedisSchema } from './schema-redis.ts';
export { RouterSchema } from './schema-router.ts';
export { ServerSchema } from './schema-server.ts';
export { TenantSchema } from './schema-tenants.ts';
export { TokensSchema } from './schema-tokens.ts';

/** The whole config file; cross-references (deployments, models, duplicate names) are checked too. */
export const ConfigSchema = SectionsSchema.superRefine((config, ctx) => {
  uniqueTenantIds(config, ctx);
  uniquePlanNames(config, ctx);
  tenantsOrCatalogueStore(config, ctx);
  tenantPlansExist(config, ctx);
  uniqueModelNames(config, ctx);
  uniqueDeploymentNames(config, ctx);
  fairShareNeedsQuota(config, ctx);
  centralModeHasRedis(config, ctx);
  hotDetectionHasRedis(config, ctx);
  oneMembership(config, ctx);
  listenerTimeouts(config, ctx);
  uniqueMemberIds(config, ctx);
  providerOptions(config, ctx);
  bedrockRegions(config, ctx);
  modelWeightsAndDeployments(config, ctx);
  uniqueTierNames(config, ctx);
  tenantTiers(config, ctx);
  spreadConcurrency(config, ctx);
  keysAndLimits(config, ctx);
});

/** The config as the schema validates it, before secrets are resolved. */
export type ParsedConfig = z.output<typeof ConfigSchema>;
/** Where and how to connect to Redis, resolved at load (see `src/config/redis-url.ts`). A secret: never log it unredacted. */
export type RedisConnection =
  | {
      readonly kind: 'url';
      /** `redis://` or `rediss://` with the credentials of `username_env` / `password_env` in it. */
      readonly url: string;
      readonly tls?: RedisTls;
    }
  | {
      readonly kind: 'sentinel';
      readonly sentinels: readonly { readonly host: string; readonly port: number }[];
      /** The primary's name in the sentinels' configuration. */
      readonly name: string;
      readonly username?: string;
      readonly password?: string;
      readonly sentinelUsername?: string;
      readonly sentinelPassword?: string;
      readonly tls?: RedisTls;
    };
/** TLS options of a Redis connection (`cluster.redis.tls`). */
export type RedisTls = NonNullable<NonNullable<ParsedConfig['cluster']['redis']>['tls']>;
/**
 * `cluster.redis` once loaded: `connection` resolved from the file and the environment, and `url`
 * for a URL connection (from the file, or `url_env`, with the credentials in it; undefined with
 * sentinels). A secret: never log it unredacted.
 */
export type RedisConfig = Omit<NonNullable<ParsedConfig['cluster']['redis']>, 'url'> & { readonly url?: string; readonly connection: RedisConnection };
/** The validated config, as the YAML says it with defaults filled in, durations in ms and the Redis URL resolved. */
export type Config = Omit<ParsedConfig, 'cluster'> & { cluster: Omit<ParsedConfig['cluster'], 'redis'> & { redis?: RedisConfig } };
/** One validated plan. */
export type PlanConfig = Config['plans'][number];
/** One validated tenant. */
export type TenantConfig = Config['tenants'][number];
/** One validated limit of a tenant (durations in ms). */
export type LimitConfig = TenantConfig['limits'][number];
/** One validated priority tier (max_wait in ms). */
export type PriorityConfig = Config['priorities'][number];
/** One validated model. */
export type ModelConfig = Config['models'][number];
/** Validated settings of a node's listener and request limits (durations in ms, sizes in bytes). */
export type ServerConfig = Config['server'];
/** Validated settings of a router's listener (durations in ms, sizes in bytes). */
export type RouterConfig = Config['router'];
/** Validated cluster settings (durations in ms). */
export type ClusterConfig = Config['cluster'];
/** One static member. */
export type MemberConfig = ClusterConfig['members'][number];

/** One validated deployment (durations in ms; the key itself is resolved at load). */
export type DeploymentConfig = Config['deployments'][number];
