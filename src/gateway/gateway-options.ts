/**
 * What a gateway node is built from (`buildGateway` in `./server.ts`): its config, clock, logging,
 * its place in a cluster and the cluster secret, and where it keeps its state file.
 */
import type { Tracing } from '../http/tracing.ts';
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { RingOptions } from '../coord/ring/ring.ts';
import type { TenantStateStore } from '../coord/handoff/state-store.ts';
import type { Member, Membership } from '../coord/types.ts';
import type { ClusterSecret } from '../security/cluster-secret.ts';

/** Options of `buildGateway`. */
export interface GatewayOptions {
  readonly config: LoadedConfig;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Use fastify's pino logger at `server.log_level`. @default true */
  readonly logger?: boolean;
  /** Readable log lines (pino-pretty) whatever `server.log_format` says. @default false */
  readonly prettyLogs?: boolean;
  /** Where JSON log lines go in place of stdout (tests). */
  readonly logStream?: NodeJS.WritableStream;
  /** This node's id where no cluster names it (a single node: admin API, levels, tenant views), read when used (a port chosen at listen). @default `single` */
  readonly nodeId?: () => string;
  /** This node's place in a cluster; absent for a single node, which owns every tenant. */
  readonly cluster?: NodeClusterOptions;
  /**
   * The cluster secret: signs this node's calls to other nodes and verifies routers' and nodes' calls
   * (`src/gateway/cluster-auth.ts`). Required with `cluster`; a single node without one refuses every
   * internal route (`/_quotaring/v1/*`).
   */
  readonly clusterSecret?: ClusterSecret;
  /**
   * Directory of the node's state file (`server.state_dir`, see `src/coord/handoff/local-state.ts`): saved
   * by `nodeLocalState``.save()` on a graceful stop, loaded by `.restore()` before listening.
   * Absent: neither (tests, embedding).
   */
  /** OpenTelemetry tracing (`src/http/tracing.ts`): a span per limited request. @default off */
  readonly tracing?: Tracing;
  readonly stateDir?: string;
  /** The cluster identity the state file carries and must match (`clusterIdentity` in `./state-file.ts`). @default from `config.cluster` */
  readonly stateCluster?: string;
}

/** A node's place in a cluster. Handoff timings come from the config's `cluster.handoff`. */
export interface NodeClusterOptions {
  readonly self: Member;
  /** The cluster's Redis connection (membership's), for the hot set; absent with static members. */
  readonly redis?: Redis;
  /** Source of the ring; started by the caller after the gateway listens (then call `nodeHandoff(app).joined()`). */
  readonly membership: Membership;
  /** Options the membership builds its rings with. */
  readonly ringOptions?: RingOptions;
  /** Where tenant state is handed over and checkpointed (Redis membership); absent with static members. */
  readonly store?: TenantStateStore;
}

/** What `/readyz` names while a node is not ready yet (see `buildGateway`). */
export type ReadinessWait = 'start' | 'redis' | 'ring' | 'handoff' | 'scripts';
