/**
 * A config that can be reloaded while the process runs (admin API `POST /admin/v1/config/reload`).
 * Everything reads the current config through this object's getters at use time, so a reload
 * applies to the next request. Only `tenants`, `models` and `priorities` may change; a file that
 * does not load, or that changes anything else (listeners, cluster, mode, deployments and their
 * quotas, token counting, queues, admin), is refused and the last good config stays.
 */
import { isDeepStrictEqual } from 'node:util';
import { ConfigError, loadConfig, withCatalogue } from './load.ts';
import type { KeyAccess, KeyLookup, LoadedConfig, PolicyLookup, ResolvedDeployment, Tier } from './load.ts';
import type { Config, ModelConfig, TenantConfig } from './schema.ts';
import type { Policy } from '../limiter/types.ts';
import type { Catalogue, CatalogueBase } from '../catalogue/catalogue.ts';

/** Sections a reload may change. */
export const RELOADABLE_SECTIONS = ['tenants', 'plans', 'models', 'priorities'] as const;

/** The outcome of {@link ReloadableConfig.reload}. */
export type ReloadResult =
  | {
      readonly ok: true;
      /** Tenants added, removed, or with changed keys, limits or tiers. */
      readonly tenantsChanged: readonly string[];
      readonly modelsChanged: boolean;
      readonly prioritiesChanged: boolean;
    }
  | {
      readonly ok: false;
      /** One line per problem (`<file>: <path>: <message>`, or a section that needs a restart). */
      readonly problems: readonly string[];
    };

/** A {@link LoadedConfig} whose content a reload replaces; built from a loaded one. */
export class ReloadableConfig implements LoadedConfig {
  #current: LoadedConfig;
  readonly #env: NodeJS.ProcessEnv;

  constructor(initial: LoadedConfig, env: NodeJS.ProcessEnv = process.env) {
    this.#current = initial;
    this.#env = env;
  }

  get file(): string {
    return this.#current.file;
  }
  get config(): Config {
    return this.#current.config;
  }
  get tenantByKey(): KeyLookup<TenantConfig> {
    return this.#current.tenantByKey;
  }
  get accessByKey(): KeyLookup<KeyAccess> {
    return this.#current.accessByKey;
  }
  get tiers(): ReadonlyMap<string, Tier> {
    return this.#current.tiers;
  }
  get policies(): PolicyLookup {
    return this.#current.policies;
  }
  get catalogue(): Catalogue {
    return this.#current.catalogue;
  }
  get base(): CatalogueBase {
    return this.#current.base;
  }
  get models(): ReadonlyMap<string, ModelConfig> {
    return this.#current.models;
  }
  get deployments(): ReadonlyMap<string, ResolvedDeployment> {
    return this.#current.deployments;
  }

  /**
   * Reads `file` (default: the file loaded last) and applies it if it is valid and changes only
   * {@link RELOADABLE_SECTIONS}. A tenant whose limits did not change keeps its policy object, so
   * its limiter state is untouched; a changed one is rebuilt on its next request keeping usage by
   * limit name (`Limiter.acquire`). Never throws: problems are returned and nothing changes.
   */
  reload(file: string = this.#current.file): ReloadResult {
    let next: LoadedConfig;
    try {
      next = loadConfig(file, this.#env);
    } catch (err) {
      return { ok: false, problems: err instanceof ConfigError ? err.problems : [`${file}: ${(err as Error).message}`] };
    }
    const before = this.#current.config;
    const after = next.config;
    const fixed = (Object.keys(after) as (keyof Config)[]).filter((k) => !(RELOADABLE_SECTIONS as readonly string[]).includes(k) && !isDeepStrictEqual(before[k], after[k]));
    if (fixed.length > 0) {
      return { ok: false, problems: fixed.map((k) => `${file}: ${k}: changed, and ${k} is read once at start: restart the process to apply it (a reload applies ${RELOADABLE_SECTIONS.join(', ')})`) };
    }
    const oldTenants = new Map(before.tenants.map((t) => [t.id, t]));
    const tenantsChanged = new Set<string>();
    const policies = new Map<string, Policy>();
    for (const t of after.tenants) {
      const old = oldTenants.get(t.id);
      const oldPolicy = this.#current.base.yamlPolicies.get(t.id);
      const same = old !== undefined && isDeepStrictEqual(old, t);
      if (!same) tenantsChanged.add(t.id);
      // Same limits: the same policy object, so the limiter keeps the tenant's state as it is.
      policies.set(t.id, old !== undefined && oldPolicy !== undefined && isDeepStrictEqual(old.limits, t.limits) ? oldPolicy : (next.base.yamlPolicies.get(t.id) as Policy));
    }
    for (const id of oldTenants.keys()) if (!policies.has(id)) tenantsChanged.add(id);
    // One catalogue for the process's life: its rows stay, it is given the new YAML base.
    const catalogue = this.#current.catalogue;
    const base: CatalogueBase = { ...next.base, yamlPolicies: policies };
    catalogue.setBase(base);
    const { catalogue: _fresh, tenantByKey: _t, accessByKey: _a, policies: _p, ...rest } = next;
    this.#current = withCatalogue({ ...rest, base }, catalogue);
    return { ok: true, tenantsChanged: [...tenantsChanged].sort(), modelsChanged: !isDeepStrictEqual(before.models, after.models), prioritiesChanged: !isDeepStrictEqual(before.priorities, after.priorities) };
  }
}
