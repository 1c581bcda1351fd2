/**
 * The in-RAM `Limiter` and its decisions: acquire, settle, release, renew, waitMs (per-limit rules in
 * admission.ts). Delegated: tenant-store.ts, limit-views.ts, tenant-transfer.ts, spend-change.ts, bucket-tally.ts.
 */
import type { Clock } from '../clock.ts';
import { tooLarge, waitOf } from './admission.ts';
import { BucketTallies, tallyAdd } from './bucket-tally.ts';
import type { BudgetView, SpendChange } from './budget-view.ts';
import { applicableLimits, type CompiledPolicy } from './compiled-policy.ts';
import { budgetViews, limitStates, peekLimits } from './limit-views.ts';
import type { LimiterOptions } from './limiter-options.ts';
import { Reservation, reservedObject } from './reservation.ts';
import type { TenantSnapshot } from './snapshot.ts';
import { changeTenantSpend } from './spend-change.ts';
import { adjustBucket, costOf, limitState, syncLimit, takeLimit } from './tenant-limits.ts';
import { purgeReservations, type TenantState } from './tenant-state.ts';
import { TenantStore } from './tenant-store.ts';
import { absorbUsage, exportTenant, importConservative, importTenant } from './tenant-transfer.ts';
import { weightedTokens } from './token-weights.ts';
import type { AcquireRequest, AcquireResult, LimitSpec, LimitState, Policy, SettleDetail, SettleResult } from './types.ts';
import { checkAcquireRequest } from './types.ts';
import type { BucketUsage, UsageDelta } from './usage-delta.ts';

export type { LimiterOptions } from './limiter-options.ts';
export { weightedTokens } from './token-weights.ts';

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
  /** The tenants' state and compiled policies; `#tenants` is its map. */
  readonly #store: TenantStore;
  readonly #tenants: Map<string, TenantState>;
  /** Units taken from each token bucket of the tenants being tallied (stand-ins). */
  readonly #tallies = new BucketTallies();

  /** @throws RangeError when `concurrencyRetryHintMs` is negative. */
  constructor(opts: LimiterOptions) {
    this.#clock = opts.clock;
    this.#policyFor = opts.policyFor;
    this.#hintMs = opts.concurrencyRetryHintMs ?? 1000;
    this.#onFreed = opts.onFreed;
    this.#store = new TenantStore(opts.clock, opts.policyFor);
    this.#tenants = this.#store.tenants;
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
    if (st !== undefined && st.policy !== policy) this.#store.rebuild(st, policy, now);
    const c = st === undefined ? this.#store.compile(policy) : st.compiled;
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
      st = this.#store.create(tenant, policy, c, now);
    } else {
      // Check every limit first; take only if all fit.
      let wait = 0;
      let first = -1;
      for (let k = 0; k < applied.length; k++) {
        const i = applied[k] as number;
        const w = waitOf(c, st, i, tokens, requests, floor, now, money, this.#hintMs);
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
    return { ok: true, limits: limitStates(st, applied, now) };
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
    if (st !== undefined && st.policy !== policy) this.#store.rebuild(st, policy, now);
    const c = st === undefined ? this.#store.compile(policy) : st.compiled;
    const floor = req.floor ?? 0;
    const money = req.cost ?? 0n;
    let wait = 0;
    const requests = req.requests ?? 1;
    for (const i of applicableLimits(c, req.model, req.key)) {
      const spec = c.limits[i] as LimitSpec;
      if (tooLarge(spec, req.tokens, requests, money, floor)) return Infinity;
      if (st === undefined) continue;
      syncLimit(c, st, i, now);
      const w = waitOf(c, st, i, req.tokens, requests, floor, now, money, this.#hintMs);
      if (w > wait) wait = w;
    }
    return Math.ceil(wait);
  }

  /** State of every limit that applies to `model` and key `key` for `tenant` now, taking nothing (see `peekLimits`). */
  peek(tenant: string, model?: string, key?: string): readonly LimitState[] {
    return peekLimits(this.#store, tenant, (c) => applicableLimits(c, model, key));
  }

  /** State of every limit of `tenant`'s policy now (every model's and key's), taking nothing; for operators. */
  peekAll(tenant: string): readonly LimitState[] {
    return peekLimits(this.#store, tenant, (c) => c.limits.map((_, i) => i));
  }

  /** Every budget (`cost` limit) of `tenant`'s policy now, exactly, taking nothing; for operators (see `budgetViews`). */
  budgets(tenant: string): BudgetView[] {
    return budgetViews(this.#store, tenant);
  }

  /**
   * Changes the spend of `tenant`'s budget `name` in its current period (see `changeTenantSpend`);
   * waiters are woken when the spend went down. @returns the spend before (pico-dollars) and the budget after.
   * @throws RangeError when the tenant's policy has no `cost` limit named `name`, or `change.pico` < 0.
   */
  changeSpend(tenant: string, name: string, change: SpendChange): { readonly beforePico: bigint; readonly after: BudgetView } {
    return changeTenantSpend(this.#store, tenant, name, change, this.#onFreed);
  }

  /** Drops the state of every idle tenant and of tenants without a policy (see `TenantStore.sweep`). @returns how many. */
  sweep(): number {
    return this.#store.sweep();
  }

  /** The complete state of `tenant` now, for a handoff or a checkpoint (see `exportTenant`); undefined: fresh. */
  exportTenant(tenant: string): TenantSnapshot | undefined {
    return exportTenant(this.#store, tenant);
  }

  /**
   * Replaces the state of `tenant` with `snap`, clamped to and mapped onto its policy (see `importTenant`).
   * @returns how many values were out of range and clamped. @throws RangeError for an invalid policy.
   */
  importTenant(tenant: string, snap: TenantSnapshot): number {
    return importTenant(this.#store, tenant, snap);
  }

  /** Replaces the state of `tenant` with its policy's conservative state (see `importConservative`). @throws RangeError for an invalid policy. */
  importConservative(tenant: string): void {
    importConservative(this.#store, tenant);
  }

  /** Adds usage a stand-in admitted for `tenant` to its state here (see `absorbUsage`). @throws RangeError for an invalid policy. */
  absorbUsage(tenant: string, usage: UsageDelta): void {
    absorbUsage(this.#store, tenant, usage);
  }

  /** Starts counting the units taken from `tenant`'s token buckets, net of settlements, for {@link bucketUsage} (a stand-in does). */
  startTally(tenant: string): void {
    this.#tallies.start(tenant);
  }

  /** Stops counting for `tenant` (see {@link startTally}). */
  stopTally(tenant: string): void {
    this.#tallies.stop(tenant);
  }

  /** Units taken from each token bucket of `tenant` since the tally started, net, > 0 only (see `BucketTallies.usage`). */
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

  /** A refusal by `spec`, with the state of every applicable limit synced to `now` (ms); `st` undefined: fresh. */
  #refusal(reason: 'limited' | 'too_large' | 'duplicate', spec: LimitSpec, retryAfterMs: number, st: TenantState | undefined, c: CompiledPolicy, applied: readonly number[], now: number): AcquireResult {
    let limits: LimitState[];
    if (st === undefined) {
      limits = applied.map((i) => limitState(c, undefined, i, now));
    } else {
      for (const i of applied) syncLimit(c, st, i, now);
      limits = limitStates(st, applied, now);
    }
    return { ok: false, reason, limit: spec.name, kind: spec.kind, retryAfterMs, limits };
  }
}
