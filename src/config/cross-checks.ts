/**
 * The checks across fields and sections of the config file (names that must exist or be unique,
 * settings that exclude or need each other), one named function per rule. `ConfigSchema`'s
 * refinement (`schema.ts`) calls them in a fixed order, which is the order of the issues it reports.
 */
import type { z } from 'zod';
import type { SectionsConfig } from './schema-sections.ts';

/** One tenant of the file. */
type Tenant = SectionsConfig['tenants'][number];
/** One model of the file. */
type Model = SectionsConfig['models'][number];
/** One limit of a tenant or a key. */
type Limit = Tenant['limits'][number];

/** Adds an issue for each item whose name (or id) an earlier item of the list `field` already has. */
function flagDuplicates(items: readonly { name?: string; id?: string }[], field: 'tenants' | 'plans' | 'models' | 'deployments', ctx: z.RefinementCtx): void {
  const seen = new Set<string>();
  items.forEach((item, i) => {
    const name = item.name ?? item.id ?? '';
    if (seen.has(name)) ctx.addIssue({ code: 'custom', path: [field, i], message: `duplicate name "${name}"` });
    seen.add(name);
  });
}

/** No two tenants share an id. */
export function uniqueTenantIds(config: SectionsConfig, ctx: z.RefinementCtx): void {
  flagDuplicates(config.tenants, 'tenants', ctx);
}

/** No two plans share a name. */
export function uniquePlanNames(config: SectionsConfig, ctx: z.RefinementCtx): void {
  flagDuplicates(config.plans, 'plans', ctx);
}

/** The file lists at least one tenant, unless a catalogue store (`catalogue.store`) keeps tenants managed at runtime. */
export function tenantsOrCatalogueStore(config: SectionsConfig, ctx: z.RefinementCtx): void {
  if (config.tenants.length === 0 && config.catalogue.store === 'none') {
    ctx.addIssue({ code: 'custom', path: ['tenants'], message: 'list at least one tenant, or set catalogue.store (file or postgres) to manage tenants at runtime' });
  }
}

/** Each tenant's `plan` names a plan of the file. */
export function tenantPlansExist(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const planNames = new Set(config.plans.map((p) => p.name));
  config.tenants.forEach((tenant, i) => {
    if (tenant.plan !== undefined && !planNames.has(tenant.plan)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'plan'], message: `no plan named "${tenant.plan}" (plans: ${[...planNames].join(', ') || 'none'})` });
  });
}

/** No two models share a name. */
export function uniqueModelNames(config: SectionsConfig, ctx: z.RefinementCtx): void {
  flagDuplicates(config.models, 'models', ctx);
}

/** No two deployments share a name. */
export function uniqueDeploymentNames(config: SectionsConfig, ctx: z.RefinementCtx): void {
  flagDuplicates(config.deployments, 'deployments', ctx);
}

/** `mode: central` has Redis (`cluster.redis`) to keep every limit in. */
export function centralModeHasRedis(config: SectionsConfig, ctx: z.RefinementCtx): void {
  if (config.mode === 'central' && config.cluster.redis === undefined) {
    ctx.addIssue({ code: 'custom', path: ['mode'], message: 'mode: central keeps every limit in Redis: set cluster.redis.url' });
  }
}

/** Hot tenant detection (`cluster.hot.threshold_rps`) has Redis to share the hot set through. */
export function hotDetectionHasRedis(config: SectionsConfig, ctx: z.RefinementCtx): void {
  if (config.cluster.hot.threshold_rps !== undefined && config.cluster.redis === undefined) {
    ctx.addIssue({ code: 'custom', path: ['cluster', 'hot', 'threshold_rps'], message: 'hot tenant detection needs cluster.redis.url (the hot set is shared through Redis); use spread: k on the tenant instead' });
  }
}

/** Membership is static (`cluster.members`) or through Redis (`cluster.redis`), not both. */
export function oneMembership(config: SectionsConfig, ctx: z.RefinementCtx): void {
  if (config.cluster.redis !== undefined && config.cluster.members.length > 0) {
    ctx.addIssue({ code: 'custom', path: ['cluster'], message: 'set either members (static membership) or redis.url (Redis membership), not both' });
  }
}

/** Timeouts and header limits of the node's and the router's listeners neither contradict each other nor cut legitimate requests. */
export function listenerTimeouts(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const longestWait = Math.max(0, ...config.priorities.map((p) => p.max_wait));
  const longestHeaders = Math.max(0, ...config.deployments.map((d) => d.headers_timeout));
  const longestBody = Math.max(0, ...config.deployments.map((d) => d.body_timeout));
  // A request a router accepts must not be refused by its node (which allows more for what routers add).
  if (config.router.max_headers > config.server.max_headers) {
    ctx.addIssue({ code: 'custom', path: ['router', 'max_headers'], message: `router.max_headers (${config.router.max_headers}) cannot exceed server.max_headers (${config.server.max_headers})` });
  }
  if (config.router.max_header_size > config.server.max_header_size) {
    ctx.addIssue({ code: 'custom', path: ['router', 'max_header_size'], message: `router.max_header_size (${config.router.max_header_size} bytes) cannot exceed server.max_header_size (${config.server.max_header_size} bytes)` });
  }
  for (const section of ['server', 'router'] as const) {
    const s = config[section];
    if (s.request_timeout > 0 && s.headers_timeout > s.request_timeout) {
      ctx.addIssue({ code: 'custom', path: [section, 'headers_timeout'], message: `headers_timeout (${s.headers_timeout} ms) cannot exceed request_timeout (${s.request_timeout} ms)` });
    }
    const silent = Math.max(longestWait + longestHeaders, longestBody);
    if (s.idle_timeout > 0 && s.idle_timeout <= silent) {
      ctx.addIssue({
        code: 'custom',
        path: [section, 'idle_timeout'],
        message: `idle_timeout (${s.idle_timeout} ms) would cut requests that legitimately wait ${silent} ms without a byte (longest priority max_wait + longest deployment headers_timeout, or a body_timeout): raise it or set 0`,
      });
    }
  }
}

/** No two static members share an id. */
export function uniqueMemberIds(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const ids = new Set<string>();
  config.cluster.members.forEach((m, i) => {
    if (ids.has(m.id)) ctx.addIssue({ code: 'custom', path: ['cluster', 'members', i, 'id'], message: `duplicate member id "${m.id}"` });
    ids.add(m.id);
  });
}

/** A deployment sets `responses_api` only with provider openai, azure or vllm, and `auth` only with azure. */
export function providerOptions(config: SectionsConfig, ctx: z.RefinementCtx): void {
  config.deployments.forEach((d, i) => {
    if (d.responses_api !== undefined && d.provider !== 'openai' && d.provider !== 'azure' && d.provider !== 'vllm') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'responses_api'], message: `responses_api applies to openai, azure and vllm deployments (a ${d.provider} deployment always serves Responses requests translated)` });
    if (d.auth !== undefined && d.provider !== 'azure') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'auth'], message: `auth applies to azure deployments only (${d.provider} keys are sent the ${d.provider} way)` });
  });
}

/** A deployment sets `region` only with provider bedrock. */
export function bedrockRegions(config: SectionsConfig, ctx: z.RefinementCtx): void {
  config.deployments.forEach((d, i) => {
    if (d.region !== undefined && d.provider !== 'bedrock') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'region'], message: 'region is for provider: bedrock only' });
  });
}

/** Each model's `weights` give one weight per deployment, at least one above 0, and each of its deployments exists. */
export function modelWeightsAndDeployments(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const deployments = new Set(config.deployments.map((d) => d.name));
  config.models.forEach((model, i) => {
    if (model.weights !== undefined && model.weights.length !== model.deployments.length) {
      ctx.addIssue({ code: 'custom', path: ['models', i, 'weights'], message: `give one weight per deployment (${model.deployments.length}), got ${model.weights.length}` });
    } else if (model.weights !== undefined && !model.weights.some((w) => w > 0)) {
      ctx.addIssue({ code: 'custom', path: ['models', i, 'weights'], message: 'at least one weight must be > 0' });
    }
    model.deployments.forEach((name, j) => {
      if (!deployments.has(name)) {
        ctx.addIssue({ code: 'custom', path: ['models', i, 'deployments', j], message: `no deployment named "${name}"` });
      }
    });
  });
}

/** No two priority tiers share a name. */
export function uniqueTierNames(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const tiers = new Set<string>();
  config.priorities.forEach((p, i) => {
    if (tiers.has(p.name)) ctx.addIssue({ code: 'custom', path: ['priorities', i, 'name'], message: `duplicate tier "${p.name}"` });
    tiers.add(p.name);
  });
}

/** The tiers a tenant names (`priorities`, `priority`) exist, and those its keys name are among the tenant's. */
export function tenantTiers(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const tiers = new Set(config.priorities.map((p) => p.name));
  const tierList = [...tiers].join(', ');
  config.tenants.forEach((tenant, i) => {
    const allowed = new Set(tenant.priorities ?? tiers);
    (tenant.priorities ?? []).forEach((name, j) => {
      if (!tiers.has(name)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priorities', j], message: `no tier named "${name}" (tiers: ${tierList})` });
    });
    if (tenant.priority !== undefined && !tiers.has(tenant.priority)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priority'], message: `no tier named "${tenant.priority}" (tiers: ${tierList})` });
    else if (tenant.priority !== undefined && !allowed.has(tenant.priority)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priority'], message: `"${tenant.priority}" is not among the tenant's priorities` });
    tenant.keys.forEach((key, j) => {
      if (typeof key === 'string') return;
      (key.priorities ?? []).forEach((name, k) => {
        if (!allowed.has(name)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'priorities', k], message: `"${name}" is not among the tenant's tiers (${[...allowed].join(', ')})` });
      });
      if (key.priority !== undefined && !new Set(key.priorities ?? allowed).has(key.priority)) {
        ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'priority'], message: `"${key.priority}" is not among the key's tiers (${[...(key.priorities ?? allowed)].join(', ')})` });
      }
    });
  });
}

/** Each concurrency limit of a spread tenant (`spread: k`) has at least one slot for each of its k nodes. */
export function spreadConcurrency(config: SectionsConfig, ctx: z.RefinementCtx): void {
  config.tenants.forEach((tenant, i) => {
    if (tenant.spread === undefined) return;
    tenant.limits.forEach((limit, j) => {
      if (limit.concurrent !== undefined && limit.concurrent < tenant.spread!) {
        ctx.addIssue({ code: 'custom', path: ['tenants', i, 'limits', j, 'concurrent'], message: `concurrent ${limit.concurrent} cannot be split over spread ${tenant.spread} nodes (each needs at least 1 slot)` });
      }
    });
  });
}

/** A list of limits (a tenant's, or one key's) and the path of that list in the file. */
interface LimitScope {
  readonly path: (string | number)[];
  readonly limits: readonly Limit[];
}

/** Tenant after tenant: its keys ({@link tenantKeys}), then its limits and its keys' ({@link scopedLimits}). */
export function keysAndLimits(config: SectionsConfig, ctx: z.RefinementCtx): void {
  const models = new Set(config.models.map((m) => m.name));
  const deploymentByName = new Map(config.deployments.map((d) => [d.name, d]));
  /** True when every request for `model` has a price (the model's, or every one of its deployments'). */
  const priced = (model: Model): boolean => model.prices !== undefined || model.deployments.every((d) => deploymentByName.get(d)?.prices !== undefined);
  config.tenants.forEach((tenant, i) => {
    const scopes = tenantKeys(config, tenant, i, ctx);
    for (const scope of scopes) scopedLimits(config, tenant, scope, models, priced, ctx);
  });
}

/** Key ids are unique in tenant `i`, and no key has limits on a spread tenant or with `mode: central`; returns the tenant's limit lists. */
function tenantKeys(config: SectionsConfig, tenant: Tenant, i: number, ctx: z.RefinementCtx): LimitScope[] {
  const scopes: LimitScope[] = [{ path: ['tenants', i, 'limits'], limits: tenant.limits }];
  const keyIds = new Set<string>();
  tenant.keys.forEach((key, j) => {
    if (typeof key === 'string') return;
    if (key.id !== undefined) {
      if (keyIds.has(key.id)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'id'], message: `duplicate key id "${key.id}" in tenant ${tenant.id}` });
      keyIds.add(key.id);
    }
    if (key.limits !== undefined && key.limits.length > 0) {
      scopes.push({ path: ['tenants', i, 'keys', j, 'limits'], limits: key.limits });
      if (tenant.spread !== undefined) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'limits'], message: 'limits per key are not supported on a spread tenant (spread: k)' });
      if (config.mode === 'central') ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'limits'], message: 'limits per key are kept with their tenant on its owner: not supported with mode: central' });
    }
  });
  return scopes;
}

/** Each limit of `scope` names a known model; a cost (usd) limit is not on `mode: central` or a spread tenant, and has prices for every model it covers. */
function scopedLimits(config: SectionsConfig, tenant: Tenant, scope: LimitScope, models: ReadonlySet<string>, priced: (model: Model) => boolean, ctx: z.RefinementCtx): void {
  scope.limits.forEach((limit, j) => {
    if (limit.model !== undefined && !models.has(limit.model)) {
      ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'model'], message: `no model named "${limit.model}"` });
    }
    if (limit.usd === undefined) return;
    if (config.mode === 'central') ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: 'cost (usd) limits are kept in the owner\'s RAM: not supported with mode: central' });
    if (tenant.spread !== undefined) ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: 'cost (usd) limits are not supported on a spread tenant (spread: k)' });
    const unpriced = config.models.filter((m) => (limit.model === undefined || m.name === limit.model) && !priced(m)).map((m) => m.name);
    if (unpriced.length > 0) {
      ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: `a cost limit needs prices for every model it covers: set prices on model${unpriced.length > 1 ? 's' : ''} ${unpriced.join(', ')} (or on each of ${unpriced.length > 1 ? 'their' : 'its'} deployments)` });
    }
  });
}

/** A fair-shared deployment has a quota to share; a `sliding_window` quota needs headroom below 1 (its bucket holds `(1 − headroom) × quota`). */
export function fairShareNeedsQuota(config: SectionsConfig, ctx: z.RefinementCtx): void {
  config.deployments.forEach((d, i) => {
    const limited = d.quota.rpm !== undefined || d.quota.tpm !== undefined;
    if (d.fair_share !== undefined && d.fair_share !== false && !limited) ctx.addIssue({ code: 'custom', path: ['deployments', i, 'fair_share'], message: 'fair_share needs a quota (rpm and/or tpm) to share' });
    if (d.quota.algorithm === 'sliding_window' && !(d.headroom < 1)) ctx.addIssue({ code: 'custom', path: ['deployments', i, 'headroom'], message: 'a sliding_window quota needs headroom below 1 (the bucket holds (1 - headroom) x quota)' });
  });
}
