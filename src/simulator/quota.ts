/**
 * The simulator's own per-API-key provider quota: RPM and TPM token buckets, charged at admission
 * (prompt tokens + output cap) and settled to the actual usage, as OpenAI documents for its limits
 * (https://platform.openai.com/docs/guides/rate-limits: capacity = the per-minute limit, continuous
 * refill; max_tokens counts toward the token limit at admission).
 * Built on the project's in-RAM `Limiter`.
 */
import type { Clock } from '../clock.ts';
import { Limiter, type LimitState, type Policy, type RateLimitSpec } from '../limiter/index.ts';

/** Outcome of an admission. */
export type QuotaDecision =
  | {
      readonly ok: true;
      /** Reservation id, to pass to `finish`. Empty when the simulator has no quota. */
      readonly id: string;
      /** State of each configured limit after the admission (requests first, then tokens). */
      readonly limits: readonly LimitState[];
    }
  | {
      readonly ok: false;
      /** `limited`: retry later; `too_large`: the request needs more tokens than the TPM capacity. */
      readonly reason: 'limited' | 'too_large';
      /** The limit that refused. */
      readonly kind: 'requests' | 'tokens';
      /** Ms until the request could be admitted (0 for too_large). */
      readonly retryAfterMs: number;
      readonly limits: readonly LimitState[];
    };

const MINUTE_MS = 60_000;

/** Per-key RPM/TPM quota; a key's buckets start full. With neither limit configured, admits everything. */
export class KeyQuota {
  /** Requests per minute, or null when unlimited. */
  readonly rpm: number | null;
  /** Tokens per minute, or null when unlimited. */
  readonly tpm: number | null;
  readonly #clock: Clock;
  readonly #policy: Policy | undefined;
  #limiter: Limiter;
  #seq = 0;

  /** @throws RangeError (from the limiter) when a limit is not a positive integer. */
  constructor(clock: Clock, rpm: number | null, tpm: number | null) {
    this.rpm = rpm;
    this.tpm = tpm;
    this.#clock = clock;
    const limits: RateLimitSpec[] = [];
    if (rpm !== null) limits.push({ name: 'requests', kind: 'requests', limit: rpm, windowMs: MINUTE_MS, algorithm: 'token_bucket' });
    if (tpm !== null) limits.push({ name: 'tokens', kind: 'tokens', limit: tpm, windowMs: MINUTE_MS, algorithm: 'token_bucket' });
    this.#policy = limits.length === 0 ? undefined : { limits };
    this.#limiter = this.#newLimiter();
  }

  /** Whether any limit is configured. */
  get enabled(): boolean {
    return this.#policy !== undefined;
  }

  #newLimiter(): Limiter {
    const policy = this.#policy;
    return new Limiter({ clock: this.#clock, policyFor: () => policy });
  }

  /**
   * Takes one request and `tokens` tokens from `key`'s buckets, or nothing when either cannot.
   * @param tokens prompt tokens + the output cap (max_tokens, or the output length).
   */
  admit(key: string, tokens: number): QuotaDecision {
    if (this.#policy === undefined) return { ok: true, id: '', limits: [] };
    const id = String(++this.#seq);
    const r = this.#limiter.acquire(key, { id, tokens });
    if (r.ok) return { ok: true, id, limits: r.limits };
    return {
      ok: false,
      reason: r.reason === 'too_large' ? 'too_large' : 'limited',
      kind: r.kind === 'tokens' ? 'tokens' : 'requests',
      retryAfterMs: r.retryAfterMs,
      limits: r.limits,
    };
  }

  /**
   * Settles an admitted request to the tokens it actually used (prompt + completion tokens sent),
   * refunding or debiting the difference with its reservation. Idempotent; a no-op for ids
   * admitted before the last `reset()`.
   */
  finish(key: string, id: string, actualTokens: number): void {
    if (id === '') return;
    this.#limiter.settle(key, id, actualTokens);
    this.#limiter.release(key, id);
  }

  /** Refills every key's buckets (forgets all keys). */
  reset(): void {
    this.#limiter = this.#newLimiter();
  }
}
