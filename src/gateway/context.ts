/**
 * What the gateway's routes share: config, clock, limiter, token counter and upstream pools.
 */
import { randomBytes } from 'node:crypto';
import { randomId } from '../security/random-id.ts';
import type { Tracing } from '../http/tracing.ts';
import type { Clock } from '../clock.ts';
import type { Fence } from '../coord/handoff/fence.ts';
import type { Handoff } from '../coord/handoff/handoff.ts';
import type { ConfiguredQuotas } from '../globalcap/quotas-from-config.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { Limiter } from '../limiter/limiter.ts';
import type { AdmissionQueues } from './admission-queue.ts';
import type { PromptCounter } from '../tokens/index.ts';
import type { HotDetector } from './hot-detector.ts';
import type { CentralDecisions } from '../central/decisions.ts';
import type { SpreadTenants } from './spread.ts';
import type { Upstreams } from './upstream.ts';
import type { DeploymentHealth } from './deployment-health.ts';
import type { NodeActivity } from '../ops/node-activity.ts';
import type { ReservationKeepers } from './reservations.ts';

/** Dependencies of the gateway routes, built once per process. */
export interface GatewayContext {
  readonly config: LoadedConfig;
  readonly clock: Clock;
  readonly limiter: Limiter;
  /** Requests refused by their tenant's limits that wait for capacity (tiers with `max_wait`). */
  readonly queues: AdmissionQueues;
  /** Deployment provider quotas (cluster-wide caps leased to this node); absent when no deployment has a quota. */
  readonly quotas?: ConfiguredQuotas;
  /** `mode: central`: every decision is a Lua call against Redis (the comparison baseline); absent in the sharded mode. */
  readonly central?: CentralDecisions;
  /** Hot tenants spread over several nodes (config `spread`); absent when there are none. */
  readonly spread?: SpreadTenants;
  /** Hot tenant detection on the owner (`cluster.hot.threshold_rps`); absent when off. */
  readonly hot?: HotDetector;
  /** Ownership and handoff in a cluster: settlements of tenants that moved away go to their owner. */
  readonly handoff?: Handoff;
  /** Fencing after a stall (`src/coord/handoff/fence.ts`): a queued request is not admitted while the node is out of date. */
  readonly fence?: Fence;
  /** Where each reservation made here is settled, released and renewed (chosen per reservation, see `reservations.ts`). */
  readonly reservations: ReservationKeepers;
  readonly tokens: PromptCounter;
  readonly upstreams: Upstreams;
  /** Time to first byte per deployment: slow ones get a share of requests moved away. */
  readonly health: DeploymentHealth;
  /** Metrics, request log lines and live rates of this node. */
  readonly activity: NodeActivity;
  /** OpenTelemetry tracing: a server span per limited request; absent when tracing is off. */
  readonly tracing?: Tracing;
  /** A request id unique in the cluster and unguessable: a per-process prefix and 128 random bits. */
  nextRequestId(): string;
}

/**
 * Returns the request-id generator: `<8 hex chars>-<22 base64url chars>`, a per-process prefix (tells
 * operators which node answered) and 128 random bits (see `randomId`). Ids name reservations in
 * settlements between nodes, so they must not be guessable from the ones clients see (they used to
 * be a counter).
 */
export function requestIdGenerator(): () => string {
  const prefix = randomBytes(4).toString('hex');
  return () => `${prefix}-${randomId()}`;
}
