/**
 * A node's state file (`server.state_dir`, format and rules in `src/coord/handoff/local-state.ts`): loaded
 * before the node listens, saved on a graceful stop. A single node loads it into its limiter; a
 * cluster node loads it among its replicas (`Handoff.receive`), so a member that gives a newer
 * state back on restart wins (`src/coord/handoff/static-handoff.ts`). Also the expiry of a tenant's stored
 * state, shared by the file and the handoff's Redis checkpoints.
 */
import { createHash } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { LoadedConfig } from '../config/load.ts';
import type { ClusterConfig } from '../config/schema.ts';
import type { Handoff } from '../coord/handoff/handoff.ts';
import { loadLocalState, saveLocalState } from '../coord/handoff/local-state.ts';
import type { Limiter } from '../limiter/limiter.ts';
import { parseTenantSnapshot } from '../limiter/snapshot.ts';
import type { Policy } from '../limiter/types.ts';
import { longestPeriodMs } from '../limiter/budget-period.ts';
import { wallNow } from '../clock.ts';

/** A node's state file: load before listening, save on a graceful stop. */
export interface NodeLocalState {
  /** Loads the state file (a single node: into its limiter; a cluster node: among its replicas). Never rejects (logged). */
  restore(): Promise<void>;
  /** Saves every tenant's state (a cluster node: the tenants it decides for and its replicas). Never rejects (logged). */
  save(): Promise<void>;
}

/** Redis expiry of a tenant's stored state, ms: its longest window, lease or budget period (a month: 31 days and an hour), plus a minute. */
export function stateTtlMs(policy: Policy | undefined): number {
  let longest = 0;
  for (const limit of policy?.limits ?? []) longest = Math.max(longest, limit.kind === 'concurrent' ? limit.leaseTtlMs : limit.kind === 'cost' ? longestPeriodMs(limit.period) : limit.windowMs);
  return longest + 60_000;
}

/**
 * The identity of a node's cluster, written into its state file and its name (`src/coord/handoff/local-state.ts`),
 * so that two clusters started from one directory neither overwrite nor load each other's file:
 * - `cluster.name` when it is set to anything but `default` (the default): the operator's name for
 *   the cluster, kept when its members change (adding a node keeps every node's state).
 * - an unnamed cluster (`default`) is told apart by what it is made of: `default-` and 12 hex
 *   digits of the SHA-256 of its static members (each `id url`, sorted), or of where its Redis is
 *   (scheme, host, port and database of the URL, never the credentials; or the sentinels, sorted,
 *   and the primary's name). Such a cluster is another one once its member list (an id or a URL)
 *   or its Redis changes: its nodes then refuse their files and start fresh. Name the cluster to
 *   keep its state across such changes.
 * - `default` for a single node (no members, no Redis).
 * @param cluster the cluster settings the node runs with (`cluster`, with `--members` in place of
 *   `cluster.members` when given).
 * @returns an id of `A-Z a-z 0-9 . _ -`, at most 64 characters.
 */
export function clusterIdentity(cluster: Pick<ClusterConfig, 'name' | 'members' | 'redis'>): string {
  if (cluster.name !== 'default') return cluster.name;
  let made: string;
  if (cluster.members.length > 0) made = `members\n${cluster.members.map((m) => `${m.id} ${m.url}`).sort().join('\n')}`;
  else if (cluster.redis !== undefined) made = `redis\n${redisPlace(cluster.redis.connection)}`;
  else return 'default';
  return `default-${createHash('sha256').update(made).digest('hex').slice(0, 12)}`;
}

/** Where a Redis connection goes, without its credentials. */
function redisPlace(connection: NonNullable<ClusterConfig['redis']>['connection']): string {
  if (connection.kind === 'sentinel') return `sentinel ${connection.name} ${connection.sentinels.map((s) => `${s.host}:${s.port}`).sort().join(',')}`;
  try {
    const url = new URL(connection.url);
    return `${url.protocol}//${url.host}${url.pathname}`;
  } catch {
    return 'url';
  }
}

/** What a node's state file reads from and writes into. */
export interface NodeStateFileOptions {
  /** Directory of the state file (`server.state_dir`). */
  readonly dir: string;
  /** This node's id (names the file), read when used. */
  readonly nodeId: () => string;
  /** The cluster's identity (in the file and its name). @default {@link clusterIdentity} of `config.config.cluster` */
  readonly cluster?: string;
  readonly config: LoadedConfig;
  readonly limiter: Limiter;
  /** The node's handoff; undefined for a single node (the file then goes straight to the limiter). */
  readonly handoff: Handoff | undefined;
  readonly log: FastifyBaseLogger;
}

/**
 * The state file of one node. A corrupt file starts every tenant it may have held in the
 * conservative state (requests and tokens limits used up for one window); a file of another
 * cluster or node, or one naming no cluster (v1), is refused and the node starts fresh (a warn
 * line: `state file <path> refused, starting fresh: it is the file of cluster "<a>" node "<n>",
 * this node is cluster "<b>" node "<m>"`); an unreadable one starts fresh (logged); states of
 * tenants not in the config are skipped.
 */
export function nodeStateFile(opts: NodeStateFileOptions): NodeLocalState {
  const { dir, nodeId, config, limiter, handoff, log } = opts;
  const cluster = opts.cluster ?? clusterIdentity(config.config.cluster);
  return {
    restore: async () => {
      try {
        const loaded = await loadLocalState(dir, { cluster, node: nodeId() });
        const configured = config.config.tenants.map((t) => t.id);
        if (loaded.kind === 'none') return;
        if (loaded.kind === 'refused') {
          log.warn({ file: loaded.file, cluster, node: nodeId() }, `state file ${loaded.file} refused, starting fresh: ${loaded.reason}`);
          return;
        }
        if (loaded.kind === 'corrupt') {
          log.warn({ dir, reason: loaded.reason }, 'state file is corrupt: every tenant it may hold starts with its requests and tokens limits used up for one window');
          if (handoff === undefined) for (const t of configured) limiter.importConservative(t);
          // An unparseable value at time 0: loaded as corrupt (conservative) unless a member gives a real state back.
          else handoff.receive(configured.filter((t) => handoff.ring().range(t, 2).some((m) => m.id === nodeId())).map((t) => ({ tenant: t, json: '', at: 0 })), (t) => config.policies.has(t));
          return;
        }
        if (handoff !== undefined) {
          const n = handoff.receive(loaded.states, (t) => config.policies.has(t));
          log.info({ dir, tenants: n, expired: loaded.expired }, 'state file loaded');
          return;
        }
        let corrupt = 0;
        for (const s of loaded.states) {
          if (!config.policies.has(s.tenant)) continue;
          try {
            limiter.importTenant(s.tenant, parseTenantSnapshot(s.json));
          } catch {
            corrupt++;
            limiter.importConservative(s.tenant);
          }
        }
        log.info({ dir, tenants: loaded.states.length, expired: loaded.expired, corrupt }, 'state file loaded');
      } catch (err) {
        log.warn({ dir, err: (err as Error).message }, 'state file unreadable: starting fresh');
      }
    },
    save: async () => {
      const now = wallNow(); // wall time: the file outlives the process; the next process reads its expiries
      const states =
        handoff?.states() ??
        [...limiter.tenants()].flatMap((tenant) => {
          const snapshot = limiter.exportTenant(tenant);
          return snapshot === undefined ? [] : [{ tenant, json: JSON.stringify(snapshot), at: snapshot.at }];
        });
      try {
        const file = await saveLocalState(
          dir,
          { cluster, node: nodeId() },
          states.map((s) => ({ ...s, expiresAtMs: now + stateTtlMs(config.policies.get(s.tenant)) })),
          now,
        );
        log.info({ file, tenants: states.length }, 'state saved');
      } catch (err) {
        log.warn({ dir, err: (err as Error).message }, 'state not saved');
      }
    },
  };
}
