/**
 * An outside client of the simulator: usage of one API key that does not come through the gateway
 * (another region, a batch job using the same provider key), spending `fraction` of the key's quota
 * per minute as a steady stream of requests through the same quota the key's requests see. Set with
 * the `outside` option or `POST /sim/outside {"key", "fraction"}` (fraction 0 stops it).
 *
 * Its requests: with an rpm quota, `fraction × rpm` requests a minute, each of
 * `fraction × tpm / (fraction × rpm)` tokens when there is a tpm quota; with only a tpm quota, ten a
 * second of `fraction × tpm / 600` tokens each. A request the quota refuses is counted as the
 * outside client's 429 and spends nothing (it does not retry).
 */
import type { Clock } from '../clock.ts';
import type { KeyQuota } from './quota.ts';

/** What the outside client did since it was set (part of `GET /sim/stats`). */
export interface OutsideStats {
  readonly key: string;
  readonly fraction: number;
  /** Its requests the quota took, and their tokens. */
  readonly requests: number;
  readonly tokens: number;
  /** Its requests the quota refused. */
  readonly rateLimited: number;
}

/** Longest catch-up at once, requests (a stalled event loop does not make it spend a burst of more). */
const MAX_CATCH_UP = 600;

/** An outside client spending a fraction of one key's quota. */
export class OutsideClient {
  readonly key: string;
  readonly fraction: number;
  readonly #quota: KeyQuota;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #tokensPerRequest: number;
  #next: number;
  #carry = 0;
  #requests = 0;
  #tokens = 0;
  #rateLimited = 0;
  #timer: ReturnType<typeof setInterval> | undefined;

  /**
   * Starts spending at once (its first request now), on a timer (unref'd) of its request interval.
   * @param fraction of the key's quota per minute, 0 < fraction ≤ 1.
   * @throws RangeError for a fraction out of range, an empty key, or a quota with neither limit.
   */
  constructor(quota: KeyQuota, clock: Clock, key: string, fraction: number) {
    if (!(fraction > 0 && fraction <= 1)) throw new RangeError(`outside fraction must be in (0, 1], got ${fraction}`);
    if (key === '') throw new RangeError('outside key must not be empty');
    if (quota.rpm === null && quota.tpm === null) throw new RangeError('an outside client needs a simulator quota (rpm or tpm)');
    this.key = key;
    this.fraction = fraction;
    this.#quota = quota;
    this.#clock = clock;
    const perMinute = quota.rpm === null ? 600 : Math.max(1e-9, fraction * quota.rpm);
    this.#intervalMs = 60_000 / perMinute;
    this.#tokensPerRequest = quota.tpm === null ? 0 : (fraction * quota.tpm) / perMinute;
    this.#next = clock.now();
    this.catchUp();
    this.#timer = setInterval(() => this.catchUp(), Math.max(10, Math.min(100, this.#intervalMs)));
    this.#timer.unref();
  }

  /** Sends the requests due by now (at most {@link MAX_CATCH_UP}); the simulator also calls it before each admission. */
  catchUp(): void {
    const now = this.#clock.now();
    for (let i = 0; i < MAX_CATCH_UP && this.#next <= now; i++) {
      this.#next += this.#intervalMs;
      this.#carry += this.#tokensPerRequest;
      const tokens = Math.floor(this.#carry);
      const d = this.#quota.admit(this.key, tokens);
      if (!d.ok) {
        this.#rateLimited++;
        continue;
      }
      this.#carry -= tokens;
      this.#quota.finish(this.key, d.id, tokens);
      this.#requests++;
      this.#tokens += tokens;
    }
    if (this.#next < now) this.#next = now;
  }

  /** Its counts so far. */
  stats(): OutsideStats {
    return { key: this.key, fraction: this.fraction, requests: this.#requests, tokens: this.#tokens, rateLimited: this.#rateLimited };
  }

  /** Stops its timer. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
