import type { LimitRuntime } from './limit-runtime.ts';
import type { LimitSpec } from './types.ts';

/**
 * What one admitted request holds until it is settled and released: the tokens and requests
 * it reserved from each limit that applied, and where (the limits' state objects, so a policy
 * reload that keeps a limit keeps its reservations settleable).
 */
export class Reservation {
  /** Tokens reserved from every applicable `tokens` limit. */
  readonly tokens: number;
  /** Requests counted by every applicable `requests` limit. */
  readonly requests: number;
  /** The tenant's limits when admitted (policy order). */
  readonly specs: readonly LimitSpec[];
  /** The tenant's limit states when admitted (indexed by policy position). */
  readonly runtimes: readonly LimitRuntime[];
  /** Positions in `runtimes` of the limits that applied. */
  readonly applied: readonly number[];
  /** Per position in `applied`: the sliding-window entry's sequence number, or -1. Null when no window applied. */
  readonly seqs: number[] | null;
  /** Lifetime after admission or renew, ms. */
  readonly ttlMs: number;
  /** From this time (ms) on the reservation is gone: settle/release/renew change nothing. */
  expiresAt: number;
  settled = false;
  released = false;

  constructor(
    tokens: number,
    requests: number,
    specs: readonly LimitSpec[],
    runtimes: readonly LimitRuntime[],
    applied: readonly number[],
    seqs: number[] | null,
    nowMs: number,
    ttlMs: number,
  ) {
    this.tokens = tokens;
    this.requests = requests;
    this.specs = specs;
    this.runtimes = runtimes;
    this.applied = applied;
    this.seqs = seqs;
    this.ttlMs = ttlMs;
    this.expiresAt = nowMs + ttlMs;
  }
}
