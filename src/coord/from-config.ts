/**
 * Chooses the membership source from the config: Redis when `cluster.redis` is set (a URL or Sentinel), the static
 * `cluster.members` list otherwise, none for a single node.
 */
import { countRedisCommands } from '../ops/metrics.ts';
import type { Redis } from 'ioredis';
import { newRedisClient } from '../config/redis-client.ts';
import type { ClusterConfig } from '../config/schema.ts';
import { RedisMembership } from './membership/redis-membership.ts';
import type { RingOptions } from './ring/ring.ts';
import { StaticMembership } from './membership/static-membership.ts';
import type { Member, Membership } from './types.ts';
import type { ClusterSecret } from '../security/cluster-secret.ts';
import { missingSecret } from '../security/cluster-secret.ts';

/** A membership and what to close with it. */
export interface ConfiguredMembership {
  readonly membership: Membership;
  /** The options every ring of this membership is built with (`cluster.vnodes`). */
  readonly ringOptions: RingOptions;
  /** The Redis connection of a Redis membership (commands only; shared with the handoff store). */
  readonly redis?: Redis;
  /** Stops the membership (a node deregisters) and closes its Redis connection. */
  close(): Promise<void>;
}

/**
 * Builds (does not start) the membership of a node (`self` given) or a router.
 * @param secret the cluster secret (see `clusterSecretFor`): signs a node's Redis entry and verifies everyone's.
 * @returns undefined when the config describes no cluster (a single node owns every tenant).
 * @throws Error when a node with static members is not one of them; when the config describes a
 *   cluster and `secret` is undefined (naming `cluster.secret_env`).
 */
export function membershipFromConfig(cluster: ClusterConfig, self: Member | undefined, secret: ClusterSecret | undefined): ConfiguredMembership | undefined {
  const ringOptions: RingOptions = { vnodes: cluster.vnodes };
  if ((cluster.redis !== undefined || cluster.members.length > 0) && secret === undefined) throw new Error(missingSecret(cluster.secret_env, self === undefined ? 'a router' : 'a node'));
  if (cluster.redis !== undefined && secret !== undefined) {
    // Membership and handoff calls fail fast rather than queue while Redis is away: at most 2
    // retries after a reconnect, and no command waits more than 1 s on a frozen server.
    const redis = newRedisClient(cluster.redis.connection, { maxRetriesPerRequest: 2, connectTimeout: 2_000, commandTimeout: 1_000 });
    countRedisCommands(redis);
    redis.on('error', () => {}); // reported through the membership's and handoff's own failures
    const membership = new RedisMembership({
      redis,
      cluster: cluster.name,
      secret,
      ...(self === undefined ? {} : { self }),
      heartbeatMs: cluster.heartbeat,
      deadAfterMs: cluster.dead_after,
      ring: ringOptions,
    });
    return {
      membership,
      ringOptions,
      redis,
      close: async () => {
        await membership.stop();
        redis.disconnect();
      },
    };
  }
  if (cluster.members.length === 0) return undefined;
  if (self !== undefined && !cluster.members.some((m) => m.id === self.id)) {
    throw new Error(`node id "${self.id}" is not in cluster.members (${cluster.members.map((m) => m.id).join(', ')})`);
  }
  const membership = new StaticMembership(
    cluster.members.map((m) => ({ id: m.id, url: m.url, ...(m.weight === undefined ? {} : { weight: m.weight }) })),
    ringOptions,
  );
  return { membership, ringOptions, close: () => membership.stop() };
}
