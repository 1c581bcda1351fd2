/**
 * Admission queues: per tenant, the requests its limits refused that may wait for capacity (their
 * tier's `max_wait` > 0), in order of tier (highest first), then arrival. Only the head is tried:
 * equal tiers are FIFO and no request passes a waiter of its own or a higher tier; a request of a
 * tier higher than every waiter is tried at once and, refused, waits ahead of them.
 *
 * The head is tried again when capacity is due — never on a poll: at the time the limiter computed
 * for it (its retry-after), when a slot is released or tokens are refunded for the tenant
 * (`wake`, from the limiter's `onFreed`), and when a waiter ahead leaves. A waiter leaves at its
 * deadline (a 429 with the time its refusal named), when the queue is full on arrival, or at once
 * when its client disconnects (nothing was charged for it).
 */
import type { Clock } from '../clock.ts';
import type { AcquireResult } from '../limiter/types.ts';

/** A refusal of the limiter. */
type Refusal = Extract<AcquireResult, { ok: false }>;

/**
 * One try of the limiter for a request: its result, or undefined when the request can no longer be
 * decided here (its tenant moved to another node while it waited).
 */
export type Attempt = () => AcquireResult | undefined;

/** How an admission ended. `waitedMs`: time spent in the queue (0 when decided at once). */
export type AdmitOutcome =
  | { readonly kind: 'admitted'; readonly result: Extract<AcquireResult, { ok: true }>; readonly waitedMs: number }
  /** Refused without waiting: the tier may not wait, the request can never fit, or it waited past its deadline (`timeout`) or found the queue full (`overflow`). */
  | { readonly kind: 'refused' | 'timeout' | 'overflow'; readonly result: Refusal; readonly waitedMs: number }
  /** The client disconnected while waiting. */
  | { readonly kind: 'gone'; readonly waitedMs: number }
  /** The tenant is no longer decided here (handed to another node while the request waited). */
  | { readonly kind: 'moved'; readonly waitedMs: number };

interface Waiter {
  readonly rank: number;
  readonly seq: number;
  readonly since: number;
  readonly attempt: Attempt;
  /** The last refusal, and when it was given (ms, clock). */
  last: Refusal;
  lastAt: number;
  readonly done: (outcome: AdmitOutcome) => void;
  readonly deadline: NodeJS.Timeout;
}

/** A request that waits: `done` resolves with how its wait ended; `leave()` takes it out at once (its client left). */
export interface Waiting {
  readonly kind: 'waiting';
  readonly done: Promise<AdmitOutcome>;
  leave(): void;
}

interface TenantQueue {
  readonly waiters: Waiter[];
  /** Timer for the head's next try (its retry-after). */
  timer: NodeJS.Timeout | undefined;
  /** A drain is scheduled (microtask). */
  scheduled: boolean;
}

/** Options of {@link AdmissionQueues}. */
export interface AdmissionQueueOptions {
  readonly clock: Clock;
  /** Most waiters per tenant, all tiers together (config `queue.max_depth`). */
  readonly maxDepth: number;
}

/** The admission queues of one node (see the module comment). */
export class AdmissionQueues {
  readonly #clock: Clock;
  readonly #maxDepth: number;
  readonly #queues = new Map<string, TenantQueue>();
  #seq = 0;

  /** @throws RangeError when maxDepth is not an integer ≥ 1. */
  constructor(opts: AdmissionQueueOptions) {
    if (!Number.isInteger(opts.maxDepth) || opts.maxDepth < 1) throw new RangeError(`maxDepth must be an integer ≥ 1 (got ${opts.maxDepth})`);
    this.#clock = opts.clock;
    this.#maxDepth = opts.maxDepth;
  }

  /**
   * Decides a request of tier `rank` (0 = highest): at once when no waiter of its tier or a higher
   * one is queued and the limiter admits it, or refuses it for good; otherwise, when `maxWaitMs` > 0,
   * it waits (a {@link Waiting}) until admitted, its deadline, or `leave()`.
   * A synchronous result means the request never waited (the caller keeps what it took before).
   * @param hint at the deadline, ms until a request like this one could be admitted (the 429's
   *   retry-after); without it, the last refusal's time counted from when it was given.
   */
  admit(tenant: string, rank: number, maxWaitMs: number, attempt: Attempt, hint?: () => number): AdmitOutcome | Waiting {
    const queue = this.#queues.get(tenant);
    // Waiters are sorted by rank: the head is the highest tier waiting.
    const head = queue?.waiters[0];
    const ahead = head !== undefined && head.rank <= rank ? head : undefined;
    let refusal: Refusal;
    if (ahead === undefined) {
      const result = attempt();
      if (result === undefined) return { kind: 'moved', waitedMs: 0 };
      if (result.ok) return { kind: 'admitted', result, waitedMs: 0 };
      if (result.reason !== 'limited' || maxWaitMs <= 0) return { kind: 'refused', result, waitedMs: 0 };
      refusal = result;
    } else {
      // Behind a waiter of its tier or a higher one: never tried before them. Its answer, should it
      // not wait, is theirs (the time named is a lower bound of its own).
      if (maxWaitMs <= 0) return { kind: 'refused', result: ahead.last, waitedMs: 0 };
      refusal = ahead.last;
    }
    const q = queue ?? { waiters: [], timer: undefined, scheduled: false };
    if (q.waiters.length >= this.#maxDepth) return { kind: 'overflow', result: refusal, waitedMs: 0 };
    if (queue === undefined) this.#queues.set(tenant, q);
    const now = this.#clock.now();
    let waiter: Waiter | undefined;
    const done = new Promise<AdmitOutcome>((resolve) => {
      const deadline = setTimeout(() => this.#leave(tenant, q, w, { kind: 'timeout', result: this.#aged(w, hint), waitedMs: this.#clock.now() - now }), maxWaitMs);
      deadline.unref();
      const w: Waiter = { rank, seq: ++this.#seq, since: now, attempt, last: refusal, lastAt: now, done: resolve, deadline };
      waiter = w;
      // Sorted by (rank, seq): after every waiter of its tier or a higher one.
      let at = q.waiters.length;
      while (at > 0 && (q.waiters[at - 1] as Waiter).rank > rank) at--;
      q.waiters.splice(at, 0, w);
      if (at === 0) this.#armHead(tenant, q, refusal.retryAfterMs);
    });
    const queued = waiter as Waiter;
    return { kind: 'waiting', done, leave: () => this.#leave(tenant, q, queued, { kind: 'gone', waitedMs: this.#clock.now() - now }) };
  }

  /** Capacity may have come back for `tenant` (a release, a refund): its head is tried (in a microtask). */
  wake(tenant: string): void {
    const q = this.#queues.get(tenant);
    if (q === undefined || q.scheduled) return;
    q.scheduled = true;
    queueMicrotask(() => {
      q.scheduled = false;
      this.#drain(tenant, q);
    });
  }

  /**
   * Answers every waiter `moved` (the node stops deciding: a graceful leave or a shutdown; routers
   * retry them at the new owner) and empties the queues.
   */
  close(): void {
    for (const [tenant, q] of [...this.#queues]) {
      for (const w of [...q.waiters]) {
        this.#remove(tenant, q, w);
        w.done({ kind: 'moved', waitedMs: this.#clock.now() - w.since });
      }
    }
  }

  /** Requests waiting for `tenant`. */
  depth(tenant: string): number {
    return this.#queues.get(tenant)?.waiters.length ?? 0;
  }

  /** Tenants with waiting requests now, and how many each. */
  depths(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [tenant, q] of this.#queues) if (q.waiters.length > 0) out.set(tenant, q.waiters.length);
    return out;
  }

  /** Tries heads in order until one is refused (it keeps the queue) or the queue is empty. */
  #drain(tenant: string, q: TenantQueue): void {
    if (this.#queues.get(tenant) !== q) return;
    while (q.waiters.length > 0) {
      const head = q.waiters[0] as Waiter;
      const result = head.attempt();
      const waitedMs = this.#clock.now() - head.since;
      if (result === undefined) {
        this.#remove(tenant, q, head);
        head.done({ kind: 'moved', waitedMs });
        continue;
      }
      if (result.ok) {
        this.#remove(tenant, q, head);
        head.done({ kind: 'admitted', result, waitedMs });
        continue;
      }
      if (result.reason !== 'limited') {
        this.#remove(tenant, q, head);
        head.done({ kind: 'refused', result, waitedMs });
        continue;
      }
      head.last = result;
      head.lastAt = this.#clock.now();
      this.#armHead(tenant, q, result.retryAfterMs);
      return;
    }
  }

  /** Schedules the next try of the head when the limiter says it could fit. */
  #armHead(tenant: string, q: TenantQueue, afterMs: number): void {
    clearTimeout(q.timer);
    q.timer = setTimeout(() => {
      q.timer = undefined;
      this.#drain(tenant, q);
    }, Math.max(1, afterMs));
    q.timer.unref();
  }

  /** Removes a waiter (deadline or client gone), answers it, and lets the next head try if it was the head. */
  #leave(tenant: string, q: TenantQueue, waiter: Waiter, outcome: AdmitOutcome): void {
    const wasHead = q.waiters[0] === waiter;
    if (!this.#remove(tenant, q, waiter)) return;
    waiter.done(outcome);
    if (wasHead && q.waiters.length > 0) this.wake(tenant);
  }

  /** @returns false when the waiter was not queued (already answered). */
  #remove(tenant: string, q: TenantQueue, waiter: Waiter): boolean {
    const at = q.waiters.indexOf(waiter);
    if (at < 0) return false;
    q.waiters.splice(at, 1);
    clearTimeout(waiter.deadline);
    if (q.waiters.length === 0) {
      clearTimeout(q.timer);
      q.timer = undefined;
      if (this.#queues.get(tenant) === q) this.#queues.delete(tenant);
    }
    return true;
  }

  /** The waiter's last refusal with its retry-after as of now: `hint()`, else the last one counted from when it was given. */
  #aged(waiter: Waiter, hint: (() => number) | undefined): Refusal {
    const fresh = hint?.();
    if (fresh !== undefined && Number.isFinite(fresh)) return { ...waiter.last, retryAfterMs: Math.max(1, Math.ceil(fresh)) };
    const elapsed = this.#clock.now() - waiter.lastAt;
    return { ...waiter.last, retryAfterMs: Math.max(1, Math.ceil(waiter.last.retryAfterMs - elapsed)) };
  }
}
