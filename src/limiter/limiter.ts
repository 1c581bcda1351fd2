import type { Clock } from '../clock.ts';
import { applicableLimits, compilePolicy, type CompiledPolicy } from './compiled-policy.ts';
import { carryOver, createRuntime, limitState, syncRuntime, type LimitRuntime } from './limit-runtime.ts';
import { Reservation } from './reservation.ts';
import type { AcquireRequest, AcquireResult, LimitSpec, LimitState, Policy, SettleResult } from './types.ts';

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
}

/** Everything the limiter keeps for one tenant. */
class TenantState {
  policy: Policy;
  compiled: CompiledPolicy;
  /** Indexed like `compiled.limits`. Replaced (not mutated) on a policy reload. */
  runtimes: LimitRuntime[];
  /** Open reservations by request id; null until the first. */
  reservations: Map<string, Reservation> | null = null;
  /** Lower bound of the earliest reservation expiry, ms (Infinity when none). */
  nextExpiry = Infinity;

  constructor(policy: Policy, compiled: CompiledPolicy, runtimes: LimitRuntime[]) {
    this.policy = policy;
    this.compiled = compiled;
    this.runtimes = runtimes;
  }
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
  readonly #tenants = new Map<string, TenantState>();
  readonly #compiled = new WeakMap<Policy, CompiledPolicy>();

  /** @throws RangeError when `concurrencyRetryHintMs` is negative. */
  constructor(opts: LimiterOptions) {
    this.#clock = opts.clock;
    this.#policyFor = opts.policyFor;
    this.#hintMs = opts.concurrencyRetryHintMs ?? 1000;
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
   * - `too_large`: the request's tokens or requests exceed a limit's capacity: it can never pass
   *   (retryAfterMs 0);
   * - `limited`: `retryAfterMs` is the exact time (ms, rounded up) until every limit could admit
   *   it, where a full concurrency limit contributes min(hint, earliest lease expiry).
   * `limit`/`kind` name the first limit in policy order that refused; `limits` is the state of
   * every applicable limit after the decision.
   * @throws RangeError when `req.tokens` or `req.requests` is negative or not finite.
   */
  acquire(tenant: string, req: AcquireRequest): AcquireResult {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return UNLIMITED;
    const tokens = req.tokens;
    const requests = req.requests ?? 1;
    if (!(tokens >= 0 && tokens < Infinity)) throw new RangeError(`tokens must be a finite number ≥ 0, got ${tokens}`);
    if (!(requests >= 0 && requests < Infinity)) throw new RangeError(`requests must be a finite number ≥ 0, got ${requests}`);
    const now = this.#clock.now();
    let st = this.#tenants.get(tenant);
    if (st !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    const compiled = st === undefined ? this.#compile(policy) : st.compiled;
    const applied = applicableLimits(compiled, req.model);
    if (applied.length === 0) return UNLIMITED;
    const specs = compiled.limits;
    const id = req.id;

    if (st !== undefined && st.reservations !== null) {
      if (now >= st.nextExpiry) this.#purgeReservations(st, now);
      if (st.reservations.has(id)) {
        return this.#refusal('duplicate', specs[applied[0] as number] as LimitSpec, 0, st, compiled, applied, now);
      }
    }
    for (let k = 0; k < applied.length; k++) {
      const spec = specs[applied[k] as number] as LimitSpec;
      if (spec.kind === 'concurrent') continue;
      if ((spec.kind === 'tokens' ? tokens : requests) > spec.limit) {
        return this.#refusal('too_large', spec, 0, st, compiled, applied, now);
      }
    }

    if (st === undefined) {
      st = new TenantState(policy, compiled, specs.map((s) => createRuntime(s, now)));
      this.#tenants.set(tenant, st);
    } else {
      // Check every limit first; take only if all fit.
      const runtimes = st.runtimes;
      let wait = 0;
      let first = -1;
      for (let k = 0; k < applied.length; k++) {
        const i = applied[k] as number;
        const rt = runtimes[i] as LimitRuntime;
        let w: number;
        if (rt.algorithm === 'token_bucket') {
          rt.refill(now);
          w = rt.waitMs((specs[i] as LimitSpec).kind === 'tokens' ? tokens : requests);
        } else if (rt.algorithm === 'sliding_window') {
          rt.purge(now);
          w = rt.waitMs(now, (specs[i] as LimitSpec).kind === 'tokens' ? tokens : requests);
        } else {
          rt.purge(now);
          w = rt.waitMs(now);
          if (w > this.#hintMs) w = this.#hintMs;
        }
        if (w > 0) {
          if (first < 0) first = i;
          if (w > wait) wait = w;
        }
      }
      if (first >= 0) {
        return this.#refusal('limited', specs[first] as LimitSpec, Math.ceil(wait), st, compiled, applied, now);
      }
    }

    const runtimes = st.runtimes;
    let seqs: number[] | null = null;
    for (let k = 0; k < applied.length; k++) {
      const i = applied[k] as number;
      const rt = runtimes[i] as LimitRuntime;
      if (rt.algorithm === 'token_bucket') {
        rt.take((specs[i] as LimitSpec).kind === 'tokens' ? tokens : requests);
      } else if (rt.algorithm === 'sliding_window') {
        seqs ??= new Array<number>(applied.length).fill(-1);
        seqs[k] = rt.add(now, (specs[i] as LimitSpec).kind === 'tokens' ? tokens : requests, id);
      } else {
        rt.acquire(now, id);
      }
    }
    const res = new Reservation(tokens, requests, specs, runtimes, applied, seqs, now, compiled.reservationTtlMs);
    (st.reservations ??= new Map()).set(id, res);
    if (res.expiresAt < st.nextExpiry) st.nextExpiry = res.expiresAt;
    return { ok: true, limits: this.#states(st, applied, now) };
  }

  /**
   * Settles reservation `id` on the actual token usage: applies (actual − reserved) to every
   * `tokens` limit it reserved from (a refund, never above a bucket's capacity; or a debit,
   * which may take a bucket below zero or a window above its limit; a window entry is adjusted
   * at its original timestamp, and not at all once it left the window). Idempotent: a second
   * settle, or a settle of an unknown or expired id, returns `{settled: false, deltaTokens: 0}`
   * and changes nothing.
   * @param actualTokens tokens actually used (prompt + completion), ≥ 0.
   * @throws RangeError when `actualTokens` is negative or not finite.
   */
  settle(tenant: string, id: string, actualTokens: number): SettleResult {
    if (!(actualTokens >= 0 && actualTokens < Infinity)) {
      throw new RangeError(`actualTokens must be a finite number ≥ 0, got ${actualTokens}`);
    }
    const st = this.#tenants.get(tenant);
    const map = st?.reservations;
    const res = map?.get(id);
    if (res === undefined || res.settled) return NOT_SETTLED;
    const now = this.#clock.now();
    if (now >= res.expiresAt) {
      (map as Map<string, Reservation>).delete(id);
      return NOT_SETTLED;
    }
    const delta = actualTokens - res.tokens;
    if (delta !== 0) {
      const { applied, specs, runtimes, seqs } = res;
      for (let k = 0; k < applied.length; k++) {
        const i = applied[k] as number;
        if ((specs[i] as LimitSpec).kind !== 'tokens') continue;
        const rt = runtimes[i] as LimitRuntime;
        if (rt.algorithm === 'token_bucket') {
          rt.refill(now);
          rt.adjust(delta);
        } else if (rt.algorithm === 'sliding_window' && seqs !== null) {
          rt.adjust(seqs[k] as number, id, delta);
        }
      }
    }
    res.settled = true;
    if (res.released) (map as Map<string, Reservation>).delete(id);
    return { settled: true, deltaTokens: delta };
  }

  /**
   * Frees the concurrency slot(s) of reservation `id`. Idempotent.
   * @returns true the first time for an open reservation (also when no concurrency limit
   *   applied to it), false when unknown, expired or already released.
   */
  release(tenant: string, id: string): boolean {
    const st = this.#tenants.get(tenant);
    const map = st?.reservations;
    const res = map?.get(id);
    if (res === undefined || res.released) return false;
    const now = this.#clock.now();
    if (now >= res.expiresAt) {
      (map as Map<string, Reservation>).delete(id);
      return false;
    }
    const { applied, runtimes } = res;
    for (let k = 0; k < applied.length; k++) {
      const rt = runtimes[applied[k] as number] as LimitRuntime;
      if (rt.algorithm === 'semaphore') rt.release(now, id);
    }
    res.released = true;
    if (res.settled) (map as Map<string, Reservation>).delete(id);
    return true;
  }

  /**
   * Keeps reservation `id` alive (a long stream): its concurrency leases expire `leaseTtlMs`
   * from now, and the reservation itself its TTL from now.
   * @returns false when unknown, expired or released (nothing changes).
   */
  renew(tenant: string, id: string): boolean {
    const st = this.#tenants.get(tenant);
    const map = st?.reservations;
    const res = map?.get(id);
    if (res === undefined || res.released) return false;
    const now = this.#clock.now();
    if (now >= res.expiresAt) {
      (map as Map<string, Reservation>).delete(id);
      return false;
    }
    const { applied, runtimes } = res;
    for (let k = 0; k < applied.length; k++) {
      const rt = runtimes[applied[k] as number] as LimitRuntime;
      if (rt.algorithm === 'semaphore') rt.renew(now, id);
    }
    res.expiresAt = now + res.ttlMs;
    return true;
  }

  /**
   * State of every limit that applies to `model` for `tenant` now, without taking anything
   * (`[]` when the tenant has no policy; a tenant without state reads as fresh).
   */
  peek(tenant: string, model?: string): readonly LimitState[] {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return [];
    const now = this.#clock.now();
    const st = this.#tenants.get(tenant);
    if (st !== undefined && st.policy !== policy) this.#rebuild(st, policy, now);
    const compiled = st === undefined ? this.#compile(policy) : st.compiled;
    const applied = applicableLimits(compiled, model);
    if (st === undefined) return applied.map((i) => limitState(compiled.limits[i] as LimitSpec, undefined, now));
    for (const i of applied) syncRuntime(st.runtimes[i] as LimitRuntime, now);
    return this.#states(st, applied, now);
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

  #isIdle(st: TenantState, now: number): boolean {
    if (st.reservations !== null) {
      if (now >= st.nextExpiry) this.#purgeReservations(st, now);
      if (st.reservations.size > 0) return false;
      st.reservations = null;
    }
    for (const rt of st.runtimes) if (!rt.isIdle(now)) return false;
    return true;
  }

  #purgeReservations(st: TenantState, now: number): void {
    const map = st.reservations;
    let next = Infinity;
    if (map !== null) {
      for (const [id, res] of map) {
        if (res.expiresAt <= now) map.delete(id);
        else if (res.expiresAt < next) next = res.expiresAt;
      }
    }
    st.nextExpiry = next;
  }

  #compile(policy: Policy): CompiledPolicy {
    let c = this.#compiled.get(policy);
    if (c === undefined) {
      c = compilePolicy(policy);
      this.#compiled.set(policy, c);
    }
    return c;
  }

  /**
   * A reload gave the tenant a new policy object: limits keep their state by name (see
   * `carryOver`); open reservations keep pointing at the states they reserved from.
   */
  #rebuild(st: TenantState, policy: Policy, now: number): void {
    const compiled = this.#compile(policy);
    const oldSpecs = st.compiled.limits;
    const oldRuntimes = st.runtimes;
    const byName = new Map<string, number>();
    oldSpecs.forEach((s, i) => byName.set(s.name, i));
    st.runtimes = compiled.limits.map((spec) => {
      const j = byName.get(spec.name);
      return j === undefined
        ? createRuntime(spec, now)
        : carryOver(oldRuntimes[j], oldSpecs[j], spec, now);
    });
    st.policy = policy;
    st.compiled = compiled;
  }

  #states(st: TenantState, applied: readonly number[], now: number): LimitState[] {
    const out: LimitState[] = [];
    const specs = st.compiled.limits;
    for (let k = 0; k < applied.length; k++) {
      const i = applied[k] as number;
      out.push(limitState(specs[i] as LimitSpec, st.runtimes[i], now));
    }
    return out;
  }

  #refusal(
    reason: 'limited' | 'too_large' | 'duplicate',
    spec: LimitSpec,
    retryAfterMs: number,
    st: TenantState | undefined,
    compiled: CompiledPolicy,
    applied: readonly number[],
    now: number,
  ): AcquireResult {
    let limits: LimitState[];
    if (st === undefined) {
      limits = applied.map((i) => limitState(compiled.limits[i] as LimitSpec, undefined, now));
    } else {
      for (const i of applied) syncRuntime(st.runtimes[i] as LimitRuntime, now);
      limits = this.#states(st, applied, now);
    }
    return { ok: false, reason, limit: spec.name, kind: spec.kind, retryAfterMs, limits };
  }
}
