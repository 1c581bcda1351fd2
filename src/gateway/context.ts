/**
 * What the gateway's routes share: config, clock, limiter, token counter and upstream pools.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.ts';
import type { Handoff } from '../coord/handoff.ts';
import type { ConfiguredQuotas } from '../globalcap/quotas-from-config.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { Limiter } from '../limiter/limiter.ts';
import type { PromptCounter } from '../tokens/index.ts';
import type { HotDetector } from './hot-detector.ts';
import type { SpreadTenants } from './spread.ts';
import type { Upstreams } from './upstream.ts';

/** Dependencies of the gateway routes, built once per process. */
export interface GatewayContext {
  readonly config: LoadedConfig;
  readonly clock: Clock;
  readonly limiter: Limiter;
  /** Deployment provider quotas (cluster-wide caps leased to this node); absent when no deployment has a quota. */
  readonly quotas?: ConfiguredQuotas;
  /** Hot tenants spread over several nodes (config `spread`); absent when there are none. */
  readonly spread?: SpreadTenants;
  /** Hot tenant detection on the owner (`cluster.hot.threshold_rps`); absent when off. */
  readonly hot?: HotDetector;
  /** Ownership and handoff in a cluster: settlements of tenants that moved away go to their owner. */
  readonly handoff?: Handoff;
  readonly tokens: PromptCounter;
  readonly upstreams: Upstreams;
  /** A request id unique in the cluster: a random per-process prefix and a counter. */
  nextRequestId(): string;
}

/** Returns a cheap unique-id generator: `<8 hex chars>-<counter>`. */
export function requestIdGenerator(): () => string {
  const prefix = randomBytes(4).toString('hex');
  let seq = 0;
  return () => `${prefix}-${(++seq).toString(36)}`;
}
