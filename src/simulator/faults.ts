/**
 * Deterministic fault injection: which requests get a 5xx, a dropped stream or a slow first token.
 */

/**
 * Fault of one request. `none`: served normally. The `echo-key` faults are only asked for by
 * header (never drawn): an upstream that echoes the credentials it received (see {@link EchoFault}).
 * `rate-limited` (a 429 whose wait is {@link RATE_LIMITED_WAIT_MS}) is only asked for by header
 * too, `x-sim-fault: rate-limit-once`: the first of each pair of requests carrying it gets the 429,
 * the second is served — a provider 429 that a retry gets past.
 */
export type Fault = 'none' | 'error' | 'drop' | 'slow' | 'rate-limited' | EchoFault;

/** The wait (ms) a `rate-limited` fault's 429 names in `retry-after-ms` (`retry-after`: 1 s). */
export const RATE_LIMITED_WAIT_MS = 20;

/**
 * A provider that echoes the `authorization` / `x-api-key` it received, in its error body and in
 * `x-sim-echo-*` response headers (what a careless proxy or a verbose error page does):
 * - `echo-key`: 401 authentication error;
 * - `echo-key-429`: 429 rate-limit error with `x-should-retry: false` (relayed, not retried);
 * - `echo-key-500`: 500 server error;
 * - `echo-key-stream`: a stream request gets 200 and its first events, then a mid-stream error
 *   event (OpenAI `data: {"error":…}`, Anthropic `event: error`); a JSON request gets the 401.
 */
export type EchoFault = 'echo-key' | 'echo-key-429' | 'echo-key-500' | 'echo-key-stream';

const ECHO_FAULTS: ReadonlySet<string> = new Set<EchoFault>(['echo-key', 'echo-key-429', 'echo-key-500', 'echo-key-stream']);

/** Whether `fault` is one of the {@link EchoFault}s. */
export function isEchoFault(fault: Fault): fault is EchoFault {
  return ECHO_FAULTS.has(fault);
}

/** Fault rates in [0, 1]. */
export interface FaultRates {
  readonly errorRate: number;
  readonly dropRate: number;
  readonly slowRate: number;
}

/**
 * mulberry32: a small 32-bit PRNG with a full 2^32 period; uniform floats in [0, 1).
 * (Tommy Ettinger's public-domain generator.)
 */
export class Mulberry32 {
  #s: number;

  /** @param seed any number; its low 32 bits are the state. */
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }

  /** Next float in [0, 1). */
  next(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
}

/**
 * Draws the fault of each request from a seeded PRNG. Every draw consumes exactly three numbers
 * (error, drop, slow, in that order) whatever the rates, so the n-th request of a run gets the same
 * fault for the same seed. Error wins over drop, drop over slow; drop only applies to streams.
 */
export class FaultPicker {
  readonly #rng: Mulberry32;
  readonly #rates: FaultRates;
  /** Requests with `x-sim-fault: rate-limit-once` so far: the even-numbered ones (0, 2, ...) get the 429. */
  #rateLimitOnce = 0;

  constructor(seed: number, rates: FaultRates) {
    this.#rng = new Mulberry32(seed);
    this.#rates = rates;
  }

  /**
   * The fault of the next request.
   * @param stream whether the request is a stream (only streams can be dropped).
   * @param forced the `x-sim-fault` header value: `error|drop|slow|none`, `rate-limit-once` (a 429
   *   for every other such request, the first included) or an {@link EchoFault} overrides the draw
   *   (which still happens).
   */
  pick(stream: boolean, forced: string | undefined): Fault {
    const r = this.#rng;
    const e = r.next();
    const d = r.next();
    const s = r.next();
    if (forced === 'error' || forced === 'slow' || forced === 'none') return forced;
    if (forced === 'rate-limit-once') return this.#rateLimitOnce++ % 2 === 0 ? 'rate-limited' : 'none';
    if (forced !== undefined && ECHO_FAULTS.has(forced)) return forced as EchoFault;
    if (forced === 'drop') return stream ? 'drop' : 'none';
    const rates = this.#rates;
    if (e < rates.errorRate) return 'error';
    if (stream && d < rates.dropRate) return 'drop';
    if (s < rates.slowRate) return 'slow';
    return 'none';
  }
}
