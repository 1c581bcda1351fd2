/**
 * What the parts of a node's handoff share (`src/coord/handoff/handoff.ts` composes them): its options,
 * its counters, and the context every part is built with (the options with their defaults applied).
 */
import type { Clock } from '../../clock.ts';
import type { Limiter } from '../../limiter/limiter.ts';
import type { GoneProbe } from './process-gone.ts';
import type { PeerTransport, SettlementSender } from './peer-wire.ts';
import type { ReplicaStore } from './replicas.ts';
import type { RingOptions } from '../ring/ring.ts';
import type { TenantStateStore } from './state-store.ts';
import type { Member, Membership } from '../types.ts';

/** Log sink (pino's shape). */
export interface HandoffLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** The states that travel straight between nodes: the replicas held here and how they are sent. */
export interface HandoffPeers {
  readonly replicas: ReplicaStore;
  readonly transport: PeerTransport;
}

/** Options of a `Handoff`. */
export interface HandoffOptions {
  readonly self: Member;
  readonly membership: Membership;
  readonly limiter: Limiter;
  /** Redis state store; absent with static members. */
  readonly store?: TenantStateStore;
  /** States straight between nodes (handoffs, replicated checkpoints): see the module comment of `src/coord/handoff/handoff.ts`. */
  readonly peers?: HandoffPeers;
  readonly clock: Clock;
  /** Options the membership builds its rings with (for the ring without this node on leave). */
  readonly ringOptions?: RingOptions;
  /** Longest wait for a previous owner's handoff, ms. @default 250 */
  readonly waitMs?: number;
  /** Checkpoint period, ms; stand-in claims are looked at as often. @default 1000 */
  readonly checkpointMs?: number;
  /** A stand-in claim no request stood in for during this long is given back to its owner, ms. @default checkpointMs */
  readonly standInIdleMs?: number;
  /** Redis expiry of a tenant's stored state, ms (its longest window plus a margin). */
  readonly stateTtlMs: (tenant: string) => number;
  /** Sends forwarded settlements. */
  readonly send: SettlementSender;
  /**
   * Whether a writer's process is gone (`processGone`, `src/coord/handoff/process-gone.ts`: its port
   * refuses connections, or another process answers there): a stand-in, or a claim that loaded the
   * state of an owner that left the ring, then frees the slots of its requests in flight (see
   * `src/coord/handoff/stand-in.ts`, `src/coord/handoff/held-slots.ts`).
   * @default never (the slots stay held until their leases expire or their settlements arrive)
   */
  readonly ownerGone?: GoneProbe;
  /** This process's incarnation, written into every state it stores (`byInc`). @default a random UUID */
  readonly incarnation?: string;
  readonly log: HandoffLog;
  /**
   * Told after each handoff (`out`: states written for new owners), prefetch (`prefetch`: states
   * read) and stand-in return (`return`: usage sent to owners), with its duration (ms) and tenants moved.
   */
  readonly onMoved?: (kind: 'out' | 'prefetch' | 'return', ms: number, tenants: number) => void;
}

/** Counters of a node's handoffs, for tests and operators. */
export interface HandoffStats {
  /** Tenants claimed with state loaded from Redis (on a first request or prefetched). */
  loaded: number;
  /** Tenants loaded at once on a previous owner's announcement, before their first request. */
  prefetched: number;
  /** Duration of the last such load (every MGET and import), ms. */
  lastPrefetchMs: number;
  /** Claims that waited for a previous owner's announcement and got it. */
  waited: number;
  /** Claims whose wait ended at `waitMs` without the announcement. */
  timedOut: number;
  /** Handoffs that came after their claim stopped waiting, merged into the state decided from since (`src/coord/handoff/late-handoff.ts`). */
  lateMerged: number;
  /** Tenants exported to Redis because they moved away. */
  handedOff: number;
  /** Checkpoint writes (tenants). */
  checkpointed: number;
  /** Settlements and renewals forwarded to another owner. */
  forwarded: number;
  /** Forwarded settlements that could not be delivered (lost). */
  lost: number;
  /** Concurrency slots of requests that died with a crashed owner, freed when loading its checkpoint. */
  slotsFreed: number;
  /** Duration of the last handoff (export, write, announce), ms. */
  lastHandoffMs: number;
  /** Tenants claimed in place of a suspect owner (stand-in claims). */
  stoodIn: number;
  /** Stand-in claims given back to their owner (their usage sent, or none to send). */
  returned: number;
  /** Stand-in usage received from other nodes and added here. */
  absorbed: number;
  /** Stored states that did not parse (corrupt): the tenant started in the conservative state (every requests/tokens limit used up). */
  corrupt: number;
  /** Stored states loaded with values out of range, clamped (see `boundSnapshot`). */
  clamped: number;
  /** Tenant states sent to replicas with checkpoints (peers). */
  replicated: number;
  /** Tenant states pushed to new owners or stand-ins on a handoff (peers). */
  pushed: number;
  /** Tenant states a restarted static member took back from the others (see `recover`). */
  recovered: number;
}

/** Every counter of {@link HandoffStats} at 0. */
export function zeroStats(): HandoffStats {
  return {
    loaded: 0,
    prefetched: 0,
    lastPrefetchMs: 0,
    waited: 0,
    timedOut: 0,
    lateMerged: 0,
    handedOff: 0,
    checkpointed: 0,
    forwarded: 0,
    lost: 0,
    slotsFreed: 0,
    lastHandoffMs: 0,
    stoodIn: 0,
    returned: 0,
    absorbed: 0,
    corrupt: 0,
    clamped: 0,
    replicated: 0,
    pushed: 0,
    recovered: 0,
  };
}

/** The options of a `Handoff` with their defaults applied, and its counters: what each of its parts is built with. */
export interface HandoffContext {
  readonly self: Member;
  readonly limiter: Limiter;
  /** Redis state store; undefined with static members. */
  readonly store: TenantStateStore | undefined;
  /** States straight between nodes; undefined without. */
  readonly peers: HandoffPeers | undefined;
  /** Claims load state (from a store or peers): without either, every tenant is decided fresh here. */
  readonly tracks: boolean;
  readonly clock: Clock;
  /** Longest wait for a previous owner's handoff (and for a claim's Redis read), ms. */
  readonly waitMs: number;
  /** A stand-in claim no request stood in for during this long is given back to its owner, ms. */
  readonly standInIdleMs: number;
  /** Expiry of a tenant's stored state, ms. */
  readonly ttlMs: (tenant: string) => number;
  readonly send: SettlementSender;
  readonly log: HandoffLog;
  readonly onMoved: HandoffOptions['onMoved'];
  readonly ownerGone: HandoffOptions['ownerGone'];
  /** This process's incarnation (see {@link HandoffOptions.incarnation}). */
  readonly incarnation: string;
  /** The counters, shared by every part (the same object as `Handoff.stats`). */
  readonly stats: HandoffStats;
}
