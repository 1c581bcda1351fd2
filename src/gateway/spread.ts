/**
 * Hot tenants spread over several nodes (issue 4, "Hot tenants"). A tenant configured with
 * `spread: k` is routed over `ring.range(tenant, k)` instead of its single owner. Its `requests` and
 * `tokens` limits then live in the global cap (one Redis token bucket per limit, capacity = the
 * limit, refilled over its window), which each of the k nodes leases from (`CapLeases`); its
 * `concurrent` limits are split across the k nodes (node i of the range gets ⌊c / k⌋, plus one for
 * the first c mod k), decided in the node's own limiter. Nothing of a spread tenant is handed over or
 * checkpointed: the cap holds its usage.
 *
 * Semantics that differ from a tenant on one owner (documented in the README):
 * - a `sliding_window` limit of a spread tenant is enforced as a token bucket in the global cap;
 * - `x-ratelimit-remaining-*` is this node's view: the cluster level at its last lease plus the
 *   refill since and the units it holds, so it may read higher than what the other nodes left.
 */
import type { LoadedConfig } from '../config/load.ts';
import { windowLabel } from '../config/duration.ts';
import type { LimitConfig, TenantConfig } from '../config/schema.ts';
import type { Member, Ring } from '../coord/types.ts';
import type { CapBucketSpec, CapLeases } from '../globalcap/cap-leases.ts';
import type { AcquireResult, LimitState, Policy } from '../limiter/types.ts';
import { DEFAULT_LEASE_TTL_MS } from '../config/policy.ts';

/** Where a spread tenant stands on this node. */
export interface SpreadPlacement {
  /** The nodes the tenant is spread over now, in ring order (at most k). */
  readonly members: readonly Member[];
  /** This node's position among them, -1 when it is not one of them. */
  readonly index: number;
}

/** Options of {@link SpreadTenants}. */
export interface SpreadTenantsOptions {
  readonly config: LoadedConfig;
  /** The node's leases on the global cap (hot tenants' groups are defined on it). */
  readonly leases: CapLeases;
  /** The current ring; undefined for a node outside any cluster (then it serves every spread tenant alone). */
  readonly ring: () => Ring | undefined;
  /** This node's id (undefined outside a cluster). */
  readonly selfId: string | undefined;
}

interface SpreadTenant {
  readonly config: TenantConfig;
  readonly k: number;
  /** Local policy (split concurrency limits only) by `<share>/<index>`. */
  readonly policies: Map<string, Policy>;
}

/** The spread tenants of a node's config, their placement, local policies and global-cap groups. */
export class SpreadTenants {
  readonly #tenants = new Map<string, SpreadTenant>();
  /** The limits behind each group's buckets, in bucket order. */
  readonly #groupLimits = new Map<string, readonly LimitConfig[]>();
  readonly #leases: CapLeases;
  readonly #ring: () => Ring | undefined;
  readonly #selfId: string | undefined;

  constructor(opts: SpreadTenantsOptions) {
    this.#leases = opts.leases;
    this.#ring = opts.ring;
    this.#selfId = opts.selfId;
    for (const t of opts.config.config.tenants) {
      if (t.spread !== undefined) this.#tenants.set(t.id, { config: t, k: t.spread, policies: new Map() });
    }
  }

  /** True when `tenant` is configured with `spread`. */
  isSpread(tenant: string): boolean {
    return this.#tenants.has(tenant);
  }

  /** The tenant's configured k, or undefined. */
  spreadOf(tenant: string): number | undefined {
    return this.#tenants.get(tenant)?.k;
  }

  /** The nodes a spread tenant is routed over now and this node's place among them. @throws RangeError for a tenant that is not spread. */
  placement(tenant: string): SpreadPlacement {
    const t = this.#tenant(tenant);
    const ring = this.#ring();
    if (ring === undefined) return { members: [], index: 0 };
    const members = ring.range(tenant, t.k);
    return { members, index: members.findIndex((m) => m.id === this.#selfId) };
  }

  /** Nodes sharing the tenant's limits now (≥ 1). */
  share(tenant: string): number {
    return Math.max(1, this.placement(tenant).members.length);
  }

  /**
   * The policy this node's limiter applies to a spread tenant: its concurrency limits only, each
   * split by the tenant's place in the range (node i of n gets ⌊c / n⌋ + (i < c mod n ? 1 : 0)).
   * The same object while the split is unchanged (the limiter rebuilds a tenant's state when its
   * policy object changes). @throws RangeError for a tenant that is not spread.
   */
  localPolicy(tenant: string): Policy {
    const t = this.#tenant(tenant);
    const { members, index } = this.placement(tenant);
    const n = Math.max(1, members.length);
    const i = Math.max(0, index);
    const key = `${n}/${i}`;
    let policy = t.policies.get(key);
    if (policy === undefined) {
      const limits = t.config.limits.flatMap((l) => {
        if (l.concurrent === undefined) return [];
        const share = Math.floor(l.concurrent / n) + (i < l.concurrent % n ? 1 : 0);
        const suffix = l.model === undefined ? '' : `@${l.model}`;
        return [
          {
            name: `concurrent${suffix}`,
            kind: 'concurrent' as const,
            limit: Math.max(1, share),
            leaseTtlMs: l.lease_ttl ?? DEFAULT_LEASE_TTL_MS,
            ...(l.model === undefined ? {} : { model: l.model }),
          },
        ];
      });
      policy = Object.freeze({ limits: Object.freeze(limits) });
      t.policies.set(key, policy);
    }
    return policy;
  }

  /**
   * The global-cap group of a spread tenant's request for `model` (its unscoped `requests`/`tokens`
   * limits plus those scoped to `model`), defined on first use: bucket `tenant:<id>:<kind>:<limit>/<window ms>[@model]`.
   * @throws RangeError for a tenant that is not spread.
   */
  group(tenant: string, model: string): string {
    const t = this.#tenant(tenant);
    const name = `tenant:${tenant}@${model}`;
    if (!this.#groupLimits.has(name)) {
      const limits = t.config.limits.filter((l) => l.concurrent === undefined && (l.model === undefined || l.model === model));
      this.#leases.define(name, { buckets: limits.map(bucketSpec(tenant)), share: () => this.share(tenant) });
      this.#groupLimits.set(name, limits);
    }
    return name;
  }

  /** The group's limits as the client sees them (headers): this node's view of each cluster bucket. */
  limitStates(group: string): LimitState[] {
    const limits = this.#groupLimits.get(group) ?? [];
    return this.#leases.buckets(group).map((b, i) => {
      const remaining = Math.max(0, Math.min(b.capacity, Math.floor(b.level + Math.max(0, b.balance))));
      const windowMs = limits[i]?.window ?? 60_000;
      return { name: limitName(limits[i]), kind: b.kind, limit: b.capacity, remaining, resetMs: Math.ceil(((b.capacity - remaining) * windowMs) / b.capacity) };
    });
  }

  /**
   * A refused take of the tenant's group as the limiter would have refused it: the first bucket
   * that cannot cover the cost (or whose capacity it exceeds, when `waitMs` is −1).
   */
  refusal(group: string, waitMs: number, cost: { readonly requests: number; readonly tokens: number }): Extract<AcquireResult, { ok: false }> {
    const limits = this.limitStates(group);
    const views = this.#leases.buckets(group);
    const units = (kind: 'requests' | 'tokens'): number => (kind === 'requests' ? cost.requests : cost.tokens);
    let i = views.findIndex((b) => (waitMs < 0 ? units(b.kind) > b.capacity : units(b.kind) > b.balance));
    if (i < 0) i = 0;
    const refusing = limits[i];
    return {
      ok: false,
      reason: waitMs < 0 ? 'too_large' : 'limited',
      limit: refusing?.name ?? 'tokens',
      kind: refusing?.kind ?? 'tokens',
      retryAfterMs: Math.max(1, waitMs),
      limits,
    };
  }

  #tenant(tenant: string): SpreadTenant {
    const t = this.#tenants.get(tenant);
    if (t === undefined) throw new RangeError(`tenant ${JSON.stringify(tenant)} is not spread`);
    return t;
  }
}

/** The limit's name as the limiter names it (`tokens/1m`, `requests/1d@gpt-4o`). */
function limitName(l: LimitConfig | undefined): string {
  if (l === undefined) return 'tokens';
  const kind = l.requests !== undefined ? 'requests' : 'tokens';
  return `${kind}/${windowLabel(l.window ?? 60_000)}${l.model === undefined ? '' : `@${l.model}`}`;
}

function bucketSpec(tenant: string): (l: LimitConfig) => CapBucketSpec {
  return (l) => {
    const kind = l.requests !== undefined ? 'requests' : 'tokens';
    const capacity = l.requests ?? l.tokens ?? 1;
    const windowMs = l.window ?? 60_000;
    return { kind, name: `tenant:${tenant}:${kind}:${capacity}/${windowMs}${l.model === undefined ? '' : `@${l.model}`}`, capacity, windowMs };
  };
}
