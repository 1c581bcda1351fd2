/**
 * The guard every Redis call on a decision path goes through: a timeout (15 ms by default) behind a
 * circuit breaker (opens after 3 consecutive failures, one half-open probe after 1 s). A guarded
 * call never throws and never makes its caller wait longer than the timeout; while the breaker is
 * open it answers at once without touching Redis, and the caller decides from local state.
 */
import type { Clock } from '../clock.ts';

/**
 * The breaker's state.
 * - `closed`: calls go to Redis.
 * - `open`: calls are answered `open` at once, without calling Redis.
 * - `half_open`: one probe call is in flight; every other call is answered `open`.
 */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** Why a guarded call did not return Redis's answer. */
export type GuardFailure = 'timeout' | 'error' | 'open';

/**
 * What a guarded call returns: Redis's answer, or why there is none (never an exception).
 * - `timeout`: no answer within `timeoutMs`; `late` settles with the call's real outcome (the command
 *   may still have run in Redis: a caller that must not lose its effect, e.g. a lease grant, reads it).
 * - `error`: the call rejected (connection down, Redis error reply, NOSCRIPT that ioredis could not
 *   recover from).
 * - `open`: the breaker is open (or half-open with its probe in flight); Redis was not called.
 */
export type GuardResult<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly reason: GuardFailure; readonly late?: Promise<T> };

/**
 * Why the breaker changed state, passed to `onChange`.
 * - `timeout` / `error`: the failure that opened it (the `failuresToOpen`-th in a row, or a failed
 *   probe);
 * - `open_elapsed`: `openMs` passed and a probe call is going through (→ `half_open`);
 * - `probe_ok`: the probe got an answer from Redis (→ `closed`).
 */
export type BreakerChangeReason = 'timeout' | 'error' | 'open_elapsed' | 'probe_ok';

/** Counters since the guard was made (calls; one call lands in exactly one of ok/timeouts/errors/rejectedOpen). */
export interface GuardStats {
  /** Calls to `run`. */
  readonly calls: number;
  /** Calls answered by Redis in time. */
  readonly ok: number;
  /** Calls with no answer within `timeoutMs`. */
  readonly timeouts: number;
  /** Calls that rejected (NOSCRIPT included). */
  readonly errors: number;
  /** Of `errors`, NOSCRIPT replies (not counted as breaker failures). */
  readonly noscript: number;
  /** Calls answered `open` without calling Redis. */
  readonly rejectedOpen: number;
  /** Transitions to `open` (from `closed` or from a failed probe). */
  readonly opened: number;
  /** Transitions to `closed` (successful probes). */
  readonly closed: number;
}

/** Options of `RedisGuard`. */
export interface RedisGuardOptions {
  /**
   * Longest wait for Redis's answer, ms (> 0). Measured with the event loop's timers
   * (`setTimeout`), since it bounds real waiting, not the injected clock.
   * @default 15
   */
  readonly timeoutMs?: number;
  /**
   * Consecutive failures (timeouts or errors, NOSCRIPT excluded) that open the breaker (integer ≥ 1).
   * @default 3
   */
  readonly failuresToOpen?: number;
  /**
   * How long the breaker stays open before one probe call may go through, ms (≥ 0), measured with
   * `clock`.
   * @default 1000
   */
  readonly openMs?: number;
  /** Time source for the open period. */
  readonly clock: Clock;
  /**
   * Called synchronously on every state change, after the state changed; the caller logs
   * "entering fallback" (→ `open` from `closed`) and "leaving fallback" (→ `closed`). It should not
   * throw: an exception it throws is caught and emitted as a process warning, so `run` still never
   * rejects.
   */
  readonly onChange?: (state: BreakerState, reason: BreakerChangeReason) => void;
  /**
   * Start warming up: until {@link RedisGuard.warmedUp} is called, timeouts and errors are returned
   * to the caller as usual but do not count towards opening the breaker (see `warmedUp`), nor do
   * the failures of calls started before it, whenever they end.
   * @default false
   */
  readonly warmUp?: boolean;
}

/** How one attempt ended, before the breaker looks at it. */
type Outcome<T> = { kind: 'ok'; value: T } | { kind: 'timeout'; late: Promise<T> } | { kind: 'error'; noscript: boolean };

const OPEN: GuardResult<never> = Object.freeze({ ok: false, reason: 'open' });
const ERROR: GuardResult<never> = Object.freeze({ ok: false, reason: 'error' });

/**
 * True for Redis's NOSCRIPT reply ("NOSCRIPT No matching script. Please use EVAL."): the script
 * cache was flushed (restart, failover, SCRIPT FLUSH). ioredis retries such a call with EVAL itself
 * (`built/Script.js`), so one reaching the guard means the retry also failed; it proves Redis is
 * answering, so it is no reason to fall back.
 */
function isNoscript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

/**
 * Runs Redis calls with a timeout behind a circuit breaker. One guard per Redis connection (or per
 * Redis deployment), shared by every decision path that uses it.
 *
 * Closed: each call gets `timeoutMs`; a timeout or an error is a failure, `failuresToOpen` in a row
 * open the breaker, an answer (or a NOSCRIPT reply) resets the count. Open: calls are answered
 * `{ ok: false, reason: 'open' }` at once until `openMs` passed; the first call after that is the
 * probe (state `half_open`; other calls still get `open`): an answer closes the breaker, a failure
 * opens it for another `openMs`. The outcome of a call that started before the last state change is
 * counted in `stats` but does not move the breaker (a late answer from before an outage does not
 * close it).
 *
 * `run` never rejects and never leaves an unhandled rejection: a call's late result or rejection
 * is consumed and dropped.
 */
export class RedisGuard {
  readonly #timeoutMs: number;
  readonly #failuresToOpen: number;
  readonly #openMs: number;
  readonly #clock: Clock;
  readonly #onChange: ((state: BreakerState, reason: BreakerChangeReason) => void) | undefined;

  #state: BreakerState = 'closed';
  /** Bumped on every state change; an outcome from an older generation does not move the breaker. */
  #generation = 0;
  #consecutiveFailures = 0;
  #openedAt = 0;
  #warming: boolean;
  #stats = { calls: 0, ok: 0, timeouts: 0, errors: 0, noscript: 0, rejectedOpen: 0, opened: 0, closed: 0 };

  /**
   * @throws RangeError when `timeoutMs` is not a finite number > 0, `failuresToOpen` not an integer
   *   ≥ 1, or `openMs` not a finite number ≥ 0.
   */
  constructor(options: RedisGuardOptions) {
    const { timeoutMs = 15, failuresToOpen = 3, openMs = 1_000 } = options;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError(`timeoutMs must be a finite number > 0 ms, got ${timeoutMs}`);
    if (!Number.isInteger(failuresToOpen) || failuresToOpen < 1) {
      throw new RangeError(`failuresToOpen must be an integer >= 1, got ${failuresToOpen}`);
    }
    if (!Number.isFinite(openMs) || openMs < 0) throw new RangeError(`openMs must be a finite number >= 0 ms, got ${openMs}`);
    this.#timeoutMs = timeoutMs;
    this.#failuresToOpen = failuresToOpen;
    this.#openMs = openMs;
    this.#clock = options.clock;
    this.#onChange = options.onChange;
    this.#warming = options.warmUp === true;
  }

  /**
   * Ends the warm-up (idempotent): from now on failures count towards opening the breaker.
   *
   * Why a warm-up: a node's first calls after it connects are not evidence about Redis. The
   * decision connection rejects every command at once until its socket is ready (offline queue
   * off), the first script calls of a process run cold code, and a node's first burst of requests
   * keeps its own event loop busy past the 15 ms timeout while Redis's answers wait in the socket.
   * Counting those would open the breaker, and put the node in fallback, against a healthy Redis.
   * The caller still never waits longer than the timeout (a failure is returned as usual); only the
   * breaker ignores it. The owner calls this once the connection is ready and every script is
   * loaded (`SCRIPT LOAD` answered: Redis proved healthy), or after a bounded wait when Redis is
   * unreachable at start (so a node that starts without Redis still falls back).
   */
  warmedUp(): void {
    this.#warming = false;
  }

  /** True until {@link warmedUp}. */
  get warming(): boolean {
    return this.#warming;
  }

  /**
   * The breaker's state. An open breaker turns `half_open` when the first call after `openMs`
   * arrives (that call is the probe), not by itself.
   */
  get state(): BreakerState {
    return this.#state;
  }

  /** A snapshot of the counters. */
  get stats(): GuardStats {
    return { ...this.#stats };
  }

  /**
   * Runs `call` (one Redis command or script) unless the breaker is open, waiting at most
   * `timeoutMs` for it.
   * @param call starts the Redis call; it may throw or reject (→ `error`).
   * @returns Redis's answer, or `timeout` / `error` / `open`; never rejects.
   */
  async run<T>(call: () => Promise<T>): Promise<GuardResult<T>> {
    this.#stats.calls++;
    if (this.#state === 'half_open') {
      this.#stats.rejectedOpen++;
      return OPEN;
    }
    if (this.#state === 'open') {
      if (this.#clock.now() - this.#openedAt < this.#openMs) {
        this.#stats.rejectedOpen++;
        return OPEN;
      }
      this.#transition('half_open', 'open_elapsed');
    }
    const generation = this.#generation;
    // A call started during the warm-up is not evidence about Redis, even when it fails after it.
    const warming = this.#warming;
    const outcome = await this.#attempt(call);
    const current = generation === this.#generation && !warming;
    switch (outcome.kind) {
      case 'ok':
        this.#stats.ok++;
        if (generation === this.#generation) this.#answered();
        return { ok: true, value: outcome.value };
      case 'error':
        this.#stats.errors++;
        if (outcome.noscript) {
          this.#stats.noscript++;
          if (generation === this.#generation) this.#answered();
        } else if (current) {
          this.#failed('error');
        }
        return ERROR;
      case 'timeout':
        this.#stats.timeouts++;
        if (current) this.#failed('timeout');
        return { ok: false, reason: 'timeout', late: outcome.late };
    }
  }

  /**
   * The background probe of a node in fallback (`quotas-from-config.ts` runs it every
   * `cluster.redis.probe_interval`): like {@link run}, except that an open breaker lets it through
   * at once as its half-open probe instead of waiting for the rest of `openMs` (so a Redis that came
   * back is seen on the next probe tick, not up to `openMs` later). While another probe is in flight
   * (`half_open`) it answers `open` without calling Redis.
   * @returns as {@link run}; never rejects.
   */
  async probe<T>(call: () => Promise<T>): Promise<GuardResult<T>> {
    if (this.#state === 'open') this.#openedAt = -Infinity;
    return this.run(call);
  }

  /** Starts `call` and settles with the first of its result and the timeout; never rejects. */
  #attempt<T>(call: () => Promise<T>): Promise<Outcome<T>> {
    return new Promise<Outcome<T>>((resolve) => {
      let settled = false;
      const settle = (outcome: Outcome<T>): void => {
        if (settled) return; // late result or rejection: consumed and dropped
        settled = true;
        clearTimeout(timer);
        resolve(outcome);
      };
      let pending: Promise<T> = Promise.reject(new Error('not called'));
      pending.catch(() => undefined);
      // When the timer fires, give I/O one more turn of the event loop (setImmediate runs after the
      // poll phase): an answer that arrived while this process's own event loop was busy past the
      // timeout (a burst of requests, a cold start) is sitting in the socket and is taken, not
      // counted as Redis being slow. The caller waits at most `timeoutMs` plus that one turn.
      const timer = setTimeout(() => setImmediate(() => settle({ kind: 'timeout', late: pending })), this.#timeoutMs);
      try {
        pending = Promise.resolve(call());
      } catch (err) {
        settle({ kind: 'error', noscript: isNoscript(err) });
        return;
      }
      pending.then(
        (value) => settle({ kind: 'ok', value }),
        (err: unknown) => settle({ kind: 'error', noscript: isNoscript(err) }),
      );
    });
  }

  /** Redis answered (a value or a NOSCRIPT reply). */
  #answered(): void {
    this.#consecutiveFailures = 0;
    if (this.#state === 'half_open') {
      this.#stats.closed++;
      this.#transition('closed', 'probe_ok');
    }
  }

  /** A timeout or an error (not NOSCRIPT) of a call started after the warm-up. */
  #failed(reason: 'timeout' | 'error'): void {
    if (this.#state === 'half_open') {
      this.#open(reason);
      return;
    }
    this.#consecutiveFailures++;
    if (this.#consecutiveFailures >= this.#failuresToOpen) this.#open(reason);
  }

  #open(reason: 'timeout' | 'error'): void {
    this.#consecutiveFailures = 0;
    this.#openedAt = this.#clock.now();
    this.#stats.opened++;
    this.#transition('open', reason);
  }

  #transition(state: BreakerState, reason: BreakerChangeReason): void {
    this.#state = state;
    this.#generation++;
    if (this.#onChange === undefined) return;
    try {
      this.#onChange(state, reason);
    } catch (err) {
      process.emitWarning(`RedisGuard onChange(${state}, ${reason}) threw: ${String(err)}`, 'RedisGuardWarning');
    }
  }
}

/**
 * A `CapCall` (see `cap-call.ts`) running every call through `guard`: a failure says whether the
 * breaker is open after it (`open`), so a single timeout is a blip and only an open breaker puts the
 * node in fallback.
 */
export function guardedCall(guard: RedisGuard): <T>(fn: () => Promise<T>) => Promise<{ ok: true; value: T } | { ok: false; late?: Promise<T>; open: boolean }> {
  return async (fn) => {
    const r = await guard.run(fn);
    if (r.ok) return r;
    return { ok: false, ...(r.late === undefined ? {} : { late: r.late }), open: guard.state !== 'closed' };
  };
}
