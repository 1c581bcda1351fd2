/**
 * Bounds on a restored tenant snapshot (`snapshot.ts`), and the conservative state of a tenant
 * whose stored snapshot is corrupt. A snapshot comes from outside the process (Redis, another
 * node), so `Limiter.importTenant` never takes its numbers as they are: each is clamped to the
 * range a limiter of the tenant's policy could have produced, so that no stored value can grant
 * more than the limit (a bucket level of 1e300) or block a tenant for longer than one window or
 * lease (a time of 9e15). Values inside the ranges are kept exactly. See docs/security.md,
 * "Values read from Redis".
 */
import { periodAt } from './budget-period.ts';
import type { CompiledPolicy } from './compiled-policy.ts';
import type { LimitSnapshot, ReservationSnapshot, TenantSnapshot } from './snapshot.ts';
import type { LimitSpec } from './types.ts';

/**
 * How far ahead of this node's clock a restored time may be, ms: the clock skew between nodes
 * that the cluster tolerates (clocks are NTP-synchronised). A later time is moved to now + this.
 */
export const MAX_CLOCK_SKEW_MS = 1_000;

/**
 * Most bytes of a tenant's stored state (`<expiresAtMs> <json>`) a node reads from Redis: 4 MiB. A
 * larger value is never transferred (the store checks its length in Redis first) and counts as
 * corrupt: the tenant starts in the conservative state. What a node exports stays well under it:
 * a lease, a window entry or a reservation is 30 to 150 bytes of JSON (a 45-character request id,
 * 13-digit times), so 4 MiB holds some 30,000 of the largest, more than a tenant has in flight or
 * in a window but for sliding logs of tens of thousands of requests a window (such a tenant's next
 * owner then starts it with its limits used up for one window: never more than the limit). Parsing
 * 4 MiB of JSON takes tens of ms and tens of MB at most, where an unbounded value (80 MB of leases)
 * froze a node for seconds and left it at GBs of RSS.
 */
export const MAX_STATE_BYTES = 4 * 1024 * 1024;

/**
 * Most entries a restored sliding window keeps, and most open reservations a restored tenant
 * keeps: 100,000, more than a node holds in practice (a window's entries are its admissions, not
 * bounded by its limit: a tokens entry may cost 0). Bounds what a value under
 * {@link MAX_STATE_BYTES} can make the limiter hold, whatever the policy's limits.
 */
export const MAX_RESTORED_ENTRIES = 100_000;

/** A token bucket's restored numbers, and how many of them were out of range. */
export interface BoundedBucket {
  /** Units × windowMs, in [−limit × windowMs, limit × windowMs]. */
  readonly level: number;
  /** Clock ms, ≤ now + {@link MAX_CLOCK_SKEW_MS}. */
  readonly refilledAt: number;
  /** Values moved into range (0, 1 or 2). */
  readonly clamped: number;
}

/**
 * Clamps a token bucket's stored state (`level` in unit·ms, see `token-bucket.ts`) to what a
 * bucket of capacity `limit` over `windowMs` can hold: a level in [−capacity, capacity] (a debt of
 * at most one window, so a hostile debt refills within two windows), a refill time no later than
 * `nowMs` + {@link MAX_CLOCK_SKEW_MS} (a later one is moved there: it would hold the refill back
 * until then). A
 * refill time in the past is kept: refilling from it never goes above capacity.
 * @param limit units (> 0). @param windowMs ms (> 0). @param nowMs this node's clock, ms.
 */
export function boundBucket(level: number, refilledAt: number, limit: number, windowMs: number, nowMs: number): BoundedBucket {
  const full = limit * windowMs;
  let clamped = 0;
  let l = level;
  if (!(l <= full)) {
    l = full;
    clamped++;
  } else if (l < -full) {
    l = -full;
    clamped++;
  }
  let at = refilledAt;
  if (at > nowMs + MAX_CLOCK_SKEW_MS) {
    at = nowMs + MAX_CLOCK_SKEW_MS;
    clamped++;
  }
  return { level: l, refilledAt: at, clamped };
}

/**
 * Clamps a sliding window's stored entries: a timestamp no later than `nowMs` +
 * {@link MAX_CLOCK_SKEW_MS} (a later one is moved there; it would otherwise stay in the window
 * until its time plus a window), a cost no more than `2 × limit` (a settlement may debit an entry
 * above the limit; at most one window of debt is kept, as for a bucket, and an entry of `limit`
 * already fills the window). Order is kept (timestamps never decrease).
 * Entries that already left the window are left to the caller (the limiter drops them).
 * @returns the entries and how many values were moved into range.
 */
export function boundWindowEntries(
  entries: readonly (readonly [number, number, string])[],
  limit: number,
  nowMs: number,
): { readonly entries: [number, number, string][]; readonly clamped: number } {
  const latest = nowMs + MAX_CLOCK_SKEW_MS;
  let clamped = 0;
  const out: [number, number, string][] = [];
  for (const [ts, cost, id] of entries) {
    let t = ts;
    let c = cost;
    if (t > latest) {
      t = latest;
      clamped++;
    }
    if (c > 2 * limit) {
      c = 2 * limit;
      clamped++;
    }
    out.push([t, c, id]);
  }
  return { entries: out, clamped };
}

/**
 * Bounds the number of a sliding window's stored entries (timestamp order) to `max` (≥ 1): the
 * oldest entries over the bound are merged into one entry (id `''`, as usage carried over) at the
 * newest of their timestamps, with the sum of their costs. Conservative: no usage is lost, and the
 * merged usage leaves the window no earlier than its parts would have.
 * @returns the entries (`entries` itself when within the bound) and how many were merged away.
 */
export function boundWindowCount(
  entries: readonly (readonly [number, number, string])[],
  max: number,
): { readonly entries: readonly (readonly [number, number, string])[]; readonly clamped: number } {
  if (entries.length <= max) return { entries, clamped: 0 };
  const merge = entries.length - max + 1;
  let cost = 0;
  for (let i = 0; i < merge; i++) cost += (entries[i] as readonly [number, number, string])[1];
  const ts = (entries[merge - 1] as readonly [number, number, string])[0];
  return { entries: [[ts, cost, ''], ...entries.slice(merge)], clamped: merge - 1 };
}

/**
 * Keeps the `max` latest-expiring of `items` (in their order); the others are dropped.
 * Conservative for a semaphore's leases (the slots held longest stay held) and for reservations
 * (a dropped reservation's usage stays charged; only its refund is lost).
 * @returns the items (`items` itself when within the bound) and how many were dropped.
 */
export function keepLatest<T>(items: readonly T[], max: number, expiresAt: (item: T) => number): { readonly items: readonly T[]; readonly clamped: number } {
  if (items.length <= max) return { items, clamped: 0 };
  if (max <= 0) return { items: [], clamped: items.length };
  const order = items.map((item, i) => i).sort((a, b) => expiresAt(items[b] as T) - expiresAt(items[a] as T));
  const kept = new Set(order.slice(0, max));
  return { items: items.filter((_, i) => kept.has(i)), clamped: items.length - max };
}

/**
 * Clamps a concurrency lease's stored expiry to `nowMs + leaseTtlMs`: a slot is never held
 * longer than one lease from now (a lease is renewed at most to now + leaseTtlMs).
 */
export function boundLeaseExpiry(expiresAt: number, leaseTtlMs: number, nowMs: number): number {
  const latest = nowMs + leaseTtlMs;
  return expiresAt > latest ? latest : expiresAt;
}

/**
 * Clamps a budget's stored spend to `[0, 2 × limit]` (a settlement may debit past the budget; at
 * most one budget of debt is kept, as for a bucket) and its period start to no later than `nowMs`
 * + {@link MAX_CLOCK_SKEW_MS} (a later one is moved to the current period's start, `start`).
 * @param limitPico the budget, pico-dollars. @param start the current period's start, ms.
 */
export function boundBudget(spent: string, periodStart: number, limitPico: bigint, start: number, nowMs: number): { readonly spent: string; readonly start: number; readonly clamped: number } {
  let clamped = 0;
  let s = spent;
  if (BigInt(spent) > 2n * limitPico) {
    s = (2n * limitPico).toString();
    clamped++;
  }
  let at = periodStart;
  if (at > nowMs + MAX_CLOCK_SKEW_MS) {
    at = start;
    clamped++;
  }
  return { spent: s, start: at, clamped };
}

/**
 * Clamps an open reservation: its expiry to `nowMs + ttlMs` (the policy's reservation
 * lifetime), its tokens, requests and cost to the largest capacity of the policy's limits of that
 * kind (an admitted request never reserves more than a limit holds; a settlement refunds at most
 * what was reserved), its admission time to no later than its expiry.
 * @param maxTokens units; Infinity when the policy has no tokens limit. @param maxRequests likewise.
 * @param maxCost pico-dollars: the largest cost limit (0 when none).
 */
export function boundReservation(
  r: ReservationSnapshot,
  ttlMs: number,
  maxTokens: number,
  maxRequests: number,
  nowMs: number,
  maxCost = 0n,
): { readonly reservation: ReservationSnapshot; readonly clamped: number } {
  let clamped = 0;
  const expiresAt = r.expiresAt > nowMs + ttlMs ? (clamped++, nowMs + ttlMs) : r.expiresAt;
  const tokens = r.tokens > maxTokens ? (clamped++, maxTokens) : r.tokens;
  const requests = r.requests > maxRequests ? (clamped++, maxRequests) : r.requests;
  const cost = r.cost !== undefined && BigInt(r.cost) > maxCost ? (clamped++, maxCost.toString()) : r.cost;
  const admittedAt = r.admittedAt !== undefined && r.admittedAt > expiresAt ? (clamped++, expiresAt) : r.admittedAt;
  return {
    reservation: clamped === 0 ? r : { ...r, expiresAt, tokens, requests, ...(cost === undefined ? {} : { cost }), ...(admittedAt === undefined ? {} : { admittedAt }) },
    clamped,
  };
}

/**
 * A snapshot with every value of `snap` moved into the range the tenant's policy `c` allows at
 * `nowMs` (see {@link boundBucket}, {@link boundWindowEntries}, {@link boundLeaseExpiry},
 * {@link boundReservation}), and no more entries than the policy can use: a semaphore's leases
 * at most its limit (the latest-expiring kept), a window's entries at most
 * {@link MAX_RESTORED_ENTRIES} (the oldest merged, {@link boundWindowCount}), reservations at most
 * {@link MAX_RESTORED_ENTRIES} (the latest-expiring kept). Limits matched to the policy by name, as `restoreLimits` does; a
 * snapshot limit the policy lacks, or of another algorithm, is passed on untouched (it is ignored
 * on restore). A bucket is bounded by the spec it was measured under (its own `limit` and
 * `windowMs`); a restore onto a changed spec clamps the units used to [0, limit] anyway.
 * @returns the bounded snapshot and how many values were moved into range (0: `snap` itself).
 */
export function boundSnapshot(c: CompiledPolicy, snap: TenantSnapshot, nowMs: number): { readonly snapshot: TenantSnapshot; readonly clamped: number } {
  let clamped = 0;
  let maxTokens = 0;
  let maxRequests = 0;
  let maxCost = 0n;
  for (const spec of c.limits) {
    if (spec.kind === 'tokens' && spec.limit > maxTokens) maxTokens = spec.limit;
    if (spec.kind === 'requests' && spec.limit > maxRequests) maxRequests = spec.limit;
    if (spec.kind === 'cost' && BigInt(spec.limit) * 1_000_000n > maxCost) maxCost = BigInt(spec.limit) * 1_000_000n;
  }
  // A kind no limit counts is not bounded (the limiter ignores it): an exported snapshot is never clamped.
  if (!c.limits.some((l) => l.kind === 'tokens')) maxTokens = Infinity;
  if (!c.limits.some((l) => l.kind === 'requests')) maxRequests = Infinity;
  const limits = snap.limits.map((l): LimitSnapshot => {
    const i = c.indexByName.get(l.name);
    const spec = i === undefined ? undefined : (c.limits[i] as LimitSpec);
    if (l.algorithm === 'token_bucket') {
      const b = boundBucket(l.level, l.refilledAt, l.limit, l.windowMs, nowMs);
      if (b.clamped === 0) return l;
      clamped += b.clamped;
      return { ...l, level: b.level, refilledAt: b.refilledAt };
    }
    if (l.algorithm === 'budget') {
      if (spec === undefined || spec.kind !== 'cost') return l;
      const b = boundBudget(l.spent, l.start, BigInt(spec.limit) * 1_000_000n, periodAt(spec.period, nowMs).start, nowMs);
      if (b.clamped === 0) return l;
      clamped += b.clamped;
      return { ...l, spent: b.spent, start: b.start };
    }
    if (l.algorithm === 'sliding_window') {
      if (spec === undefined || spec.kind === 'concurrent' || spec.kind === 'cost') return l;
      const counted = boundWindowCount(l.entries, MAX_RESTORED_ENTRIES);
      const w = boundWindowEntries(counted.entries, spec.limit, nowMs);
      if (counted.clamped + w.clamped === 0) return l;
      clamped += counted.clamped + w.clamped;
      return { ...l, entries: w.entries };
    }
    if (spec === undefined || spec.kind !== 'concurrent') return l;
    let n = 0;
    const expiring = l.leases.map(([id, exp]): [string, number] => {
      const e = boundLeaseExpiry(exp, spec.leaseTtlMs, nowMs);
      if (e !== exp) n++;
      return [id, e];
    });
    const kept = keepLatest(expiring, spec.limit, ([, e]) => e);
    if (n + kept.clamped === 0) return l;
    clamped += n + kept.clamped;
    return { ...l, leases: kept.items };
  });
  const latest = keepLatest(snap.reservations, MAX_RESTORED_ENTRIES, (r) => r.expiresAt);
  clamped += latest.clamped;
  const reservations = latest.items.map((r) => {
    const b = boundReservation(r, c.reservationTtlMs, maxTokens, maxRequests, nowMs, maxCost);
    clamped += b.clamped;
    return b.reservation;
  });
  return { snapshot: clamped === 0 ? snap : { ...snap, limits, reservations }, clamped };
}

/**
 * The conservative state of a tenant of policy `c` at `nowMs`, for a tenant whose stored state is
 * corrupt (what it used is unknown, so it is taken as all): every `requests` and `tokens` limit
 * used up at `nowMs`, i.e. full for one window. A token bucket at level 0 refilled at `nowMs`
 * (it admits again as it refills, fully after one window); a sliding window with one entry of
 * cost `limit` at `nowMs` (id `''`, as usage carried over; it admits nothing until that entry
 * leaves, one window later). A budget (cost limit) spent for the rest of its current period.
 * Concurrency limits start free: the slots of requests that ran elsewhere cannot be known, and a
 * crashed owner's slots are freed on load anyway.
 */
export function conservativeSnapshot(c: CompiledPolicy, nowMs: number): TenantSnapshot {
  const limits: LimitSnapshot[] = [];
  for (const spec of c.limits) {
    if (spec.kind === 'concurrent') continue;
    if (spec.kind === 'cost') {
      limits.push({ name: spec.name, algorithm: 'budget', spent: (BigInt(spec.limit) * 1_000_000n).toString(), start: periodAt(spec.period, nowMs).start });
      continue;
    }
    if (spec.algorithm === 'token_bucket') {
      limits.push({ name: spec.name, algorithm: 'token_bucket', kind: spec.kind, limit: spec.limit, windowMs: spec.windowMs, level: 0, refilledAt: nowMs });
    } else {
      limits.push({ name: spec.name, algorithm: 'sliding_window', kind: spec.kind, entries: [[nowMs, spec.limit, '']] });
    }
  }
  return { v: 1, at: nowMs, limits, reservations: [] };
}
