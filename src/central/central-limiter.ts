/**
 * Central-store mode's limiter: the in-RAM `Limiter`'s API and semantics (src/limiter/limiter.ts),
 * but every decision is one atomic Lua call against Redis, so any gateway process can decide for
 * any tenant. Time is Redis TIME (one clock for every process).
 *
 * Redis calls: acquire 1 (every applicable limit, the semaphore and the reservation record in one
 * `central-acquire.lua`), settle 1, release 1, renew 1, `finish` (settle + release, the gateway's
 * end of a request) 1, peek 1. A tenant without a policy, or without an applicable limit, costs 0.
 *
 * Key layout (all of one tenant share the hash tag `{<tenant>}`, so each call stays on one Redis
 * Cluster slot), namespaced by cluster:
 * - `qr:<cluster>:central:{<tenant>}:r`          reservations (hash, id → record), ttl ≥ the longest open one
 * - `qr:<cluster>:central:{<tenant>}:b:<limit>`  token bucket (hash u = units used, t), deleted when full
 * - `qr:<cluster>:central:{<tenant>}:w:<limit>`  sliding window entries (sorted set by admission ms)
 * - `qr:<cluster>:central:{<tenant>}:s:<limit>`  the window's running sum (string)
 * - `qr:<cluster>:central:{<tenant>}:c:<limit>`  concurrency slots (sorted set by lease expiry ms)
 * The type letter keeps a window's sum key from colliding with a limit named `…:sum`, and a limit
 * that changes algorithm on a reload from reading the other algorithm's state.
 */
import type { Redis } from 'ioredis';
import { applicableLimits, compilePolicy, type CompiledPolicy } from '../limiter/compiled-policy.ts';
import { checkAcquireRequest } from '../limiter/types.ts';
import type { AcquireRequest, AcquireResult, LimitSpec, LimitState, Policy, SettleResult } from '../limiter/types.ts';
import { defineCentralScripts, type CentralLimitArg, type CentralScripts } from './scripts.ts';

/** Options of a `CentralLimiter`. */
export interface CentralLimiterOptions {
  /** The connection the scripts run on (no `enableAutoPipelining`, see src/globalcap/scripts.ts). */
  redis: Redis;
  /** Cluster name (`cluster.name`): the key namespace. No braces. */
  cluster: string;
  /** The policy of a tenant; undefined = no limits (acquire returns ok with `limits: []`, no Redis call). */
  policyFor: (tenant: string) => Policy | undefined;
  /** Retry hint for a concurrency refusal, ms: min(this, ms until the earliest lease expires). @default 1000 */
  concurrencyRetryHintMs?: number;
}

/** Result of `finish`: a settle and a release in one call. */
export interface FinishResult {
  readonly settle: SettleResult;
  readonly released: boolean;
}

const UNLIMITED: AcquireResult = Object.freeze({ ok: true, limits: Object.freeze([]) as readonly LimitState[] });
const NOT_SETTLED: SettleResult = Object.freeze({ settled: false, deltaTokens: 0 });

/** What is derived once per `Policy` object. */
interface Prepared {
  readonly compiled: CompiledPolicy;
  /** Limits that settle, release and renew act on: every `tokens` and `concurrent` limit. */
  readonly settleable: readonly LimitSpec[];
}

/**
 * Key of one piece of a tenant's central state: `qr:<cluster>:central:{<tenant>}:<suffix>`.
 * @throws RangeError when the cluster or tenant is empty or contains a brace (it would change the hash tag).
 */
export function centralKey(cluster: string, tenant: string, suffix: string): string {
  checkName('cluster', cluster);
  checkName('tenant', tenant);
  return `qr:${cluster}:central:{${tenant}}:${suffix}`;
}

function checkName(what: string, name: string): void {
  if (name === '') throw new RangeError(`central-store ${what} name is empty`);
  if (name.includes('{') || name.includes('}')) {
    throw new RangeError(`central-store ${what} name ${JSON.stringify(name)} contains a brace; braces would change the Redis Cluster hash tag`);
  }
}

/** @throws RangeError for a `cost` limit: budgets live in RAM only (the config refuses them in central mode). */
function typeOf(spec: LimitSpec): 'b' | 'w' | 'c' {
  if (spec.kind === 'cost') throw new RangeError(`limit "${spec.name}": cost limits are not supported in central mode`);
  return spec.kind === 'concurrent' ? 'c' : spec.algorithm === 'token_bucket' ? 'b' : 'w';
}

/** Units an acquire of (`tokens`, `requests`) costs under `spec` (1 slot for concurrency), as in RAM. */
function costOf(spec: LimitSpec, tokens: number, requests: number): number {
  return spec.kind === 'tokens' ? tokens : spec.kind === 'requests' ? requests : 1;
}

/**
 * Per-tenant requests, tokens and concurrency limits decided in Redis, all-or-nothing, with
 * two-phase tokens. Results have exactly the shapes of the in-RAM `Limiter`'s. Methods reject
 * with the Redis error when Redis fails (connection down, timeout); a RangeError for invalid input
 * is thrown (as a rejection) before any Redis call.
 */
export class CentralLimiter {
  readonly #scripts: CentralScripts;
  readonly #cluster: string;
  readonly #policyFor: (tenant: string) => Policy | undefined;
  readonly #hintMs: number;
  readonly #prepared = new WeakMap<Policy, Prepared>();

  /** @throws RangeError when `concurrencyRetryHintMs` is negative or the cluster name is invalid. */
  constructor(opts: CentralLimiterOptions) {
    checkName('cluster', opts.cluster);
    this.#cluster = opts.cluster;
    this.#policyFor = opts.policyFor;
    this.#hintMs = opts.concurrencyRetryHintMs ?? 1000;
    if (!(this.#hintMs >= 0 && this.#hintMs < Infinity)) throw new RangeError('concurrencyRetryHintMs must be a finite number ≥ 0');
    this.#scripts = defineCentralScripts(opts.redis);
  }

  /**
   * As `Limiter.acquire`: admits the request if every applicable limit can take it now and takes
   * from all of them, else takes nothing; refusals `duplicate`, `too_large`, `limited` (in that
   * order of precedence) are results. One Redis call.
   * @throws RangeError (as a rejection) when `req.tokens`/`req.requests` is negative or not
   *   finite, `req.id` is empty, or the policy is invalid.
   */
  async acquire(tenant: string, req: AcquireRequest): Promise<AcquireResult> {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return UNLIMITED;
    checkAcquireRequest(req);
    const tokens = req.tokens;
    const requests = req.requests ?? 1;
    if (typeof req.id !== 'string' || req.id === '') throw new RangeError('the request id must be a non-empty string');
    const p = this.#prepare(policy);
    const specs = applicableLimits(p.compiled, req.model).map((i) => p.compiled.limits[i] as LimitSpec);
    if (specs.length === 0) return UNLIMITED;
    const reply = await this.#scripts.acquire(this.#key(tenant, 'r'), {
      op: 'acquire',
      id: req.id,
      hintMs: this.#hintMs,
      reservationTtlMs: p.compiled.reservationTtlMs,
      tokens,
      limits: specs.map((s) => ({ ...this.#limitArg(tenant, s), cost: costOf(s, tokens, requests) })),
    });
    const limits = states(specs, reply.states);
    if (reply.code === 1) return { ok: true, limits };
    const spec = specs[reply.index - 1];
    if (spec === undefined) throw new Error(`central-acquire.lua named limit ${reply.index} of ${specs.length}`);
    const reason = reply.code === 0 ? 'limited' : reply.code === 2 ? 'too_large' : 'duplicate';
    return { ok: false, reason, limit: spec.name, kind: spec.kind, retryAfterMs: reply.retryAfterMs, limits };
  }

  /**
   * As `Limiter.settle`: applies actual − reserved tokens to the `tokens` limits the reservation
   * took from. Idempotent; unknown, expired or settled ids answer `{settled: false, deltaTokens: 0}`.
   * Works from any process (the reservation lives in Redis). One Redis call.
   * @throws RangeError (as a rejection) when `actualTokens` is negative or not finite.
   */
  async settle(tenant: string, id: string, actualTokens: number): Promise<SettleResult> {
    const r = await this.#settleCall(tenant, id, 'settle', actualTokens);
    return r.settled ? { settled: true, deltaTokens: r.deltaTokens } : NOT_SETTLED;
  }

  /** As `Limiter.release`: frees the reservation's concurrency slots. Idempotent. One Redis call. */
  async release(tenant: string, id: string): Promise<boolean> {
    return (await this.#settleCall(tenant, id, 'release', 0)).done;
  }

  /** As `Limiter.renew`: live slots expire `leaseTtlMs` from now, the reservation its ttl from now. One call. */
  async renew(tenant: string, id: string): Promise<boolean> {
    return (await this.#settleCall(tenant, id, 'renew', 0)).done;
  }

  /** `settle` then `release` in one Redis call (the gateway's end of a request). */
  async finish(tenant: string, id: string, actualTokens: number): Promise<FinishResult> {
    const r = await this.#settleCall(tenant, id, 'finish', actualTokens);
    return { settle: r.settled ? { settled: true, deltaTokens: r.deltaTokens } : NOT_SETTLED, released: r.done };
  }

  /** As `Limiter.peek`: every applicable limit's state now, taking nothing (`[]` without a policy). One call. */
  async peek(tenant: string, model?: string): Promise<LimitState[]> {
    const policy = this.#policyFor(tenant);
    if (policy === undefined) return [];
    const p = this.#prepare(policy);
    const specs = applicableLimits(p.compiled, model).map((i) => p.compiled.limits[i] as LimitSpec);
    if (specs.length === 0) return [];
    const reply = await this.#scripts.acquire(this.#key(tenant, 'r'), {
      op: 'peek',
      id: '-',
      hintMs: this.#hintMs,
      reservationTtlMs: p.compiled.reservationTtlMs,
      tokens: 0,
      limits: specs.map((s) => ({ ...this.#limitArg(tenant, s), cost: 0 })),
    });
    return states(specs, reply.states);
  }

  async #settleCall(tenant: string, id: string, op: 'settle' | 'release' | 'renew' | 'finish', actualTokens: number) {
    if (!(actualTokens >= 0 && actualTokens < Infinity)) {
      throw new RangeError(`actualTokens must be a finite number ≥ 0, got ${actualTokens}`);
    }
    if (typeof id !== 'string' || id === '') return { settled: false, deltaTokens: 0, done: false };
    const policy = this.#policyFor(tenant);
    const specs = policy === undefined ? [] : this.#prepare(policy).settleable;
    return this.#scripts.settle(this.#key(tenant, 'r'), {
      op,
      id,
      actualTokens,
      limits: specs.map((s) => this.#limitArg(tenant, s)),
    });
  }

  #key(tenant: string, suffix: string): string {
    return centralKey(this.#cluster, tenant, suffix);
  }

  #limitArg(tenant: string, spec: LimitSpec): CentralLimitArg {
    const type = typeOf(spec);
    const key = this.#key(tenant, `${type}:${spec.name}`);
    return {
      type,
      limit: spec.limit,
      periodMs: spec.kind === 'concurrent' ? spec.leaseTtlMs : spec.kind === 'cost' ? 0 : spec.windowMs,
      name: spec.name,
      key,
      aux: type === 'w' ? this.#key(tenant, `s:${spec.name}`) : key,
    };
  }

  #prepare(policy: Policy): Prepared {
    let p = this.#prepared.get(policy);
    if (p === undefined) {
      const compiled = compilePolicy(policy);
      p = { compiled, settleable: compiled.limits.filter((l) => l.kind !== 'requests') };
      this.#prepared.set(policy, p);
    }
    return p;
  }
}

function states(specs: readonly LimitSpec[], raw: readonly (readonly [number, number])[]): LimitState[] {
  return specs.map((s, i) => {
    const [remaining, resetMs] = raw[i] as readonly [number, number];
    return { name: s.name, kind: s.kind, limit: s.limit, remaining, resetMs };
  });
}
