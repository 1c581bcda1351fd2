/**
 * Prometheus metrics of a gateway node and of a router (prom-client), each in its own registry so
 * that two instances in one process (tests) never share series. Every label takes values from a
 * bounded set: decision results, limit kinds, configured models, deployments and opted-in tenants,
 * HTTP status codes, Redis command names. Never an API key, a prompt or a request id.
 * The full list, with types and labels, is `docs/metrics.md`.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { fairShareMetrics } from './fair-share-metrics.ts';
import { providerFeedbackMetrics } from './provider-feedback-metrics.ts';
import type { ProviderFeedbackCount } from './provider-feedback-metrics.ts';
import type { FairShareLevel } from './fair-share-metrics.ts';
import { setCounter } from './scrape-counter.ts';
import { PathCounter, PathHistogram } from './request-path-metrics.ts';
import { UsdCounter } from './usd-counter.ts';

/** What a node decided for a request (label `result` of `quotaring_decisions_total`). */
export type DecisionResult =
  /** Admitted by every limit (at once or after waiting in its tenant's queue). */
  | 'admitted'
  /** Refused by a limit that may take it later (429 with retry-after). */
  | 'limited'
  /** Larger than a limit can ever take (429 `request_too_large`). */
  | 'too_large'
  /** Waited in its tenant's queue until its tier's `max_wait` (429). */
  | 'queue_timeout'
  /** Found its tenant's queue full (`queue.max_depth`, 429). */
  | 'queue_full'
  /** The client left while waiting in the queue (nothing charged). */
  | 'gone'
  /** Redis could not decide (`on_redis_failure: closed` or central mode, 503). */
  | 'unavailable';

/** Which limit refused (label `limit_kind`): a tenant's requests/tokens/concurrency limit, a deployment quota, or `none` when admitted. */
export type LimitKind = 'requests' | 'tokens' | 'concurrent' | 'cost' | 'quota' | 'none';

/** Seconds buckets of the acquire wait: immediate decisions land in the first bucket, queued ones up to the 60 s batch deadline. */
const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Buckets of used/reserved per settled request (1 = the reservation was exact; above 1 only with a usage beyond max_tokens). */
const RATIO_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 2];
/** Seconds buckets of request and handoff durations. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** One remaining level of an opted-in tenant, read at scrape time. */
export interface TenantLevel {
  readonly tenant: string;
  /** The limit's name, e.g. `tokens/1m` (as in error messages). */
  readonly limit: string;
  /** Units left now (requests, tokens, concurrency slots or, for a budget, micro-dollars). */
  readonly remaining: number;
  /** The limit's size in the same units (a budget's: micro-dollars per period). */
  readonly capacity: number;
}

export type { FairShareLevel } from './fair-share-metrics.ts';

/** What a node's gauges read at scrape time; every reader must be cheap and must not throw. */
export interface NodeGaugeSources {
  /** Requests waiting in every tenant's admission queue. */
  queueDepth(): number;
  /** Requests admitted and not yet finished on this node. */
  inFlight(): number;
  /** 1 while this node decides from local fallback shares (Redis unreachable), else 0. */
  fallbackActive(): number;
  /** The ring this node sees: its members and version (absent for a single node). */
  ring(): { readonly members: number; readonly version: string } | undefined;
  /** Remaining per limit of the tenants with `metrics: true` that this node decides for now. */
  tenantLevels(): readonly TenantLevel[];
  /** Cumulative lease renewals of the global cap, by outcome. */
  leaseRenewals(): Readonly<Record<'granted' | 'partial' | 'denied' | 'failed', number>>;
  /** Cumulative unspent leased units given back to the global cap: sent, and answered by Redis. Optional: 0 when absent. */
  leaseGivenBack?(): Readonly<Record<'sent' | 'answered', number>>;
  /** Cumulative guarded Redis calls (global cap, central decisions), by guard and outcome. */
  guardCalls(): readonly { readonly guard: string; readonly result: 'ok' | 'timeout' | 'error' | 'open'; readonly n: number }[];
  /** Distinct member entries in Redis ignored for a missing or bad signature (0 without Redis membership). */
  memberEntriesRejected(): number;
  /** Calls refused for want of a valid cluster signature: internal routes, and client requests whose stand-in headers were dropped. */
  clusterAuthRefused(): { readonly internalCalls: number; readonly standInHeaders: number };
  /** Fair shares and demands of the tenants with `metrics: true`, per fair-shared deployment and kind. Optional: none when absent. */
  fairShares?(): readonly FairShareLevel[];
  /** Cumulative demand-report exchanges through Redis, by outcome (undefined: no exchange on this node). */
  fairExchanges?(): Readonly<Record<'ok' | 'failed' | 'invalid', number>> | undefined;
  /** Cumulative provider-feedback counts by deployment, kind and result. Optional: none when absent. */
  providerFeedback?(): readonly ProviderFeedbackCount[];
}

/** `quotaring_member_entries_rejected_total`, read at scrape time. */
function memberEntriesCounter(registry: Registry, read: () => number | undefined): void {
  new Counter({
    name: 'quotaring_member_entries_rejected_total',
    help: 'Member entries in Redis ignored because they are not signed with the cluster secret (or are not member entries), each counted once.',
    registers: [registry],
    collect() {
      setCounter(this, {}, read() ?? 0);
    },
  });
}

/** A ring gauge pair: member count, and an info series `{version}` = 1 for the current ring only. */
function ringGauges(registry: Registry, read: () => { readonly members: number; readonly version: string } | undefined): void {
  new Gauge({
    name: 'quotaring_ring_members',
    help: 'Members of the ring this process sees.',
    registers: [registry],
    collect() {
      this.set(read()?.members ?? 0);
    },
  });
  new Gauge({
    name: 'quotaring_ring_info',
    help: 'The current ring version (label version), always 1; a new ring replaces the series.',
    labelNames: ['version'],
    registers: [registry],
    collect() {
      this.reset();
      const ring = read();
      if (ring !== undefined) this.set({ version: ring.version }, 1);
    },
  });
}

/** Redis commands sent by this process on connections wrapped with {@link countRedisCommands}, by `command|result`. */
const redisCommandCounts = new Map<string, number>();

/**
 * Counts every command an ioredis connection sends (pipelined ones included), by lowercased command
 * name and result (`ok` / `error`), for `quotaring_redis_commands_total`. Process-wide: every
 * registry in the process reports the same counts.
 */
export function countRedisCommands(redis: { sendCommand: (...args: never[]) => unknown }): void {
  const target = redis as unknown as { sendCommand: (command: { name: string; promise: Promise<unknown> }, ...rest: unknown[]) => unknown };
  const send = target.sendCommand.bind(target);
  target.sendCommand = (command, ...rest) => {
    const out = send(command, ...rest);
    const name = command.name.toLowerCase();
    const count = (key: string): void => void redisCommandCounts.set(key, (redisCommandCounts.get(key) ?? 0) + 1);
    command.promise.then(
      () => count(`${name}|ok`),
      () => count(`${name}|error`),
    );
    return out;
  };
}

/** The Redis command counter, read from the process-wide counts at scrape time. */
function redisCommandsCounter(registry: Registry): void {
  new Counter({
    name: 'quotaring_redis_commands_total',
    help: 'Redis commands sent by this process (membership, handoff, global cap, central store), by command and result.',
    labelNames: ['command', 'result'],
    registers: [registry],
    collect() {
      for (const [key, n] of redisCommandCounts) {
        const [command = '', result = ''] = key.split('|');
        setCounter(this, { command, result }, n);
      }
    },
  });
}

/**
 * A gateway node's metrics. The request path calls {@link decision}, {@link settled} and
 * {@link upstream}; gauges are read from {@link NodeGaugeSources} at scrape time.
 */
export class NodeMetrics {
  /** The node's own registry (`GET /metrics` renders it). */
  readonly registry = new Registry();
  readonly #decisions: PathCounter;
  readonly #wait: PathHistogram;
  readonly #reserved: PathCounter;
  readonly #used: PathCounter;
  readonly #ratio: PathHistogram;
  readonly #shed: PathCounter;
  readonly #upstream: PathCounter;
  readonly #upstream429: PathCounter;
  readonly #spend: UsdCounter;
  readonly #handoffs: Counter<'kind'>;
  readonly #handoffSeconds: Histogram<'kind'>;
  readonly #handoffTenants: Counter<'kind'>;
  readonly #fallbackTransitions: Counter<'state'>;
  readonly #shareRefusals: PathCounter;
  #src: NodeGaugeSources | undefined;

  /** Gauges read nothing (0) until {@link setSources}: the gateway builds its parts after its metrics. */
  constructor() {
    const r = this.registry;
    const src = (): NodeGaugeSources | undefined => this.#src;
    collectDefaultMetrics({ register: r });
    this.#decisions = new PathCounter(r, 'quotaring_decisions_total', 'Admission decisions, by result, the kind of limit that refused (none when admitted) and priority tier.');
    this.#wait = new PathHistogram(r, 'quotaring_acquire_wait_seconds', 'Time from a request\'s first admission attempt to its decision (queue wait; 0 for immediate decisions), by priority tier.', WAIT_BUCKETS);
    this.#reserved = new PathCounter(r, 'quotaring_tokens_reserved_total', 'Tokens reserved at admission (prompt + reserved output), by model.');
    this.#used = new PathCounter(r, 'quotaring_tokens_used_total', 'Tokens charged at settlement (the provider\'s usage, or the reservation when none was reported), by model.');
    this.#ratio = new PathHistogram(r, 'quotaring_tokens_used_ratio', 'Used / reserved tokens per settled request, by model.', RATIO_BUCKETS);
    this.#shed = new PathCounter(r, 'quotaring_queue_shed_total', 'Requests that waited in a tenant queue and were refused: deadline (max_wait) or queue full (queue.max_depth).');
    this.#upstream = new PathCounter(r, 'quotaring_upstream_requests_total', 'Requests sent to deployments (each attempt, retries and failovers included), by deployment and HTTP status (0: no response).');
    this.#upstream429 = new PathCounter(r, 'quotaring_upstream_rate_limited_total', 'Provider 429 answers, by deployment.');
    this.#spend = new UsdCounter(r, 'quotaring_tenant_spend_usd_total', 'Settled cost of the requests of tenants with metrics: true, USD at the serving deployment\'s prices, by tenant, model and (for a key with its own budget) key.');
    this.#handoffs = new Counter({ name: 'quotaring_handoffs_total', help: 'Ring changes handled by this node: out (tenants handed to new owners) and prefetch (tenants read from Redis).', labelNames: ['kind'], registers: [r] });
    this.#handoffSeconds = new Histogram({ name: 'quotaring_handoff_duration_seconds', help: 'Duration of a handoff (out) or a prefetch, seconds.', labelNames: ['kind'], buckets: DURATION_BUCKETS, registers: [r] });
    this.#handoffTenants = new Counter({ name: 'quotaring_handoff_tenants_total', help: 'Tenant states moved by handoffs, by kind.', labelNames: ['kind'], registers: [r] });
    this.#fallbackTransitions = new Counter({ name: 'quotaring_fallback_transitions_total', help: 'Entries into (state=entered) and exits from (state=left) local fallback.', labelNames: ['state'], registers: [r] });
    this.#shareRefusals = new PathCounter(r, 'quotaring_fair_share_refusals_total', 'Requests refused over their tenant\'s fair share of a deployment quota (429 share_exhausted), by deployment.');
    new Gauge({ name: 'quotaring_queue_depth', help: 'Requests waiting in tenant admission queues on this node.', registers: [r], collect() { this.set(src()?.queueDepth() ?? 0); } });
    new Gauge({ name: 'quotaring_requests_in_flight', help: 'Admitted requests not yet finished on this node.', registers: [r], collect() { this.set(src()?.inFlight() ?? 0); } });
    new Gauge({ name: 'quotaring_fallback_active', help: '1 while this node decides deployment quotas and hot tenants from local fallback shares (Redis unreachable), else 0.', registers: [r], collect() { this.set(src()?.fallbackActive() ?? 0); } });
    new Gauge({
      name: 'quotaring_tenant_remaining',
      help: 'Units left in each limit of tenants with metrics: true, exported by the tenant\'s owner only.',
      labelNames: ['tenant', 'limit'],
      registers: [r],
      collect() {
        this.reset();
        for (const l of src()?.tenantLevels() ?? []) this.set({ tenant: l.tenant, limit: l.limit }, l.remaining);
      },
    });
    new Gauge({
      name: 'quotaring_tenant_limit',
      help: 'Size of each limit of tenants with metrics: true (same units as quotaring_tenant_remaining), exported by the tenant\'s owner only.',
      labelNames: ['tenant', 'limit'],
      registers: [r],
      collect() {
        this.reset();
        for (const l of src()?.tenantLevels() ?? []) this.set({ tenant: l.tenant, limit: l.limit }, l.capacity);
      },
    });
    new Counter({
      name: 'quotaring_lease_renewals_total',
      help: 'Global-cap lease renewals (deployment quotas, hot tenants), by outcome: granted in full, partial, denied (bucket empty), failed (Redis).',
      labelNames: ['result'],
      registers: [r],
      collect() {
        const n = src()?.leaseRenewals();
        if (n === undefined) return;
        for (const result of ['granted', 'partial', 'denied', 'failed'] as const) setCounter(this, { result }, n[result]);
      },
    });
    new Counter({
      name: 'quotaring_lease_given_back_units_total',
      help: 'Unspent leased units given back to the global cap (lease expired, bucket idle, node closing), by result: sent, answered (by Redis).',
      labelNames: ['result'],
      registers: [r],
      collect() {
        const n = src()?.leaseGivenBack?.();
        for (const result of ['sent', 'answered'] as const) setCounter(this, { result }, n?.[result] ?? 0);
      },
    });
    new Counter({
      name: 'quotaring_redis_guard_calls_total',
      help: 'Redis calls on decision paths (guard=cap: leases; guard=central: central-store decisions), by result: ok, timeout, error, open (breaker open, not sent).',
      labelNames: ['guard', 'result'],
      registers: [r],
      collect() {
        for (const c of src()?.guardCalls() ?? []) setCounter(this, { guard: c.guard, result: c.result }, c.n);
      },
    });
    new Counter({
      name: 'quotaring_cluster_auth_refused_total',
      help: 'Calls without a valid cluster signature: kind=internal_call (a /_quotaring/v1/* call refused with 401), kind=stand_in_headers (a client request whose x-quotaring-fallback-for / -redirected-for were ignored).',
      labelNames: ['kind'],
      registers: [r],
      collect() {
        const n = src()?.clusterAuthRefused();
        if (n === undefined) return;
        setCounter(this, { kind: 'internal_call' }, n.internalCalls);
        setCounter(this, { kind: 'stand_in_headers' }, n.standInHeaders);
      },
    });
    fairShareMetrics(r, src);
    providerFeedbackMetrics(r, () => src()?.providerFeedback?.());
    memberEntriesCounter(r, () => src()?.memberEntriesRejected());
    redisCommandsCounter(r);
    ringGauges(r, () => src()?.ring());
  }

  /** Sets what the gauges read at scrape time. */
  setSources(sources: NodeGaugeSources): void {
    this.#src = sources;
  }

  /**
   * One admission decision. `waitSeconds`: time in the tenant's queue (0 when decided at once);
   * observed for every decision except `gone`.
   */
  decision(result: DecisionResult, kind: LimitKind, priority: string, waitSeconds: number): void {
    this.#decisions.add(`${result}|${kind}|${priority}`, () => ({ result, limit_kind: kind, priority }));
    if (result !== 'gone') this.#wait.observe(priority, () => ({ priority }), waitSeconds);
    if (result === 'queue_timeout') this.#shed.add('deadline', () => ({ reason: 'deadline' }));
    else if (result === 'queue_full') this.#shed.add('queue_full', () => ({ reason: 'queue_full' }));
  }

  /** A request refused over its tenant's fair share of `deployment` (429 `share_exhausted`). */
  shareRefused(deployment: string): void {
    this.#shareRefusals.add(deployment, () => ({ deployment }));
  }

  /** A settled admitted request: `reserved` and `used` tokens (≥ 0). */
  settled(model: string, reserved: number, used: number): void {
    const labels = (): Record<string, string> => ({ model });
    this.#reserved.add(model, labels, reserved);
    this.#used.add(model, labels, used);
    if (reserved > 0) this.#ratio.observe(model, labels, used / reserved);
  }

  /**
   * The settled cost of a request of an opted-in tenant (`quotaring_tenant_spend_usd_total`).
   * @param key the key's id when the key has a budget of its own, else undefined (no `key` label).
   * @param pico pico-dollars (≥ 0), exactly what the tenant's cost limits were charged.
   */
  spent(tenant: string, model: string, key: string | undefined, pico: bigint): void {
    this.#spend.add(`${tenant}|${model}|${key ?? ''}`, () => ({ tenant, model, ...(key === undefined ? {} : { key }) }), pico);
  }

  /** One upstream attempt's outcome: HTTP status, or 0 when no response came (connect error, timeout). */
  upstream(deployment: string, status: number): void {
    this.#upstream.add(`${deployment}|${status}`, () => ({ deployment, status: String(status) }));
    if (status === 429) this.#upstream429.add(deployment, () => ({ deployment }));
  }

  /**
   * A finished handoff (`out`: states written for new owners), prefetch (`prefetch`: states read)
   * or stand-in return (`return`: a tenant held in place of a suspect owner given back): its duration and tenants moved.
   */
  handoff(kind: 'out' | 'prefetch' | 'return', ms: number, tenants: number): void {
    this.#handoffs.inc({ kind });
    this.#handoffSeconds.observe({ kind }, ms / 1_000);
    this.#handoffTenants.inc({ kind }, tenants);
  }

  /** The node entered (true) or left (false) local fallback. */
  fallback(active: boolean): void {
    this.#fallbackTransitions.inc({ state: active ? 'entered' : 'left' });
  }
}

/** What a router's gauges read at scrape time. */
export interface RouterGaugeSources {
  ring(): { readonly members: number; readonly version: string } | undefined;
  /** Members routed around now (failed health checks or connections). */
  suspects(): number;
  /** WebSocket clients of the live stream. */
  liveClients(): number;
  /** Distinct member entries in Redis ignored for a missing or bad signature (0 with static members). */
  memberEntriesRejected(): number;
}

/** A router's metrics: forwarded requests by status, retries, duration, ring and suspects. */
export class RouterMetrics {
  readonly registry = new Registry();
  readonly #requests: PathCounter;
  readonly #retries: Counter<'reason'>;
  readonly #duration: PathHistogram;

  constructor(sources: RouterGaugeSources) {
    const r = this.registry;
    collectDefaultMetrics({ register: r });
    this.#requests = new PathCounter(r, 'quotaring_router_requests_total', 'Requests answered by the router, by HTTP status (its own errors included).');
    this.#retries = new Counter({ name: 'quotaring_router_retries_total', help: 'Requests sent again to another member: reason 421 (not the owner) or unreachable.', labelNames: ['reason'], registers: [r] });
    this.#duration = new PathHistogram(r, 'quotaring_router_request_duration_seconds', 'Time from a request\'s arrival to the end of its response, seconds.', DURATION_BUCKETS);
    new Gauge({ name: 'quotaring_router_suspect_members', help: 'Members the router routes around now.', registers: [r], collect() { this.set(sources.suspects()); } });
    new Gauge({ name: 'quotaring_live_clients', help: 'WebSocket clients of the live stream.', registers: [r], collect() { this.set(sources.liveClients()); } });
    memberEntriesCounter(r, () => sources.memberEntriesRejected());
    redisCommandsCounter(r);
    ringGauges(r, () => sources.ring());
  }

  /** A finished request: its status and duration, ms. */
  request(status: number, ms: number): void {
    this.#requests.add(String(status), () => ({ status: String(status) }));
    this.#duration.observe('', () => ({}), ms / 1_000);
  }

  /** A request sent again to another member. */
  retry(reason: '421' | 'unreachable'): void {
    this.#retries.inc({ reason });
  }
}
