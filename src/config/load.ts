/**
 * Loads a YAML config file, validates it against {@link ConfigSchema}, resolves secrets from the
 * environment and builds the frozen runtime view the gateway uses.
 */
import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import type { Policy } from '../limiter/types.ts';
import { policyFromTenant } from './policy.ts';
import { ConfigSchema } from './schema.ts';
import type { Config, DeploymentConfig, ModelConfig, PlanConfig, RedisConfig, TenantConfig } from './schema.ts';
import type { KeyAccess, KeyLookup, Tier } from './access.ts';
import { resolveRedisConnection } from './redis-url.ts';
import { adminExposureProblem } from '../security/admin-exposure.ts';
import { adapterOf } from '../providers/adapters.ts';
import { bedrockSigningFromEnv } from '../providers/bedrock/credentials.ts';
import { Catalogue } from '../catalogue/catalogue.ts';
import type { CatalogueBase } from '../catalogue/catalogue.ts';
import { mergeLimits } from '../catalogue/docs.ts';
import { keyHash } from '../catalogue/keys.ts';
import type { BedrockSigning } from '../providers/bedrock/credentials.ts';

/** A config that cannot be used; the message names the file and the key path of every problem. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  /** One line per problem: `<file>: <path>: <message>`. */
  readonly problems: readonly string[];

  constructor(problems: readonly string[]) {
    super(`invalid config:\n  ${problems.join('\n  ')}`);
    this.problems = problems;
  }
}

/** A deployment with its provider key resolved from the environment (never logged). */
export interface ResolvedDeployment extends DeploymentConfig {
  /** Provider key, or undefined when `api_key_env` is not set. */
  readonly apiKey: string | undefined;
  /** A Bedrock deployment without an API key: the SigV4 region and credentials (from AWS_*). */
  readonly aws?: BedrockSigning;
}

export type { KeyAccess, KeyLookup, Tier } from './access.ts';

/** Tenant id → limiter policy, over the YAML tenants and the catalogue's. */
export interface PolicyLookup {
  get(tenant: string): Policy | undefined;
  has(tenant: string): boolean;
}

/** The validated config plus the lookups the gateway needs per request. Frozen. */
export interface LoadedConfig {
  readonly file: string;
  readonly config: Config;
  /** API key → tenant (YAML and catalogue tenants). */
  readonly tenantByKey: KeyLookup<TenantConfig>;
  /** API key → its tenant and priority tiers. */
  readonly accessByKey: KeyLookup<KeyAccess>;
  /** Tier name → tier, highest first. */
  readonly tiers: ReadonlyMap<string, Tier>;
  /** Tenant id → limiter policy. */
  readonly policies: PolicyLookup;
  /** The tenant catalogue: the YAML tenants and, with `catalogue.store`, those managed at runtime. */
  readonly catalogue: Catalogue;
  /** What the catalogue was built on (the YAML lookups); a reload gives the catalogue the new one. */
  readonly base: CatalogueBase;
  /** Model name → model. */
  readonly models: ReadonlyMap<string, ModelConfig>;
  /** Deployment name → deployment with its key. */
  readonly deployments: ReadonlyMap<string, ResolvedDeployment>;
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    out += typeof part === 'number' ? `[${part}]` : `${out === '' ? '' : '.'}${String(part)}`;
  }
  return out === '' ? '(root)' : out;
}

function zodProblems(file: string, error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return `${file}: ${formatPath(issue.path)}: unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
    }
    return `${file}: ${formatPath(issue.path)}: ${issue.message}`;
  });
}

/**
 * Validates a parsed config object and builds the runtime view.
 * @param file name used in error messages.
 * @param env where `{env: NAME}` keys, `api_key_env`, the `cluster.redis` `*_env` variables,
 *   `admin.token_env` and a Bedrock deployment's AWS_* credentials and region are read. @default process.env
 * @throws ConfigError naming the file and the key path of every problem (among them an admin
 *   listener on a non-loopback `admin.host` whose token is a placeholder or too short); values
 *   are never echoed.
 */
export function buildConfig(raw: unknown, file: string, env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(zodProblems(file, parsed.error));
  const problems: string[] = [];
  const { redis: redisSource, ...clusterRest } = parsed.data.cluster;
  let redis: RedisConfig | undefined;
  if (redisSource !== undefined) {
    const resolved = resolveRedisConnection(redisSource, env);
    if ('connection' in resolved) {
      const { url: _fileUrl, ...rest } = redisSource;
      redis = { ...rest, ...(resolved.connection.kind === 'url' ? { url: resolved.connection.url } : {}), connection: resolved.connection };
    } else problems.push(...resolved.problems.map((p) => `${file}: ${p}`));
  }
  const withPlans = parsed.data.tenants.map((t) => resolvePlan(t, parsed.data.plans));
  const config: Config = { ...parsed.data, tenants: withPlans, cluster: { ...clusterRest, ...(redis === undefined ? {} : { redis }) } };

  const tiers = new Map<string, Tier>(config.priorities.map((p, rank) => [p.name, Object.freeze({ name: p.name, rank, floor: p.floor, maxWaitMs: p.max_wait })]));
  const tiersOf = (names: readonly string[]): ReadonlyMap<string, Tier> => new Map(names.map((n) => [n, tiers.get(n) as Tier]));
  // Keys held as their SHA-256 only: the YAML file has them in the clear, RAM does not.
  const tenantByKey = new Map<string, TenantConfig>();
  const accessByKey = new Map<string, KeyAccess>();
  config.tenants.forEach((tenant, i) => {
    const tenantTiers = tenant.priorities ?? [...tiers.keys()];
    tenant.keys.forEach((key, j) => {
      const plain = typeof key === 'string' ? key : (key.key ?? env[key.env ?? '']);
      if (plain === undefined || plain.length === 0) {
        problems.push(`${file}: tenants[${i}].keys[${j}].env: environment variable ${typeof key === 'string' ? '' : `${key.env} `}is not set`);
        return;
      }
      const value = keyHash(plain);
      if (tenantByKey.has(value)) {
        problems.push(`${file}: tenants[${i}].keys[${j}]: this key is already given to tenant "${tenantByKey.get(value)?.id}"`);
        return;
      }
      tenantByKey.set(value, tenant);
      const own = typeof key === 'string' ? {} : key;
      const allowed = own.priorities ?? tenantTiers;
      // A key limited to tiers without the tenant's default defaults to the highest of its own.
      const tenantDefault = tenant.priority ?? (tenantTiers[0] as string);
      const tier = own.priority ?? (allowed.includes(tenantDefault) ? tenantDefault : (allowed[0] as string));
      const keyId = typeof key === 'string' ? undefined : key.id;
      accessByKey.set(value, Object.freeze({ tenant, tier: tiers.get(tier) as Tier, tiers: tiersOf(allowed), ...(keyId === undefined ? {} : { keyId }) }));
    });
  });

  const deployments = new Map<string, ResolvedDeployment>();
  config.deployments.forEach((d, i) => {
    // A provider's own rule for its base URL (an Azure deployment URL needs its api-version).
    const urlProblem = adapterOf(d.provider).baseUrlProblem(d.base_url);
    if (urlProblem !== undefined) problems.push(`${file}: deployments[${i}].base_url: ${urlProblem}`);
    const apiKey = d.api_key_env === undefined ? undefined : env[d.api_key_env];
    if (d.api_key_env !== undefined && (apiKey === undefined || apiKey.length === 0)) {
      problems.push(`${file}: deployments[${i}].api_key_env: environment variable ${d.api_key_env} is not set`);
    }
    if (d.provider === 'bedrock' && d.api_key_env === undefined) {
      const signing = bedrockSigningFromEnv(d, env);
      if ('problems' in signing) problems.push(...signing.problems.map((p) => `${file}: deployments[${i}]: ${p}`));
      else {
        deployments.set(d.name, Object.freeze({ ...d, apiKey, aws: signing }));
        return;
      }
    }
    deployments.set(d.name, Object.freeze({ ...d, apiKey }));
  });
  // An admin listener reachable from other machines needs a token the operator chose.
  const exposure = adminExposureProblem(config.admin.host, config.admin.token_env, env[config.admin.token_env]);
  if (exposure !== undefined) problems.push(`${file}: admin.host: ${exposure}`);
  if (problems.length > 0) throw new ConfigError(problems);

  deepFreeze(config);
  const base: CatalogueBase = {
    config,
    tiers,
    yamlAccess: accessByKey,
    yamlPolicies: new Map(config.tenants.map((t) => [t.id, policyFromTenant(t)])),
    yamlTenants: new Map(config.tenants.map((t) => [t.id, t])),
  };
  return withCatalogue({ file, config, tiers, models: new Map(config.models.map((m) => [m.name, m])), deployments, base }, new Catalogue(base));
}

/**
 * A loaded config whose key, tenant and policy lookups go through `catalogue` (given `base`, the
 * YAML lookups of this config).
 */
export function withCatalogue(loaded: Omit<LoadedConfig, 'catalogue' | 'tenantByKey' | 'accessByKey' | 'policies'>, catalogue: Catalogue): LoadedConfig {
  return Object.freeze({
    ...loaded,
    catalogue,
    tenantByKey: { get: (key: string) => catalogue.tenantOfKey(key) },
    accessByKey: { get: (key: string) => catalogue.access(key) },
    policies: { get: (tenant: string) => catalogue.policy(tenant), has: (tenant: string) => catalogue.has(tenant) },
  });
}

/** A YAML tenant with its plan applied: the plan's limits under its own, the plan's tiers and estimator unless it sets them. */
function resolvePlan(tenant: TenantConfig, plans: readonly PlanConfig[]): TenantConfig {
  if (tenant.plan === undefined) return tenant;
  const plan = plans.find((p) => p.name === tenant.plan);
  if (plan === undefined) return tenant;
  const priority = tenant.priority ?? plan.priority;
  const priorities = tenant.priorities ?? plan.priorities;
  const estimator = tenant.estimator ?? plan.estimator;
  const share = tenant.share ?? plan.share;
  return {
    ...tenant,
    limits: mergeLimits(plan.limits, tenant.limits),
    ...(priority === undefined ? {} : { priority }),
    ...(priorities === undefined ? {} : { priorities }),
    ...(estimator === undefined ? {} : { estimator }),
    ...(share === undefined ? {} : { share }),
  };
}

/**
 * Reads and validates a YAML config file.
 * @throws ConfigError when the file cannot be read, is not YAML, or fails validation.
 */
export function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
  }
  const doc = parseDocument(text, { uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(doc.errors.map((e) => `${file}: line ${e.linePos?.[0]?.line ?? '?'}: ${e.code}: ${(e.message.split('\n')[0] ?? '').replace(/:$/, '')}`));
  }
  return buildConfig(doc.toJS(), file, env);
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
