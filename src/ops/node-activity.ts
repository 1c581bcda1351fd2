/**
 * What a node records about each request for operators: a {@link RequestTrail} filled along the
 * request's path, turned at its end into metrics, one info log line, and the per-tenant rates of
 * the live view. Per-tenant counts are kept only for tenants of the config (bounded).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { DecisionResult, LimitKind, NodeMetrics } from './metrics.ts';
import { levelEnabled } from './logging.ts';

/** One request's account, filled by the exchange; logged and counted once when it ends. */
export interface RequestTrail {
  readonly tenant: string;
  readonly priority: string;
  readonly model: string;
  /** Tokens reserved at admission (prompt + reserved output). */
  readonly reserved: number;
  /** What the limiter (or the queue, or Redis) decided; unset for a request that never reached a decision (421). */
  result?: DecisionResult;
  /** The kind of limit that refused; `none` when admitted. */
  limitKind: LimitKind;
  /** Name of the refusing limit, e.g. `tokens/1m`. */
  limit?: string;
  /** Time spent in the tenant's queue, ms. */
  waitMs: number;
  /** The deployment that served (the last one tried). */
  deployment?: string;
  /** Tokens charged at settlement; unset when nothing was admitted. */
  used?: number;
  /** The client closed the connection before its answer was complete (logged as status 499). */
  clientGone?: boolean;
}

/** A new trail: nothing decided yet. */
export function newTrail(tenant: string, priority: string, model: string, reserved: number): RequestTrail {
  return { tenant, priority, model, reserved, limitKind: 'none', waitMs: 0 };
}

/** Counts of one tenant (or the node): cumulative, and per second over the last whole second. */
interface Counts {
  admitted: number;
  refused: number;
  lastAdmitted: number;
  lastRefused: number;
  admittedPerSec: number;
  refusedPerSec: number;
}

function counts(): Counts {
  return { admitted: 0, refused: 0, lastAdmitted: 0, lastRefused: 0, admittedPerSec: 0, refusedPerSec: 0 };
}

function roll(c: Counts, seconds: number): void {
  c.admittedPerSec = (c.admitted - c.lastAdmitted) / seconds;
  c.refusedPerSec = (c.refused - c.lastRefused) / seconds;
  c.lastAdmitted = c.admitted;
  c.lastRefused = c.refused;
}

/** Suffix of the `limit` of a refusal over a tenant's fair share of a deployment quota. */
const SHARE_SUFFIX = '#share';

/** Results that count as a refusal in the 429 rates of the live view. */
const REFUSED: ReadonlySet<DecisionResult> = new Set(['limited', 'too_large', 'queue_timeout', 'queue_full']);

/**
 * A node's activity: requests in flight, per-tenant and node decision rates (rolled once a second by
 * a timer the caller starts with {@link start}), and the sink of request trails.
 */
export class NodeActivity {
  readonly metrics: NodeMetrics;
  /** Admitted requests not finished yet. */
  inFlight = 0;
  readonly #node = counts();
  readonly #tenants = new Map<string, Counts>();
  readonly #isTenant: (tenant: string) => boolean;
  #timer: NodeJS.Timeout | undefined;
  #rolledAt = 0;

  /** @param isTenant whether an id is a configured tenant (others are never kept). */
  constructor(metrics: NodeMetrics, isTenant: (tenant: string) => boolean) {
    this.metrics = metrics;
    this.#isTenant = isTenant;
  }

  /** Starts rolling the per-second rates (every 1,000 ms, unref'd). */
  start(): void {
    this.#rolledAt = performance.now();
    this.#timer ??= setInterval(() => this.roll(), 1_000);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Turns the counts since the last roll into per-second rates (called by the timer; tests may call it). */
  roll(): void {
    const now = performance.now();
    const seconds = Math.max(0.001, (now - this.#rolledAt) / 1_000);
    this.#rolledAt = now;
    roll(this.#node, seconds);
    for (const [tenant, c] of this.#tenants) {
      roll(c, seconds);
      if (c.admittedPerSec === 0 && c.refusedPerSec === 0) this.#tenants.delete(tenant);
    }
  }

  /** An upstream attempt's HTTP status (0: no response). */
  upstream(deployment: string, status: number): void {
    this.metrics.upstream(deployment, status);
  }

  /**
   * Records a decision in the metrics and the live rates: at admission for an admitted request
   * (a stream is counted when it starts, not when it ends), at its end for any other.
   */
  decided(trail: RequestTrail): void {
    const result = trail.result;
    if (result === undefined) return;
    this.metrics.decision(result, trail.limitKind, trail.priority, trail.waitMs / 1_000);
    // A refusal over a fair share names its limit `<deployment>#share` (gateway/refusals.ts).
    if (result === 'limited' && trail.limitKind === 'quota' && trail.limit?.endsWith(SHARE_SUFFIX) === true) this.metrics.shareRefused(trail.limit.slice(0, -SHARE_SUFFIX.length));
    if (result !== 'admitted' && !REFUSED.has(result)) return;
    if (result === 'admitted') this.#node.admitted++;
    else this.#node.refused++;
    if (!this.#isTenant(trail.tenant)) return;
    let c = this.#tenants.get(trail.tenant);
    if (c === undefined) this.#tenants.set(trail.tenant, (c = counts()));
    if (result === 'admitted') c.admitted++;
    else c.refused++;
  }

  /**
   * Records a finished request: its decision unless admitted (recorded by {@link decided}), its
   * settlement, and one info line in `log` (tenant, priority, wait, reserved, used, deployment,
   * status, ms; never a key or a prompt). `status` 499: the client closed the connection first.
   */
  finished(trail: RequestTrail, status: number, ms: number, log: FastifyBaseLogger): void {
    const result = trail.result;
    if (result !== 'admitted') this.decided(trail);
    if (trail.used !== undefined) this.metrics.settled(trail.model, trail.reserved, trail.used);
    if (!levelEnabled(log, 'info')) return;
    log.info(
      {
        tenant: trail.tenant,
        priority: trail.priority,
        model: trail.model,
        result: result ?? null,
        ...(trail.limit === undefined ? {} : { limit: trail.limit }),
        waitMs: Math.round(trail.waitMs),
        reserved: trail.reserved,
        used: trail.used ?? 0,
        deployment: trail.deployment ?? null,
        status,
        ms: Math.round(ms * 10) / 10,
      },
      'request',
    );
  }

  /** The node's decision rates over the last whole second. */
  nodeRates(): { readonly admittedPerSec: number; readonly refusedPerSec: number } {
    return { admittedPerSec: this.#node.admittedPerSec, refusedPerSec: this.#node.refusedPerSec };
  }

  /** Tenants with activity in the last second or since, with their rates (unordered). */
  tenantRates(): { readonly tenant: string; readonly admittedPerSec: number; readonly refusedPerSec: number }[] {
    return [...this.#tenants].map(([tenant, c]) => ({ tenant, admittedPerSec: c.admittedPerSec, refusedPerSec: c.refusedPerSec }));
  }
}
