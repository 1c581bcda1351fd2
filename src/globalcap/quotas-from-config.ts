/**
 * Builds a node's deployment quota leases from the config: every deployment with a `quota` (rpm
 * and/or tpm) gets a cluster-wide bucket of `quota × headroom`. With `cluster.redis.url` the buckets
 * live in Redis (Lua scripts, every call behind a 15 ms timeout and a circuit breaker); without
 * Redis each node enforces its share, `capacity / live nodes`, locally.
 */
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import { DeploymentLeases } from './deployment-lease.ts';
import type { CapCall, DeploymentQuota } from './deployment-lease.ts';
import { redisForDecisions } from './redis-connection.ts';
import { RedisGuard } from './redis-guard.ts';
import { defineCapScripts } from './scripts.ts';
import type { CapScripts } from './scripts.ts';

/** Log sink (pino's shape). */
export interface QuotaLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** A node's deployment quotas and what to close with them. */
export interface ConfiguredQuotas {
  readonly leases: DeploymentLeases;
  /** Names of the deployments that have a quota (others are not limited here). */
  readonly limited: ReadonlySet<string>;
  /** `cluster.on_redis_failure: closed`: refuse (503) instead of serving the local share while Redis is unavailable. */
  readonly closedOnFailure: boolean;
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
 * @param liveNodes nodes sharing the quotas now (the ring's members; at least 1).
 * @returns undefined when no deployment has a quota.
 */
export function quotasFromConfig(config: LoadedConfig, opts: { readonly clock: Clock; readonly liveNodes: () => number; readonly log: QuotaLog }): ConfiguredQuotas | undefined {
  const deployments: Record<string, DeploymentQuota> = {};
  for (const d of config.config.deployments) {
    if (d.quota.rpm === undefined && d.quota.tpm === undefined) continue;
    deployments[d.name] = { ...(d.quota.rpm === undefined ? {} : { rpm: d.quota.rpm }), ...(d.quota.tpm === undefined ? {} : { tpm: d.quota.tpm }), headroom: d.headroom };
  }
  const limited = new Set(Object.keys(deployments));
  if (limited.size === 0) return undefined;
  const cluster = config.config.cluster;
  let redis: Redis | undefined;
  let scripts = NO_REDIS;
  let call = LOCAL_ONLY;
  if (cluster.redis !== undefined) {
    redis = redisForDecisions(cluster.redis.url);
    scripts = defineCapScripts(redis);
    const guard = new RedisGuard({ clock: opts.clock, onChange: (state, reason) => opts.log.info({ breaker: state, reason }, 'Redis circuit breaker') });
    call = (fn) => guard.run(fn);
  }
  const leases = new DeploymentLeases({
    cluster: cluster.name,
    deployments,
    scripts,
    clock: opts.clock,
    call,
    liveNodes: () => Math.max(1, opts.liveNodes()),
    localOnly: redis === undefined,
    ...(redis === undefined
      ? {}
      : {
          onFallbackChange: (inFallback: boolean) =>
            inFallback
              ? opts.log.warn({ deployments: [...limited] }, 'entering fallback: deployment quotas shared locally (capacity / live nodes)')
              : opts.log.info({ deployments: [...limited] }, 'leaving fallback: deployment quotas leased from Redis again'),
        }),
  });
  return {
    leases,
    limited,
    closedOnFailure: redis !== undefined && cluster.on_redis_failure === 'closed',
    close: async () => {
      try {
        await leases.close();
      } catch (err) {
        opts.log.warn({ err: (err as Error).message }, 'returning deployment leases failed');
      }
      redis?.disconnect();
    },
  };
}
