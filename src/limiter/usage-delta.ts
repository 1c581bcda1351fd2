/**
 * Usage one node recorded for a tenant while it stood in for the tenant's owner (a router routed
 * around the owner as suspect): what it admitted since it loaded the owner's checkpoint. When the
 * stand-in gives the tenant back, the owner adds this usage to its own state, so the admissions of
 * both nodes count against the tenant's limits from then on.
 *
 * - Sliding windows: the entries the stand-in added (by request id), each at its own admission time
 *   and with its settled cost ({@link windowUsageSince}); exact.
 * - Token buckets: the units the stand-in took from each bucket, net of settlements (counted by
 *   the stand-in's limiter, `Limiter.bucketUsage`), taken from the owner's bucket when it
 *   absorbs them: exact unless the combined bucket would have refilled to capacity meanwhile.
 * - Budgets (cost limits): the spend the stand-in added in the current period (its spend now less
 *   the spend it loaded, in pico-dollars; {@link budgetUsageSince}), added to the owner's budget
 *   when it absorbs them, if the owner is in the same period; exact.
 * - Requests still running on the stand-in ({@link openRequestsSince}): their reservations and
 *   concurrency leases, so the owner holds their slots from the give-back on and applies their
 *   settlements, which the stand-in forwards to it; exact.
 */
import type { ReservationSnapshot, TenantSnapshot, TokenBucketSnapshot } from './snapshot.ts';

/** Window entries a stand-in admitted for one sliding-window limit. */
export interface WindowUsage {
  /** The limit's name. */
  readonly name: string;
  readonly kind?: 'requests' | 'tokens';
  /** `[admission time ms, cost in units, request id]`, oldest first. */
  readonly entries: readonly (readonly [ts: number, cost: number, id: string])[];
}

/** Units a stand-in took from one token-bucket limit (with the bucket's spec, for an owner that holds no state). */
export interface BucketUsage {
  /** The limit's name. */
  readonly name: string;
  readonly kind: 'requests' | 'tokens';
  /** Capacity, units. */
  readonly limit: number;
  /** Window, ms. */
  readonly windowMs: number;
  /** Units taken, net of settlements, > 0. */
  readonly taken: number;
}

/** Spend a stand-in added to one budget (a cost limit) in the period that began at `start`. */
export interface BudgetUsage {
  /** The limit's name. */
  readonly name: string;
  /** Clock ms when the period began. */
  readonly start: number;
  /** Pico-dollars, a decimal integer string > 0. */
  readonly spent: string;
}

/**
 * Requests a stand-in admitted that still ran when it gave the tenant back: their reservations and
 * concurrency leases (their usage is in the delta's windows, buckets and budgets, at what they
 * reserved, under the same request ids).
 */
export interface OpenRequests {
  readonly reservations: readonly ReservationSnapshot[];
  /** Concurrency leases of those requests, by limit name: `[request id, lease expiry ms]`. */
  readonly leases: readonly { readonly name: string; readonly leases: readonly (readonly [id: string, expiresAt: number])[] }[];
}

/** What a stand-in admitted for a tenant since it loaded the owner's state. */
export interface UsageDelta {
  readonly windows: readonly WindowUsage[];
  readonly buckets: readonly BucketUsage[];
  /** Absent from a node that predates budgets. */
  readonly budgets?: readonly BudgetUsage[];
  /** Absent when none ran (and from a node that predates carrying them). */
  readonly open?: OpenRequests;
}

/** True when a delta carries no usage. */
export function isEmptyUsage(delta: UsageDelta): boolean {
  return delta.windows.length === 0 && delta.buckets.length === 0 && (delta.budgets ?? []).length === 0 && (delta.open?.reservations.length ?? 0) === 0;
}

/**
 * The requests of `current` still open whose ids `except` lacks (`except`: the ids of the state
 * the stand-in loaded, the owner's own requests), with their concurrency leases; undefined when none.
 */
export function openRequestsSince(current: TenantSnapshot | undefined, except: ReadonlySet<string>): OpenRequests | undefined {
  const reservations = (current?.reservations ?? []).filter((r) => !except.has(r.id));
  if (reservations.length === 0) return undefined;
  const ids = new Set(reservations.map((r) => r.id));
  const leases: OpenRequests['leases'][number][] = [];
  for (const l of current?.limits ?? []) {
    if (l.algorithm !== 'semaphore') continue;
    const held = l.leases.filter(([id]) => ids.has(id));
    if (held.length > 0) leases.push({ name: l.name, leases: held });
  }
  return { reservations, leases };
}

/**
 * `snap` (the result of {@link withUsage}) with the open requests a delta carries added (see
 * {@link withOpenRequests}).
 */
export function withCarriedRequests(snap: TenantSnapshot, open: OpenRequests | undefined): TenantSnapshot {
  if (open === undefined || open.reservations.length === 0) return snap;
  const from: TenantSnapshot = { v: 1, at: snap.at, limits: open.leases.map((l) => ({ name: l.name, algorithm: 'semaphore' as const, leases: l.leases })), reservations: open.reservations };
  return withOpenRequests(snap, from, new Set());
}

/**
 * The spend `current` added to each budget since `base` (undefined: fresh): its spend less the
 * spend `base` held in the same period (all of it when `base` was of an earlier period or lacks the
 * budget); budgets with nothing added are left out.
 */
export function budgetUsageSince(base: TenantSnapshot | undefined, current: TenantSnapshot | undefined): BudgetUsage[] {
  const out: BudgetUsage[] = [];
  for (const limit of current?.limits ?? []) {
    if (limit.algorithm !== 'budget') continue;
    const before = base?.limits.find((l) => l.name === limit.name);
    const had = before?.algorithm === 'budget' && before.start === limit.start ? BigInt(before.spent) : 0n;
    const added = BigInt(limit.spent) - had;
    if (added > 0n) out.push({ name: limit.name, start: limit.start, spent: added.toString() });
  }
  return out;
}

/** A bucket's level (unit·ms) refilled from its `refilledAt` to `atMs`, capped at capacity. */
function levelAt(b: Pick<TokenBucketSnapshot, 'level' | 'refilledAt' | 'limit' | 'windowMs'>, atMs: number): number {
  const full = b.limit * b.windowMs;
  if (b.level >= full) return full;
  const next = b.level + Math.max(0, atMs - b.refilledAt) * b.limit;
  return next > full ? full : next;
}

/**
 * The units `current` took from each token bucket since `base` (undefined: fresh, a full bucket),
 * from the two states alone: `base`'s level refilled to `current`'s refill time, less `current`'s
 * level. Short by the refill a full bucket could not hold in between; buckets with nothing taken are
 * left out. (A stand-in counts what it takes instead: `Limiter.bucketUsage`.)
 */
export function bucketUsageSince(base: TenantSnapshot | undefined, current: TenantSnapshot | undefined): BucketUsage[] {
  const out: BucketUsage[] = [];
  for (const limit of current?.limits ?? []) {
    if (limit.algorithm !== 'token_bucket' || !(limit.windowMs > 0)) continue;
    const before = base?.limits.find((l) => l.name === limit.name);
    const from = before?.algorithm === 'token_bucket' ? levelAt(before, limit.refilledAt) : limit.limit * limit.windowMs;
    const taken = Math.floor((from - limit.level) / limit.windowMs);
    if (taken > 0) out.push({ name: limit.name, kind: limit.kind, limit: limit.limit, windowMs: limit.windowMs, taken });
  }
  return out;
}

/**
 * The sliding-window entries in `current` that are not in `base`, by request id (ids `''`, usage
 * carried over by a reload, are never counted), with their settled costs.
 * @param base the state as loaded when standing in began; undefined: fresh.
 * @param current the state now; undefined: fresh (nothing admitted still counts).
 */
export function windowUsageSince(base: TenantSnapshot | undefined, current: TenantSnapshot | undefined): WindowUsage[] {
  const windows: WindowUsage[] = [];
  for (const limit of current?.limits ?? []) {
    if (limit.algorithm !== 'sliding_window') continue;
    const before = base?.limits.find((l) => l.name === limit.name);
    const known = new Set(before?.algorithm === 'sliding_window' ? before.entries.map((e) => e[2]) : []);
    const entries = limit.entries.filter(([, , id]) => id !== '' && !known.has(id));
    if (entries.length > 0) windows.push({ name: limit.name, ...(limit.kind === undefined ? {} : { kind: limit.kind }), entries });
  }
  return windows;
}

/**
 * `snap` (the owner's state; undefined: fresh) with `delta` added at `nowMs`: window entries merged
 * in time order (an entry whose id the window holds already is skipped), each bucket refilled to
 * `nowMs` and then lowered by the units taken (below zero when both nodes took more than its
 * capacity), each budget's spend added when of the same period (a later period's replaces it). A limit `snap` lacks is added from the delta. Reservations and leases are `snap`'s.
 * Import the result with `Limiter.importTenant`, which maps it onto the tenant's policy by name.
 */
export function withUsage(snap: TenantSnapshot | undefined, delta: UsageDelta, nowMs: number): TenantSnapshot {
  const limits = [...(snap?.limits ?? [])];
  for (const w of delta.windows) {
    const k = limits.findIndex((l) => l.name === w.name);
    const held = limits[k];
    if (held === undefined) {
      limits.push({ name: w.name, algorithm: 'sliding_window', ...(w.kind === undefined ? {} : { kind: w.kind }), entries: [...w.entries].sort((a, b) => a[0] - b[0]) });
    } else if (held.algorithm === 'sliding_window') {
      const known = new Set(held.entries.map((e) => e[2]));
      const entries = [...held.entries, ...w.entries.filter((e) => !known.has(e[2]))].sort((a, b) => a[0] - b[0]);
      limits[k] = { ...held, entries };
    }
  }
  for (const b of delta.buckets) {
    const k = limits.findIndex((l) => l.name === b.name);
    const held = limits[k];
    if (held === undefined) {
      limits.push({ name: b.name, algorithm: 'token_bucket', kind: b.kind, limit: b.limit, windowMs: b.windowMs, level: (b.limit - b.taken) * b.windowMs, refilledAt: nowMs });
    } else if (held.algorithm === 'token_bucket') {
      limits[k] = { ...held, level: levelAt(held, nowMs) - b.taken * held.windowMs, refilledAt: Math.max(nowMs, held.refilledAt) };
    }
  }
  for (const b of delta.budgets ?? []) {
    const k = limits.findIndex((l) => l.name === b.name);
    const held = limits[k];
    if (held === undefined) limits.push({ name: b.name, algorithm: 'budget', spent: b.spent, start: b.start });
    else if (held.algorithm === 'budget' && held.start === b.start) limits[k] = { ...held, spent: (BigInt(held.spent) + BigInt(b.spent)).toString() };
    else if (held.algorithm === 'budget' && held.start < b.start) limits[k] = { ...held, spent: b.spent, start: b.start };
  }
  return { v: 1, at: nowMs, limits, reservations: snap?.reservations ?? [] };
}

/**
 * `snap` with the open reservations of `from` whose id `except` lacks, and their concurrency
 * leases (by limit name; a semaphore `snap` lacks is added), so that their settlements and releases
 * apply after an import: the requests a stand-in still runs when a ring change makes it the
 * tenant's owner and it reloads the tenant. Use on the result of {@link withUsage}, whose window
 * entries carry the same request ids.
 */
export function withOpenRequests(snap: TenantSnapshot, from: TenantSnapshot | undefined, except: ReadonlySet<string>): TenantSnapshot {
  const open = (from?.reservations ?? []).filter((r) => !except.has(r.id));
  if (open.length === 0) return snap;
  const ids = new Set(open.map((r) => r.id));
  const limits = [...snap.limits];
  for (const l of from?.limits ?? []) {
    if (l.algorithm !== 'semaphore') continue;
    const leases = l.leases.filter(([id]) => ids.has(id));
    if (leases.length === 0) continue;
    const k = limits.findIndex((x) => x.name === l.name);
    const held = limits[k];
    if (held === undefined) limits.push({ name: l.name, algorithm: 'semaphore', leases });
    else if (held.algorithm === 'semaphore') {
      const known = new Set(held.leases.map(([id]) => id));
      limits[k] = { ...held, leases: [...held.leases, ...leases.filter(([id]) => !known.has(id))] };
    }
  }
  const known = new Set(snap.reservations.map((r) => r.id));
  return { ...snap, limits, reservations: [...snap.reservations, ...open.filter((r) => !known.has(r.id))] };
}
