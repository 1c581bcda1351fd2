/**
 * A bulk import of NDJSON lines (plans and tenants with their keys), checked line by line against
 * the catalogue held and the running config before anything is written: the rows and conditions
 * of the one write that makes it, or the answer that refuses it. Keys of the import never take a
 * key id or a key another tenant holds, never bring back a revoked key, and are never given twice.
 */
import type { Catalogue } from './catalogue.ts';
import { error, invalid } from './answers.ts';
import type { AdminAnswer } from './answers.ts';
import { configProblems, KeyDocSchema, PlanDocSchema, problemsOf, protoKeyPath, TenantDocSchema } from './docs.ts';
import { issuedKeyId, keyHash, newKeyId } from './keys.ts';
import type { RowCondition, RowWrite } from './store.ts';
import { CATALOGUE_ID } from '../config/catalogue-schema.ts';
import type { Config } from '../config/schema.ts';

/** Most rows one import request may hold. */
export const IMPORT_MAX_LINES = 10_000;

/** What an import writes: its rows, their conditions, and how many of each kind. */
export interface ImportWrite {
  readonly rows: RowWrite[];
  readonly conditions: RowCondition[];
  readonly counts: { readonly plans: number; readonly tenants: number; readonly keys: number };
}

/**
 * The write of an import of `text` (NDJSON), or the answer refusing it (400 naming the line and
 * field, 409 for a key or name another holds, 413 over {@link IMPORT_MAX_LINES} lines).
 */
export function importRows(c: Catalogue, text: string): ImportWrite | AdminAnswer {
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  if (lines.length > IMPORT_MAX_LINES) return error(413, 'too_many_lines', `At most ${IMPORT_MAX_LINES} lines per import; split the file.`);
  const rows: RowWrite[] = [];
  const conditions: RowCondition[] = [];
  const seen = new Set<string>();
  let tenants = 0;
  let plans = 0;
  let keys = 0;
  const parsedLines: { at: string; kind: unknown; rest: Record<string, unknown> }[] = [];
  const importedPlans = new Set<string>();
  for (let i = 0; i < lines.length; i++) {
    const at = `line ${i + 1}`;
    let v: unknown;
    try {
      v = JSON.parse(lines[i] as string);
    } catch {
      return invalid([{ field: at, message: 'not JSON' }]);
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return invalid([{ field: at, message: 'a JSON object' }]);
    const proto = protoKeyPath(v);
    if (proto !== undefined) return invalid([{ field: `${at}: ${proto}`, message: 'a reserved name (__proto__, constructor, prototype)' }]);
    const { kind, ...rest } = v as Record<string, unknown>;
    parsedLines.push({ at, kind, rest });
    if (kind === 'plan' && typeof rest.name === 'string') importedPlans.add(rest.name);
  }
  // Keys of this import: id → tenant, hash → tenant (one key never on two tenants).
  const keyIds = new Map<string, string>();
  const keyHashes = new Map<string, string>();
  for (const { at, kind, rest } of parsedLines) {
    if (kind === 'plan') {
      const { name, ...doc } = rest;
      if (typeof name !== 'string' || !CATALOGUE_ID.test(name)) return invalid([{ field: `${at}: name`, message: 'plan name: 1-64 of A-Z a-z 0-9 . _ -' }]);
      if (c.isYamlPlan(name)) return error(409, 'plan_in_config', `${at}: plan ${name} is in the config file's plans list: change it there.`, `${at}: name`);
      const parsed = PlanDocSchema.safeParse(doc);
      if (!parsed.success) return invalid(problemsOf(parsed.error, `${at}: `));
      const problems = configProblems(c.config, parsed.data);
      if (problems.length > 0) return invalid(problems.map((p) => ({ field: `${at}: ${p.field}`, message: p.message })));
      rows.unshift({ kind: 'plan', id: name, deleted: false, doc });
      plans += 1;
      continue;
    }
    if (kind !== undefined && kind !== 'tenant') return invalid([{ field: `${at}: kind`, message: 'plan or tenant' }]);
    const { id, keys: keyList, version: _v, source: _s, limits_in_force: _l, ...doc } = rest;
    if (typeof id !== 'string' || !CATALOGUE_ID.test(id)) return invalid([{ field: `${at}: id`, message: 'tenant id: 1-64 of A-Z a-z 0-9 . _ -' }]);
    if (seen.has(id)) return invalid([{ field: `${at}: id`, message: `tenant ${id} twice in the import` }]);
    seen.add(id);
    if (c.isYamlTenant(id)) return error(409, 'tenant_in_config', `${at}: tenant ${id} is in the config file's tenants list.`, `${at}: id`);
    const parsed = TenantDocSchema.safeParse(doc);
    if (!parsed.success) return invalid(problemsOf(parsed.error, `${at}: `));
    const problems = configProblems(c.config, parsed.data);
    if (problems.length > 0) return invalid(problems.map((p) => ({ field: `${at}: ${p.field}`, message: p.message })));
    const plan = parsed.data.plan;
    if (plan !== undefined && c.plan(plan) === undefined && !importedPlans.has(plan)) return invalid([{ field: `${at}: plan`, message: `no plan named "${plan}"` }]);
    rows.push({ kind: 'tenant', id, deleted: false, doc });
    tenants += 1;
    const old = c.entry(id);
    const kept = new Set<string>();
    if (keyList !== undefined && !Array.isArray(keyList)) return invalid([{ field: `${at}: keys`, message: 'a list' }]);
    for (const [j, k] of ((keyList ?? []) as unknown[]).entries()) {
      const field = `${at}: keys[${j}]`;
      const key = importedKey(k, c.config);
      if (typeof key === 'string') return invalid([{ field, message: key }]);
      const held = c.keyEntry(key.id);
      if (held !== undefined && held.tenant !== id) return error(409, 'key_taken', `${field}: key ${key.id} belongs to another tenant: revoke it there first.`, field);
      if (held !== undefined && held.hash !== key.hash) return error(409, 'key_taken', `${field}: key ${key.id} exists with another secret: import it under another id, or rotate it.`, field);
      if (c.tombstone('key', key.id) !== undefined) return error(409, 'key_revoked', `${field}: key ${key.id} was revoked; a revoked key is never brought back (issue a new one).`, field);
      const owner = c.keyHashOwner(key.hash);
      if (owner !== undefined && owner !== id) return error(409, 'key_taken', `${field}: this key is already given to ${owner === '' ? 'a tenant of the config file' : 'another tenant'}.`, field);
      if ((keyIds.get(key.id) ?? id) !== id || (keyHashes.get(key.hash) ?? id) !== id || kept.has(key.id)) return invalid([{ field, message: 'the same key twice in the import' }]);
      keyIds.set(key.id, id);
      keyHashes.set(key.hash, id);
      kept.add(key.id);
      if (held === undefined) conditions.push({ kind: 'key', id: key.id, live: false });
      rows.push({ kind: 'key', id: key.id, tenant: id, hash: key.hash, deleted: false, doc: key.doc });
      keys += 1;
    }
    for (const k of old?.keys ?? []) if (!kept.has(k.id)) rows.push({ kind: 'key', id: k.id, tenant: id, deleted: true, doc: {} });
  }
  return { rows, conditions, counts: { plans, tenants, keys } };
}

/** A stored key hash: base64url SHA-256, 43 characters. */
const HASH = /^[A-Za-z0-9_-]{43}$/;

/** A key of an import line: exported (`{id, hash, …}`) or in the clear (a string, or `{key, id?, …}`), else a problem. */
function importedKey(k: unknown, config: Config): { id: string; hash: string; doc: Record<string, unknown> } | string {
  if (typeof k === 'string') k = { key: k };
  if (typeof k !== 'object' || k === null || Array.isArray(k)) return 'a key string or object';
  const { id, hash, key, ...doc } = k as Record<string, unknown>;
  if (id !== undefined && (typeof id !== 'string' || !CATALOGUE_ID.test(id))) return 'id: 1-64 of A-Z a-z 0-9 . _ -';
  const parsed = KeyDocSchema.safeParse(doc);
  if (!parsed.success) return problemsOf(parsed.error).map((p) => `${p.field}: ${p.message}`).join('; ');
  const problems = configProblems(config, parsed.data, parsed.data.limits.length > 0);
  if (problems.length > 0) return problems.map((p) => `${p.field}: ${p.message}`).join('; ');
  if (typeof hash === 'string') {
    if (!HASH.test(hash) || typeof id !== 'string') return 'an exported key needs its id and a hash of 43 base64url characters';
    return { id, hash, doc };
  }
  if (typeof key !== 'string' || key.length < 8) return 'key: the key itself, at least 8 characters (or hash and id of an exported key)';
  // A key of the issued form keeps the id it carries (it is found by it); any other is found by its hash.
  const issued = issuedKeyId(key);
  return { id: issued ?? (id as string | undefined) ?? newKeyId(), hash: keyHash(key), doc: issued === undefined ? { ...doc, literal: true } : doc };
}
