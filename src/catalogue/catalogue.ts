/**
 * The tenant catalogue as every router and node holds it in RAM: the YAML `tenants:` list (the
 * base, replaced by a config reload) and the rows of the catalogue store (plans, tenants, keys),
 * applied as they arrive. Requests look keys up here, never in the store.
 *
 * What is held per row is kept small, for a million tenants (`entries.ts`): a tenant on a plan with
 * no limits of its own is its id, its plan's name and its keys; its policy is the plan's (one
 * compiled policy for every tenant of the plan). The full view of a tenant (`TenantConfig`, its
 * policy, its keys' tiers) is built on first use (`materialize.ts`) and kept in a bounded cache,
 * dropped when the tenant, one of its keys or its plan changes. Keys are held as their SHA-256 only
 * (`keys.ts`).
 *
 * Identity rules: a tenant id of the YAML list wins over a catalogue row of the same id (the
 * admin API refuses to create one); a plan of the YAML `plans:` list likewise.
 */
import { LRUCache } from 'lru-cache';
import type { KeyAccess } from '../config/access.ts';
import type { Config, PlanConfig, TenantConfig } from '../config/schema.ts';
import type { Policy } from '../limiter/types.ts';
import { KeyDocSchema, PlanDocSchema, TenantDocSchema } from './docs.ts';
import type { PlanDoc } from './docs.ts';
import type { CatalogueBase, KeyEntry, PlanEntry, TenantEntry } from './entries.ts';
import { issuedKeyId, keyHash, keyMatches } from './keys.ts';
import { materialize } from './materialize.ts';
import type { Materialized } from './materialize.ts';
import type { CatalogueRow } from './store.ts';

export type { CatalogueBase, KeyEntry, TenantEntry } from './entries.ts';

/** What applying rows changed. */
export interface AppliedRows {
  /** Tenants whose limits, keys or existence changed (a plan change names its tenants). */
  readonly tenants: ReadonlySet<string>;
  /** Rows skipped because their doc did not validate (`kind/id: message`). */
  readonly problems: readonly string[];
}

/** Size of the cache of full tenant views. @default 100_000 */
const MATERIALIZED_MAX = 100_000;

/** The catalogue in RAM. */
export class Catalogue {
  #base: CatalogueBase;
  readonly #tenants = new Map<string, TenantEntry>();
  readonly #keys = new Map<string, KeyEntry>();
  /** Imported keys of another form than `qr_<id>_<secret>` (`literal: true`): hash → entry. */
  readonly #literal = new Map<string, KeyEntry>();
  readonly #plans = new Map<string, PlanEntry>();
  /** Keys whose tenant has not arrived (yet): tenant id → keys. */
  readonly #orphans = new Map<string, KeyEntry[]>();
  /** Tombstones seen: `kind/id` → version (a revoked key, a deleted tenant or plan). */
  readonly #tombstones = new Map<string, number>();
  readonly #cache = new LRUCache<string, Materialized>({ max: MATERIALIZED_MAX });
  /** The shared policy of each YAML plan object, for tenants on it with nothing of their own. */
  readonly #yamlPlanPolicies = new WeakMap<PlanConfig, Policy>();
  /** Catalogue tenants with `metrics: true`. */
  readonly #metered = new Set<string>();
  #version = 0;
  #versionAt = 0;

  /** A catalogue of the YAML `base` only, until rows are applied. */
  constructor(base: CatalogueBase) {
    this.#base = base;
  }

  /** Replaces the YAML base (a config reload); catalogue rows stay, their views are rebuilt on use. */
  setBase(base: CatalogueBase): void {
    this.#base = base;
    for (const p of this.#plans.values()) p.policy = undefined;
    this.#cache.clear();
  }

  /** The running config the catalogue was last given. */
  get config(): Config {
    return this.#base.config;
  }

  /** Highest store version applied, and the `at` of that write (0, 0 before any row). */
  get head(): { readonly version: number; readonly at: number } {
    return { version: this.#version, at: this.#versionAt };
  }

  /** Catalogue tenants and keys held (YAML ones not counted). */
  get size(): { readonly tenants: number; readonly keys: number; readonly plans: number } {
    return { tenants: this.#tenants.size, keys: this.#keys.size, plans: this.#plans.size };
  }

  /**
   * What a presented API key gives, or undefined for an unknown, revoked or malformed key. An issued
   * key (`qr_<id>_<secret>`) is found by its id and its hash compared in constant time; any other is
   * looked up by its hash among the YAML keys. One SHA-256 per call; no I/O.
   */
  access(key: string): KeyAccess | undefined {
    const id = issuedKeyId(key);
    if (id !== undefined) {
      const entry = this.#keys.get(id);
      if (entry !== undefined) {
        if (!keyMatches(key, entry.hash)) return undefined;
        return this.#materialize(entry.tenant)?.access.get(id);
      }
    }
    const hash = keyHash(key);
    const yaml = this.#base.yamlAccess.get(hash);
    if (yaml !== undefined || this.#literal.size === 0) return yaml;
    const literal = this.#literal.get(hash);
    return literal === undefined ? undefined : this.#materialize(literal.tenant)?.access.get(literal.id);
  }

  /** The tenant a key gives (see {@link access}). */
  tenantOfKey(key: string): TenantConfig | undefined {
    return this.access(key)?.tenant;
  }

  /** A tenant by id (YAML or catalogue), or undefined. */
  tenant(id: string): TenantConfig | undefined {
    return this.#base.yamlTenants.get(id) ?? this.#materialize(id)?.tenant;
  }

  /** A tenant's policy (YAML or catalogue), or undefined when no such tenant exists. */
  policy(id: string): Policy | undefined {
    return this.#base.yamlPolicies.get(id) ?? this.#materialize(id)?.policy;
  }

  /** Whether a tenant exists (YAML or catalogue). */
  has(id: string): boolean {
    return this.#base.yamlTenants.has(id) || this.#tenants.has(id);
  }

  /** Whether `id` is a tenant of the YAML list (read-only to the admin API). */
  isYamlTenant(id: string): boolean {
    return this.#base.yamlTenants.has(id);
  }

  /** Whether `name` is a plan of the YAML `plans:` list (read-only to the admin API). */
  isYamlPlan(name: string): boolean {
    return this.#base.config.plans.some((p) => p.name === name);
  }

  /** A catalogue tenant's entry (for listings and the admin API). */
  entry(id: string): TenantEntry | undefined {
    return this.#tenants.get(id);
  }

  /**
   * Who holds a key of this hash among those found by hash: `''` for a YAML key, a tenant id for an
   * imported key of another form than `qr_<id>_<secret>`, undefined when none.
   */
  keyHashOwner(hash: string): string | undefined {
    if (this.#base.yamlAccess.has(hash)) return '';
    return this.#literal.get(hash)?.tenant;
  }

  /** A catalogue key's entry by public id. */
  keyEntry(id: string): KeyEntry | undefined {
    return this.#keys.get(id);
  }

  /** A plan by name: the catalogue's, else the YAML file's. */
  plan(name: string): PlanConfig | undefined {
    return this.#plans.get(name)?.plan ?? this.#base.config.plans.find((p) => p.name === name);
  }

  /** Every plan (YAML first), with the version of catalogue ones (0 for YAML). */
  plans(): { plan: PlanConfig; version: number; yaml: boolean }[] {
    return [...this.#base.config.plans.map((plan) => ({ plan, version: 0, yaml: true })), ...[...this.#plans.values()].map((p) => ({ plan: p.plan, version: p.version, yaml: false }))];
  }

  /** Every tenant id, YAML ones first. */
  *tenantIds(): IterableIterator<string> {
    yield* this.#base.yamlTenants.keys();
    for (const id of this.#tenants.keys()) if (!this.#base.yamlTenants.has(id)) yield id;
  }

  /** Catalogue tenant entries, in insertion order. */
  entries(): IterableIterator<TenantEntry> {
    return this.#tenants.values();
  }

  /** Tenants whose levels are exported as metrics (YAML `metrics: true` and catalogue ones). */
  *meteredTenants(): IterableIterator<string> {
    for (const t of this.#base.yamlTenants.values()) if (t.metrics) yield t.id;
    yield* this.#metered;
  }

  /** The version of the tombstone of `kind/id`, when one was seen. */
  tombstone(kind: CatalogueRow['kind'], id: string): number | undefined {
    return this.#tombstones.get(`${kind}/${id}`);
  }

  /** Every tombstone seen (`kind/id` → version). */
  tombstones(): ReadonlyMap<string, number> {
    return this.#tombstones;
  }

  /**
   * Applies rows read from the store, in version order. A row older than what is held for its
   * `(kind, id)` is ignored (a replay, or a store that went back); a tombstone removes the row; a row
   * whose doc does not validate is skipped and reported. Never throws.
   */
  apply(rows: readonly CatalogueRow[]): AppliedRows {
    const tenants = new Set<string>();
    const problems: string[] = [];
    for (const row of rows) {
      if (row.version > this.#version) {
        this.#version = row.version;
        this.#versionAt = row.at;
      }
      const stone = this.#tombstones.get(`${row.kind}/${row.id}`);
      if (stone !== undefined && stone >= row.version) continue;
      const problem = row.kind === 'tenant' ? this.#applyTenant(row, tenants) : row.kind === 'key' ? this.#applyKey(row, tenants) : this.#applyPlan(row, tenants);
      if (problem !== undefined) problems.push(`${row.kind}/${row.id}: ${problem}`);
    }
    for (const t of tenants) this.#cache.delete(t);
    return { tenants, problems };
  }

  /**
   * Every catalogue row held, tombstones included, as a store would return it (`at` 0 and `actor`
   * empty: not held in RAM): plans, then tenants each followed by its keys. For the local copy,
   * exports and writing rows back to a store that went back in time.
   */
  *rows(): IterableIterator<CatalogueRow> {
    for (const [name, p] of this.#plans) yield { kind: 'plan', id: name, version: p.version, deleted: false, doc: p.raw, at: 0, actor: '' };
    for (const t of this.#tenants.values()) {
      yield { kind: 'tenant', id: t.id, version: t.version, deleted: false, doc: t.raw ?? (t.plan === undefined ? {} : { plan: t.plan }), at: 0, actor: '' };
      for (const k of t.keys) yield { kind: 'key', id: k.id, version: k.version, deleted: false, tenant: k.tenant, hash: k.hash, doc: k.raw ?? {}, at: 0, actor: '' };
    }
    for (const waiting of this.#orphans.values()) for (const k of waiting) yield { kind: 'key', id: k.id, version: k.version, deleted: false, tenant: k.tenant, hash: k.hash, doc: k.raw ?? {}, at: 0, actor: '' };
    for (const [ref, version] of this.#tombstones) {
      const slash = ref.indexOf('/');
      yield { kind: ref.slice(0, slash) as CatalogueRow['kind'], id: ref.slice(slash + 1), version, deleted: true, doc: {}, at: 0, actor: '' };
    }
  }

  /** Marks the applied head (after a full read of a store that went back in time). */
  setHead(version: number, at: number): void {
    this.#version = version;
    this.#versionAt = at;
  }

  #applyTenant(row: CatalogueRow, changed: Set<string>): string | undefined {
    const old = this.#tenants.get(row.id);
    if (old !== undefined && old.version >= row.version) return undefined;
    changed.add(row.id);
    if (row.deleted) {
      this.#tombstones.set(`tenant/${row.id}`, row.version);
      if (old !== undefined) for (const k of old.keys) this.#dropKey(k);
      this.#tenants.delete(row.id);
      this.#metered.delete(row.id);
      return undefined;
    }
    const parsed = TenantDocSchema.safeParse(row.doc);
    if (!parsed.success) return parsed.error.issues[0]?.message ?? 'invalid doc';
    const doc = parsed.data;
    const plain = doc.limits.length === 0 && doc.priority === undefined && doc.priorities === undefined && doc.estimator === undefined && !doc.metrics && doc.labels === undefined;
    const id = old?.id ?? row.id;
    const waiting = this.#orphans.get(id);
    if (waiting !== undefined) this.#orphans.delete(id);
    this.#tenants.set(id, { id, doc: plain ? undefined : doc, raw: plain ? undefined : row.doc, plan: doc.plan, version: row.version, keys: old?.keys ?? waiting ?? [] });
    if (doc.metrics) this.#metered.add(id);
    else this.#metered.delete(id);
    return undefined;
  }

  #applyKey(row: CatalogueRow, changed: Set<string>): string | undefined {
    const old = this.#keys.get(row.id);
    if (old !== undefined && old.version >= row.version) return undefined;
    const detach = (k: KeyEntry): void => {
      const t = this.#tenants.get(k.tenant);
      if (t !== undefined) t.keys = t.keys.filter((x) => x.id !== k.id);
      const waiting = this.#orphans.get(k.tenant);
      if (waiting !== undefined) this.#orphans.set(k.tenant, waiting.filter((x) => x.id !== k.id));
      changed.add(k.tenant);
    };
    if (row.deleted) {
      this.#tombstones.set(`key/${row.id}`, row.version);
      if (old !== undefined) {
        detach(old);
        this.#dropKey(old);
      }
      return undefined;
    }
    if (row.tenant === undefined || row.hash === undefined || !/^[A-Za-z0-9_-]{43}$/.test(row.hash)) return 'a key row needs its tenant and a 32-byte hash';
    const parsed = KeyDocSchema.safeParse(row.doc);
    if (!parsed.success) return parsed.error.issues[0]?.message ?? 'invalid doc';
    const doc = parsed.data;
    const plain = doc.limits.length === 0 && doc.priority === undefined && doc.priorities === undefined && doc.name === undefined && !doc.literal;
    if (old !== undefined) {
      detach(old);
      this.#dropKey(old);
    }
    const owner = this.#tenants.get(row.tenant);
    // A key may arrive before its tenant (rows of one write in any order): it waits in #keys and
    // is attached when found; access() of a key whose tenant is missing finds no tenant.
    const entry: KeyEntry = { id: row.id, tenant: owner?.id ?? row.tenant, hash: row.hash, doc: plain ? undefined : doc, raw: plain ? undefined : row.doc, version: row.version };
    this.#keys.set(row.id, entry);
    if (doc.literal) this.#literal.set(entry.hash, entry);
    if (owner !== undefined) owner.keys.push(entry);
    else this.#orphans.set(row.tenant, [...(this.#orphans.get(row.tenant) ?? []), entry]);
    changed.add(entry.tenant);
    return undefined;
  }

  #dropKey(k: KeyEntry): void {
    this.#keys.delete(k.id);
    if (this.#literal.get(k.hash) === k) this.#literal.delete(k.hash);
  }

  #applyPlan(row: CatalogueRow, changed: Set<string>): string | undefined {
    const old = this.#plans.get(row.id);
    if (old !== undefined && old.version >= row.version) return undefined;
    if (row.deleted) {
      this.#tombstones.set(`plan/${row.id}`, row.version);
      this.#plans.delete(row.id);
    } else {
      const parsed = PlanDocSchema.safeParse(row.doc);
      if (!parsed.success) return parsed.error.issues[0]?.message ?? 'invalid doc';
      const doc: PlanDoc = parsed.data;
      this.#plans.set(row.id, { plan: { name: row.id, ...doc }, raw: row.doc, version: row.version, policy: undefined });
    }
    // Every tenant of the plan changes; a plan change is rare, a scan is fine.
    for (const t of this.#tenants.values()) if (t.plan === row.id) changed.add(t.id);
    return undefined;
  }

  /** The full view of a catalogue tenant (cached; built by `materialize.ts`); undefined when it does not exist. */
  #materialize(id: string): Materialized | undefined {
    const hit = this.#cache.get(id);
    if (hit !== undefined) return hit;
    const entry = this.#tenants.get(id);
    if (entry === undefined || this.#base.yamlTenants.has(id)) return undefined;
    const made = materialize(entry, this.#plans, this.#base, this.#yamlPlanPolicies);
    this.#cache.set(id, made);
    return made;
  }
}
