/**
 * Periodic health checks of every ring member: `GET <member>/healthz`. A member that refuses the
 * connection is suspect at once; one that times out or answers other than 200 is suspect after
 * `failuresToMarkDown` such rounds in a row (a node whose event loop stalled for one probe under a
 * CPU burst is not routed around: a router that routes around a live owner splits its tenants'
 * decisions over two nodes). A suspect member stays so until it answers 200 again.
 */
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
type Probe = { readonly ok: true } | { readonly ok: false; readonly refused: boolean; readonly reason: string };

/** Options of {@link HealthCheck}. */
export interface HealthCheckOptions {
  /** The ring whose members are checked (read at each round). */
  readonly ring: () => Ring;
  readonly pools: MemberPools;
  readonly suspects: Suspects;
  /** Period of the rounds, ms. */
  readonly intervalMs: number;
  /** A member that has not answered within this many ms fails the check. @default 500 */
  readonly timeoutMs?: number;
  /** Failed rounds in a row (timeouts, non-200 answers) that make a member suspect; a refused connection does at once. @default 2 */
  readonly failuresToMarkDown?: number;
  /** Told when a member becomes suspect and when it answers again. */
  readonly log?: HealthLog;
}

/** Runs health-check rounds on a timer (`start`/`stop`) or on demand (`checkOnce`). */
export class HealthCheck {
  readonly #opts: HealthCheckOptions;
  readonly #timeoutMs: number;
  readonly #failuresToMarkDown: number;
  /** Failed rounds in a row, by member id (absent: the last round passed). */
  readonly #failures = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;

  constructor(opts: HealthCheckOptions) {
    this.#opts = opts;
    this.#timeoutMs = opts.timeoutMs ?? 500;
    this.#failuresToMarkDown = opts.failuresToMarkDown ?? 2;
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

  async #runRound(): Promise<void> {
    const { pools, suspects, log } = this.#opts;
    const members = this.#opts.ring().members;
    const ids = new Set(members.map((m) => m.id));
    for (const id of this.#failures.keys()) if (!ids.has(id)) this.#failures.delete(id);
    await Promise.all(
      members.map(async (member) => {
        const probe = await this.#probe(pools.get(member));
        if (probe.ok) {
          this.#failures.delete(member.id);
          if (suspects.has(member.id)) log?.info({ member: member.id }, 'member healthy again');
          suspects.clear(member.id);
          return;
        }
        const failures = (this.#failures.get(member.id) ?? 0) + 1;
        this.#failures.set(member.id, failures);
        if (!probe.refused && failures < this.#failuresToMarkDown) return;
        if (!suspects.has(member.id)) log?.warn({ member: member.id, reason: probe.reason, failures }, 'member suspect: health check failed; routing around it');
        suspects.markDown(member.id);
      }),
    );
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
      return res.statusCode === 200 ? { ok: true } : { ok: false, refused: false, reason: `answered ${res.statusCode}` };
    } catch (err) {
      const refused = isConnectFailure(err);
      return { ok: false, refused, reason: refused ? 'connection refused' : `no answer within ${this.#timeoutMs} ms` };
    }
  }
}
