/**
 * The admin API's budgets: how a budget reads for operators (USD, the current period's start and
 * when it renews), and the body of `POST /admin/v1/tenants/:tenant/spend`, which changes the spend of
 * one budget of a tenant or of one of its keys in the current period (a top-up with `credit_usd`, or
 * `set_spent_usd`). Amounts are decimal strings read exactly into micro-dollars (no float); the
 * change itself is applied by the tenant's owner (`src/peer/tenant-spend.ts`).
 */
import { z } from 'zod';
import type { LoadedConfig } from '../config/load.ts';
import type { BudgetView, SpendChange } from '../limiter/budget-view.ts';
import type { CostLimitSpec } from '../limiter/types.ts';
import { PICO_PER_MICRO, formatMicros, parseUsdMicros, picoToMicrosCeil } from '../pricing/usd.ts';

/** A budget in US dollars (decimal strings, six places): `spent` rounded up, `remaining` down (never below 0). */
export interface UsdAmounts {
  readonly limit: string;
  readonly spent: string;
  readonly remaining: string;
}

/** A budget for operators (the cost entries of `GET /admin/v1/tenants/:tenant`, and a change's result). */
export interface BudgetUsage {
  readonly name: string;
  /** The key's id for a key's budget, else null. */
  readonly key: string | null;
  readonly model: string | null;
  readonly usd: UsdAmounts;
  /** Start of the current period, RFC 3339 UTC. */
  readonly periodStart: string;
  /** When the budget renews (the period's end), RFC 3339 UTC. */
  readonly resetsAt: string;
  /** Ms until then. */
  readonly resetMs: number;
}

/** `ms` since the epoch as RFC 3339 UTC (`2025-04-01T04:00:00Z`; milliseconds only when not whole seconds). */
export function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace('.000Z', 'Z');
}

/** Spend in micro-dollars as operators read it: rounded up (so that spent + remaining = limit while under it). */
function spentMicros(b: BudgetView): bigint {
  return picoToMicrosCeil(b.spentPico);
}

/** `b` in dollars, at `nowMs`. */
export function budgetUsage(b: BudgetView, nowMs: number): BudgetUsage {
  const spent = spentMicros(b);
  const left = BigInt(b.limitMicros) - spent;
  return {
    name: b.name,
    key: b.key ?? null,
    model: b.model ?? null,
    usd: { limit: formatMicros(b.limitMicros), spent: formatMicros(spent), remaining: formatMicros(left > 0n ? left : 0n) },
    periodStart: rfc3339(b.startMs),
    resetsAt: rfc3339(b.endMs),
    resetMs: Math.max(0, b.endMs - nowMs),
  };
}

/** A decimal string amount of US dollars (`"5"`, `"0.25"`, `"$5.00"`; at most 6 decimals). Numbers are refused: they would pass through a float. */
const usdText = z.string().max(40);

/** The body of `POST /admin/v1/tenants/:tenant/spend`. */
export const SpendBodySchema = z
  .strictObject({
    /** The budget's name as `GET /admin/v1/tenants/:tenant` lists it (`cost/month`, `cost/1d#ci`), or without the `#key` part when `key` is given. Optional when the tenant (or key) has one budget. */
    limit: z.string().min(1).max(200).optional(),
    /** The id of the key whose budget changes (`keys[].id` in the config). */
    key: z.string().min(1).max(64).optional(),
    /** A top-up: lowers the current period's spend by this much, never below 0. */
    credit_usd: usdText.optional(),
    /** Sets the current period's spend (0 ..= the budget). */
    set_spent_usd: usdText.optional(),
  })
  .refine((b) => (b.credit_usd === undefined) !== (b.set_spent_usd === undefined), 'give exactly one of credit_usd (a top-up) or set_spent_usd');

/** A validated spend change for one budget. */
export interface ResolvedSpendChange {
  readonly name: string;
  readonly key: string | undefined;
  readonly change: SpendChange;
  /** The amount as asked, six decimals. */
  readonly amountUsd: string;
}

/** Why a spend change is refused: 400 (invalid body, unknown limit, not a cost limit, bad amount) or 404 (unknown tenant or key). */
export interface SpendProblem {
  readonly status: 400 | 404;
  readonly code: 'invalid_request' | 'not_found';
  readonly message: string;
}

type Resolved = { readonly ok: true; readonly value: ResolvedSpendChange } | { readonly ok: false; readonly problem: SpendProblem };

const bad = (message: string): Resolved => ({ ok: false, problem: { status: 400, code: 'invalid_request', message } });
const missing = (message: string): Resolved => ({ ok: false, problem: { status: 404, code: 'not_found', message } });

/** Names of `budgets` for a message. */
function names(budgets: readonly CostLimitSpec[]): string {
  return budgets.length === 0 ? 'none' : budgets.map((b) => b.name).join(', ');
}

/**
 * Checks a spend change against `tenant`'s config: the tenant, the key (by its id), the budget (by
 * name, or the only budget of the tenant or key when `limit` is absent) and the amount. Changes nothing.
 */
export function resolveSpendChange(config: Pick<LoadedConfig, 'config' | 'policies' | 'catalogue'>, tenant: string, body: unknown): Resolved {
  const policy = config.policies.get(tenant);
  if (policy === undefined) return missing(`No tenant ${tenant} in the config.`);
  const parsed = SpendBodySchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue === undefined || issue.path.length === 0 ? '' : `${issue.path.join('.')}: `;
    return bad(`Not a spend change: ${where}${issue?.message ?? 'invalid'}. Send {"limit": "<budget name>", "key"?: "<key id>", "credit_usd": "5.00"} or {..., "set_spent_usd": "0"}.`);
  }
  const b = parsed.data;
  const key = b.key;
  if (key !== undefined) {
    const keys = config.catalogue.tenant(tenant)?.keys ?? [];
    if (!keys.some((k) => typeof k !== 'string' && k.id === key)) return missing(`Tenant ${tenant} has no key with id ${key}.`);
  }
  const budgets = policy.limits.filter((l): l is CostLimitSpec => l.kind === 'cost');
  const inScope = budgets.filter((l) => l.key === key);
  let spec: CostLimitSpec | undefined;
  const scope = key === undefined ? `tenant ${tenant}` : `key ${key} of tenant ${tenant}`;
  if (b.limit === undefined) {
    if (inScope.length !== 1) return bad(`Name the budget to change (limit): the budgets of ${scope} are ${names(inScope)}.`);
    spec = inScope[0];
  } else {
    const name = key === undefined || b.limit.endsWith(`#${key}`) ? b.limit : `${b.limit}#${key}`;
    const limit = policy.limits.find((l) => l.name === name);
    if (limit === undefined) return bad(`Tenant ${tenant} has no limit ${name}; the budgets of ${scope} are ${names(inScope)}.`);
    if (limit.kind !== 'cost') return bad(`Limit ${name} is a ${limit.kind} limit, not a budget (cost limit): only budgets have a spend to change.`);
    if (key !== undefined && limit.key !== key) return bad(`Limit ${name} is not a budget of key ${key}.`);
    spec = limit;
  }
  if (spec === undefined) return bad(`Tenant ${tenant} has no budget.`);
  const field = b.credit_usd !== undefined ? 'credit_usd' : 'set_spent_usd';
  const text = b.credit_usd ?? b.set_spent_usd ?? '';
  const micros = parseUsdMicros(text);
  if (micros === undefined) return bad(`${field}: "${text}" is not an amount of US dollars (a decimal string such as "5.00", at most 6 decimals, not negative).`);
  if (field === 'credit_usd' && micros === 0) return bad('credit_usd: a top-up above 0.');
  if (field === 'set_spent_usd' && micros > spec.limit) return bad(`set_spent_usd: at most the budget, ${formatMicros(spec.limit)} (${spec.name}).`);
  const pico = BigInt(micros) * PICO_PER_MICRO;
  return { ok: true, value: { name: spec.name, key: spec.key, change: field === 'credit_usd' ? { op: 'credit', pico } : { op: 'set', pico }, amountUsd: formatMicros(micros) } };
}

/** The answer to a spend change applied: the budget before and after. */
export interface SpendChanged {
  readonly tenant: string;
  /** The node that applied it (the tenant's owner). */
  readonly node: string;
  readonly limit: string;
  readonly key: string | null;
  /** `credit` (`credit_usd`) or `set` (`set_spent_usd`), and its amount. */
  readonly op: SpendChange['op'];
  readonly amountUsd: string;
  /** Spend of the current period before and after, USD (rounded up to the micro-dollar). */
  readonly spentBefore: string;
  readonly spentAfter: string;
  readonly budget: BudgetUsage;
}

/** The answer to `change` applied on `node`, whose spend was `beforePico` and is now `after`. */
export function spendChanged(tenant: string, node: string, change: ResolvedSpendChange, beforePico: bigint, after: BudgetView, nowMs: number): SpendChanged {
  const budget = budgetUsage(after, nowMs);
  return {
    tenant,
    node,
    limit: change.name,
    key: change.key ?? null,
    op: change.change.op,
    amountUsd: change.amountUsd,
    spentBefore: formatMicros(picoToMicrosCeil(beforePico)),
    spentAfter: budget.usd.spent,
    budget,
  };
}

/** Who asked for a spend change, for the log line: the admin client's address, and the router that forwarded it. */
export interface SpendRequester {
  readonly remote: string;
  readonly via?: string;
}

/** An answer to a spend change: 200 with what changed, or an admin error (400, 404, 409 `not_owner` naming the owner). */
export type SpendAnswer =
  | { readonly status: 200; readonly body: SpendChanged }
  | { readonly status: 400 | 404 | 409; readonly body: { readonly error: { readonly message: string; readonly type: string; readonly param: null; readonly code: string }; readonly owner?: string | null } };

/** What a router sends to the owner's `POST /_quotaring/v1/tenants/:tenant/spend`: the admin's body as it came, and who asked. */
export const ForwardedSpendSchema = z.strictObject({
  change: z.unknown(),
  admin: z.strictObject({ remote: z.string().max(200), via: z.string().min(1).max(200) }),
});

/** The body a router sends to the owner's internal spend route. */
export type ForwardedSpend = z.infer<typeof ForwardedSpendSchema>;
