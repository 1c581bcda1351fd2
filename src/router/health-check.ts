/**
 * Periodic health checks of every ring member: `GET <member>/healthz`, and the liveness that
 * forwarded requests show.
 *
 * What each outcome means, and why:
 * - A refused (or reset) connection makes the member suspect at once, `unreachable`: no process
 *   listens there (a crash, a SIGKILL). Nothing about a busy CPU makes a kernel refuse a connection.
 * - An answer other than 200 makes it suspect (`unresponsive`) after `failuresToMarkDown` rounds in
 *   a row: the process is there and says it is not well.
 * - A probe that times out counts only as a missed round. The member becomes suspect
 *   (`unresponsive`) once it has missed `failuresToMarkDown` rounds in a row spanning at least
 *   `graceMs` (default: the cluster's `dead_after`) with no sign of life in between. A node whose
 *   event loop stalls for a second (a CPU burst, a large JSON parse, a GC pause, 2,000 streams on 2
 *   cores) is late, not dead; a router that routes around a live owner splits its tenants'
 *   decisions over two nodes and, when every node is late, answers 503 to everyone. `dead_after` is
 *   how long membership itself waits before a silent node leaves the ring: the router is no less
 *   patient than that.
 * - A sign of life is a 200 to a probe, or a forwarded request's answer (status and headers; see
 *   {@link HealthCheck.noteAnswer}): a node that answers real requests is alive whatever its probes
 *   say. It ends a run of missed rounds, and a suspect mark this check made for missed rounds; a
 *   probe that timed out while a forwarded request was answered is not a missed round.
 *   It does not clear an `unreachable` mark or a non-200 one (the probe clears those on its next 200).
 *
 * Considered and not taken: an adaptive timeout from observed probe latency (it follows a slowly
 * saturating node upward, yet a single longer stall still trips it; the grace bounds the time
 * directly); a longer probe timeout alone (a frozen node is found no sooner than with the grace,
 * and probes pile up).
 *
 * A member marked suspect stays so until it answers a probe with 200 (or, for missed rounds, any
 * forwarded request is answered by it). Bound: a stalled-but-live member is never routed around
 * before `graceMs` + one probe timeout; a dead process is routed around on the first refused
 * connection (a probe, or a forwarded request: see `forward.ts`).
 */
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { Ring } from '../coord/types.ts';
import { isConnectFailure } from './forward.ts';
import type { MemberPool, MemberPools } from './member-pools.ts';
import type { Suspects } from './suspects.ts';

/** Log sink (pino's shape). */
export interface HealthLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** A probe's outcome: healthy, or why not. */
export type Probe =
  | { readonly ok: true }
  | { readonly ok: false; readonly kind: 'refused' | 'timeout' | 'status'; readonly reason: string };

/** Options of {@link HealthCheck}. */
export interface HealthCheckOptions {
  /** The ring whose members are checked (read at each round). */
  readonly ring: () => Ring;
  readonly pools: MemberPools;
  readonly suspects: Suspects;
  /** Period of the rounds, ms. */
  readonly intervalMs: number;
  /** A member that has not answered within this many ms misses the round. @default 500 */
  readonly timeoutMs?: number;
  /** Failed rounds in a row (timeouts, non-200 answers) that make a member suspect; a refused connection does at once. @default 2 */
  readonly failuresToMarkDown?: number;
  /** Least time, ms, from the start of the first missed round to the end of the last, before timeouts alone make a member suspect. @default 3000 (`cluster.dead_after`) */
  readonly graceMs?: number;
  /** Time source of the grace. @default systemClock */
  readonly clock?: Clock;
  /** Probes one member (tests). @default `GET /healthz` with `timeoutMs` */
  readonly probe?: (entry: MemberPool) => Promise<Probe>;
  /** Told when a member becomes suspect and when it answers again. */
  readonly log?: HealthLog;
}

/** A run of failed rounds of one member. */
interface Run {
  /** Failed rounds in a row. */
  count: number;
  /** When the probe of the first of them started, ms. */
  readonly since: number;
}

/** Runs health-check rounds on a timer (`start`/`stop`) or on demand (`checkOnce`). */
export class HealthCheck {
  readonly #opts: HealthCheckOptions;
  readonly #timeoutMs: number;
  readonly #failuresToMarkDown: number;
  readonly #graceMs: number;
  readonly #clock: Clock;
  /** Failed rounds in a row, by member id (absent: the last round passed, or a sign of life since). */
  readonly #runs = new Map<string, Run>();
  /** Last sign of life (a 200 probe or a forwarded answer) by member id, ms. */
  readonly #alive = new Map<string, number>();
  /** Members this check marked suspect for missed rounds (a sign of life clears them). */
  readonly #stalled = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;

  constructor(opts: HealthCheckOptions) {
    this.#opts = opts;
    this.#timeoutMs = opts.timeoutMs ?? 500;
    this.#failuresToMarkDown = opts.failuresToMarkDown ?? 2;
    this.#graceMs = opts.graceMs ?? 3_000;
    this.#clock = opts.clock ?? systemClock;
  }

  /** Starts a round every `intervalMs` (a round still running is not overlapped). Idempotent. */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => void this.checkOnce(), this.#opts.intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer; a round in progress completes. Idempotent. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Checks every member once, in parallel; resolves when all answered or timed out. Never rejects. */
  checkOnce(): Promise<void> {
    this.#round ??= this.#runRound().finally(() => {
      this.#round = undefined;
    });
    return this.#round;
  }

  /**
   * A forwarded request to `id` was answered (status and headers came): the member is alive now.
   * Ends its run of failed rounds and a suspect mark this check made for missed rounds. O(1).
   */
  noteAnswer(id: string): void {
    this.#alive.set(id, this.#clock.now());
    this.#runs.delete(id);
    if (this.#stalled.delete(id) && this.#opts.suspects.kindOf(id) === 'unresponsive') {
      this.#opts.suspects.clear(id);
      this.#opts.log?.info({ member: id }, 'member answered a request: no longer suspect');
    }
  }

  async #runRound(): Promise<void> {
    const { pools } = this.#opts;
    const members = this.#opts.ring().members;
    const ids = new Set(members.map((m) => m.id));
    for (const map of [this.#runs, this.#alive]) for (const id of map.keys()) if (!ids.has(id)) map.delete(id);
    for (const id of this.#stalled) if (!ids.has(id)) this.#stalled.delete(id);
    await Promise.all(
      members.map(async (member) => {
        const started = this.#clock.now();
        const entry = pools.get(member);
        const probe = await (this.#opts.probe ?? ((e: MemberPool) => this.#probe(e)))(entry);
        this.record(member.id, probe, started);
      }),
    );
  }

  /**
   * Applies one probe's outcome to the member's state (exposed for tests with a fake clock).
   * @param started when the probe started, ms (the clock's).
   */
  record(id: string, probe: Probe, started: number): void {
    const { suspects, log } = this.#opts;
    const now = this.#clock.now();
    if (probe.ok || (probe.kind === 'timeout' && (this.#alive.get(id) ?? -Infinity) >= started)) {
      // A 200, or a timeout while a forwarded request was answered: alive.
      this.#alive.set(id, now);
      this.#runs.delete(id);
      if (probe.ok) {
        this.#stalled.delete(id);
        if (suspects.has(id)) log?.info({ member: id }, 'member healthy again');
        suspects.clear(id);
      } else if (this.#stalled.delete(id) && suspects.kindOf(id) === 'unresponsive') {
        suspects.clear(id);
      }
      return;
    }
    const run = this.#runs.get(id) ?? { count: 0, since: started };
    run.count++;
    this.#runs.set(id, run);
    let kind: 'unreachable' | 'unresponsive';
    if (probe.kind === 'refused') kind = 'unreachable';
    else if (run.count < this.#failuresToMarkDown) return;
    else if (probe.kind === 'timeout' && now - run.since < this.#graceMs) return;
    else kind = 'unresponsive';
    if (!suspects.has(id)) log?.warn({ member: id, reason: probe.reason, failures: run.count, ms: now - run.since }, 'member suspect: health check failed; routing around it');
    if (kind === 'unresponsive' && probe.kind === 'timeout') this.#stalled.add(id);
    else this.#stalled.delete(id);
    suspects.markDown(id, kind);
  }

  async #probe(entry: MemberPool): Promise<Probe> {
    try {
      const res = await entry.pool.request({
        method: 'GET',
        path: `${entry.prefix}/healthz`,
        signal: AbortSignal.timeout(this.#timeoutMs),
        headersTimeout: this.#timeoutMs,
        bodyTimeout: this.#timeoutMs,
      });
      await res.body.dump();
      return res.statusCode === 200 ? { ok: true } : { ok: false, kind: 'status', reason: `answered ${res.statusCode}` };
    } catch (err) {
      return isConnectFailure(err) ? { ok: false, kind: 'refused', reason: 'connection refused or reset' } : { ok: false, kind: 'timeout', reason: `no answer within ${this.#timeoutMs} ms` };
    }
  }
}
