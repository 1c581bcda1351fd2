/**
 * One limiter conformance suite for both modes and both algorithms: every scenario of SCENARIOS
 * runs against the in-RAM `Limiter` (systemClock, wrapped to return promises) and the
 * `CentralLimiter` (Lua in a real redis-server), once with token buckets and once with sliding
 * windows, and must give the expected result at every step: ok or refused, the reason, the limit
 * named, every limit's `remaining`, settle/release/renew results, and `retryAfterMs`.
 *
 * Why the numbers are exact: scenarios that do not wait use 10-minute windows, where a bucket of
 * 1000 tokens refills one token per 600 ms and one of 5 requests one per 120 s, so the few ms a
 * scenario takes never change a floored `remaining`. Waiting scenarios use 1 s windows and leases
 * of 300-400 ms with waits chosen ≥ 50 ms away from every boundary.
 *
 * retryAfterMs tolerance: a retry hint counts from the limiter's own clock (Date.now() in RAM, Redis
 * TIME in Redis; the same system clock here) and the state it waits on was created earlier in the
 * scenario, so the true value is the expected one (computed as if every step took 0 ms) minus the
 * time the scenario spent outside its planned sleeps (Redis round trips, timer overshoot). The
 * check is therefore expected − overhead − 2 ≤ retryAfterMs ≤ expected + 1, with overhead measured
 * per run (the 1 ms and 2 ms absorb rounding up of a wait that is not a whole ms).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { systemClock } from '../../src/clock.ts';
import { CentralLimiter } from '../../src/central/central-limiter.ts';
import { Limiter } from '../../src/limiter/limiter.ts';
import type { AcquireRequest, AcquireResult, Algorithm, LimitSpec, LimitState, Policy, SettleResult } from '../../src/limiter/types.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

/** The async surface both modes share. */
interface AnyLimiter {
  acquire(tenant: string, req: AcquireRequest): Promise<AcquireResult>;
  settle(tenant: string, id: string, actualTokens: number): Promise<SettleResult>;
  release(tenant: string, id: string): Promise<boolean>;
  renew(tenant: string, id: string): Promise<boolean>;
  peek(tenant: string, model?: string): Promise<readonly LimitState[]>;
}

/** The in-RAM limiter behind promises. */
function ramLimiter(policyFor: (tenant: string) => Policy | undefined): AnyLimiter {
  const l = new Limiter({ clock: systemClock, policyFor });
  return {
    acquire: async (t, r) => l.acquire(t, r),
    settle: async (t, id, n) => l.settle(t, id, n),
    release: async (t, id) => l.release(t, id),
    renew: async (t, id) => l.renew(t, id),
    peek: async (t, m) => l.peek(t, m),
  };
}

/** Expected acquire result: `remaining` by limit name (every applicable limit, in order). */
type Expect =
  | { readonly ok: true; readonly remaining: Readonly<Record<string, number>> }
  | {
      readonly ok: false;
      readonly reason: 'limited' | 'too_large' | 'duplicate';
      readonly limit: string;
      readonly retryAfterMs: number;
      readonly remaining: Readonly<Record<string, number>>;
    };

/** A value that may differ by algorithm. */
type PerAlg<T> = T | { readonly token_bucket: T; readonly sliding_window: T };

type Step =
  | { readonly op: 'acquire'; readonly id: string; readonly tokens: number; readonly requests?: number; readonly model?: string; readonly expect: PerAlg<Expect> }
  | { readonly op: 'settle'; readonly id: string; readonly actual: number; readonly expect: SettleResult }
  | { readonly op: 'release' | 'renew'; readonly id: string; readonly expect: boolean }
  | { readonly op: 'peek'; readonly model?: string; readonly remaining: PerAlg<Readonly<Record<string, number>>> }
  | { readonly op: 'sleep'; readonly ms: number };

interface Scenario {
  readonly name: string;
  readonly limits: (alg: Algorithm) => LimitSpec[];
  readonly steps: readonly Step[];
}

const TEN_MIN = 600_000;
const rate = (name: string, kind: 'requests' | 'tokens', limit: number, windowMs: number, algorithm: Algorithm, model?: string): LimitSpec => ({
  name,
  kind,
  limit,
  windowMs,
  algorithm,
  ...(model === undefined ? {} : { model }),
});
const conc = (name: string, limit: number, leaseTtlMs: number): LimitSpec => ({ name, kind: 'concurrent', limit, leaseTtlMs });
const ok = (remaining: Record<string, number>): Expect => ({ ok: true, remaining });
const no = (reason: 'limited' | 'too_large' | 'duplicate', limit: string, retryAfterMs: number, remaining: Record<string, number>): Expect => ({
  ok: false,
  reason,
  limit,
  retryAfterMs,
  remaining,
});
const byAlg = <T,>(token_bucket: T, sliding_window: T): PerAlg<T> => ({ token_bucket, sliding_window });

/** requests 5 and tokens 1000 per 10 min. */
const basic = (alg: Algorithm): LimitSpec[] => [rate('req', 'requests', 5, TEN_MIN, alg), rate('tok', 'tokens', 1000, TEN_MIN, alg)];

const SCENARIOS: readonly Scenario[] = [
  {
    name: 'admits until a limit is reached, all or nothing',
    limits: basic,
    steps: [
      { op: 'acquire', id: 'a', tokens: 600, expect: ok({ req: 4, tok: 400 }) },
      // Bucket: 100 missing tokens at 1000 per 600 s = 60 s. Window: `a` must leave: 600 s.
      { op: 'acquire', id: 'b', tokens: 500, expect: byAlg(no('limited', 'tok', 60_000, { req: 4, tok: 400 }), no('limited', 'tok', TEN_MIN, { req: 4, tok: 400 })) },
      { op: 'acquire', id: 'c', tokens: 400, expect: ok({ req: 3, tok: 0 }) },
      { op: 'acquire', id: 'd', tokens: 0, expect: ok({ req: 2, tok: 0 }) },
      { op: 'acquire', id: 'e', tokens: 0, requests: 3, expect: byAlg(no('limited', 'req', 120_000, { req: 2, tok: 0 }), no('limited', 'req', TEN_MIN, { req: 2, tok: 0 })) },
      { op: 'peek', remaining: { req: 2, tok: 0 } },
    ],
  },
  {
    name: 'too_large and duplicate are refused at once; an id is reusable once closed',
    limits: basic,
    steps: [
      { op: 'acquire', id: 'a', tokens: 1001, expect: no('too_large', 'tok', 0, { req: 5, tok: 1000 }) },
      { op: 'acquire', id: 'a', tokens: 0, requests: 6, expect: no('too_large', 'req', 0, { req: 5, tok: 1000 }) },
      { op: 'acquire', id: 'a', tokens: 10, expect: ok({ req: 4, tok: 990 }) },
      { op: 'acquire', id: 'a', tokens: 10, expect: no('duplicate', 'req', 0, { req: 4, tok: 990 }) },
      { op: 'release', id: 'a', expect: true },
      { op: 'acquire', id: 'a', tokens: 10, expect: no('duplicate', 'req', 0, { req: 4, tok: 990 }) },
      { op: 'settle', id: 'a', actual: 10, expect: { settled: true, deltaTokens: 0 } },
      { op: 'acquire', id: 'a', tokens: 5, expect: ok({ req: 3, tok: 985 }) },
    ],
  },
  {
    name: 'settle refunds and debits once; a debit may go past the limit',
    limits: basic,
    steps: [
      { op: 'acquire', id: 'a', tokens: 500, expect: ok({ req: 4, tok: 500 }) },
      { op: 'settle', id: 'a', actual: 200, expect: { settled: true, deltaTokens: -300 } },
      { op: 'settle', id: 'a', actual: 200, expect: { settled: false, deltaTokens: 0 } },
      { op: 'settle', id: 'unknown', actual: 1, expect: { settled: false, deltaTokens: 0 } },
      { op: 'peek', remaining: { req: 4, tok: 800 } },
      { op: 'acquire', id: 'b', tokens: 100, expect: ok({ req: 3, tok: 700 }) },
      { op: 'settle', id: 'b', actual: 1500, expect: { settled: true, deltaTokens: 1400 } },
      { op: 'peek', remaining: { req: 3, tok: 0 } },
      // Bucket at −700: 700 tokens to refill = 420 s. Window at 1700: `a` (200) leaving is not
      // enough, `b` (1500) must leave too: 600 s.
      { op: 'acquire', id: 'c', tokens: 0, expect: byAlg(no('limited', 'tok', 420_000, { req: 3, tok: 0 }), no('limited', 'tok', TEN_MIN, { req: 3, tok: 0 })) },
    ],
  },
  {
    name: 'model-scoped limits apply only to their model',
    limits: (alg) => [rate('req', 'requests', 5, TEN_MIN, alg), rate('tok-m', 'tokens', 100, TEN_MIN, alg, 'm')],
    steps: [
      { op: 'acquire', id: 'a', tokens: 80, model: 'm', expect: ok({ req: 4, 'tok-m': 20 }) },
      { op: 'acquire', id: 'b', tokens: 80, model: 'm', expect: byAlg(no('limited', 'tok-m', 360_000, { req: 4, 'tok-m': 20 }), no('limited', 'tok-m', TEN_MIN, { req: 4, 'tok-m': 20 })) },
      { op: 'acquire', id: 'c', tokens: 80, expect: ok({ req: 3 }) },
      { op: 'acquire', id: 'd', tokens: 80, model: 'other', expect: ok({ req: 2 }) },
      { op: 'peek', model: 'm', remaining: { req: 2, 'tok-m': 20 } },
    ],
  },
  {
    name: 'concurrency: a full semaphore waits min(hint 1000 ms, earliest expiry); release frees a slot',
    limits: (alg) => [rate('req', 'requests', 10, TEN_MIN, alg), conc('conc', 2, TEN_MIN)],
    steps: [
      { op: 'acquire', id: 'a', tokens: 0, expect: ok({ req: 9, conc: 1 }) },
      { op: 'acquire', id: 'b', tokens: 0, expect: ok({ req: 8, conc: 0 }) },
      { op: 'acquire', id: 'c', tokens: 0, expect: no('limited', 'conc', 1000, { req: 8, conc: 0 }) },
      { op: 'release', id: 'a', expect: true },
      { op: 'release', id: 'a', expect: false },
      { op: 'acquire', id: 'c', tokens: 0, expect: ok({ req: 7, conc: 0 }) },
      { op: 'renew', id: 'b', expect: true },
      { op: 'renew', id: 'a', expect: false },
      { op: 'renew', id: 'unknown', expect: false },
    ],
  },
  {
    name: 'waiting: a bucket refills continuously, a window frees when entries leave (1 s)',
    limits: (alg) => [rate('req', 'requests', 4, 1000, alg)],
    steps: [
      { op: 'acquire', id: 'a', tokens: 0, expect: ok({ req: 3 }) },
      { op: 'acquire', id: 'b', tokens: 0, expect: ok({ req: 2 }) },
      { op: 'acquire', id: 'c', tokens: 0, expect: ok({ req: 1 }) },
      { op: 'acquire', id: 'd', tokens: 0, expect: ok({ req: 0 }) },
      // Bucket: 1 request per 250 ms. Window: `a` leaves 1000 ms after admission.
      { op: 'acquire', id: 'e', tokens: 0, expect: byAlg(no('limited', 'req', 250, { req: 0 }), no('limited', 'req', 1000, { req: 0 })) },
      { op: 'sleep', ms: 300 },
      // Bucket: 1.2 requests refilled → admits, 0.2 left. Window: still 4 entries, 700 ms to go.
      { op: 'acquire', id: 'f', tokens: 0, expect: byAlg(ok({ req: 0 }), no('limited', 'req', 700, { req: 0 })) },
      { op: 'sleep', ms: 750 },
      // t ≈ 1050: bucket 0.2 + 3 = 3.2 → takes 1 → 2. Window: a-d left; only g → 3.
      { op: 'acquire', id: 'g', tokens: 0, expect: byAlg(ok({ req: 2 }), ok({ req: 3 })) },
    ],
  },
  {
    name: 'stale concurrency slots are purged on acquire; the reservation expires with its lease',
    limits: (alg) => [rate('req', 'requests', 100, TEN_MIN, alg), conc('one', 1, 300)],
    steps: [
      { op: 'acquire', id: 'a', tokens: 0, expect: ok({ req: 99, one: 0 }) },
      { op: 'acquire', id: 'b', tokens: 0, expect: no('limited', 'one', 300, { req: 99, one: 0 }) },
      { op: 'sleep', ms: 350 },
      { op: 'acquire', id: 'c', tokens: 0, expect: ok({ req: 98, one: 0 }) },
      { op: 'release', id: 'a', expect: false },
      { op: 'settle', id: 'a', actual: 5, expect: { settled: false, deltaTokens: 0 } },
    ],
  },
  {
    name: 'renew keeps a slot past its first lease',
    limits: (alg) => [rate('req', 'requests', 100, TEN_MIN, alg), conc('one', 1, 400)],
    steps: [
      { op: 'acquire', id: 'a', tokens: 0, expect: ok({ req: 99, one: 0 }) },
      { op: 'sleep', ms: 250 },
      { op: 'renew', id: 'a', expect: true },
      { op: 'sleep', ms: 250 },
      // Renewed at 250 → expires at 650; now 500.
      { op: 'acquire', id: 'b', tokens: 0, expect: no('limited', 'one', 150, { req: 99, one: 0 }) },
      { op: 'release', id: 'a', expect: true },
      { op: 'acquire', id: 'b', tokens: 0, expect: ok({ req: 98, one: 0 }) },
    ],
  },
];

function pick<T>(v: PerAlg<T>, alg: Algorithm): T {
  if (typeof v === 'object' && v !== null && 'token_bucket' in v && 'sliding_window' in v) return v[alg];
  return v as T;
}

function remainingOf(limits: readonly LimitState[]): Record<string, number> {
  return Object.fromEntries(limits.map((l) => [l.name, l.remaining]));
}

/** What a run observed at each step, comparable across modes (retryAfterMs separately, with its bound). */
type Observed = unknown[];

/** Runs `s` on `limiter` for `tenant` and asserts every step; returns the observations. */
async function run(s: Scenario, alg: Algorithm, limiter: AnyLimiter, tenant: string): Promise<Observed> {
  const start = Date.now();
  let slept = 0;
  const seen: Observed = [];
  for (const [k, step] of s.steps.entries()) {
    const where = `step ${k} (${step.op}${'id' in step ? ` ${step.id}` : ''})`;
    switch (step.op) {
      case 'acquire': {
        const req: AcquireRequest = {
          id: step.id,
          tokens: step.tokens,
          ...(step.requests === undefined ? {} : { requests: step.requests }),
          ...(step.model === undefined ? {} : { model: step.model }),
        };
        const r = await limiter.acquire(tenant, req);
        const overhead = Date.now() - start - slept;
        const e = pick(step.expect, alg);
        if (e.ok) {
          assert.deepEqual({ ok: r.ok, remaining: remainingOf(r.limits) }, { ok: true, remaining: e.remaining }, `${where}: ${JSON.stringify(r)}`);
          seen.push({ ok: true, remaining: e.remaining });
        } else {
          assert.equal(r.ok, false, `${where}: expected a refusal, got ${JSON.stringify(r)}`);
          if (r.ok) throw new Error('unreachable');
          assert.deepEqual(
            { reason: r.reason, limit: r.limit, remaining: remainingOf(r.limits) },
            { reason: e.reason, limit: e.limit, remaining: e.remaining },
            where,
          );
          assert.ok(
            r.retryAfterMs <= e.retryAfterMs + 1 && r.retryAfterMs >= e.retryAfterMs - overhead - 2,
            `${where}: retryAfterMs ${r.retryAfterMs}, expected ${e.retryAfterMs} (overhead ${overhead} ms)`,
          );
          seen.push({ ok: false, reason: r.reason, limit: r.limit, kind: r.kind, remaining: remainingOf(r.limits) });
        }
        break;
      }
      case 'settle': {
        const r = await limiter.settle(tenant, step.id, step.actual);
        assert.deepEqual(r, step.expect, where);
        seen.push(r);
        break;
      }
      case 'release':
      case 'renew': {
        const r = step.op === 'release' ? await limiter.release(tenant, step.id) : await limiter.renew(tenant, step.id);
        assert.equal(r, step.expect, where);
        seen.push(r);
        break;
      }
      case 'peek': {
        const r = remainingOf(await limiter.peek(tenant, step.model));
        assert.deepEqual(r, pick(step.remaining, alg), where);
        seen.push(r);
        break;
      }
      case 'sleep': {
        await sleep(step.ms);
        // The planned ms only: timer overshoot ages state beyond the plan, so it counts as overhead.
        slept += step.ms;
        break;
      }
    }
  }
  return seen;
}

describe('limiter conformance: in-RAM and central (Redis), token bucket and sliding window', () => {
  let redis: RunningRedis;
  let c: Redis;
  const policies = new Map<string, Policy>();
  const policyFor = (t: string): Policy | undefined => policies.get(t);
  const modes: Record<'ram' | 'central', () => AnyLimiter> = {
    ram: () => ramLimiter(policyFor),
    central: () => new CentralLimiter({ redis: c, cluster: 'conformance', policyFor }),
  };
  const observed = new Map<string, Observed>();

  before(async () => {
    redis = await startRedis();
    c = redis.client();
  });
  after(async () => {
    await redis.stop();
  });

  for (const [i, s] of SCENARIOS.entries()) {
    for (const alg of ['token_bucket', 'sliding_window'] as const) {
      for (const mode of ['ram', 'central'] as const) {
        test(`${s.name} [${alg}, ${mode}]`, async () => {
          const tenant = `s${i}-${alg}-${mode}`;
          policies.set(tenant, { limits: s.limits(alg) });
          observed.set(`${i}/${alg}/${mode}`, await run(s, alg, modes[mode](), tenant));
        });
      }
      test(`${s.name} [${alg}]: both modes observed the same results`, () => {
        const ram = observed.get(`${i}/${alg}/ram`);
        const central = observed.get(`${i}/${alg}/central`);
        assert.ok(ram !== undefined && central !== undefined, 'both runs completed');
        assert.deepEqual(central, ram);
      });
    }
  }
});
