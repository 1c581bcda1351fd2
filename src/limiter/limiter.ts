import type { Clock } from '../clock.ts';
import { applicableLimits, compilePolicy, type CompiledPolicy } from './compiled-policy.ts';
import { Reservation } from './reservation.ts';
import type { Budget } from './budget.ts';
import { asBudget, budgetView, changeSpend, type BudgetView, type SpendChange } from './budget-view.ts';
import {
  type LimitObject,
  limitObject,
  adjustBucket,
  budgetKeep,
  costOf,
  createTenantLimits,
  limitState,
  limitsIdle,
  rebuildTenantLimits,
  syncLimit,
  syncedWaitMs,
  takeLimit,
} from './tenant-limits.ts';
import { boundSnapshot, conservativeSnapshot } from './snapshot-bounds.ts';
import type { TenantSnapshot } from './snapshot.ts';
import { BucketTallies, tallyAdd } from './bucket-tally.ts';
import { purgeReservations, TenantState } from './tenant-state.ts';
import { restoredState, snapshotOf } from './tenant-snapshot-io.ts';
import { withCarriedRequests, withUsage } from './usage-delta.ts';
import type { BucketUsage, UsageDelta } from './usage-delta.ts';
import { checkAcquireRequest } from './types.ts';
import type { AcquireRequest, AcquireResult, LimitSpec, LimitState, Policy, RateLimitSpec, SettleDetail, SettleResult, TokenKinds } from './types.ts';

/** Options of a `Limiter`. */
export interface LimiterOptions {
  /** Source of time (ms). */
  clock: Clock;
  /**
   * The policy of a tenant; undefined = the tenant has no limits (acquire returns ok with
   * `limits: []`). Called on every acquire: it must be cheap (a Map lookup). Returning a
   * different object than before (a config reload) rebuilds the tenant's state.
   */
  policyFor: (tenant: string) => Policy | undefined;
  /** Retry hint for a concurrency refusal, ms: min(this, ms until the earliest lease expires). @default 1000 */
  concurrencyRetryHintMs?: number;
  /**
   * Called (synchronously, after the change) when capacity came back early for a tenant: a slot
   * released, or tokens refunded by a settlement. The admission queue wakes its waiters with it.
   */
  onFreed?: (tenant: string) => void;
}

const UNLIMITED: AcquireResult = Object.freeze({ ok: true, limits: Object.freeze([]) as readonly LimitState[] });
const NOT_SETTLED: SettleResult = Object.freeze({ settled: false, deltaTokens: 0 });

/**
 * The in-RAM limiter: per-tenant requests, tokens and concurrency limits, decided
 * all-or-nothing, with two-phase tokens (reserve on acquire, settle on the actual usage).
 * Knows nothing of HTTP or Redis. Not thread-safe (one event loop owns it).
 *
 * Memory: a tenant's state exists only while it carries information; `sweep()` drops idle
 * tenants (every bucket full, every window empty, no lease, no open reservation).
 */
export class Limiter {
  readonly #clock: Clock;
  readonly #policyFor: (tenant: string) => Policy | undefined;
  readonly #hintMs: number;
  readonly #onFreed: ((tenant: string) => void) | undefined;
  readonly #tenants = new Map<string, TenantState>();
  readonly #compiled = new WeakMap<Policy, CompiledPolicy>();
  /** Units taken from each token bucket of the tenants being tallied (stand-ins). */
  readonly #tallies = new BucketTallies();

  /** @throws RangeError when `concurrencyRetryHintMs` is negative. */
  constructor(opts: LimiterOptions) {
    this.#clock = opts.clock;
    this.#policyFor = opts.policyFor;
    this.#hintMs = opts.concurrencyRetryHintMs ?? 1000;
    this.#onFreed = opts.onFreed;
    if (!(this.#hintMs >= 0)) throw new RangeError('concurrencyRetryHintMs must be ≥ 0');
  }

  /** Tenants with state in memory. */
  get size(): number {
    return this.#tenants.size;
  }

  /**
   * Admits a request if every limit that applies to it (unscoped limits, plus limits scoped to
   * `req.model`) can take it now, and then takes from all of them; otherwise takes nothing.
   * Refusals (results, not exceptions):
   * - `duplicate`: `req.id` is an open reservation of this tenant (retryAfterMs 0);
   * - `too_large`: the request's tokens or requests exceed a limit's capacity (less `req.floor` of
   *   it): it can never pass (retryAfterMs 0);
   * - `limited`: `retryAfterMs` is the exact time (ms, rounded up) until every limit could admit
   *   it, where a full concurrency limit contributes min(hint, earliest lease expiry).
   * `limit`/`kind` name the first limit in policy order that refused; `limits` is the state of
   * every applicable limit after the decision. A tenant's first acquire creates its state; a
   * new policy object for the tenant rebuilds it (see `rebuildTenantLimits`).
   * With `req.floor`, every requests/tokens limit must keep `floor × limit` after the request.
   * @throws RangeError when `req.tokens` or `req.requests` is negative or not finite, `req.floor`
   *   is not in [0, 1), or the
   *   tenant's policy is invalid (see `compilePolicy`).
   */
  acquire(tenant: string, req: AcquireRequest): AcquireResult {
    // The clock first: reading it (a vDSO call) waits for the CPU's pending memory loads, so after
    // the policy and tenant lookups it would make their cache misses (on a cold tenant) wait one
    // after the other instead of together.
    const now = this.#clock.now();
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return UNLIMITED;
    checkAcquireRequest(req);
    const tokens = req.tokens;
    const requests = req.requests ?? 1;
    const floor = req.floor ?? 0;
    const money = req.cost ?? 0n;
    let st = this.#tenants.get(tenant);
    if (st !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    const c = st === undefined ? this.#compile(policy) : st.compiled;
    const applied = applicableLimits(c, req.model, req.key);
    if (applied.length === 0) return UNLIMITED;
    const specs = c.limits;
    const id = req.id;

    if (st !== undefined) {
      // Every applicable limit to now first (refilled; expired entries and leases dropped), as every
      // outcome below needs: on a cold tenant this loads its numbers and limit objects together, so
      // that the CPU waits for their cache misses at once rather than one after the other.
      if (now >= (st.num[0] as number)) purgeReservations(st, now);
      for (let k = 0; k < applied.length; k++) syncLimit(c, st, applied[k] as number, now);
      if (st.has(id)) return this.#refusal('duplicate', specs[applied[0] as number] as LimitSpec, 0, st, c, applied, now);
    }
    for (let k = 0; k < applied.length; k++) {
      const spec = specs[applied[k] as number] as LimitSpec;
      if (tooLarge(spec, tokens, requests, money, floor)) return this.#refusal('too_large', spec, 0, st, c, applied, now);
    }

    if (st === undefined) {
      st = new TenantState(policy, c, createTenantLimits(c, now));
      this.#tenants.set(tenant, st);
    } else {
      // Check every limit first; take only if all fit.
      let wait = 0;
      let first = -1;
      for (let k = 0; k < applied.length; k++) {
        const i = applied[k] as number;
        const w = this.#waitOf(c, st, i, tokens, requests, floor, now, money);
        if (w > 0) {
          if (first < 0) first = i;
          if (w > wait) wait = w;
        }
      }
      if (first >= 0) return this.#refusal('limited', specs[first] as LimitSpec, Math.ceil(wait), st, c, applied, now);
    }

    let seqs: number[] | null = null;
    const tally = this.#tallies.of(tenant);
    for (let k = 0; k < applied.length; k++) {
      const i = applied[k] as number;
      const cost = costOf(specs[i] as LimitSpec, tokens, requests);
      const seq = takeLimit(c, st, i, cost, now, id, money);
      if (seq >= 0) (seqs ??= new Array<number>(applied.length).fill(-1))[k] = seq;
      else if (tally !== undefined && c.bucket[i] === true) tallyAdd(tally, (specs[i] as LimitSpec).name, cost);
    }
    const res = new Reservation(tokens, requests, c, st.objs, applied, seqs, now, money, now);
    st.set(id, res);
    if (res.expiresAt < (st.num[0] as number)) st.num[0] = res.expiresAt;
    return { ok: true, limits: this.#states(st, applied, now) };
  }

  /**
   * Settles reservation `id` on the actual usage: applies (actual − reserved) to every `tokens`
   * limit it reserved from (a refund, never above a bucket's capacity; or a debit, which may take
   * a bucket below zero or a window above its limit; a window entry is adjusted at its original
   * timestamp, and not at all once it left the window), where a limit with `weights` counts the
   * actual tokens weighted by `detail.kinds` (rounded up to a whole token); and (actual cost −
   * reserved cost) to every `cost` limit, exactly (the spend never goes below 0; a reservation
   * admitted in a period that has ended since is charged its whole actual cost in the current
   * one, where the request ended). Idempotent: a second settle, or a settle of an unknown or
   * expired id, returns `{settled: false, deltaTokens: 0}` and changes nothing.
   * @param actualTokens tokens actually used (prompt + completion), ≥ 0.
   * @param detail the actual cost (pico-dollars; absent: the reserved cost stays charged) and the
   *   token kinds among `actualTokens` (absent: every token weighs 1).
   * @throws RangeError when `actualTokens` is negative or not finite, or `detail.cost` is negative.
   */
  settle(tenant: string, id: string, actualTokens: number, detail?: SettleDetail): SettleResult {
    if (!(actualTokens >= 0 && actualTokens < Infinity)) {
      throw new RangeError(`actualTokens must be a finite number ≥ 0, got ${actualTokens}`);
    }
    if (detail?.cost !== undefined && detail.cost < 0n) throw new RangeError(`cost must be ≥ 0, got ${detail.cost}`);
    const st = this.#tenants.get(tenant);
    if (st === undefined) return NOT_SETTLED;
    const res = st.get(id);
    if (res === undefined || res.settled) return NOT_SETTLED;
    const now = this.#clock.now();
    if (now >= res.expiresAt) {
      st.delete(id);
      return NOT_SETTLED;
    }
    const delta = actualTokens - res.tokens;
    const kinds = detail?.kinds;
    const weighted = kinds !== undefined && res.compiled.weighted;
    const money = detail?.cost;
    const moneyDelta = money === undefined ? 0n : money - res.cost;
    if (delta !== 0 || weighted || (money !== undefined && res.compiled.budgets)) {
      const { applied, compiled, seqs } = res;
      const cur = st.compiled;
      for (let k = 0; k < applied.length; k++) {
        const i = applied[k] as number;
        const spec0 = compiled.limits[i] as LimitSpec;
        if (spec0.kind === 'cost') {
          const budget = reservedObject(res, st, i);
          if (money === undefined || budget === null || budget.algorithm !== 'budget') continue;
          budget.purge(now);
          // Admitted in a period that has ended: its reservation was forgotten with that period.
          budget.adjust(res.admittedAt < budget.start ? money : moneyDelta);
          continue;
        }
        if (spec0.kind !== 'tokens') continue;
        const spec = spec0;
        const d = weighted && spec.weights !== undefined ? weightedTokens(actualTokens, kinds, spec) - res.tokens : delta;
        if (d === 0) continue;
        const obj = reservedObject(res, st, i);
        if (obj !== null) {
          if (obj.algorithm === 'sliding_window' && seqs !== null) obj.adjust(seqs[k] as number, id, d);
        } else if (compiled === cur) {
          adjustBucket(cur, st, i, d, now);
          tallyAdd(this.#tallies.of(tenant), spec.name, d);
        } else {
          // Reloaded since admission: settle on the bucket that kept this limit's name, if any.
          const j = cur.indexByName.get(spec.name);
          const kept = cur.limits[j ?? -1];
          if (j !== undefined && kept !== undefined && kept.kind === 'tokens' && st.objs[j] === null) {
            adjustBucket(cur, st, j, d, now);
            tallyAdd(this.#tallies.of(tenant), spec.name, d);
          }
        }
      }
    }
    res.settled = true;
    if (res.released) st.delete(id);
    if (delta < 0 || moneyDelta < 0n || weighted) this.#onFreed?.(tenant);
    return { settled: true, deltaTokens: delta };
  }

  /** Reservation `id` of a tenant while it is open and not released; drops it once expired. */
  #unreleased(st: TenantState, id: string, now: number): Reservation | undefined {
    const res = st.get(id);
    if (res === undefined || res.released) return undefined;
    if (now >= res.expiresAt) {
      st.delete(id);
      return undefined;
    }
    return res;
  }

  /**
   * Frees the concurrency slot(s) of reservation `id`. Idempotent.
   * @returns true the first time for an open reservation (also when no concurrency limit
   *   applied to it), false when unknown, expired or already released.
   */
  release(tenant: string, id: string): boolean {
    const now = this.#clock.now();
    const st = this.#tenants.get(tenant);
    const res = st === undefined ? undefined : this.#unreleased(st, id, now);
    if (st === undefined || res === undefined) return false;
    const applied = res.applied;
    for (let k = 0; k < applied.length; k++) {
      const obj = reservedObject(res, st, applied[k] as number);
      if (obj !== null && obj.algorithm === 'semaphore') obj.release(now, id);
    }
    res.released = true;
    if (res.settled) st.delete(id);
    this.#onFreed?.(tenant);
    return true;
  }

  /**
   * Keeps reservation `id` alive (a long stream): its concurrency leases expire `leaseTtlMs`
   * from now, and the reservation itself its TTL from now.
   * @returns false when unknown, expired or released (nothing changes).
   */
  renew(tenant: string, id: string): boolean {
    const now = this.#clock.now();
    const st = this.#tenants.get(tenant);
    const res = st === undefined ? undefined : this.#unreleased(st, id, now);
    if (st === undefined || res === undefined) return false;
    const applied = res.applied;
    for (let k = 0; k < applied.length; k++) {
      const obj = reservedObject(res, st, applied[k] as number);
      if (obj !== null && obj.algorithm === 'semaphore') obj.renew(now, id);
    }
    res.expiresAt = now + res.ttlMs;
    return true;
  }

  /**
   * Ms (rounded up) until a request like `req` would be admitted, taking nothing: 0 when it would be
   * now, Infinity when it never can (too large). A full concurrency limit counts min(hint, earliest
   * lease expiry), as in `acquire`.
   */
  waitMs(tenant: string, req: Omit<AcquireRequest, 'id'>): number {
    const policy = this.#policyFor(tenant);
    const st = this.#tenants.get(tenant);
    if (policy === undefined) return 0;
    const now = this.#clock.now();
    if (st !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    const c = st === undefined ? this.#compile(policy) : st.compiled;
    const floor = req.floor ?? 0;
    const money = req.cost ?? 0n;
    let wait = 0;
    const requests = req.requests ?? 1;
    for (const i of applicableLimits(c, req.model, req.key)) {
      const spec = c.limits[i] as LimitSpec;
      if (tooLarge(spec, req.tokens, requests, money, floor)) return Infinity;
      if (st === undefined) continue;
      syncLimit(c, st, i, now);
      const w = this.#waitOf(c, st, i, req.tokens, requests, floor, now, money);
      if (w > wait) wait = w;
    }
    return Math.ceil(wait);
  }

  /**
   * Ms until limit `i` (synced to `now`) could take a request of `tokens`/`requests` (0: now). A floored request must
   * leave `floor × limit` behind it: it waits as if it cost that much more. A full concurrency
   * limit counts min(hint, earliest lease expiry).
   */
  #waitOf(c: CompiledPolicy, st: TenantState, i: number, tokens: number, requests: number, floor: number, now: number, money: bigint): number {
    const spec = c.limits[i] as LimitSpec;
    if (spec.kind === 'concurrent') return Math.min(syncedWaitMs(c, st, i, 0, now), this.#hintMs);
    if (spec.kind === 'cost') return syncedWaitMs(c, st, i, 0, now, money, budgetKeep(spec.limit, floor));
    return syncedWaitMs(c, st, i, floor === 0 ? costOf(spec, tokens, requests) : costOf(spec, tokens, requests) + floor * spec.limit, now);
  }

  /**
   * State of every limit that applies to `model` and key `key` for `tenant` now, without taking
   * anything (`[]` when the tenant has no policy; a tenant without state reads as fresh).
   */
  peek(tenant: string, model?: string, key?: string): readonly LimitState[] {
    return this.#peekLimits(tenant, (c) => applicableLimits(c, model, key));
  }

  /**
   * State of every limit of `tenant`'s policy now (every model's and every key's), without taking
   * anything; for operators. `[]` when the tenant has no policy.
   */
  peekAll(tenant: string): readonly LimitState[] {
    return this.#peekLimits(tenant, (c) => c.limits.map((_, i) => i));
  }

  /**
   * Every budget (`cost` limit) of `tenant`'s policy now, exactly (see `BudgetView`), taking nothing;
   * for operators. A budget without state reads as fresh. `[]` when the tenant has no policy.
   */
  budgets(tenant: string): BudgetView[] {
    const current = this.#current(tenant);
    if (current === undefined) return [];
    const { st, c, now } = current;
    const out: BudgetView[] = [];
    c.limits.forEach((spec, i) => {
      if (spec.kind === 'cost') out.push(budgetView(spec, asBudget(st?.objs[i]), now));
    });
    return out;
  }

  /**
   * Changes the spend of `tenant`'s budget `name` in its current period (an operator's top-up, see
   * `changeSpend`), creating the tenant's state if it has none. Waiters are woken when the spend went down.
   * @returns the spend before (pico-dollars) and the budget after.
   * @throws RangeError when the tenant's policy has no `cost` limit named `name`, or `change.pico` < 0.
   */
  changeSpend(tenant: string, name: string, change: SpendChange): { readonly beforePico: bigint; readonly after: BudgetView } {
    const current = this.#current(tenant);
    const i = current?.c.indexByName.get(name) ?? -1;
    const spec = current?.c.limits[i];
    if (current === undefined || spec === undefined || spec.kind !== 'cost') throw new RangeError(`tenant ${tenant} has no cost limit ${name}`);
    const { policy, c, now } = current;
    let st = current.st;
    if (st === undefined) {
      st = new TenantState(policy, c, createTenantLimits(c, now));
      this.#tenants.set(tenant, st);
    }
    const budget = asBudget(st.objs[i]) as Budget;
    const beforePico = changeSpend(budget, change, now);
    if (budget.spent < beforePico) this.#onFreed?.(tenant);
    return { beforePico, after: budgetView(spec, budget, now) };
  }

  /**
   * `tenant`'s policy, its state (rebuilt when the policy changed; undefined when it has none), the
   * compiled policy and the clock now; undefined when the tenant has no policy. Takes nothing.
   */
  #current(tenant: string): { policy: Policy; st: TenantState | undefined; c: CompiledPolicy; now: number } | undefined {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return undefined;
    const now = this.#clock.now();
    const st = this.#tenants.get(tenant);
    if (st !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    return { policy, st, c: st === undefined ? this.#compile(policy) : st.compiled, now };
  }

  /** The state now of the limits `pick` chooses of `tenant`'s compiled policy, taking nothing. */
  #peekLimits(tenant: string, pick: (c: CompiledPolicy) => readonly number[]): readonly LimitState[] {
    const current = this.#current(tenant);
    if (current === undefined) return [];
    const { st, c, now } = current;
    const picked = pick(c);
    if (st === undefined) return picked.map((i) => limitState(c, undefined, i, now));
    for (const i of picked) syncLimit(c, st, i, now);
    return this.#states(st, picked, now);
  }

  /**
   * Drops the state of every idle tenant (every bucket full, every window empty, no live lease,
   * no open reservation) and of tenants that no longer have a policy. O(tenants).
   * @returns how many tenants were dropped.
   */
  sweep(): number {
    const now = this.#clock.now();
    let dropped = 0;
    for (const [tenant, st] of this.#tenants) {
      if (this.#policyFor(tenant) === undefined || this.#isIdle(st, now)) {
        this.#tenants.delete(tenant);
        dropped++;
      }
    }
    return dropped;
  }

  /**
   * The complete state of `tenant` now, for a handoff to another node or a checkpoint
   * (see `TenantSnapshot`): every limit's state and every open reservation. Expired
   * reservations, window entries and leases are purged first; a tenant whose policy object
   * changed is first rebuilt onto the new one (as its next acquire would). O(state).
   * @returns undefined when the limiter holds no state for the tenant, which means fresh
   *   (full buckets, empty windows, no lease, no reservation).
   */
  exportTenant(tenant: string): TenantSnapshot | undefined {
    const st = this.#tenants.get(tenant);
    if (st === undefined) return undefined;
    const now = this.#clock.now();
    const policy = this.#policyFor(tenant);
    if (policy !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    purgeReservations(st, now);
    return snapshotOf(st, now);
  }

  /**
   * Replaces the state of `tenant` (if any) with `snap` mapped onto the tenant's current
   * policy by limit name, as a policy reload keeps usage (see `restoreLimits`): limits absent
   * from the snapshot, or whose kind or algorithm changed, start fresh; snapshot limits absent
   * from the policy are ignored; entries, leases and reservations already expired now are
   * dropped. Restored reservations settle, release and renew exactly as if admitted here: a
   * settlement adjusts the window entry with the reservation's id at its original timestamp
   * (and the buckets), a release frees the lease with its id. No-op when the tenant has no
   * policy. `snap` must be well-formed (untrusted JSON goes through `parseTenantSnapshot` first);
   * its values are not trusted: each is first clamped to what the policy allows now (see
   * `boundSnapshot`: bucket levels to [−capacity, capacity], times to at most now + clock skew,
   * lease expiries to now + leaseTtlMs, reservations to the policy's capacities and lifetime).
   * @returns how many values were out of range and clamped (0 for any snapshot a limiter exported).
   * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
   */
  importTenant(tenant: string, snap: TenantSnapshot): number {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return 0;
    const now = this.#clock.now();
    const c = this.#compile(policy);
    const bounded = boundSnapshot(c, snap, now);
    this.#restore(tenant, policy, c, bounded.snapshot, now);
    return bounded.clamped;
  }

  /**
   * Replaces the state of `tenant` (if any) with the conservative state of its policy (see
   * `conservativeSnapshot`): every requests and tokens limit used up now, so nothing is admitted
   * until it refills (bucket) or slides (window), one window at most; no lease, no reservation.
   * For a tenant whose stored state is corrupt: what it used is unknown, so it is taken as all,
   * never as nothing. No-op when the tenant has no policy.
   * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
   */
  importConservative(tenant: string): void {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return;
    const now = this.#clock.now();
    const c = this.#compile(policy);
    this.#restore(tenant, policy, c, conservativeSnapshot(c, now), now);
  }

  #restore(tenant: string, policy: Policy, c: CompiledPolicy, snap: TenantSnapshot, now: number): void {
    this.#tenants.set(tenant, restoredState(policy, c, snap, now));
  }

  /**
   * Adds usage another node admitted for `tenant` (a stand-in's, see `usage-delta.ts`) to its state
   * here: window entries at their own times, bucket units taken now, and the requests it still runs
   * (their reservations and slots; their settlements are forwarded here). Open reservations, leases
   * and the rest of the state are kept. No-op when the tenant has no policy.
   * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
   */
  absorbUsage(tenant: string, usage: UsageDelta): void {
    if (this.#policyFor(tenant) === undefined) return;
    this.importTenant(tenant, withCarriedRequests(withUsage(this.exportTenant(tenant), usage, this.#clock.now()), usage.open));
  }

  /**
   * Starts counting the units taken from `tenant`'s token buckets (admissions, and settlement debits
   * and refunds of them), for {@link bucketUsage}; a running count is reset. Costs nothing for
   * tenants not tallied. A stand-in node tallies the tenants it holds for a suspect owner.
   */
  startTally(tenant: string): void {
    this.#tallies.start(tenant);
  }

  /** Stops counting for `tenant` (see {@link startTally}). */
  stopTally(tenant: string): void {
    this.#tallies.stop(tenant);
  }

  /**
   * The units taken from each token bucket of `tenant` since the tally started (net of settlements,
   * less what {@link untally} took off; > 0 only), with each bucket's spec under the tenant's
   * current policy. Empty when not tallied or when no bucket was taken from.
   */
  bucketUsage(tenant: string): BucketUsage[] {
    const policy = this.#policyFor(tenant);
    return policy === undefined ? [] : this.#tallies.usage(tenant, policy);
  }

  /** Takes `sent` (an earlier {@link bucketUsage}, counted elsewhere now) off `tenant`'s tally; the tally goes on. */
  untally(tenant: string, sent: readonly BucketUsage[]): void {
    this.#tallies.untally(tenant, sent);
  }

  /** Forgets the state of `tenant` (it now reads as fresh). @returns true when there was some. */
  dropTenant(tenant: string): boolean {
    return this.#tenants.delete(tenant);
  }

  /** Ids of the tenants with state in memory (insertion order; do not import/drop while iterating). */
  tenants(): IterableIterator<string> {
    return this.#tenants.keys();
  }

  /** True when the limiter holds state for `tenant`. */
  hasTenant(tenant: string): boolean {
    return this.#tenants.has(tenant);
  }

  #isIdle(st: TenantState, now: number): boolean {
    if (now >= (st.num[0] as number)) purgeReservations(st, now);
    if (st.size > 0) return false;
    return limitsIdle(st.compiled, st, now);
  }

  #compile(policy: Policy): CompiledPolicy {
    let c = this.#compiled.get(policy);
    if (c === undefined) {
      c = compilePolicy(policy);
      this.#compiled.set(policy, c);
    }
    return c;
  }

  /** A reload gave the tenant a new policy object: rebuild its limits, keeping usage by name. */
  #rebuild(st: TenantState, policy: Policy, now: number): void {
    const c = this.#compile(policy);
    st.relimit(policy, c, rebuildTenantLimits(st.compiled, st, c, now));
  }

  #states(st: TenantState, applied: readonly number[], now: number): LimitState[] {
    const out: LimitState[] = [];
    for (let k = 0; k < applied.length; k++) out.push(limitState(st.compiled, st, applied[k] as number, now));
    return out;
  }

  #refusal(
    reason: 'limited' | 'too_large' | 'duplicate',
    spec: LimitSpec,
    retryAfterMs: number,
    st: TenantState | undefined,
    c: CompiledPolicy,
    applied: readonly number[],
    now: number,
  ): AcquireResult {
    let limits: LimitState[];
    if (st === undefined) {
      limits = applied.map((i) => limitState(c, undefined, i, now));
    } else {
      for (const i of applied) syncLimit(c, st, i, now);
      limits = this.#states(st, applied, now);
    }
    return { ok: false, reason, limit: spec.name, kind: spec.kind, retryAfterMs, limits };
  }
}

/**
 * The state object of limit `i` (in `res.compiled`) that reservation `res` of tenant `st` was taken
 * from, or null for a token bucket: `st.first` while the tenant still has the objects the
 * reservation was admitted with (no reload since), else from the reservation's own `objs`.
 */
function reservedObject(res: Reservation, st: TenantState, i: number): LimitObject | null {
  return res.objs === st.objs ? limitObject(res.compiled, st, i) : (res.objs[i] ?? null);
}

/**
 * True when a request can never pass `spec`: more tokens or requests than its capacity (less the
 * floor's part of it), or a dearer reservation than its budget (less the floor's part).
 */
function tooLarge(spec: LimitSpec, tokens: number, requests: number, money: bigint, floor: number): boolean {
  if (spec.kind === 'concurrent') return false;
  if (spec.kind === 'cost') return money + budgetKeep(spec.limit, floor) > BigInt(spec.limit) * 1_000_000n;
  return costOf(spec, tokens, requests) + floor * spec.limit > spec.limit;
}

/**
 * `actual` tokens as a weighted `tokens` limit counts them: each cached, cache-write or reasoning
 * token weighs its weight instead of 1 (parts larger than the whole are taken as the whole);
 * rounded up to a whole token, never below 0.
 */
export function weightedTokens(actual: number, kinds: TokenKinds | undefined, spec: RateLimitSpec): number {
  const w = spec.weights;
  if (w === undefined || kinds === undefined) return actual;
  let total = actual;
  const part = (n: number | undefined, weight: number | undefined): void => {
    if (weight === undefined || weight === 1 || n === undefined || !(n > 0)) return;
    const m = Math.min(n, actual);
    total += m * (weight - 1);
  };
  part(kinds.cacheRead, w.cacheRead);
  part(kinds.cacheWrite, w.cacheWrite);
  part(kinds.reasoning, w.reasoning);
  // Weights are decimals (0.1): round a hair of float error down before rounding up.
  const rounded = Math.ceil(total - 1e-9);
  return rounded > 0 ? rounded : 0;
}
