/**
 * A node's fair shares of its fair-shared deployments' quotas: what each of its tenants asks and
 * uses (`usage.ts`), the demand reports of every node (`exchange.ts`), and each tenant's share,
 * water-filled over the whole cluster's demand (`water-fill.ts`).
 *
 * The rule a request meets (at admission, before the deployment's lease is taken):
 * - **within its share** when, for every bucket of the deployment, the tenant's share bucket on this
 *   node (refilled at its share on this node per window, `usage.ts`) holds the request's cost. Such
 *   a take may empty the cluster bucket;
 * - **over its share** otherwise: its take may only spend what lies above the bucket's reserve
 *   (`reserve × capacity`, lua/lease.lua's `floor`), so a tenant beyond its share never takes the
 *   units a tenant within its share needs, yet takes every unit nobody within a share wants (no
 *   capacity is idle while anyone asks for it).
 *
 * A tenant's share on this node is its cluster share × this node's part of its demand (a spread
 * tenant is asked on several nodes). Without a fresh exchange (no Redis, Redis unavailable for
 * `staleMs`, or before the first one) the node water-fills `capacity / live nodes` over its own
 * tenants. A tenant no report names yet (it has just started asking) gets the water line × its
 * weight (what a tenant whose demand is not met gets) plus its floor.
 */
import type { Clock } from '../clock.ts';
import { waterFill } from './water-fill.ts';
import type { Claim } from './water-fill.ts';
import { DEFAULT_USAGE_TUNING, KindUsage } from './usage.ts';
import type { UsageTuning } from './usage.ts';

/** The unit a deployment bucket counts. */
export type ShareKind = 'requests' | 'tokens';

/** A deployment whose quota is shared fairly. */
export interface FairDeploymentSpec {
  readonly name: string;
  /** Its quota's buckets: kind and capacity (units per window, after headroom). */
  readonly buckets: readonly { readonly kind: ShareKind; readonly capacity: number }[];
  /** Fraction of each bucket left to takes within their tenant's share (0 ≤ reserve < 1). */
  readonly reserve: number;
}

/** A tenant's weight and floor (its guaranteed fraction of each fair-shared bucket). */
export interface TenantShareSpec {
  /** > 0. @default 1 */
  readonly weight: number;
  /** Fraction of each bucket's capacity reserved for it, 0..1. @default 0 */
  readonly floor: number;
}

/** What a node reports of one deployment: each tenant's demand per bucket (in the spec's order), weight and floor. */
export interface DemandReport {
  readonly v: 1;
  /** The bucket kinds, in order. */
  readonly kinds: readonly ShareKind[];
  /** `[tenant, demand per kind (units per window), weight, floor fraction]`. */
  readonly t: readonly (readonly [string, readonly number[], number, number])[];
}

/** A node's report as the exchange read it. */
export interface ReceivedReport {
  readonly node: string;
  readonly report: DemandReport;
}

/** What a request's cost is in a deployment's units. */
export interface ShareCost {
  readonly requests: number;
  readonly tokens: number;
}

/** The verdict on a request. */
export interface ShareVerdict {
  /** Within its tenant's share on every bucket. */
  readonly within: boolean;
  /** Over its share: ms until it would be within it (0 when within). */
  readonly waitMs: number;
}

/** One tenant of one deployment, for the admin API, metrics and tests. */
export interface TenantShareView {
  readonly tenant: string;
  /** Per bucket kind: units per window. */
  readonly kinds: readonly { readonly kind: ShareKind; readonly demand: number; readonly share: number; readonly used: number }[];
}

/** A deployment's fair-share table as this node sees it. */
export interface DeploymentShareView {
  readonly deployment: string;
  /** `cluster`: from every node's reports; `local`: this node's tenants over capacity / live nodes. */
  readonly source: 'cluster' | 'local';
  /** Nodes whose reports made the table. */
  readonly nodes: number;
  readonly reserve: number;
  readonly buckets: readonly { readonly kind: ShareKind; readonly capacity: number; readonly level: number }[];
  readonly tenants: readonly TenantShareView[];
}

interface Table {
  readonly source: 'cluster' | 'local';
  readonly nodes: number;
  /** Per bucket: share of each tenant (cluster-wide, units per window), the water line, and the tenant's total demand. */
  readonly perKind: readonly { readonly share: ReadonlyMap<string, number>; readonly level: number; readonly demand: ReadonlyMap<string, number> }[];
  readonly at: number;
}

interface Deployment {
  readonly spec: FairDeploymentSpec;
  /** Usage per tenant, one `KindUsage` per bucket. */
  readonly usage: Map<string, KindUsage[]>;
  /** Demand this node reported last, per tenant and bucket. */
  reported: Map<string, readonly number[]>;
  /** The last cluster table and when it was received. */
  cluster: Table | undefined;
  /** The local table, recomputed at most every `LOCAL_EVERY_MS`. */
  local: Table | undefined;
}

/** The local table is recomputed at most this often, ms. */
const LOCAL_EVERY_MS = 250;

/** Options of {@link FairShares}. */
export interface FairSharesOptions {
  readonly clock: Clock;
  readonly deployments: readonly FairDeploymentSpec[];
  /** A tenant's weight and floor (from its config or plan). */
  readonly tenantSpec: (tenant: string) => TenantShareSpec;
  /** Nodes sharing the quotas now (≥ 1). */
  readonly liveNodes: () => number;
  /** A cluster table older than this is not used (ms). @default 2000 */
  readonly staleMs?: number;
  readonly tuning?: UsageTuning;
}

/** A node's fair shares (see the file comment). */
export class FairShares {
  readonly #clock: Clock;
  readonly #deployments = new Map<string, Deployment>();
  readonly #tenantSpec: (tenant: string) => TenantShareSpec;
  readonly #liveNodes: () => number;
  readonly #staleMs: number;
  readonly #tuning: UsageTuning;

  /** @throws RangeError for a reserve outside [0, 1) or a bucket capacity not > 0. */
  constructor(o: FairSharesOptions) {
    this.#clock = o.clock;
    this.#tenantSpec = o.tenantSpec;
    this.#liveNodes = o.liveNodes;
    this.#staleMs = o.staleMs ?? 2_000;
    this.#tuning = o.tuning ?? DEFAULT_USAGE_TUNING;
    for (const spec of o.deployments) {
      if (!(spec.reserve >= 0 && spec.reserve < 1)) throw new RangeError(`deployment ${spec.name}: fair_share.reserve must be in [0, 1), got ${spec.reserve}`);
      for (const b of spec.buckets) if (!(b.capacity > 0)) throw new RangeError(`deployment ${spec.name}: bucket capacity must be > 0`);
      this.#deployments.set(spec.name, { spec, usage: new Map(), reported: new Map(), cluster: undefined, local: undefined });
    }
  }

  /** The deployments shared fairly. */
  get deployments(): readonly string[] {
    return [...this.#deployments.keys()];
  }

  /** Whether `deployment` is shared fairly. */
  has(deployment: string): boolean {
    return this.#deployments.has(deployment);
  }

  /** The reserve of `deployment` (fraction of each bucket), or 0 when it is not shared fairly. */
  reserveOf(deployment: string): number {
    return this.#deployments.get(deployment)?.spec.reserve ?? 0;
  }

  /**
   * Counts a request's ask and decides whether it is within its tenant's share (see the file
   * comment). Undefined for a deployment not shared fairly.
   * @param counted false for a request asking again (after a wait): its ask was counted once.
   */
  ask(tenant: string, deployment: string, cost: ShareCost, counted = true): ShareVerdict | undefined {
    const d = this.#deployments.get(deployment);
    if (d === undefined) return undefined;
    const now = this.#clock.now();
    const usage = this.#usage(d, tenant);
    const table = this.#table(d, now);
    let waitMs = 0;
    d.spec.buckets.forEach((b, i) => {
      const units = b.kind === 'requests' ? cost.requests : cost.tokens;
      const u = usage[i] as KindUsage;
      if (counted) u.ask(now, units);
      if (units <= 0) return;
      const share = this.#localShare(d, table, i, tenant);
      waitMs = Math.max(waitMs, u.msUntilWithin(now, share, units));
    });
    return { within: waitMs === 0, waitMs };
  }

  /**
   * A take for `tenant` was admitted (`sign` 1) or given back (`sign` -1); `within`: it was within
   * its share (it spends from, or goes back to, the tenant's share bucket). No-op for a deployment
   * not shared fairly.
   */
  used(tenant: string, deployment: string, cost: ShareCost, sign: 1 | -1, within = sign < 0): void {
    const d = this.#deployments.get(deployment);
    if (d === undefined) return;
    const now = this.#clock.now();
    const usage = this.#usage(d, tenant);
    const table = within ? this.#table(d, now) : undefined;
    d.spec.buckets.forEach((b, i) => {
      const units = sign * (b.kind === 'requests' ? cost.requests : cost.tokens);
      const u = usage[i] as KindUsage;
      u.use(now, units);
      if (table !== undefined) u.spendShare(now, this.#localShare(d, table, i, tenant), units);
    });
  }

  /** A settlement: `tokensDelta` = tokens used − tokens reserved (negative: a refund). */
  settled(tenant: string, deployment: string, tokensDelta: number): void {
    const d = this.#deployments.get(deployment);
    if (d === undefined || tokensDelta === 0 || !Number.isFinite(tokensDelta)) return;
    const now = this.#clock.now();
    const usage = d.usage.get(tenant);
    if (usage === undefined) return;
    d.spec.buckets.forEach((b, i) => {
      if (b.kind === 'tokens') (usage[i] as KindUsage).correct(now, tokensDelta);
    });
  }

  /** This node's report of `deployment` now (tenants idle for a window are dropped first). */
  report(deployment: string): DemandReport | undefined {
    const d = this.#deployments.get(deployment);
    if (d === undefined) return undefined;
    const now = this.#clock.now();
    const t: [string, number[], number, number][] = [];
    const reported = new Map<string, readonly number[]>();
    for (const [tenant, usage] of d.usage) {
      if (usage.every((u) => u.idle(now))) {
        d.usage.delete(tenant);
        continue;
      }
      const demand = usage.map((u) => roundUnits(u.demand(now)));
      const spec = this.#tenantSpec(tenant);
      t.push([tenant, demand, spec.weight, spec.floor]);
      reported.set(tenant, demand);
    }
    d.reported = reported;
    return { v: 1, kinds: d.spec.buckets.map((b) => b.kind), t };
  }

  /**
   * Every live node's reports of `deployment` (this node's own included), as the exchange read
   * them: the shares are water-filled over the cluster's demand. Reports whose kinds are not the
   * deployment's (a node with another config) are left out.
   */
  received(deployment: string, reports: readonly ReceivedReport[]): void {
    const d = this.#deployments.get(deployment);
    if (d === undefined) return;
    const kinds = d.spec.buckets.map((b) => b.kind);
    const usable = reports.filter((r) => r.report.kinds.length === kinds.length && r.report.kinds.every((k, i) => k === kinds[i]));
    const claims = d.spec.buckets.map(() => [] as Claim[]);
    for (const r of usable) {
      for (const [tenant, demand, weight, floor] of r.report.t) {
        d.spec.buckets.forEach((b, i) => claims[i]?.push({ id: tenant, demand: demand[i] ?? 0, weight, floor: floor * b.capacity }));
      }
    }
    d.cluster = fill(d.spec, claims, 1, 'cluster', usable.length, this.#clock.now());
  }

  /** A deployment's table as this node sees it now, for the admin API, metrics and tests. */
  view(deployment: string): DeploymentShareView | undefined {
    const d = this.#deployments.get(deployment);
    if (d === undefined) return undefined;
    const now = this.#clock.now();
    const table = this.#table(d, now);
    const tenants = new Set<string>([...d.usage.keys(), ...(table.perKind[0]?.share.keys() ?? [])]);
    return {
      deployment,
      source: table.source,
      nodes: table.nodes,
      reserve: d.spec.reserve,
      buckets: d.spec.buckets.map((b, i) => ({ kind: b.kind, capacity: b.capacity, level: roundUnits(table.perKind[i]?.level ?? 0) })),
      tenants: [...tenants].sort().map((tenant) => ({
        tenant,
        kinds: d.spec.buckets.map((b, i) => ({
          kind: b.kind,
          demand: roundUnits(table.perKind[i]?.demand.get(tenant) ?? 0),
          share: roundUnits(this.#localShare(d, table, i, tenant)),
          used: roundUnits(d.usage.get(tenant)?.[i]?.used(now) ?? 0),
        })),
      })),
    };
  }

  /** Views of every fair-shared deployment in which `tenant` asks (admin API of one tenant). */
  tenantViews(tenant: string): { readonly deployment: string; readonly kinds: TenantShareView['kinds'] }[] {
    const out: { deployment: string; kinds: TenantShareView['kinds'] }[] = [];
    for (const name of this.#deployments.keys()) {
      const v = this.view(name);
      const t = v?.tenants.find((x) => x.tenant === tenant);
      if (t !== undefined) out.push({ deployment: name, kinds: t.kinds });
    }
    return out;
  }

  #usage(d: Deployment, tenant: string): KindUsage[] {
    let u = d.usage.get(tenant);
    if (u === undefined) {
      u = d.spec.buckets.map(() => new KindUsage(this.#tuning));
      d.usage.set(tenant, u);
    }
    return u;
  }

  /** The cluster table while fresh, else the local one (recomputed at most every LOCAL_EVERY_MS). */
  #table(d: Deployment, now: number): Table {
    if (d.cluster !== undefined && now - d.cluster.at <= this.#staleMs) return d.cluster;
    if (d.local !== undefined && now - d.local.at < LOCAL_EVERY_MS) return d.local;
    const claims = d.spec.buckets.map(() => [] as Claim[]);
    for (const [tenant, usage] of d.usage) {
      const spec = this.#tenantSpec(tenant);
      d.spec.buckets.forEach((b, i) => claims[i]?.push({ id: tenant, demand: usage[i]?.demand(now) ?? 0, weight: spec.weight, floor: spec.floor * b.capacity }));
    }
    d.local = fill(d.spec, claims, 1 / Math.max(1, this.#liveNodes()), 'local', 1, now);
    return d.local;
  }

  /** `tenant`'s share of bucket `i` on this node: its share × this node's part of its demand. */
  #localShare(d: Deployment, table: Table, i: number, tenant: string): number {
    const k = table.perKind[i];
    if (k === undefined) return Infinity;
    const share = k.share.get(tenant);
    if (share === undefined) {
      // Not counted yet: what a tenant whose demand is not met gets.
      const spec = this.#tenantSpec(tenant);
      return k.level * spec.weight + spec.floor * (d.spec.buckets[i]?.capacity ?? 0) * (table.source === 'local' ? 1 / Math.max(1, this.#liveNodes()) : 1);
    }
    if (table.source === 'local') return share;
    const total = k.demand.get(tenant) ?? 0;
    const mine = d.reported.get(tenant)?.[i] ?? 0;
    // A node that has not reported the tenant yet (it has just become its owner) uses the whole share
    // until its next report: generous for one exchange period, never an empty share.
    return total > 0 && mine > 0 ? (share * mine) / total : share;
  }
}

/** Water-fills each bucket's capacity × `scale` over its claims. */
function fill(spec: FairDeploymentSpec, claims: readonly Claim[][], scale: number, source: 'cluster' | 'local', nodes: number, at: number): Table {
  return {
    source,
    nodes,
    at,
    perKind: spec.buckets.map((b, i) => {
      const c = claims[i] ?? [];
      const demand = new Map<string, number>();
      for (const x of c) demand.set(x.id, (demand.get(x.id) ?? 0) + x.demand);
      const scaled = scale === 1 ? c : c.map((x) => ({ ...x, floor: x.floor * scale }));
      const r = waterFill(b.capacity * scale, scaled);
      return { share: r.share, level: r.level, demand };
    }),
  };
}

/** Units rounded to 3 decimals (reports and views). */
function roundUnits(x: number): number {
  return Number.isFinite(x) ? Math.round(x * 1000) / 1000 : 0;
}
