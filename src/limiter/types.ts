/**
 * Contracts of the in-RAM limiter. No HTTP, Redis or fastify types here:
 * the gateway composes these, the limiter knows nothing of it.
 */
import type { BudgetPeriod } from './budget-period.ts';

/** Algorithm of a `requests` or `tokens` limit. */
export type Algorithm = 'token_bucket' | 'sliding_window';

/**
 * A `requests` or `tokens` limit: at most `limit` units per `windowMs`.
 * - `token_bucket`: capacity `limit`, continuous refill at `limit / windowMs` units per ms
 *   (the model OpenAI documents for its own rate limits).
 * - `sliding_window`: the sum of costs admitted in any window of `windowMs` ending now is
 *   at most `limit` (an exact log of timestamped entries).
 */
export interface RateLimitSpec {
  /** Stable name used in results, errors and headers, e.g. `tokens/1m`. */
  readonly name: string;
  readonly kind: 'requests' | 'tokens';
  /** Units (requests or tokens) per window; a positive integer. */
  readonly limit: number;
  /** Window length in ms, 1_000 ..= 86_400_000. */
  readonly windowMs: number;
  readonly algorithm: Algorithm;
  /** When set, the limit only applies to requests for this model. */
  readonly model?: string;
  /** When set, the limit only applies to requests made with this API key (its id). */
  readonly key?: string;
  /**
   * A `tokens` limit only: how much a token of each kind counts at settlement (1 = a full token).
   * Unset kinds count 1. Admission reserves every token at 1 (what is cached is not known yet).
   */
  readonly weights?: TokenWeights;
}

/** Weights (0 ..= 10) of token kinds in a `tokens` limit's settlement. */
export interface TokenWeights {
  /** Input tokens read from the prompt cache. @default 1 */
  readonly cacheRead?: number;
  /** Input tokens written to the prompt cache. @default 1 */
  readonly cacheWrite?: number;
  /** Reasoning tokens (part of the output). @default 1 */
  readonly reasoning?: number;
}

/** Tokens of the kinds a {@link TokenWeights} weighs, as a provider reported them (parts of the actual tokens). */
export interface TokenKinds {
  readonly cacheRead?: number;
  readonly cacheWrite?: number;
  readonly reasoning?: number;
}

/**
 * A `cost` limit (a budget): at most `limit` micro-dollars of spend per period (see
 * `budget-period.ts`); spend is counted exactly in pico-dollars and forgotten when the period ends.
 */
export interface CostLimitSpec {
  /** Stable name, e.g. `cost/month`, `cost/1d@gpt-4o`, `cost/1d#ci-key`. */
  readonly name: string;
  readonly kind: 'cost';
  /** Budget per period, micro-dollars; a positive safe integer. */
  readonly limit: number;
  readonly period: BudgetPeriod;
  readonly model?: string;
  readonly key?: string;
}

/** At most `limit` requests in flight; each slot is a lease that expires after `leaseTtlMs`. */
export interface ConcurrencyLimitSpec {
  readonly name: string;
  readonly kind: 'concurrent';
  /** Slots; a positive integer. */
  readonly limit: number;
  /** A slot not released or renewed within this many ms frees itself. */
  readonly leaseTtlMs: number;
  readonly model?: string;
  readonly key?: string;
}

/** Any limit of a policy. */
export type LimitSpec = RateLimitSpec | ConcurrencyLimitSpec | CostLimitSpec;

/** Kinds of limits. */
export type LimitKind = LimitSpec['kind'];

/** A tenant's limits; an acquire is all-or-nothing across every limit that applies. */
export interface Policy {
  readonly limits: readonly LimitSpec[];
}

/** What one request asks for. */
export interface AcquireRequest {
  /** Unique per request; settle/release/renew use it. */
  readonly id: string;
  /** Tokens to reserve: prompt estimate + reserved output. A non-negative integer. */
  readonly tokens: number;
  /** Requests to count. @default 1 */
  readonly requests?: number;
  /** Model of the request, to select model-scoped limits. */
  readonly model?: string;
  /** Id of the API key the request came with, to select key-scoped limits. */
  readonly key?: string;
  /** Pico-dollars to reserve from every applicable `cost` limit (see `src/pricing`). @default 0n */
  readonly cost?: bigint;
  /**
   * Fraction (0 ≤ floor < 1) of every requests/tokens/cost limit this request may not take: it is
   * admitted only if `floor × limit` units are still left after it (a lower priority tier leaving
   * room for higher ones). Concurrency limits are not floored. @default 0
   */
  readonly floor?: number;
}

/** What a settlement knows besides the actual tokens (see `Limiter.settle`). */
export interface SettleDetail {
  /** Actual cost, pico-dollars; undefined keeps the reserved cost charged. */
  readonly cost?: bigint;
  /** Token kinds among the actual tokens, for weighted `tokens` limits; undefined: all count 1. */
  readonly kinds?: TokenKinds;
}

/**
 * Checks what an acquire asks for (both limiters: RAM and central).
 * @throws RangeError when `tokens` or `requests` is negative or not finite, or `floor` is not in [0, 1).
 */
export function checkAcquireRequest(req: Pick<AcquireRequest, 'tokens' | 'requests' | 'floor' | 'cost'>): void {
  if (req.cost !== undefined && req.cost < 0n) throw new RangeError(`cost must be ≥ 0, got ${req.cost}`);
  if (!(req.tokens >= 0 && req.tokens < Infinity)) throw new RangeError(`tokens must be a finite number ≥ 0, got ${req.tokens}`);
  const requests = req.requests ?? 1;
  if (!(requests >= 0 && requests < Infinity)) throw new RangeError(`requests must be a finite number ≥ 0, got ${requests}`);
  const floor = req.floor ?? 0;
  if (!(floor >= 0 && floor < 1)) throw new RangeError(`floor must be a fraction in [0, 1), got ${floor}`);
}

/** State of one limit as seen right after a decision (or a peek). */
export interface LimitState {
  readonly name: string;
  readonly kind: LimitKind;
  /** Configured limit (units per window, slots, or micro-dollars per period). */
  readonly limit: number;
  /** Units (or slots, or micro-dollars) available now, floored to an integer, never below 0. */
  readonly remaining: number;
  /** Ms until the limit is back to its initial state (bucket full / window empty / no slot held); for a cost limit, until its period ends. */
  readonly resetMs: number;
  /**
   * A cost limit only: when its period ends (epoch ms, exact). `resetMs` counts from the decision's
   * own clock reading, so a reply rendered later must name the renewal from this, not `now + resetMs`.
   */
  readonly resetAt?: number;
}

/** Result of an acquire. "Limited" is a result, not an exception. */
export type AcquireResult =
  | {
      readonly ok: true;
      readonly limits: readonly LimitState[];
    }
  | {
      readonly ok: false;
      /**
       * `limited`: retry after `retryAfterMs`.
       * `too_large`: the request exceeds the named limit's capacity and can never be admitted.
       * `duplicate`: a reservation with this id is already open.
       */
      readonly reason: 'limited' | 'too_large' | 'duplicate';
      /** Name of the (first) limit that refused. */
      readonly limit: string;
      /** Kind of the limit that refused. */
      readonly kind: LimitKind;
      /** Exact ms until every limit could admit this request (0 for too_large/duplicate). */
      readonly retryAfterMs: number;
      readonly limits: readonly LimitState[];
    };

/** Result of settle(). */
export interface SettleResult {
  /** False when the id was unknown, expired or already settled (then nothing changed). */
  readonly settled: boolean;
  /** actual − reserved tokens: negative is a refund, positive a debit. 0 when not settled. */
  readonly deltaTokens: number;
}
