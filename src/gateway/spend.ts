/**
 * What a request costs, for the tenant's and key's cost limits: its reservation at admission and
 * its settlement on the provider's reported usage, priced by the deployment that served it (a
 * deployment's own `prices`, else its model's). Integer pico-dollars (see `src/pricing/usd.ts`).
 */
import type { DeploymentConfig, ModelConfig, TenantConfig } from '../config/schema.ts';
import type { SettleDetail } from '../limiter/types.ts';
import { reservationCostPico, usageCostPico, type PriceTable } from '../pricing/prices.ts';
import type { TokenUsage } from '../providers/types.ts';

/** The prices of a request for `model` served by `deployment`: the deployment's, else the model's; undefined when neither has any. */
export function pricesOf(model: ModelConfig, deployment: DeploymentConfig): PriceTable | undefined {
  return deployment.prices ?? model.prices;
}

/** Pico-dollars admission reserves (see `reservationCostPico`); 0 when the request has no prices. */
export function reservedCost(prices: PriceTable | undefined, promptTokens: number, reservedOutput: number): bigint {
  return prices === undefined ? 0n : reservationCostPico(promptTokens, reservedOutput, prices);
}

/**
 * What a settlement tells the limiter besides the tokens: the actual cost and the token kinds.
 * - `usage` reported: its exact cost under `prices`, and its kinds (for weighted tokens limits);
 * - no usage but `tokens` known (a stream cut short: prompt + delivered output; an upstream failure:
 *   0): the prompt at the input price and the rest at the output price;
 * - `tokens` undefined (a reply that reported nothing): the reserved cost stays charged.
 * @param prices of the deployment that served the request (undefined: nothing is charged in money).
 */
export function settleDetail(prices: PriceTable | undefined, usage: TokenUsage | undefined, promptTokens: number, tokens: number | undefined): SettleDetail {
  if (usage !== undefined) {
    const kinds = { ...(usage.cacheRead === undefined ? {} : { cacheRead: usage.cacheRead }), ...(usage.cacheWrite === undefined ? {} : { cacheWrite: usage.cacheWrite }), ...(usage.reasoning === undefined ? {} : { reasoning: usage.reasoning }) };
    return { ...(prices === undefined ? { cost: 0n } : { cost: usageCostPico(usage, prices) }), kinds };
  }
  if (tokens === undefined) return {};
  if (prices === undefined) return { cost: 0n };
  const prompt = Math.min(promptTokens, tokens);
  return { cost: reservationCostPico(prompt, tokens - prompt, { ...prices, reasoning: prices.output }) };
}

const pinned = new WeakMap<TenantConfig, boolean>();

/**
 * True when the tenant's limits must stay on its owner (a cost limit, or limits of one of its
 * keys): such a tenant is never spread by hot detection (a budget split over nodes would be
 * granted once per node).
 */
export function staysOnOwner(tenant: TenantConfig): boolean {
  let p = pinned.get(tenant);
  if (p === undefined) {
    p = tenant.limits.some((l) => l.usd !== undefined) || tenant.keys.some((k) => typeof k !== 'string' && (k.limits?.length ?? 0) > 0);
    pinned.set(tenant, p);
  }
  return p;
}

const budgetedKeys = new WeakMap<TenantConfig, ReadonlySet<string>>();

/**
 * The `key` label of the tenant's spend counter: `keyId` when that key has a cost limit of its own
 * (its spend is a budget the operator configured per key), else undefined (the tenant's series).
 * Bounded: only configured key ids with a budget, never an API key.
 */
export function budgetedKey(tenant: TenantConfig, keyId: string | undefined): string | undefined {
  if (keyId === undefined) return undefined;
  let ids = budgetedKeys.get(tenant);
  if (ids === undefined) {
    ids = new Set(tenant.keys.flatMap((k) => (typeof k !== 'string' && k.id !== undefined && (k.limits ?? []).some((l) => l.usd !== undefined) ? [k.id] : [])));
    budgetedKeys.set(tenant, ids);
  }
  return ids.has(keyId) ? keyId : undefined;
}
