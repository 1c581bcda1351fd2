/** What an API key gives once the config is loaded: its tenant and its priority tiers. */
import type { TenantConfig } from './schema.ts';

/** A priority tier as the gateway uses it. */
export interface Tier {
  readonly name: string;
  /** Position in `priorities`: 0 is the highest tier. */
  readonly rank: number;
  /** Fraction of each requests/tokens limit this tier leaves to higher tiers (0 ≤ floor < 1). */
  readonly floor: number;
  /** Longest wait in the tenant's queue, ms (0: refused at once). */
  readonly maxWaitMs: number;
}

/** What an API key gives: its tenant, its default tier, and the tiers it may ask for by name. */
export interface KeyAccess {
  readonly tenant: TenantConfig;
  /** The key's id (its name in config), when it has one: selects the key's own limits. */
  readonly keyId?: string;
  readonly tier: Tier;
  readonly tiers: ReadonlyMap<string, Tier>;
}

/** A lookup by API key (the key is hashed, never kept). */
export interface KeyLookup<T> {
  get(key: string): T | undefined;
}
