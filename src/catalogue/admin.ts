/**
 * The changes the admin API makes to the catalogue (create, change and delete tenants and plans;
 * issue, revoke and rotate keys; import), as writes to the store with conditions that make each
 * one exact under concurrent callers: a tenant is created only if absent, changed only at the
 * version the caller's view read, a key issued only to a live tenant. After a write the process
 * applies it before answering (read-your-writes); the other processes get it from the store.
 *
 * Answers are `{ status, body }` in the admin API's shape (`adminError`); no HTTP types here.
 */
import type { Catalogue, KeyEntry, TenantEntry } from './catalogue.ts';
import { error, invalid, off, unavailable } from './answers.ts';
import type { AdminAnswer } from './answers.ts';
import { configProblems, KeyDocSchema, PlanDocSchema, problemsOf, protoKeyPath, TenantDocSchema } from './docs.ts';
import { importRows } from './import.ts';
import type { CatalogueFollower } from './follower.ts';
import { issueKey } from './keys.ts';
import { CatalogueConflict, CatalogueUnavailable } from './store.ts';
import type { CatalogueStore, RowCondition, RowWrite } from './store.ts';
import { CATALOGUE_ID } from '../config/catalogue-schema.ts';
import { limitName } from '../config/policy.ts';

/** Most tenants one listing page holds. */
export const LIST_MAX = 1_000;

/** A tenant as the admin API shows it: id, plan, doc, keys (public ids and names, never secrets), version. */
export interface TenantView {
  readonly id: string;
  readonly source: 'catalogue' | 'config';
  readonly version: number;
  readonly plan: string | null;
  readonly doc: Readonly<Record<string, unknown>>;
  /** The limits in force: the plan's with the tenant's own applied, by name. */
  readonly limits: readonly string[];
  readonly keys: readonly { readonly id: string; readonly name: string | null; readonly version: number }[];
}

/** Options of a {@link CatalogueAdmin}. */
export interface CatalogueAdminOptions {
  readonly catalogue: Catalogue;
  /** Undefined: `catalogue.store: none` (every change answers 409 `catalogue_off`). */
  readonly store: CatalogueStore | undefined;
  readonly follower: CatalogueFollower | undefined;
}

/** The catalogue's admin operations. */
export class CatalogueAdmin {
  readonly #c: Catalogue;
  readonly #store: CatalogueStore | undefined;
  readonly #follower: CatalogueFollower | undefined;

  constructor(o: CatalogueAdminOptions) {
    this.#c = o.catalogue;
    this.#store = o.store;
    this.#follower = o.follower;
  }

  /** A tenant's view, or 404. */
  getTenant(id: string): AdminAnswer {
    const view = this.#view(id);
    return view === undefined ? error(404, 'not_found', `No tenant ${id}.`) : { status: 200, body: view };
  }

  /**
   * A page of tenants in id order after `after`, at most `limit` (≤ 1,000), optionally only those on
   * `plan`, with label `label` (`name:value`), or whose id starts with `prefix`. Scans the tenants
   * held (YAML and catalogue): O(tenants), yielding to the event loop every 50,000.
   */
  async listTenants(q: { after?: unknown; limit?: number; plan?: unknown; label?: unknown; prefix?: unknown }): Promise<AdminAnswer> {
    for (const name of ['after', 'plan', 'label', 'prefix'] as const) if (q[name] !== undefined && typeof q[name] !== 'string') return error(400, 'invalid_field', `${name}: give it once`, name);
    const after = q.after as string | undefined;
    const plan = q.plan as string | undefined;
    const prefix = q.prefix as string | undefined;
    const label = q.label as string | undefined;
    const limit = q.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > LIST_MAX) return error(400, 'invalid_field', `limit: 1 ..= ${LIST_MAX}`, 'limit');
    const colon = label === undefined ? -1 : label.indexOf(':');
    const labelName = label === undefined || colon < 0 ? undefined : label.slice(0, colon);
    const labelValue = label === undefined || colon < 0 ? undefined : label.slice(colon + 1);
    if (label !== undefined && (labelName === undefined || labelName === '')) return error(400, 'invalid_field', 'label: name:value', 'label');
    const page: string[] = [];
    let scanned = 0;
    let total = 0;
    for (const id of this.#c.tenantIds()) {
      if (++scanned % 50_000 === 0) await new Promise((r) => setImmediate(r));
      if (prefix !== undefined && !id.startsWith(prefix)) continue;
      if (plan !== undefined || labelName !== undefined) {
        const t = this.#c.entry(id);
        const itsPlan = t?.plan ?? this.#c.tenant(id)?.plan;
        if (plan !== undefined && itsPlan !== plan) continue;
        if (labelName !== undefined && t?.doc?.labels?.[labelName] !== labelValue) continue;
      }
      total += 1;
      if (after !== undefined && id <= after) continue;
      // Keep the `limit` smallest ids after the cursor (insertion into a short sorted array).
      if (page.length === limit && id >= (page[limit - 1] as string)) continue;
      let i = page.length;
      while (i > 0 && (page[i - 1] as string) > id) i--;
      page.splice(i, 0, id);
      if (page.length > limit) page.pop();
    }
    const tenants = page.map((id) => this.#view(id) as TenantView);
    return { status: 200, body: { tenants, total, next: page.length === limit ? (page.at(-1) ?? null) : null } };
  }

  /** Creates a tenant (`body`: `{ id, plan?, limits?, priority?, priorities?, estimator?, metrics?, labels?, issue_key? }`); 201 with its view and, with `issue_key: true`, its first key. */
  async createTenant(body: unknown, actor: string): Promise<AdminAnswer> {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return invalid([{ field: '(body)', message: 'a JSON object' }]);
    const proto = protoKeyPath(body);
    if (proto !== undefined) return invalid([{ field: proto, message: 'a reserved name (__proto__, constructor, prototype)' }]);
    const { id, issue_key: issue, ...doc } = body as Record<string, unknown>;
    if (typeof id !== 'string' || !CATALOGUE_ID.test(id)) return invalid([{ field: 'id', message: 'tenant id: 1-64 of A-Z a-z 0-9 . _ -' }]);
    if (issue !== undefined && typeof issue !== 'boolean') return invalid([{ field: 'issue_key', message: 'true or false' }]);
    if (this.#c.isYamlTenant(id)) return error(409, 'tenant_in_config', `Tenant ${id} is in the config file's tenants list: change it there.`, 'id');
    const checked = this.#checkTenantDoc(doc);
    if ('status' in checked) return checked;
    const key = issue === true ? issueKey() : undefined;
    const rows: RowWrite[] = [{ kind: 'tenant', id, deleted: false, doc }];
    if (key !== undefined) rows.push({ kind: 'key', id: key.id, tenant: id, hash: key.hash, deleted: false, doc: {} });
    const written = await this.#write(rows, [{ kind: 'tenant', id, live: false }, ...checked.conditions], actor);
    if (written !== undefined) return written;
    return { status: 201, body: { tenant: this.#view(id), ...(key === undefined ? {} : { key: { id: key.id, key: key.key } }) } };
  }

  /** Changes a tenant: `patch`'s fields replace the tenant's (`null` removes one); 200 with the new view. */
  async updateTenant(id: string, patch: unknown, actor: string): Promise<AdminAnswer> {
    const t = this.#c.entry(id);
    if (t === undefined) return this.#c.isYamlTenant(id) ? error(409, 'tenant_in_config', `Tenant ${id} is in the config file's tenants list: change it there.`) : error(404, 'not_found', `No tenant ${id}.`);
    if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return invalid([{ field: '(body)', message: 'a JSON object of the fields to change' }]);
    const proto = protoKeyPath(patch);
    if (proto !== undefined) return invalid([{ field: proto, message: 'a reserved name (__proto__, constructor, prototype)' }]);
    if ('id' in patch && (patch as { id: unknown }).id !== id) return invalid([{ field: 'id', message: 'a tenant id cannot change: create a new tenant' }]);
    const doc: Record<string, unknown> = { ...(t.raw ?? (t.plan === undefined ? {} : { plan: t.plan })) };
    for (const [k, v] of Object.entries(patch)) {
      if (k === 'id') continue;
      if (v === null) delete doc[k];
      else doc[k] = v;
    }
    const checked = this.#checkTenantDoc(doc);
    if ('status' in checked) return checked;
    const written = await this.#write([{ kind: 'tenant', id, deleted: false, doc }], [{ kind: 'tenant', id, live: true, version: t.version }, ...checked.conditions], actor);
    return written ?? { status: 200, body: { tenant: this.#view(id) } };
  }

  /** Deletes a tenant and revokes its keys; its limiter state is dropped on every node. 200. */
  async deleteTenant(id: string, actor: string): Promise<AdminAnswer> {
    const t = this.#c.entry(id);
    if (t === undefined) return this.#c.isYamlTenant(id) ? error(409, 'tenant_in_config', `Tenant ${id} is in the config file's tenants list: remove it there.`) : error(404, 'not_found', `No tenant ${id}.`);
    const rows: RowWrite[] = [{ kind: 'tenant', id, deleted: true, doc: {} }, ...t.keys.map((k): RowWrite => ({ kind: 'key', id: k.id, tenant: id, deleted: true, doc: {} }))];
    const written = await this.#write(rows, [{ kind: 'tenant', id, live: true, version: t.version }], actor);
    return written ?? { status: 200, body: { deleted: id, keysRevoked: t.keys.length } };
  }

  /** Issues a key to a tenant (`body`: `{ name?, limits?, priority?, priorities? }`); 201 with the key, shown this once. */
  async issue(tenant: string, body: unknown, actor: string): Promise<AdminAnswer> {
    const t = this.#c.entry(tenant);
    if (t === undefined) return this.#c.isYamlTenant(tenant) ? error(409, 'tenant_in_config', `Tenant ${tenant} is in the config file's tenants list: give it keys there.`) : error(404, 'not_found', `No tenant ${tenant}.`);
    const doc = body === undefined ? {} : body;
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return invalid([{ field: '(body)', message: 'a JSON object (or no body)' }]);
    const parsed = KeyDocSchema.safeParse(doc);
    if (!parsed.success) return invalid(problemsOf(parsed.error));
    if (parsed.data.literal) return invalid([{ field: 'literal', message: 'issued keys are qr_<id>_<secret>; import a key of another form with POST /admin/v1/catalogue/import' }]);
    const problems = configProblems(this.#c.config, parsed.data, parsed.data.limits.length > 0);
    if (problems.length > 0) return invalid(problems);
    const key = issueKey();
    const written = await this.#write([{ kind: 'key', id: key.id, tenant, hash: key.hash, deleted: false, doc: doc as Record<string, unknown> }], [{ kind: 'tenant', id: tenant, live: true }], actor);
    return written ?? { status: 201, body: { key: { id: key.id, key: key.key, tenant, name: parsed.data.name ?? null } } };
  }

  /** Revokes a key by its public id: refused on every process within the catalogue's poll period. 200. */
  async revoke(keyId: string, actor: string): Promise<AdminAnswer> {
    const k = this.#c.keyEntry(keyId);
    if (k === undefined) return error(404, 'not_found', `No live key ${keyId}.`);
    const written = await this.#write([{ kind: 'key', id: keyId, tenant: k.tenant, deleted: true, doc: {} }], [{ kind: 'key', id: keyId, live: true, version: k.version }], actor);
    return written ?? { status: 200, body: { revoked: keyId, tenant: k.tenant } };
  }

  /** Rotates a key: a new key with the same tenant, name, limits and tiers, and the old one revoked, in one write. 201. */
  async rotate(keyId: string, actor: string): Promise<AdminAnswer> {
    const k = this.#c.keyEntry(keyId);
    if (k === undefined) return error(404, 'not_found', `No live key ${keyId}.`);
    const key = issueKey();
    const doc = { ...(k.raw ?? {}) };
    delete doc.literal;
    const written = await this.#write(
      [
        { kind: 'key', id: keyId, tenant: k.tenant, deleted: true, doc: {} },
        { kind: 'key', id: key.id, tenant: k.tenant, hash: key.hash, deleted: false, doc },
      ],
      [{ kind: 'key', id: keyId, live: true, version: k.version }, { kind: 'tenant', id: k.tenant, live: true }],
      actor,
    );
    return written ?? { status: 201, body: { key: { id: key.id, key: key.key, tenant: k.tenant }, revoked: keyId } };
  }

  /** The plans (YAML and catalogue). */
  listPlans(): AdminAnswer {
    return { status: 200, body: { plans: this.#c.plans().map((p) => ({ name: p.plan.name, source: p.yaml ? 'config' : 'catalogue', version: p.version, limits: p.plan.limits.map((l) => limitName(l)) })) } };
  }

  /** Creates or replaces a catalogue plan (`body`: `{ limits, priority?, priorities?, estimator? }`); its tenants take it at once. */
  async putPlan(name: string, body: unknown, actor: string): Promise<AdminAnswer> {
    if (!CATALOGUE_ID.test(name)) return invalid([{ field: 'name', message: 'plan name: 1-64 of A-Z a-z 0-9 . _ -' }]);
    if (this.#c.isYamlPlan(name)) return error(409, 'plan_in_config', `Plan ${name} is in the config file's plans list: change it there.`);
    const parsed = PlanDocSchema.safeParse(body);
    if (!parsed.success) return invalid(problemsOf(parsed.error));
    const problems = configProblems(this.#c.config, parsed.data);
    if (problems.length > 0) return invalid(problems);
    const written = await this.#write([{ kind: 'plan', id: name, deleted: false, doc: body as Record<string, unknown> }], [], actor);
    return written ?? { status: 200, body: { plan: name } };
  }

  /** Deletes a catalogue plan no tenant uses (409 naming how many do). */
  async deletePlan(name: string, actor: string): Promise<AdminAnswer> {
    if (this.#c.isYamlPlan(name)) return error(409, 'plan_in_config', `Plan ${name} is in the config file's plans list: remove it there.`);
    if (this.#c.plans().every((p) => p.plan.name !== name)) return error(404, 'not_found', `No plan ${name}.`);
    let users = 0;
    for (const t of this.#c.entries()) if (t.plan === name) users += 1;
    if (users > 0) return error(409, 'plan_in_use', `Plan ${name} is the plan of ${users} tenant(s): move them to another plan first.`);
    const written = await this.#write([{ kind: 'plan', id: name, deleted: true, doc: {} }], [{ kind: 'plan', id: name, live: true }], actor);
    return written ?? { status: 200, body: { deleted: name } };
  }

  /**
   * Imports NDJSON lines: `{"kind":"plan","name",…}`, `{"kind":"tenant","id",…,"keys":[…]}` (also a
   * tenant of the YAML list as JSON, without `kind`). A tenant's keys are either exported ones
   * (`{"id","hash",…}`) or keys in the clear as the YAML list gives them (a string, or `{"key",…}`),
   * which are stored hashed. Existing tenants are replaced with their keys; every line is checked
   * before anything is written (400 naming the line and field), then written in one write.
   */
  async importLines(text: string, actor: string): Promise<AdminAnswer> {
    const parsed = importRows(this.#c, text);
    if ('status' in parsed) return parsed;
    const written = await this.#write(parsed.rows, parsed.conditions, actor);
    return written ?? { status: 200, body: { imported: parsed.counts } };
  }

  /** Every catalogue plan and tenant as NDJSON lines (keys as their hash, importable elsewhere). */
  *exportLines(): IterableIterator<string> {
    for (const p of this.#c.plans()) if (!p.yaml) yield JSON.stringify({ kind: 'plan', name: p.plan.name, ...rawPlan(this.#c, p.plan.name) });
    for (const t of this.#c.entries()) {
      yield JSON.stringify({ kind: 'tenant', id: t.id, ...(t.raw ?? (t.plan === undefined ? {} : { plan: t.plan })), keys: t.keys.map((k) => ({ id: k.id, hash: k.hash, ...(k.raw ?? {}) })) });
    }
  }

  /** The audit log, newest first: `before` a version, at most `limit` (≤ 1,000). */
  async audit(before: number | undefined, limit: number): Promise<AdminAnswer> {
    if (this.#store === undefined) return off();
    try {
      return { status: 200, body: { entries: await this.#store.audit(before, Math.min(Math.max(1, limit), LIST_MAX)) } };
    } catch (err) {
      if (err instanceof CatalogueUnavailable) return unavailable(err);
      throw err;
    }
  }

  /** Status for `/readyz` and `GET /admin/v1/catalogue`. */
  status(): { store: string; reachable: boolean; version: number; tenants: number; keys: number; plans: number; regressions: number } {
    return { store: this.#store?.kind ?? 'none', reachable: this.#follower?.reachable ?? false, version: this.#c.head.version, ...this.#c.size, regressions: this.#follower?.regressions ?? 0 };
  }

  #checkTenantDoc(doc: Record<string, unknown>): AdminAnswer | { conditions: RowCondition[] } {
    const parsed = TenantDocSchema.safeParse(doc);
    if (!parsed.success) return invalid(problemsOf(parsed.error));
    const problems = configProblems(this.#c.config, parsed.data);
    if (problems.length > 0) return invalid(problems);
    const plan = parsed.data.plan;
    if (plan === undefined) return { conditions: [] };
    if (this.#c.plan(plan) === undefined) return invalid([{ field: 'plan', message: `no plan named "${plan}"` }]);
    return { conditions: this.#c.isYamlPlan(plan) ? [] : [{ kind: 'plan', id: plan, live: true }] };
  }

  /** Writes, then applies here; an answer for a refusal, undefined when written. */
  async #write(rows: RowWrite[], conditions: RowCondition[], actor: string): Promise<AdminAnswer | undefined> {
    if (this.#store === undefined) return off();
    try {
      await this.#store.write({ rows, conditions, actor });
    } catch (err) {
      if (err instanceof CatalogueConflict) return error(409, 'conflict', `${err.message} (someone else changed ${err.condition.kind} ${err.condition.id}: read it again)`);
      if (err instanceof CatalogueUnavailable) return unavailable(err);
      throw err;
    }
    await this.#follower?.kick();
    return undefined;
  }

  #view(id: string): TenantView | undefined {
    const t: TenantEntry | undefined = this.#c.entry(id);
    const tenant = this.#c.tenant(id);
    if (tenant === undefined) return undefined;
    const limits = tenant.limits.map((l) => limitName(l));
    if (t === undefined) {
      return { id, source: 'config', version: 0, plan: tenant.plan ?? null, doc: {}, limits, keys: tenant.keys.map((k) => ({ id: typeof k === 'string' || k.id === undefined ? '(unnamed)' : k.id, name: null, version: 0 })) };
    }
    return { id, source: 'catalogue', version: t.version, plan: t.plan ?? null, doc: t.raw ?? (t.plan === undefined ? {} : { plan: t.plan }), limits, keys: t.keys.map((k: KeyEntry) => ({ id: k.id, name: k.doc?.name ?? null, version: k.version })) };
  }
}

function rawPlan(c: Catalogue, name: string): Record<string, unknown> {
  for (const row of c.rows()) if (row.kind === 'plan' && row.id === name) return row.doc as Record<string, unknown>;
  return {};
}
