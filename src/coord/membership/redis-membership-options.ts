/**
 * The options of `RedisMembership` (`redis-membership.ts`), their defaults, and the checks its
 * constructor runs on them.
 */
import type { Redis } from 'ioredis';
import type { Clock } from '../../clock.ts';
import type { ClusterSecret } from '../../security/cluster-secret.ts';
import { createRing } from '../ring/ring.ts';
import type { RingOptions } from '../ring/ring.ts';
import type { Member } from '../types.ts';

/** Options of `RedisMembership`. */
export interface RedisMembershipOptions {
  /**
   * Connection for heartbeats and reads; the membership never closes it (its owner does, after
   * `stop()`). A `duplicate()` of it carries the SUBSCRIBE and is closed by `stop()`.
   */
  readonly redis: Redis;
  /** Cluster name: namespaces the keys. Must not contain `{` or `}` (it is the keys' hash tag). */
  readonly cluster: string;
  /** Signs this node's entry; entries that do not verify under it (or its previous secret) are ignored. */
  readonly secret: ClusterSecret;
  /** This node, when the process is a node; absent on a router (it only watches). */
  readonly self?: Member;
  /** Interval of heartbeats and periodic reads, ms. @default 1000 */
  readonly heartbeatMs?: number;
  /** A member whose last heartbeat (Redis `TIME`) is older than this is out, ms; > heartbeatMs. @default 3000 */
  readonly deadAfterMs?: number;
  /** Measures gaps in contact with Redis and `lastSyncMs()` (member scores use Redis `TIME`). @default systemClock */
  readonly clock?: Clock;
  /** Passed to {@link createRing}. */
  readonly ring?: RingOptions;
  /**
   * Told about Redis faults on the background path (a failed heartbeat or read, a listener that
   * threw); the view is kept and the next heartbeat retries. @default ignore
   */
  readonly onError?: (err: Error) => void;
}

/** @see RedisMembershipOptions.heartbeatMs */
export const DEFAULT_HEARTBEAT_MS = 1_000;
/** @see RedisMembershipOptions.deadAfterMs */
export const DEFAULT_DEAD_AFTER_MS = 3_000;

/** The timings of a {@link RedisMembershipOptions}, defaults applied, ms. */
export interface MembershipTimings {
  /** Interval of heartbeats and reads, ms. */
  readonly heartbeatMs: number;
  /** A member silent this long is out, ms. */
  readonly deadAfterMs: number;
}

/**
 * Checks `opts` and applies the default timings.
 * @throws RangeError on a cluster name with `{`/`}` or empty, heartbeatMs < 1, or
 *   deadAfterMs ≤ heartbeatMs; from {@link createRing} on a bad `self` weight or empty id.
 */
export function checkedTimings(opts: RedisMembershipOptions): MembershipTimings {
  const heartbeatMs = opts.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
  const deadAfterMs = opts.deadAfterMs ?? DEFAULT_DEAD_AFTER_MS;
  if (opts.cluster === '' || /[{}]/.test(opts.cluster)) throw new RangeError(`cluster name must be non-empty without { or } (got "${opts.cluster}")`);
  if (!(heartbeatMs >= 1)) throw new RangeError(`heartbeatMs must be ≥ 1 (got ${heartbeatMs})`);
  if (!(deadAfterMs > heartbeatMs)) throw new RangeError(`deadAfterMs (${deadAfterMs}) must exceed heartbeatMs (${heartbeatMs})`);
  if (opts.self !== undefined) createRing([opts.self]); // validates id and weight
  return { heartbeatMs, deadAfterMs };
}
