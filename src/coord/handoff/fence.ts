/**
 * Fencing: a node that may have been out of the others' view decides for no tenant until it has
 * caught up with what they did meanwhile. A crash and a stall look the same from outside until the
 * stalled process wakes (SIGSTOP, a long GC pause, a frozen VM, a saturated host): after
 * `dead_after` without an answer, routers route around it to a stand-in and, with Redis membership,
 * the others drop it from the ring and its successor takes its tenants. When it wakes, requests
 * already queued on its sockets would be decided from its own state, which lacks everything the
 * stand-in or the successor admitted: the tenant would run its limits twice.
 *
 * Rule: the node watches its own event loop (a timer every {@link TICK_MS}). When more than
 * `dead_after / 2` passed without a tick, it considers itself out of the others' view: it is
 * *fenced*, and every decision waits until it has
 * 1. read the member list again (Redis membership: a heartbeat and read sent after the wake,
 *    at most the step wait; if the others dropped it, the read shows it its drop and the ring without it,
 *    and its tenants come back by handoff like any moved tenant's: `src/coord/handoff/rejoin.ts`), and
 * 2. taken its tenants back from every member that stood in for it (`Handoff.takeBack`: each ends
 *    its stand-in claims and sends what it admitted there, the requests still running included;
 *    for `dead_after` it stands in for this node no more and tells routers to route here), at most
 *    the step wait per member (an answer that comes later is absorbed then), and marked every tenant for the next checkpoint, so its replicas learn
 *    what it admitted since its last one.
 * The step wait is the larger of `cluster.handoff.wait_ms` and `dead_after`: a node just woken from
 * a stall runs its backlog of queued work (health checks, peers' pushes, the requests sent to it
 * during the stall) before it reads an answer, so with both cores busy an answer sent at once is
 * read hundreds of ms later; a shorter wait would decide without what the stand-ins admitted, and
 * a member silent for `dead_after` is one routers route around as well.
 * A stall of half of `dead_after` is not yet one the others can have acted on (they need all of
 * `dead_after`), so a shorter gap costs nothing; the check is one clock read per decision.
 *
 * Bound: after the wake, nothing (every decision waits for the two steps) except when a step times
 * out (Redis unreachable: membership is frozen everywhere, so no one dropped this node; a stand-in
 * unreachable from here but not from a router: a partition, whose bound is in the README). Running
 * streams are not cut: the ones this node admitted before its last checkpoint reached its replica
 * or Redis stayed counted there all along (their slots are held for a possibly-alive owner:
 * `src/coord/handoff/held-slots.ts`, `src/coord/handoff/stand-in.ts`); those it admitted after that checkpoint are
 * the stated loss of a stall, as of a crash (at most one checkpoint period of the tenant's traffic).
 */
import type { Clock } from '../../clock.ts';
import type { HandoffLog } from './handoff-context.ts';

/** Period of the event-loop watch, ms. */
export const TICK_MS = 100;

/** What a fence does on waking: see the module comment. */
export interface FenceOptions {
  readonly clock: Clock;
  /** `cluster.dead_after`, ms: a gap over half of it fences the node. */
  readonly deadAfterMs: number;
  /** `cluster.handoff.wait_ms`, ms: each step waits at most the larger of it and `deadAfterMs`. */
  readonly waitMs: number;
  /** Redis membership: a heartbeat and read sent now; true once applied, false on failure or after `timeoutMs`. */
  readonly syncNow?: (timeoutMs: number) => Promise<boolean>;
  /** Takes this node's tenants back from their stand-ins (`Handoff.takeBack`); resolves with how many. */
  readonly takeBack: (timeoutMs: number) => Promise<number>;
  readonly log: HandoffLog;
}

/** Counters of a {@link Fence}. */
export interface FenceStats {
  /** Wake-ups from a gap over half of `dead_after`. */
  wakes: number;
  /** The longest gap seen, ms. */
  longestGapMs: number;
  /** Decisions that waited for a wake-up's catch-up. */
  waited: number;
}

/** A node's fence: see the module comment. */
export class Fence {
  readonly #opts: FenceOptions;
  readonly #gapMs: number;
  /** Longest wait for each step of the catch-up, ms. */
  readonly #stepMs: number;
  #lastTick: number;
  #timer: NodeJS.Timeout | undefined;
  #catchingUp: Promise<void> | undefined;
  /** The counters. */
  readonly stats: FenceStats = { wakes: 0, longestGapMs: 0, waited: 0 };

  /** @throws RangeError when `deadAfterMs` is not positive. */
  constructor(opts: FenceOptions) {
    if (!(opts.deadAfterMs > 0)) throw new RangeError(`deadAfterMs must be > 0 (got ${opts.deadAfterMs})`);
    this.#opts = opts;
    this.#gapMs = opts.deadAfterMs / 2;
    this.#stepMs = Math.max(opts.waitMs, opts.deadAfterMs);
    this.#lastTick = opts.clock.now();
  }

  /** Starts the event-loop watch (an unref'd timer). Idempotent. */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#lastTick = this.#opts.clock.now();
    this.#timer = setInterval(() => void this.#tick(), TICK_MS);
    this.#timer.unref();
  }

  /** Stops the watch. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Per decision: undefined when this node may decide now (no gap, no catch-up under way); else a
   * promise that resolves once the wake-up's catch-up is done (never rejects). Starts the catch-up
   * when this call is the first to see the gap.
   */
  check(): Promise<void> | undefined {
    if (this.#catchingUp === undefined && this.#opts.clock.now() - this.#lastTick <= this.#gapMs) return undefined;
    this.stats.waited++;
    return this.#tick() ?? this.#catchingUp;
  }

  /**
   * True when a decision now would have to wait (a gap over half of `dead_after` since the last
   * tick, or a catch-up under way): for decisions that cannot wait, such as a queued request's
   * retry run by a timer, which must not be admitted before the catch-up.
   */
  stale(): boolean {
    return this.#catchingUp !== undefined || this.#opts.clock.now() - this.#lastTick > this.#gapMs;
  }

  /** True while a wake-up's catch-up is under way. */
  get fenced(): boolean {
    return this.#catchingUp !== undefined;
  }

  /** Notes a tick; on a gap over half of `dead_after`, starts the catch-up and returns it. */
  #tick(): Promise<void> | undefined {
    const now = this.#opts.clock.now();
    const gap = now - this.#lastTick;
    this.#lastTick = now;
    if (gap > this.stats.longestGapMs) this.stats.longestGapMs = gap;
    if (gap <= this.#gapMs || this.#catchingUp !== undefined) return this.#catchingUp;
    this.stats.wakes++;
    this.#catchingUp = this.#catchUp(gap).finally(() => {
      this.#catchingUp = undefined;
      this.#lastTick = this.#opts.clock.now();
    });
    return this.#catchingUp;
  }

  async #catchUp(gapMs: number): Promise<void> {
    const { syncNow, takeBack, log, clock } = this.#opts;
    const waitMs = this.#stepMs;
    const started = clock.now();
    let read: boolean | undefined;
    try {
      read = syncNow === undefined ? undefined : await syncNow(waitMs);
    } catch {
      read = false;
    }
    let taken = 0;
    try {
      taken = await takeBack(waitMs);
    } catch {
      taken = 0;
    }
    log.warn({ gapMs: Math.round(gapMs), memberList: read === undefined ? 'static' : read ? 'read' : 'unreadable', takenBack: taken, ms: Math.round(clock.now() - started) }, 'woke from a stall longer than half of dead_after: fenced until the member list was read again and the stand-ins gave its tenants back');
  }
}
