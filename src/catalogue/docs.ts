/**
 * The content (`doc`) of catalogue rows: what a plan, a tenant and a key hold, validated with the
 * same limit schema as the YAML file, and the checks against the running config (tiers, models,
 * prices) that a change must pass before it is written. Docs are stored as given (durations as
 * written, dollars as strings) and validated again wherever a row is read back.
 */
import { z } from 'zod';
import { CATALOGUE_ID } from '../config/catalogue-schema.ts';
import { ESTIMATORS, LimitSchema } from '../config/schema.ts';
import type { Config, LimitConfig } from '../config/schema.ts';
import { limitName } from '../config/policy.ts';

const tierName = z.string().min(1).max(32);
const labels = z
  .record(z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'label name: 1-64 of A-Z a-z 0-9 . _ -'), z.string().max(256))
  .refine((l) => Object.keys(l).length <= 16, 'at most 16 labels');

/** A plan's doc: its limits and default tiers. */
export const PlanDocSchema = z.strictObject({
  limits: z.array(LimitSchema).max(64).default([]),
  priority: tierName.optional(),
  priorities: z.array(tierName).min(1).max(16).optional(),
  estimator: z.enum(ESTIMATORS).optional(),
});

/** A tenant's doc: its plan, its own limits (overriding the plan's of the same name), tiers, labels. */
export const TenantDocSchema = z.strictObject({
  plan: z.string().regex(CATALOGUE_ID, 'plan: 1-64 of A-Z a-z 0-9 . _ -').optional(),
  limits: z.array(LimitSchema).max(64).default([]),
  priority: tierName.optional(),
  priorities: z.array(tierName).min(1).max(16).optional(),
  estimator: z.enum(ESTIMATORS).optional(),
  /** Export the tenant's levels as metrics (as `metrics: true` in the YAML list). */
  metrics: z.boolean().default(false),
  /** Free-form labels, for filters in listings (`?label=team:ml`). */
  labels: labels.optional(),
});

/** A key's doc: a name, its own limits (named `#<key id>`), its tiers. */
export const KeyDocSchema = z.strictObject({
  /** A human name for the key (never the key). */
  name: z.string().max(128).optional(),
  /** A key imported in the form its operator gave it (not `qr_<id>_<secret>`): found by its hash. */
  literal: z.boolean().default(false),
  limits: z.array(LimitSchema).max(64).default([]),
  priority: tierName.optional(),
  priorities: z.array(tierName).min(1).max(16).optional(),
});

/** A validated plan doc (durations in ms). */
export type PlanDoc = z.output<typeof PlanDocSchema>;
/** A validated tenant doc (durations in ms). */
export type TenantDoc = z.output<typeof TenantDocSchema>;
/** A validated key doc (durations in ms). */
export type KeyDoc = z.output<typeof KeyDocSchema>;

/** A doc that failed validation: the field path and message of each problem. */
export interface DocProblem {
  readonly field: string;
  readonly message: string;
}

/** The problems of a zod error, each naming its field (`limits[0].window`). */
export function problemsOf(error: z.ZodError, prefix = ''): DocProblem[] {
  return error.issues.map((issue) => {
    let path = '';
    for (const part of issue.path) path += typeof part === 'number' ? `[${part}]` : `${path === '' ? '' : '.'}${String(part)}`;
    // An unknown field is named by the field itself.
    if (issue.code === 'unrecognized_keys' && issue.keys.length === 1) path += `${path === '' ? '' : '.'}${issue.keys[0] ?? ''}`;
    const message = issue.code === 'unrecognized_keys' ? `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}` : issue.message;
    return { field: path === '' ? (prefix === '' ? '(body)' : prefix.replace(/: $/, '')) : `${prefix}${path}`, message };
  });
}

/** Limits of a plan with a tenant's own limits applied: same-named ones replaced, others added. */
export function mergeLimits(plan: readonly LimitConfig[], own: readonly LimitConfig[]): LimitConfig[] {
  if (own.length === 0) return [...plan];
  const byName = new Map(own.map((l) => [limitName(l), l]));
  const out = plan.map((l) => byName.get(limitName(l)) ?? l);
  const planNames = new Set(plan.map((l) => limitName(l)));
  for (const l of own) if (!planNames.has(limitName(l))) out.push(l);
  return out;
}

/**
 * Problems of limits and tiers against the running config: a tier that does not exist, a model
 * that is not configured, a cost limit over a model without prices, a limit kind that `mode:
 * central` does not keep. `field` is the doc's field name (`limits`, `priority`, …).
 */
export function configProblems(config: Config, doc: { readonly limits: readonly LimitConfig[]; readonly priority?: string | undefined; readonly priorities?: readonly string[] | undefined }, isKey = false): DocProblem[] {
  const out: DocProblem[] = [];
  const tiers = new Set(config.priorities.map((p) => p.name));
  doc.priorities?.forEach((p, i) => {
    if (!tiers.has(p)) out.push({ field: `priorities[${i}]`, message: `no tier named "${p}" (tiers: ${[...tiers].join(', ')})` });
  });
  if (doc.priority !== undefined && !tiers.has(doc.priority)) out.push({ field: 'priority', message: `no tier named "${doc.priority}" (tiers: ${[...tiers].join(', ')})` });
  else if (doc.priority !== undefined && doc.priorities !== undefined && !doc.priorities.includes(doc.priority)) out.push({ field: 'priority', message: `"${doc.priority}" is not among priorities` });
  const models = new Map(config.models.map((m) => [m.name, m]));
  const deployments = new Map(config.deployments.map((d) => [d.name, d]));
  const priced = (m: Config['models'][number]): boolean => m.prices !== undefined || m.deployments.every((d) => deployments.get(d)?.prices !== undefined);
  const names = new Set<string>();
  doc.limits.forEach((limit, i) => {
    const name = limitName(limit);
    if (names.has(name)) out.push({ field: `limits[${i}]`, message: `two limits named ${name}` });
    names.add(name);
    if (limit.model !== undefined && !models.has(limit.model)) out.push({ field: `limits[${i}].model`, message: `no model named "${limit.model}"` });
    if (config.mode === 'central' && (limit.usd !== undefined || isKey)) out.push({ field: `limits[${i}]`, message: 'mode: central keeps only requests, tokens and concurrent limits of tenants' });
    if (limit.usd !== undefined) {
      const unpriced = config.models.filter((m) => (limit.model === undefined || m.name === limit.model) && !priced(m)).map((m) => m.name);
      if (unpriced.length > 0) out.push({ field: `limits[${i}].usd`, message: `a cost limit needs prices for every model it covers: ${unpriced.join(', ')} has none` });
    }
  });
  return out;
}

/** The path of the first own key named __proto__, constructor or prototype in `v` or undefined. Iterative: any depth. */
export function protoKeyPath(v: unknown): string | undefined {
  const stack: { value: unknown; path: string }[] = [{ value: v, path: '' }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { value, path } = item;
    if (typeof value !== 'object' || value === null) continue;
    for (const k of Object.keys(value)) {
      const here = Array.isArray(value) ? `${path}[${k}]` : path === '' ? k : `${path}.${k}`;
      if (k === '__proto__' || k === 'constructor' || k === 'prototype') return here;
      stack.push({ value: (value as Record<string, unknown>)[k], path: here });
    }
  }
  return undefined;
}
