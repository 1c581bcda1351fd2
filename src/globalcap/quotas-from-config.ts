/**
 * Builds a node's deployment quota leases from the config: every deployment with a `quota` (rpm
 * and/or tpm) gets a cluster-wide bucket of `quota × headroom`. With `cluster.redis.url` the buckets
 * live in Redis (Lua scripts, every call behind a 15 ms timeout and a circuit breaker); without
 * Redis each node enforces its share, `capacity / live nodes`, locally.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import { DemandExchange } from '../fairshare/exchange.ts';
import type { FairShares } from '../fairshare/shares.ts';
import { CapLeases } from './cap-leases.ts';
import { fairSharesFromConfig } from './fair-from-config.ts';
import { feedbackFromConfig } from './feedback-from-config.ts';
import { defineFeedbackScript, loadFeedbackScript } from './feedback-script.ts';
import type { ProviderFeedback } from './provider-feedback.ts';
import type { CapCall, DeploymentQuota, FallbackShare } from './cap-leases.ts';
import { redisForDecisions } from '../redis/connection.ts';
import { RedisGuard, guardedCall } from '../redis/guard.ts';
import { capEpochKey } from './keys.ts';
import { RestoreWatch, defineReconcileScripts } from './reconcile.ts';
import { defineCapScripts, loadCapScripts } from './scripts.ts';
import type { CapScripts } from './scripts.ts';

/** Log sink (pino's shape). */
export interface QuotaLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** A node's deployment quotas and what to close with them. */
export interface ConfiguredQuotas {
  readonly leases: CapLeases;
  /** Names of the deployments that have a quota (others are not limited here). */
  readonly limited: ReadonlySet<string>;
  /** `cluster.on_redis_failure: closed`: refuse (503) instead of serving the local share while Redis is unavailable. */
  readonly closedOnFailure: boolean;
  /** The guard of the leases' Redis calls (its counters feed the metrics); absent without Redis. */
  readonly guard?: RedisGuard;
  /** Fair shares of the deployments with `fair_share` (`src/fairshare/`); absent when none has it. */
  readonly fair?: FairShares;
  /** The exchange of demand reports through Redis; absent without Redis or fair-shared deployments. */
  readonly exchange?: DemandExchange;
  /** Provider feedback of the deployments with `quota.feedback` on (`provider-feedback.ts`); absent when none has it. */
  readonly feedback?: ProviderFeedback;
  /**
   * True once the node can decide from Redis without a cold start: without Redis at once; with
   * Redis once the connection was ready and `SCRIPT LOAD` of every script answered (`/readyz`
   * waits for it: `scripts`).
   */
  scriptsLoaded(): boolean;
  /** Returns unspent leases to Redis and closes the connection. Never rejects. */
  close(): Promise<void>;
}

/** Scripts for a node without Redis: every call fails, so the leases stay on the local share. */
const NO_REDIS: CapScripts = {
  tokenBucket: () => Promise.reject(new Error('no Redis configured')),
  lease: () => Promise.reject(new Error('no Redis configured')),
};
const LOCAL_ONLY: CapCall = async () => ({ ok: false });

/**
 * Longest warm-up of the guard, ms: when the scripts could not be loaded within this long after
 * the node was built (Redis unreachable at start), failures count towards the breaker anyway, so
 * a node started without Redis still falls back.
 */
export const WARM_UP_MAX_MS = 5_000;

/**
 * Start-up and recovery of the Redis side of the leases: loads the scripts on each `ready` of the
 * connection (then ends the guard's warm-up), and while the node is in fallback probes Redis every
 * `probeMs` (one PING through the breaker, with or without traffic) so the node leaves fallback
 * within one probe interval after Redis answers again (plus the connection's reconnect delay, at
 * most `RECONNECT_MAX_MS`, when the connection itself dropped).
 */
class RedisUpkeep {
  #loaded = false;
  #closed = false;
  readonly #timers: NodeJS.Timeout[] = [];
  constructor(
    private readonly redis: Redis,
    private readonly guard: RedisGuard,
    private readonly leases: CapLeases,
    private readonly probeMs: number,
    private readonly log: QuotaLog,
  ) {}

  get loaded(): boolean {
    return this.#loaded;
  }

  start(): void {
    const load = (): void => {
      Promise.all([loadCapScripts(this.redis), loadFeedbackScript(this.redis)]).then(
        () => {
          this.#loaded = true;
          this.guard.warmedUp();
        },
        (err: unknown) => {
          // Retried on the next `ready` (the connection drops and reconnects when Redis is away).
          if (!this.#closed) this.log.warn({ err: (err as Error).message }, 'loading the Redis scripts failed');
        },
      );
    };
    this.redis.on('ready', load);
    if (this.redis.status === 'ready') load();
    const warmUp = setTimeout(() => this.guard.warmedUp(), WARM_UP_MAX_MS);
    const probe = setInterval(() => this.probe(), this.probeMs);
    warmUp.unref();
    probe.unref();
    this.#timers.push(warmUp, probe);
  }

  /** One probe when the node is in fallback and the connection is up; a no-op otherwise. */
  probe(): void {
    const leases = this.leases;
    if (this.#closed || !leases.inFallback || this.redis.status !== 'ready') return;
    void this.guard.probe(() => this.redis.ping()).then((r) => {
      if (r.ok && !this.#closed) leases.probeAnswered();
    });
  }

  stop(): void {
    this.#closed = true;
    for (const t of this.#timers) clearTimeout(t);
  }
}

/**
 * @param liveNodes nodes sharing the quotas now (the ring's members; at least 1).
 * @param always build the leases even when nothing in the config needs them yet (hot tenant detection).
 * @returns undefined when no deployment has a quota, no tenant is spread and `always` is not set.
 */
export function quotasFromConfig(
  config: LoadedConfig,
  opts: {
    readonly clock: Clock;
    readonly liveNodes: () => number;
    readonly log: QuotaLog;
    readonly always?: boolean;
    /** Told when the node enters (true) or leaves (false) fallback, after the log line. */
    readonly onFallbackChange?: (inFallback: boolean) => void;
    /** This node's id (its field in the fair-share demand hashes). @default a random id */
    readonly nodeId?: string;
  },
): ConfiguredQuotas | undefined {
  const deployments: Record<string, DeploymentQuota> = {};
  for (const d of config.config.deployments) {
    if (d.quota.rpm === undefined && d.quota.tpm === undefined) continue;
    deployments[d.name] = { ...(d.quota.rpm === undefined ? {} : { rpm: d.quota.rpm }), ...(d.quota.tpm === undefined ? {} : { tpm: d.quota.tpm }), headroom: d.headroom, algorithm: d.quota.algorithm };
  }
  const limited = new Set(Object.keys(deployments));
  const spread = config.config.tenants.some((t) => t.spread !== undefined);
  if (limited.size === 0 && !spread && opts.always !== true) return undefined;
  const cluster = config.config.cluster;
  let redis: Redis | undefined;
  let scripts = NO_REDIS;
  let call = LOCAL_ONLY;
  let guard: RedisGuard | undefined;
  if (cluster.redis !== undefined) {
    redis = redisForDecisions(cluster.redis.connection);
    scripts = defineCapScripts(redis);
    guard = new RedisGuard({
      clock: opts.clock,
      // Open for one probe interval: the background probe then finds Redis back at its next tick.
      openMs: cluster.redis.probe_interval,
      warmUp: true,
      onChange: (state, reason) => opts.log.info({ breaker: state, reason }, 'Redis circuit breaker'),
    });
    call = guardedCall(guard);
  }

  const restores = redis === undefined || cluster.redis === undefined ? undefined : new RestoreWatch(redis, capEpochKey(cluster.name), cluster.redis.probe_interval);
  const leases = new CapLeases({
    cluster: cluster.name,
    deployments,
    scripts,
    clock: opts.clock,
    call,
    liveNodes: () => Math.max(1, opts.liveNodes()),
    localOnly: redis === undefined,
    ...(redis === undefined ? {} : { reseed: defineReconcileScripts(redis).reseed }),
    ...(cluster.redis === undefined ? {} : { probeIntervalMs: cluster.redis.probe_interval }),
    ...(redis === undefined
      ? {}
      : {
          onFallbackChange: (inFallback: boolean) => {
            if (inFallback) opts.log.warn({ deployments: [...limited] }, 'entering fallback: deployment quotas shared locally (capacity / live nodes)');
            else opts.log.info({ deployments: [...limited] }, 'leaving fallback: deployment quotas leased from Redis again');
            opts.onFallbackChange?.(inFallback);
          },
          onFallbackShare: (share: FallbackShare) => opts.log.info(share, 'fallback share'),
        }),
  });
  const fair = fairSharesFromConfig(config, deployments, opts.clock, () => Math.max(1, opts.liveNodes()));
  const exchange =
    fair === undefined || redis === undefined ? undefined : new DemandExchange({ redis, cluster: cluster.name, nodeId: opts.nodeId ?? `node-${randomUUID()}`, shares: fair, log: opts.log });
  exchange?.start();
  const feedback = feedbackFromConfig(config, deployments, { clock: opts.clock, call, lower: redis === undefined ? undefined : defineFeedbackScript(redis), leases });
  const upkeep = redis === undefined || guard === undefined || cluster.redis === undefined ? undefined : new RedisUpkeep(redis, guard, leases, cluster.redis.probe_interval, opts.log);
  upkeep?.start();
  restores?.start({
    lost: () => leases.connectionLost(),
    back: (check) => {
      // A failed check counts as a restore (the safe side: a reseed never adds usage).
      const c = check ?? { restored: true, epoch: `unknown:${opts.clock.now()}` };
      if (c.restored) {
        opts.log.warn({ epoch: c.epoch }, 'Redis restarted (new run_id) or lost its data (new epoch): re-seeding the global cap from this node\'s known levels before leasing again');
        leases.restored(c.epoch);
      }
      leases.reconnected();
      // Back and told: leave fallback now rather than at the next probe tick.
      upkeep?.probe();
    },
    restored: (c) => {
      opts.log.warn({ epoch: c.epoch }, 'Redis lost or regressed data: re-seeding the global cap from this node\'s known levels');
      leases.restored(c.epoch);
    },
  });
  return {
    leases,
    limited,
    ...(guard === undefined ? {} : { guard }),
    ...(fair === undefined ? {} : { fair }),
    ...(exchange === undefined ? {} : { exchange }),
    ...(feedback === undefined ? {} : { feedback }),
    closedOnFailure: redis !== undefined && cluster.on_redis_failure === 'closed',
    scriptsLoaded: () => upkeep === undefined || upkeep.loaded,
    close: async () => {
      exchange?.stop();
      feedback?.stop();
      upkeep?.stop();
      restores?.stop();
      try {
        await leases.close();
      } catch (err) {
        opts.log.warn({ err: (err as Error).message }, 'returning deployment leases failed');
      }
      redis?.disconnect();
    },
  };
}
