/**
 * The `cluster:` section: name, static members, secret, Redis, heartbeats, ring, Redis failure mode,
 * hot tenants and handoff.
 */
import { z } from 'zod';
import { RedisSchema } from './schema-redis.ts';
import { duration } from './units.ts';

/** A node of a static member list. */
export const MemberSchema = z.strictObject({
  /** Unique node id, e.g. `node-1`. */
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'member id: 1-64 of A-Z a-z 0-9 . _ -'),
  /** Where the node serves clients, e.g. `http://127.0.0.1:8081`. */
  url: z.url({ protocol: /^https?$/, error: 'member url: an http:// or https:// URL such as http://127.0.0.1:8101' }),
  /** Relative share of the ring. @default 1 */
  weight: z.number().int({ error: 'member weight: a positive integer' }).positive({ error: 'member weight: a positive integer' }).optional(),
});

/**
 * Cluster settings. Without `redis`, membership is the static `members` list (routers health-check
 * them); with `redis.url`, nodes heartbeat into Redis and everyone builds the ring from the live set.
 */
export const ClusterSchema = z.strictObject({
  /** Namespace of this cluster's Redis keys. @default default */
  name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'cluster name: 1-64 of A-Z a-z 0-9 . _ -').default('default'),
  /** Static members (the embedded default, no Redis). */
  members: z.array(MemberSchema).default([]),
  /**
   * Environment variable holding the cluster secret (at least 32 characters, the same in every node
   * and router; `<name>_PREVIOUS` may hold the one being rotated out). Required by every process of
   * a cluster (static members or Redis); see docs/security.md. @default QUOTARING_CLUSTER_SECRET
   */
  secret_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('QUOTARING_CLUSTER_SECRET'),
  /** Redis for membership (and, later, handoff and the global cap). */
  redis: RedisSchema.optional(),
  /** Node heartbeat period. @default 1s */
  heartbeat: duration.default(1_000),
  /** A member silent this long is out of the ring. @default 3s */
  dead_after: duration.default(3_000),
  /** Virtual nodes per member on the ring. @default 160 */
  vnodes: z.number().int().min(1).max(1_000).default(160),
  /** Router health checks of members. @default 1s */
  health_check: duration.default(1_000),
  /**
   * When Redis cannot be reached for a cluster-wide limit (deployment quotas): `local` serves within
   * each node's share (capacity / live nodes); `closed` answers 503 `limiter_unavailable`.
   * @default local
   */
  on_redis_failure: z.enum(['local', 'closed']).default('local'),
  /**
   * Hot tenants found by their owner (Redis membership only): a tenant whose request rate stays above
   * `threshold_rps` for `sustain` is spread over `spread` nodes like a tenant configured with
   * `spread`, until its rate has stayed below half the threshold for `cooldown`. Off without `threshold_rps`.
   */
  hot: z
    .strictObject({
      /** Requests per second (the owner's moving average, 1 s time constant) that make a tenant hot. */
      threshold_rps: z.number().positive().optional(),
      /** Nodes a hot tenant is spread over. @default 3 */
      spread: z.number().int().min(2).max(64).default(3),
      /** How long the rate must stay above the threshold. @default 5s */
      sustain: duration.default(5_000),
      /** How long a hot tenant stays spread after its rate fell below half the threshold. @default 60s */
      cooldown: duration.default(60_000),
    })
    .prefault({}),
  /** Limiter-state handoff between owners (Redis membership only). */
  handoff: z
    .strictObject({
      /** How long a new owner waits for the previous owner's handoff before its first decision for a tenant. @default 250ms */
      wait_ms: duration.default(250),
      /** Period of the owners' checkpoints of recently touched tenants to Redis. @default 1s */
      checkpoint: duration.default(1_000),
      /** After a graceful leave is announced, how long a node keeps answering 421 (so routers catch up) before it stops accepting connections. @default 500ms */
      drain: duration.default(500),
      /** On SIGTERM, how long in-flight requests (streams) may take to finish before the node exits anyway. @default 30s */
      grace: duration.default(30_000),
    })
    .prefault({}),
});
