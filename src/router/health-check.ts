/**
 * Periodic health checks of every ring member: `GET <member>/healthz`; a member that fails is
 * suspect until it answers 200 again.
 */
import type { Ring } from '../coord/types.ts';
import type { MemberPool, MemberPools } from './member-pools.ts';
import type { Suspects } from './suspects.ts';

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
}

/** Runs health-check rounds on a timer (`start`/`stop`) or on demand (`checkOnce`). */
export class HealthCheck {
  readonly #opts: HealthCheckOptions;
  readonly #timeoutMs: number;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;

  constructor(opts: HealthCheckOptions) {
    this.#opts = opts;
    this.#timeoutMs = opts.timeoutMs ?? 500;
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
    const { pools, suspects } = this.#opts;
    await Promise.all(
      this.#opts.ring().members.map(async (member) => {
        if (await this.#probe(pools.get(member))) suspects.clear(member.id);
        else suspects.markDown(member.id);
      }),
    );
  }

  async #probe(entry: MemberPool): Promise<boolean> {
    try {
      const res = await entry.pool.request({
        method: 'GET',
        path: `${entry.prefix}/healthz`,
        signal: AbortSignal.timeout(this.#timeoutMs),
        headersTimeout: this.#timeoutMs,
        bodyTimeout: this.#timeoutMs,
      });
      await res.body.dump();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }
}
