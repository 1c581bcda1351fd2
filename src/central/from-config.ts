/** Central-store mode built from a config (`mode: central`), for a gateway node. */
import type { LoadedConfig } from '../config/load.ts';
import { systemClock } from '../clock.ts';
import { redisForDecisions } from '../redis/connection.ts';
import { RedisGuard } from '../redis/guard.ts';
import { CentralLimiter } from './central-limiter.ts';
import type { CentralDecisions } from './decisions.ts';
import { loadCentralScripts } from './scripts.ts';

/** Longest wait for one central-store decision, ms: beyond it the request gets 503 `limiter_unavailable`. */
const CENTRAL_TIMEOUT_MS = 1_000;

/** `mode: central`: the central-store limiter on its own decision connection, every call behind a 1 s guard; undefined in the sharded mode. */
export function centralDecisions(config: LoadedConfig): (CentralDecisions & { ready(): Promise<void>; close(): void }) | undefined {
  const connection = config.config.cluster.redis?.connection;
  if (config.config.mode !== 'central' || connection === undefined) return undefined;
  const redis = redisForDecisions(connection);
  return {
    limiter: new CentralLimiter({ redis, cluster: config.config.cluster.name, policyFor: (tenant) => config.policies.get(tenant) }),
    guard: new RedisGuard({ clock: systemClock, timeoutMs: CENTRAL_TIMEOUT_MS }),
    // The decision connection queues nothing while connecting: serve once it is up and the scripts
    // are loaded (or after 5 s anyway; a failed load leaves ioredis to EVAL them on first use).
    ready: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 5_000);
        const load = (): void => {
          loadCentralScripts(redis)
            .catch(() => undefined)
            .finally(() => {
              clearTimeout(timer);
              resolve();
            });
        };
        if (redis.status === 'ready') load();
        else redis.once('ready', load);
      }),
    close: () => redis.disconnect(),
  };
}
