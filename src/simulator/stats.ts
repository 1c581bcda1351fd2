/**
 * The simulator's counters, served by `GET /sim/stats`. Benchmarks read `rateLimited` before and
 * after a run to count upstream 429s, so every count is exact.
 */

/** Counters of one API key. */
export interface KeyStats {
  /** Requests on model routes with this key (any outcome). */
  requests: number;
  /** Prompt tokens of this key's served requests. */
  promptTokens: number;
  /** Completion tokens sent to this key. */
  completionTokens: number;
  /** 429 replies to this key. */
  rateLimited: number;
}

/** JSON body of `GET /sim/stats`. */
export interface SimulatorStats {
  /** Requests received on model routes (chat, embeddings, messages), whatever the outcome. */
  requests: number;
  /** Replies delivered in full (200). */
  completed: number;
  /**
   * Prompt tokens of served requests (completed, dropped or aborted after admission), as reported
   * in `usage`.
   */
  promptTokens: number;
  /** Completion tokens actually sent (a cut stream counts the tokens written before the cut). */
  completionTokens: number;
  /** 429 replies (quota). */
  rateLimited: number;
  /** Other error replies: 400, 401, 404 and the injected 5xx. */
  errors: number;
  /** Streams cut by the drop fault. */
  dropped: number;
  /** Replies abandoned by the client (disconnect before the end); their timers are stopped. */
  aborted: number;
  /** Admitted requests whose reply has not ended yet. Not zeroed by a reset. */
  inFlight: number;
  /**
   * The most requests in flight at once since the start or the last reset (a reset starts it at
   * the current `inFlight`): how many ran concurrently where the provider sees them.
   */
  peakInFlight: number;
  /** `POST /v1/messages/count_tokens` answered (free: no quota, no tokens counted above). */
  countTokens: number;
  /** Per API key. */
  byKey: Record<string, KeyStats>;
}

/** Mutable counters; `snapshot()` gives the JSON of `/sim/stats`. */
export class StatsCounters {
  requests = 0;
  completed = 0;
  promptTokens = 0;
  completionTokens = 0;
  rateLimited = 0;
  errors = 0;
  dropped = 0;
  aborted = 0;
  #inFlight = 0;
  peakInFlight = 0;
  countTokens = 0;
  #byKey = new Map<string, KeyStats>();

  /** Admitted requests whose reply has not ended yet; setting it raises {@link peakInFlight} when higher. */
  get inFlight(): number {
    return this.#inFlight;
  }

  set inFlight(value: number) {
    this.#inFlight = value;
    if (value > this.peakInFlight) this.peakInFlight = value;
  }

  /** The counters of `key`, created at zero. */
  key(key: string): KeyStats {
    let k = this.#byKey.get(key);
    if (k === undefined) {
      k = { requests: 0, promptTokens: 0, completionTokens: 0, rateLimited: 0 };
      this.#byKey.set(key, k);
    }
    return k;
  }

  /** Zeroes every counter except `inFlight` (requests still running keep their slot in it). */
  reset(): void {
    this.requests = 0;
    this.completed = 0;
    this.promptTokens = 0;
    this.completionTokens = 0;
    this.rateLimited = 0;
    this.errors = 0;
    this.dropped = 0;
    this.aborted = 0;
    this.countTokens = 0;
    this.peakInFlight = this.#inFlight;
    this.#byKey = new Map();
  }

  /** A copy of the counters. */
  snapshot(): SimulatorStats {
    const byKey: Record<string, KeyStats> = {};
    for (const [k, v] of this.#byKey) byKey[k] = { ...v };
    return {
      requests: this.requests,
      completed: this.completed,
      promptTokens: this.promptTokens,
      completionTokens: this.completionTokens,
      rateLimited: this.rateLimited,
      errors: this.errors,
      dropped: this.dropped,
      aborted: this.aborted,
      inFlight: this.inFlight,
      peakInFlight: this.peakInFlight,
      countTokens: this.countTokens,
      byKey,
    };
  }
}
