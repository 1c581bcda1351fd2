/**
 * Hot tenants spread over several nodes. A tenant configured with
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
import type { LimitConfig, TenantConfig } from '../config/schema.ts';
import type { HotSet } from '../coord/hot/hot-set.ts';
import type { Member, Ring } from '../coord/types.ts';
import type { CapBucketSpec, CapLeases } from '../globalcap/cap-leases.ts';
import type { AcquireResult, LimitState, Policy } from '../limiter/types.ts';
import { limitName, policyFromLimits } from '../config/policy.ts';

/** Where a spread tenant stands on this node. */
export interface SpreadPlacement {
  /** The nodes the tenant is spread over now, in ring order (at most k). */
  readonly members: readonly Member[];
  /** This node's position among them, -1 when it is not one of them. */
  readonly index: number;
}

/** Found-hot tenants (`cluster.hot`): the shared hot set and how the owner's limiter hands over. */
export interface SpreadHotOptions {
  /** The cluster's hot set (read every 500 ms). */
  readonly set: HotSet;
  /**
   * Usage of each `requests`/`tokens` limit of a tenant in this node's limiter (units used in its
   * window, in config order), charged to the global cap when the tenant becomes hot.
   */
  readonly usage: (tenant: TenantConfig) => number[];
  /**
   * Charges a cooled tenant's usage (the most used of its requests limits and of its tokens limits,
   * read from the global cap) to this node's limiter, once the tenant is back on its owner.
   */
  readonly seed: (tenant: string, used: { readonly requests: number; readonly tokens: number }) => void;
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
  /** Tenants found hot at run time, besides those configured with `spread`. */
  readonly hot?: SpreadHotOptions;
}

interface SpreadTenant {
  readonly config: TenantConfig;
  readonly k: number;
  /** Local policy (split concurrency limits only) by `<share>/<index>`. */
  readonly policies: Map<string, Policy>;
  /** The last placement and the ring it was computed on. */
  placed?: { readonly ring: Ring; readonly placement: SpreadPlacement };
}

/** A node outside any cluster serves a spread tenant alone. */
const OUTSIDE_CLUSTER: SpreadPlacement = Object.freeze({ members: Object.freeze([]) as readonly Member[], index: 0 });

/** The spread tenants of a node's config, their placement, local policies and global-cap groups. */
export class SpreadTenants {
  readonly #tenants = new Map<string, SpreadTenant>();
  /** The limits behind each group's buckets, in bucket order. */
  readonly #groupLimits = new Map<string, readonly LimitConfig[]>();
  readonly #leases: CapLeases;
  readonly #ring: () => Ring | undefined;
  readonly #selfId: string | undefined;
  readonly #hot: SpreadHotOptions | undefined;
  readonly #configs = new Map<string, TenantConfig>();
  readonly #config: LoadedConfig;
  /** Tenants spread because they are in the hot set (or were, until their owner has taken them back). */
  readonly #dynamic = new Map<string, SpreadTenant & { cooling: boolean }>();

  constructor(opts: SpreadTenantsOptions) {
    this.#leases = opts.leases;
    this.#ring = opts.ring;
    this.#selfId = opts.selfId;
    this.#hot = opts.hot;
    this.#config = opts.config;
    for (const t of opts.config.config.tenants) {
      this.#configs.set(t.id, t);
      if (t.spread !== undefined) this.#tenants.set(t.id, { config: t, k: t.spread, policies: new Map() });
    }
  }

  /**
   * True when `tenant` is spread: configured with `spread`, in the hot set, or cooled but not yet
   * taken back by its owner (which reads the tenant's usage from the global cap first).
   */
  isSpread(tenant: string): boolean {
    if (this.#tenants.has(tenant)) return true;
    if (this.#hot === undefined) return false;
    const k = this.#hot.set.spreadOf(tenant);
    const known = this.#dynamic.get(tenant);
    if (k !== undefined) {
      const config = this.#configOf(tenant);
      if (config === undefined) return false;
      if (known === undefined || known.k !== k) this.#dynamic.set(tenant, { config, k, policies: new Map(), cooling: false });
      return true;
    }
    if (known === undefined) return false;
    this.#cool(tenant, known);
    return this.#dynamic.has(tenant);
  }

  /** A tenant of the YAML list, else of the catalogue (as it is when the tenant is found hot). */
  #configOf(tenant: string): TenantConfig | undefined {
    return this.#configs.get(tenant) ?? this.#config.catalogue.tenant(tenant);
  }

  /** The tenant's k (configured or hot), or undefined when it is not spread. */
  spreadOf(tenant: string): number | undefined {
    return this.isSpread(tenant) ? this.#tenant(tenant).k : undefined;
  }

  /** True when the tenant is spread because it was found hot (not configured). */
  isHot(tenant: string): boolean {
    return !this.#tenants.has(tenant) && this.isSpread(tenant);
  }

  /** True when this node is the tenant's owner on the ring (the first of its range). */
  owns(tenant: string): boolean {
    return this.#ring()?.owner(tenant)?.id === this.#selfId;
  }

  /**
   * Makes `tenant` hot (called by its owner): charges the usage its limits have in this node's
   * limiter to the global cap, then, in one synchronous step, records what this node admitted while
   * that call was in flight (charged before its next lease) and marks the tenant in the hot set over
   * `k` nodes for `ttlMs` (this node decides from the cap from then on; the others read the set
   * within 500 ms). @returns false when Redis could not take the usage (the tenant stays on its
   * owner); rejects when the hot set could not be written.
   */
  async promote(tenant: string, k: number, ttlMs: number): Promise<boolean> {
    const config = this.#configOf(tenant);
    const hot = this.#hot;
    if (config === undefined || hot === undefined) return false;
    const group = this.#allGroup(tenant, config);
    const before = hot.usage(config);
    if (!(await this.#leases.charge(group, before))) return false;
    const after = hot.usage(config);
    this.#leases.owe(group, after.map((u, i) => Math.max(0, u - (before[i] ?? 0))));
    await hot.set.mark(tenant, k, ttlMs);
    return true;
  }

  /** A tenant that left the hot set: other nodes drop it at once; its owner first reads its levels. */
  #cool(tenant: string, t: SpreadTenant & { cooling: boolean }): void {
    const hot = this.#hot;
    if (hot === undefined || t.cooling) return;
    if (!this.owns(tenant)) {
      this.#dynamic.delete(tenant);
      return;
    }
    t.cooling = true;
    const limits = t.config.limits.filter((l) => l.concurrent === undefined);
    void this.#leases.levels(this.#allGroup(tenant, t.config)).then((levels) => {
      const used = { requests: 0, tokens: 0 };
      limits.forEach((l, i) => {
        const kind = l.requests !== undefined ? 'requests' : 'tokens';
        const capacity = l.requests ?? l.tokens ?? 0;
        used[kind] = Math.max(used[kind], Math.min(capacity, Math.max(0, capacity - (levels[i] ?? capacity))));
      });
      if (this.#dynamic.get(tenant) === t) this.#dynamic.delete(tenant);
      hot.seed(tenant, used);
    });
  }

  /** A group with every requests/tokens limit of the tenant (for charging and reading levels). */
  #allGroup(tenant: string, config: TenantConfig): string {
    const name = `tenant:${tenant}`;
    if (!this.#groupLimits.has(name)) {
      const limits = config.limits.filter((l) => l.concurrent === undefined);
      this.#leases.define(name, { buckets: limits.map(bucketSpec(tenant)), share: () => this.share(tenant) });
      this.#groupLimits.set(name, limits);
    }
    return name;
  }

  /** The nodes a spread tenant is routed over now and this node's place among them. @throws RangeError for a tenant that is not spread. */
  placement(tenant: string): SpreadPlacement {
    const t = this.#tenant(tenant);
    const ring = this.#ring();
    if (ring === undefined) return OUTSIDE_CLUSTER;
    // Asked several times per request (ownership, local policy, lease share): computed once per ring.
    if (t.placed?.ring === ring) return t.placed.placement;
    const members = ring.range(tenant, t.k);
    const placement = { members, index: members.findIndex((m) => m.id === this.#selfId) };
    t.placed = { ring, placement };
    return placement;
  }

  /** Nodes sharing the tenant's limits now (≥ 1; 1 once a found-hot tenant is back on its owner). */
  share(tenant: string): number {
    if (!this.#tenants.has(tenant) && !this.#dynamic.has(tenant)) return 1;
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
      const split = t.config.limits.flatMap((l) =>
        l.concurrent === undefined ? [] : [{ ...l, concurrent: Math.max(1, Math.floor(l.concurrent / n) + (i < l.concurrent % n ? 1 : 0)) }],
      );
      policy = policyFromLimits(split);
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
      return { name: limits[i] === undefined ? b.kind : limitName(limits[i]), kind: b.kind, limit: b.capacity, remaining, resetMs: Math.ceil(((b.capacity - remaining) * windowMs) / b.capacity) };
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
    // This node's view of the cluster level may still cover the cost (a renewal was in flight or the
    // other nodes hold the rest): the refusing limit reads as short of the request, not as if it fit.
    const shown = limits[i];
    if (shown !== undefined && waitMs >= 0) limits[i] = { ...shown, remaining: Math.min(shown.remaining, Math.max(0, units(shown.kind === 'requests' ? 'requests' : 'tokens') - 1)) };
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
    const t = this.#tenants.get(tenant) ?? this.#dynamic.get(tenant);
    if (t === undefined) throw new RangeError(`tenant ${JSON.stringify(tenant)} is not spread`);
    return t;
  }
}


/**
 * The global-cap bucket of a spread tenant's `requests` or `tokens` limit: capacity = the limit (units),
 * refilled over its window (ms), named `tenant:<id>:<kind>:<limit>/<window ms>[@model]` so that a
 * changed limit gets a bucket of its own. Passing a `concurrent` limit is a caller error.
 */
export function bucketSpec(tenant: string): (l: LimitConfig) => CapBucketSpec {
  return (l) => {
    const kind = l.requests !== undefined ? 'requests' : 'tokens';
    const capacity = l.requests ?? l.tokens ?? 1;
    const windowMs = l.window ?? 60_000;
    return { kind, name: `tenant:${tenant}:${kind}:${capacity}/${windowMs}${l.model === undefined ? '' : `@${l.model}`}`, capacity, windowMs };
  };
}
