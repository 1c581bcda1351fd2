/**
 * Ownership and handoff of tenants on one node: which tenants this node decides for, how their
 * limiter state arrives when they move here, leaves when they move away, and survives a crash.
 *
 * - A node decides for a tenant once it has *claimed* it: it owns the tenant under its ring (or a
 *   router sent the request here because the owner is suspect) and has loaded the tenant's state
 *   from Redis. Claimed tenants cost nothing more per request: no Redis command.
 * - On a ring change the node exports every claimed tenant it no longer owns, drops it from its
 *   limiter, writes the states in one pipeline and announces the handoff (`HandoffDone`).
 * - The announcement lists the tenants by new owner, which loads its share at once (MGET), so most
 *   first requests find their tenant claimed. A node claiming a tenant otherwise reads its state
 *   from Redis first. When the tenant's previous owner is
 *   still in the ring (a join) and has not announced its handoff for this ring, the node waits for
 *   the announcement up to `waitMs`. After that wait, or when the previous owner is gone (a crash),
 *   it starts from whatever Redis holds: the last checkpoint, at most one checkpoint period old
 *   (the conservative start: usage that old is still counted, only the last period can be missing),
 *   or fresh limits when Redis holds nothing. What Redis holds is not trusted: its values are
 *   clamped to the tenant's limits, and a value that does not parse starts the tenant with its
 *   requests and tokens limits used up for one window (docs/security.md, "Values read from Redis").
 *   When the previous owner crashed (left the ring), the concurrency slots of its in-flight requests
 *   are freed (those requests died with it; their tokens stay charged). A stand-in for an owner that
 *   is still a member never frees them: `src/coord/stand-in.ts` states that rule and its bound.
 * - Every `checkpointMs` the tenants touched since the last checkpoint are written (one `HSET` per
 *   1,000 tenants). A tenant swept idle (its state fresh) has its stored state deleted and stays
 *   claimed, so a light tenant costs no Redis command per request nor per idle sweep.
 * - Settlements, releases and renewals of requests admitted here for a tenant that has since moved
 *   are forwarded to its owner, which applies them to the reservation it received in the handoff.
 * - A graceful leave hands every tenant over to the ring without this node before it deregisters.
 * - A tenant claimed in place of a suspect owner (`fallback`) is held as a *stand-in*: not
 *   checkpointed (Redis keeps the owner's state), and given back once no request stood in for the
 *   owner for `standInIdleMs` and every request admitted here has ended: the usage admitted here
 *   since the claim (`windowUsageSince`, `Limiter.bucketUsage`) is sent to the owner, which adds it to its own state
 *   (`absorb`), and the claim is dropped. Without this the owner, healthy again, would decide on a
 *   state that lacks the stand-in's admissions, and the stand-in, routed to again later, on one
 *   that lacks the owner's. If the owner leaves the ring instead, the ring change hands the
 *   stand-in's state on like any claimed tenant's; if it gives the tenant to the stand-in itself,
 *   the stand-in loads the owner's state (its handoff, or its last checkpoint) like any moved
 *   tenant's and adds its own usage to it.
 *
 * With `peers` (every cluster node; `src/coord/transfer-http.ts`, `src/coord/replicas.ts`), states
 * also travel straight between nodes over signed HTTP, with or without Redis: a handoff is pushed to
 * each new owner before it is written to Redis; every checkpoint goes to each tenant's replica (the
 * next member of its range, the member that takes over if the owner dies); a claim loads the replica
 * held here first (no Redis read) and reads Redis only when there is none. With static members
 * (no store, the ring never changes) see `src/coord/static-handoff.ts` for the leave, stand-in and
 * restart rules and their bounds.
 */
import type { Clock } from '../clock.ts';
import type { Limiter } from '../limiter/limiter.ts';
import { MAX_STATE_BYTES } from '../limiter/snapshot-bounds.ts';
import { parseTenantSnapshot } from '../limiter/snapshot.ts';
import type { TenantSnapshot } from '../limiter/snapshot.ts';
import { isEmptyUsage, windowUsageSince, withOpenRequests, withUsage } from '../limiter/usage-delta.ts';
import type { UsageDelta } from '../limiter/usage-delta.ts';
import type { PeerTransport, ReplicaStore, TransferKind, WireState } from './replicas.ts';
import { createRing } from './ring.ts';
import { Rejoined } from './rejoin.ts';
import { slotsDiedWithOwner } from './stand-in.ts';
import type { RingOptions } from './ring.ts';
import type { HandoffDone, OversizedState, StoredState, TenantStateStore } from './state-store.ts';
import type { Member, Membership, Ring } from './types.ts';

/**
 * A settlement or renewal of a reservation, sent to the tenant's owner; or (`absorb`) the usage a
 * stand-in admitted for the owner's tenant, sent when it gives the tenant back.
 */
export type ForwardedSettlement =
  | { readonly op: 'finish'; readonly tenant: string; readonly id: string; /** Actual tokens used. */ readonly tokens: number }
  | { readonly op: 'renew'; readonly tenant: string; readonly id: string }
  | { readonly op: 'absorb'; readonly tenant: string; readonly usage: UsageDelta };

/** A forwarded settlement or renewal of one reservation. */
type ReservationOp = Extract<ForwardedSettlement, { readonly id: string }>;

/**
 * Sends a settlement from node `from` to node `to`; `hops` counts the nodes it went through.
 * @throws when the node did not accept it.
 */
export type SettlementSender = (from: Member, to: Member, settlement: ForwardedSettlement, hops: number) => Promise<void>;

/** Why a node claims a tenant: see {@link Handoff.ready}. */
export type ClaimHow = 'owner' | 'fallback' | 'handed';

/** Where a tenant's requests are decided, as seen by this node. */
export type Placement = { readonly here: true } | { readonly here: false; /** The owner under this node's ring. */ readonly owner: Member | undefined };

/** Log sink (pino's shape). */
export interface HandoffLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** Options of a {@link Handoff}. */
export interface HandoffOptions {
  readonly self: Member;
  readonly membership: Membership;
  readonly limiter: Limiter;
  /** Redis state store; absent with static members. */
  readonly store?: TenantStateStore;
  /** States straight between nodes (handoffs, replicated checkpoints): see the module comment. */
  readonly peers?: { readonly replicas: ReplicaStore; readonly transport: PeerTransport };
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
   * Whether a member's process is gone (its port refuses connections: `listenerGone`): a stand-in
   * then frees the slots of the owner's requests in flight (see `src/coord/stand-in.ts`).
   * @default never (the slots stay held until their leases expire)
   */
  readonly ownerGone?: (owner: Member) => Promise<boolean>;
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

/** A tenant this node holds in place of its suspect owner. */
interface StandIn {
  /** The owner it stands in for. */
  readonly owner: string;
  /** The state as loaded when standing in began (undefined: fresh), or as last sent to the owner. */
  base: TenantSnapshot | undefined;
  /** Clock ms of the last request that stood in for the owner. */
  lastMs: number;
  /** A return is being sent. */
  returning: boolean;
  /** The owner's requests in flight in `base` hold slots here until the owner is known gone. */
  ownerSlots: boolean;
}

const SEEN_ANNOUNCEMENTS = 256;
/** Tenants per MGET when loading a handoff at once. */
const PREFETCH_CHUNK = 100;
/** Forwarding hops before a settlement is dropped (owner changed again while it travelled). */
export const MAX_FORWARD_HOPS = 2;

/** A node's ownership of tenants and the handoff of their limiter state. See the module comment. */
export class Handoff {
  readonly #self: Member;
  readonly #membership: Membership;
  readonly #limiter: Limiter;
  readonly #store: TenantStateStore | undefined;
  readonly #peers: HandoffOptions['peers'];
  /** Claims load state (from a store or peers): without either, every tenant is decided fresh here. */
  readonly #tracks: boolean;
  readonly #clock: Clock;
  readonly #ringOptions: RingOptions;
  readonly #waitMs: number;
  readonly #checkpointMs: number;
  readonly #standInIdleMs: number;
  readonly #ttlMs: (tenant: string) => number;
  readonly #send: SettlementSender;
  readonly #log: HandoffLog;
  readonly #onMoved: HandoffOptions['onMoved'];
  readonly #ownerGone: HandoffOptions['ownerGone'];

  #ring: Ring;
  #previous: Ring;
  #leaving = false;
  readonly #claimed = new Set<string>();
  /** Claimed tenants held in place of their suspect owner (see the module comment). */
  readonly #standIns = new Map<string, StandIn>();
  /**
   * What was admitted here as a stand-in for tenants a ring change then gave this node, added once
   * their state is loaded: the usage, and the requests still running (`current`'s reservations not in `base`).
   */
  readonly #carried = new Map<string, { readonly usage: UsageDelta; readonly current: TenantSnapshot | undefined; readonly base: ReadonlySet<string> }>();
  readonly #loading = new Map<string, Promise<void>>();
  /** States of the tenants this node decided for when the others dropped it from their ring (see `#dropped`). */
  readonly #rejoined = new Rejoined();
  readonly #dirty = new Set<string>();
  /** Claimed tenants whose state Redis may hold (checkpointed here, or loaded from a handoff or checkpoint). */
  readonly #stored = new Set<string>();
  /** `from|ring` of announcements seen, oldest first. */
  readonly #seen = new Set<string>();
  readonly #waiters = new Map<string, Set<() => void>>();
  /** Handoffs run one after another, so states are written in ring order. */
  #chain: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  /** Forwarded settlements not yet answered. */
  readonly #sending = new Set<Promise<void>>();
  #unsubscribe: (() => void) | undefined;
  readonly stats: HandoffStats = {
    loaded: 0,
    prefetched: 0,
    lastPrefetchMs: 0,
    waited: 0,
    timedOut: 0,
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

  /** Builds (does not start) a node's handoff; see {@link HandoffOptions} for units and defaults. */
  constructor(opts: HandoffOptions) {
    this.#self = opts.self;
    this.#membership = opts.membership;
    this.#limiter = opts.limiter;
    this.#store = opts.store;
    this.#peers = opts.peers;
    this.#tracks = opts.store !== undefined || opts.peers !== undefined;
    this.#clock = opts.clock;
    this.#ringOptions = opts.ringOptions ?? {};
    this.#waitMs = opts.waitMs ?? 250;
    this.#checkpointMs = opts.checkpointMs ?? 1_000;
    this.#standInIdleMs = opts.standInIdleMs ?? this.#checkpointMs;
    this.#ttlMs = opts.stateTtlMs;
    this.#send = opts.send;
    this.#log = opts.log;
    this.#onMoved = opts.onMoved;
    this.#ownerGone = opts.ownerGone;
    this.#ring = createRing([], this.#ringOptions);
    this.#previous = this.#ring;
  }

  /**
   * Subscribes to handoff announcements and starts checkpoints. Call before the membership starts,
   * so the first ring (and the ring before this node joined) are seen.
   * @throws the Redis error when subscribing fails.
   */
  async start(): Promise<void> {
    await this.#store?.subscribe(
      (done) => this.#announced(done),
      (err) => this.#log.warn({ err: err.message }, 'handoff subscriber error'),
    );
    this.#unsubscribe = this.#membership.onChange((ring) => this.#ringChanged(ring));
    if (this.#tracks) {
      this.#timer = setInterval(() => {
        void this.checkpoint();
        void this.returnStandIns();
      }, this.#checkpointMs);
      this.#timer.unref();
    }
  }

  /**
   * After the membership started: takes its first ring, with the ring before this node joined as the
   * previous one (when the membership did not announce it as a change already).
   */
  joined(): void {
    const ring = this.#membership.ring();
    if (ring.version !== this.#ring.version) {
      this.#previous = createRing(
        ring.members.filter((m) => m.id !== this.#self.id),
        this.#ringOptions,
      );
      this.#ring = ring;
    }
    this.#awaitHandoffs();
  }

  /**
   * True once this node has received its handoffs after {@link joined}: every member of the ring
   * before it joined that is still in the ring announced its handoff for the ring it joined (and
   * the states announced for this node are loaded), or `waitMs` passed without an announcement.
   * True as soon as `joined()` ran without a store (nothing is handed over) or when nobody held
   * tenants before. False before `joined()` (`/readyz` waits for it: `handoff`).
   */
  get handoffsReceived(): boolean {
    return this.#handoffsReceived;
  }

  #handoffsReceived = false;
  #awaitingHandoffs = false;

  #awaitHandoffs(): void {
    if (this.#awaitingHandoffs) return;
    this.#awaitingHandoffs = true;
    const ring = this.#ring;
    const inRing = new Set(ring.members.map((m) => m.id));
    const from = this.#store === undefined ? [] : this.#previous.members.filter((m) => m.id !== this.#self.id && inRing.has(m.id));
    if (from.length === 0) {
      this.#handoffsReceived = true;
      return;
    }
    void Promise.all(from.map((m) => (this.#seen.has(`${m.id}|${ring.version}`) ? true : this.#waitFor(`${m.id}|${ring.version}`))))
      // The announcements start loading this node's tenants (prefetch): wait for those loads too.
      .then(() => Promise.allSettled([...this.#loading.values()]))
      .then(() => {
        this.#handoffsReceived = true;
      });
  }

  /** The ring this node decides by (without itself once leaving). */
  ring(): Ring {
    return this.#ring;
  }

  /**
   * Where a tenant's request is decided. Here when this node owns it, or when `fallbackFor` names
   * the owner (a router routes around it as suspect) and this node is not leaving.
   */
  place(tenant: string, fallbackFor?: string): Placement {
    const owner = this.#ring.owner(tenant);
    if (owner === undefined) return this.#leaving ? { here: false, owner } : { here: true };
    if (owner.id === this.#self.id) return { here: true };
    if (fallbackFor !== undefined && fallbackFor === owner.id && !this.#leaving) return { here: true };
    return { here: false, owner };
  }

  /**
   * Resolves once this node may decide for `tenant` (its state loaded). Undefined when it already
   * may: the per-request fast path. Never rejects: a Redis failure starts the tenant fresh (logged).
   * @param how `owner`: this node owns the tenant (waits for a live previous owner's handoff);
   *   `fallback`: a router routes around the suspect owner (no wait; the slots and reservations of
   *   the requests the owner had in flight stay counted until their leases expire, see
   *   `src/coord/stand-in.ts`); `handed`: the node that handed the tenant here said so (its
   *   handoff is stored already: no wait). @default owner
   */
  ready(tenant: string, how: ClaimHow = 'owner'): Promise<void> | undefined {
    if (how === 'fallback') {
      const standIn = this.#standIns.get(tenant);
      if (standIn !== undefined) standIn.lastMs = this.#clock.now();
    }
    return this.#ready(tenant, how, true);
  }

  #ready(tenant: string, how: ClaimHow, again: boolean): Promise<void> | undefined {
    if (!this.#tracks || this.#claimed.has(tenant)) return undefined;
    const pending = this.#loading.get(tenant);
    // Another load (a prefetch chunk, another request) is under way: wait for it, then claim
    // ourselves if it did not (once).
    if (pending !== undefined) return again ? pending.then(() => this.#ready(tenant, how, false)) : pending;
    const loading = this.#claim(tenant, how).finally(() => this.#loading.delete(tenant));
    this.#loading.set(tenant, loading);
    return loading;
  }

  /** True when this node's limiter holds the tenant's state now (settle it here, synchronously). */
  holds(tenant: string): boolean {
    return !this.#tracks || this.#claimed.has(tenant);
  }

  /** Marks a tenant's state as changed, for the next checkpoint. */
  touched(tenant: string): void {
    if (this.#tracks) this.#dirty.add(tenant);
  }

  /**
   * Settles reservation `id` on `tokens` actually used and releases its slot: here when this node
   * holds the tenant, otherwise at the tenant's owner (forwarded, one retry, then logged as lost).
   * @param hops nodes the settlement went through (0 when it starts here).
   * @param from the node that forwarded it: when this node's ring still names that node as the owner,
   *   the sender's ring is newer (it handed the tenant here), so the settlement is applied here.
   */
  async finish(tenant: string, id: string, tokens: number, hops = 0, from?: string): Promise<{ settled: boolean; released: boolean }> {
    if (await this.#holdsOrForwards(tenant, { op: 'finish', tenant, id, tokens }, hops, from)) {
      const settled = this.#limiter.settle(tenant, id, tokens).settled;
      const released = this.#limiter.release(tenant, id);
      this.touched(tenant);
      return { settled, released };
    }
    return { settled: false, released: false };
  }

  /** Renews reservation `id` (a long stream) here or at the tenant's owner; `hops` and `from` as for {@link finish}. */
  async renew(tenant: string, id: string, hops = 0, from?: string): Promise<boolean> {
    if (await this.#holdsOrForwards(tenant, { op: 'renew', tenant, id }, hops, from)) {
      const renewed = this.#limiter.renew(tenant, id);
      this.touched(tenant);
      return renewed;
    }
    return false;
  }

  /**
   * Graceful leave: from now on this node decides for no tenant; every claimed tenant is handed to
   * its owner in the ring without this node, and the handoff announced. Call before the membership
   * deregisters, so the new owners find the states before they see the new ring.
   */
  async leave(): Promise<void> {
    // Stand-in claims go back to their owners with their usage first (requests still running here
    // are counted as reserved); any left (owner unreachable) are handed over with the rest.
    await Promise.all([...this.#standIns].map(([tenant, standIn]) => this.#giveBack(tenant, standIn, true)));
    this.#leaving = true;
    this.#ring = this.#without(this.#membership.ring());
    await this.#handOver(this.#ring);
  }

  /** Writes the tenants touched since the last checkpoint (one `HSET` per 1,000 tenants). Never rejects. */
  async checkpoint(): Promise<void> {
    const store = this.#store;
    if (!this.#tracks || this.#dirty.size === 0) return;
    const states: StoredState[] = [];
    for (const tenant of this.#dirty) {
      // A stand-in's state is not the owner's: Redis keeps the owner's checkpoint.
      if (!this.#claimed.has(tenant) || this.#standIns.has(tenant)) continue;
      const state = this.#state(tenant);
      if (state !== undefined) states.push(state);
    }
    this.#dirty.clear();
    const replicated = this.#replicate(states);
    if (store === undefined) return replicated;
    try {
      await store.write(states);
      for (const s of states) if (this.#claimed.has(s.tenant)) this.#stored.add(s.tenant);
      this.stats.checkpointed += states.length;
    } catch (err) {
      this.#log.warn({ err: (err as Error).message, tenants: states.length }, 'checkpoint failed');
    }
    await replicated;
  }

  /**
   * Sends checkpoint `states` to each tenant's replica under the ring: the second member of its
   * range (one push per replica). Never rejects: a replica that cannot be reached misses this
   * checkpoint (logged), and gets the tenant's next one.
   */
  async #replicate(states: readonly StoredState[]): Promise<void> {
    if (this.#peers === undefined || states.length === 0) return;
    const byReplica = new Map<string, { member: Member; states: WireState[] }>();
    const at = this.#clock.now();
    for (const s of states) {
      const replica = this.#ring.range(s.tenant, 2)[1];
      if (replica === undefined || replica.id === this.#self.id) continue;
      let group = byReplica.get(replica.id);
      if (group === undefined) byReplica.set(replica.id, (group = { member: replica, states: [] }));
      group.states.push({ tenant: s.tenant, json: s.json, at });
    }
    await Promise.all([...byReplica.values()].map((g) => this.#push(g.member, 'checkpoint', g.states)));
  }

  /** Pushes states to a member; never rejects (logged). @returns whether it stored them. */
  async #push(to: Member, kind: TransferKind, states: readonly WireState[]): Promise<boolean> {
    if (this.#peers === undefined || states.length === 0) return true;
    try {
      await this.#peers.transport.push(this.#self, to, kind, states);
      if (kind === 'checkpoint') this.stats.replicated += states.length;
      else this.stats.pushed += states.length;
      return true;
    } catch (err) {
      this.#log.warn({ to: to.id, kind, tenants: states.length, err: (err as Error).message }, kind === 'checkpoint' ? 'replica checkpoint not delivered' : 'handoff to a peer not delivered');
      return false;
    }
  }

  /**
   * Stores states another node sent (its handoff or its replicated checkpoint) among this node's
   * replicas, each expiring after the tenant's state TTL; tenants this node claims already keep
   * their own state (what arrives later is older than what they decided since). Tenants `known`
   * rejects (not in the config) are ignored.
   * @returns how many were stored.
   */
  receive(states: readonly WireState[], known: (tenant: string) => boolean): number {
    const replicas = this.#peers?.replicas;
    if (replicas === undefined) return 0;
    let stored = 0;
    const now = Date.now();
    for (const s of states) {
      if (!known(s.tenant) || this.#claimed.has(s.tenant)) continue;
      if (replicas.put({ tenant: s.tenant, json: s.json, at: s.at, expiresAtMs: now + this.#ttlMs(s.tenant) })) stored++;
    }
    return stored;
  }

  /**
   * Deletes the stored states of claimed tenants the limiter no longer holds (swept idle: their
   * state is fresh): a checkpoint taken while they were busy (an open reservation, a full window)
   * would otherwise be loaded by a later owner. The tenants stay claimed: this node still owns
   * them and their state is fresh, so their next request is decided in RAM without reading Redis
   * (a tenant re-read at every idle sweep cost a command per light tenant every sweep interval).
   * Never rejects; on a Redis error they are tried again at the next sweep.
   */
  async forgetIdle(): Promise<void> {
    if (this.#store === undefined) return;
    const idle = [...this.#stored].filter((tenant) => !this.#limiter.hasTenant(tenant) && !this.#standIns.has(tenant));
    if (idle.length === 0) return;
    try {
      await this.#store.remove(idle);
    } catch (err) {
      this.#log.warn({ err: (err as Error).message, tenants: idle.length }, 'deleting the states of idle tenants failed: tried again at the next sweep');
      return;
    }
    for (const tenant of idle) if (!this.#limiter.hasTenant(tenant)) this.#stored.delete(tenant);
  }

  /**
   * Gives back the stand-in claims no request stood in for during `standInIdleMs` and whose
   * requests admitted here have all ended: sends each owner the usage admitted here since the claim
   * (one `absorb` per tenant, skipped when there is none), then drops the claim. A claim that a
   * request stood in for while its usage travelled is kept, with what was sent as its new base. An
   * owner that cannot be reached, or no longer owns the tenant under its ring, is tried again at the
   * next period. Never rejects.
   */
  async returnStandIns(): Promise<void> {
    const now = this.#clock.now();
    const holding = [...this.#standIns].filter(([, s]) => s.ownerSlots);
    for (const id of new Set(holding.map(([, s]) => s.owner))) {
      const owner = this.#ring.members.find((m) => m.id === id);
      if (owner !== undefined) await this.#freeIfOwnerGone(holding.filter(([, s]) => s.owner === id), owner);
    }
    const due: [string, StandIn][] = [];
    for (const [tenant, standIn] of this.#standIns) if (!standIn.returning && now - standIn.lastMs >= this.#standInIdleMs) due.push([tenant, standIn]);
    await Promise.all(due.map(([tenant, standIn]) => this.#giveBack(tenant, standIn, false)));
  }

  /**
   * Frees the slots of the owner's requests in flight that `standIns` loaded from its checkpoint,
   * when `ownerGone` says its process is gone (see `src/coord/stand-in.ts`). Never rejects.
   */
  async #freeIfOwnerGone(standIns: readonly (readonly [string, StandIn])[], owner: Member): Promise<void> {
    if (this.#ownerGone === undefined || standIns.length === 0) return;
    let gone = false;
    try {
      gone = await this.#ownerGone(owner);
    } catch {
      gone = false;
    }
    if (!gone) return;
    for (const [tenant, standIn] of standIns) {
      if (this.#standIns.get(tenant) !== standIn || !standIn.ownerSlots) continue;
      standIn.ownerSlots = false;
      for (const r of standIn.base?.reservations ?? []) if (!r.released && this.#limiter.release(tenant, r.id)) this.stats.slotsFreed++;
      this.touched(tenant);
    }
    this.#log.info({ owner: owner.id, tenants: standIns.length }, 'owner gone (connection refused): the slots of its requests in flight are freed');
  }

  /** Gives one stand-in claim back (see {@link returnStandIns}); `force`: also while requests admitted here run. */
  async #giveBack(tenant: string, standIn: StandIn, force: boolean): Promise<void> {
    const owner = this.#ring.owner(tenant);
    // The ring moved the tenant since (the ring change handed it on, or made it ours): not a stand-in any more.
    if (owner === undefined || owner.id !== standIn.owner) return;
    const current = this.#limiter.exportTenant(tenant);
    const baseIds = new Set(standIn.base?.reservations.map((r) => r.id));
    // A request admitted here still runs: its settlement is applied here, so the claim stays until it ends.
    if (!force && current?.reservations.some((r) => !baseIds.has(r.id)) === true) return;
    const usage = this.#usageSince(tenant, standIn.base, current);
    const lastMs = standIn.lastMs;
    const started = this.#clock.now();
    if (!isEmptyUsage(usage)) {
      standIn.returning = true;
      try {
        await this.#send(this.#self, owner, { op: 'absorb', tenant, usage }, 1);
      } catch (err) {
        this.#log.warn({ tenant, owner: owner.id, err: (err as Error).message }, 'giving a stand-in tenant back failed: tried again at the next checkpoint');
        return;
      } finally {
        standIn.returning = false;
      }
    }
    if (this.#standIns.get(tenant) !== standIn) return;
    if (standIn.lastMs !== lastMs) {
      // A request stood in for the owner meanwhile: keep standing in; what was sent is counted there.
      standIn.base = current;
      this.#limiter.untally(tenant, usage.buckets);
      return;
    }
    this.#unclaim(tenant);
    this.stats.returned++;
    this.#log.info({ tenant, owner: owner.id, windows: usage.windows.length, buckets: usage.buckets.length }, 'stand-in tenant given back to its owner');
    this.#onMoved?.('return', this.#clock.now() - started, 1);
  }

  /**
   * Adds the usage a stand-in admitted for `tenant` to this node's state of it (see `withUsage`),
   * loading the tenant first if this node had not claimed it.
   * @returns false when this node does not own the tenant under its ring (nothing changes).
   */
  async absorb(tenant: string, usage: UsageDelta): Promise<boolean> {
    if (!this.#tracks || !this.place(tenant).here || this.#standIns.has(tenant)) return false;
    await this.ready(tenant);
    if (!this.#claimed.has(tenant) || !this.place(tenant).here) return false;
    this.#limiter.absorbUsage(tenant, usage);
    this.touched(tenant);
    this.stats.absorbed++;
    return true;
  }

  /** The usage admitted here for `tenant` since `base`, its state then; `current` is its state now. */
  #usageSince(tenant: string, base: TenantSnapshot | undefined, current: TenantSnapshot | undefined): UsageDelta {
    return { windows: windowUsageSince(base, current), buckets: this.#limiter.bucketUsage(tenant) };
  }

  /** Forgets a claimed tenant here: its stand-in role (and tally), limiter state, claim, pending checkpoint and stored-state note. */
  #unclaim(tenant: string): void {
    this.#standIns.delete(tenant);
    this.#limiter.stopTally(tenant);
    this.#limiter.dropTenant(tenant);
    this.#claimed.delete(tenant);
    this.#dirty.delete(tenant);
    this.#stored.delete(tenant);
  }

  /**
   * Gives `owner` back every tenant of it held here: the stand-in claims for it (their state now,
   * requests admitted here included; the claim is dropped and the state kept as a replica, so a
   * request still routed here before routers see the owner again starts from it) and the replicas
   * of its tenants (its checkpoints, kept). Called when a restarted static member asks
   * (`src/coord/static-handoff.ts`). Settlements of requests still running here are then forwarded to it.
   */
  surrender(owner: string): WireState[] {
    const at = this.#clock.now();
    const out: WireState[] = [];
    const replicas = this.#peers?.replicas;
    for (const e of replicas?.entries() ?? []) if (typeof e.json === 'string' && this.#ring.owner(e.tenant)?.id === owner) out.push({ tenant: e.tenant, json: e.json, at: e.at });
    for (const [tenant, standIn] of [...this.#standIns]) {
      if (standIn.owner !== owner) continue;
      const snapshot = this.#limiter.exportTenant(tenant);
      this.#unclaim(tenant);
      if (snapshot === undefined) continue;
      const json = JSON.stringify(snapshot);
      out.push({ tenant, json, at });
      replicas?.put({ tenant, json, at, expiresAtMs: Date.now() + this.#ttlMs(tenant) });
      this.stats.returned++;
    }
    return out;
  }

  /** The state of every tenant claimed here and of every replica held (for the local state file). */
  states(): WireState[] {
    const at = this.#clock.now();
    const out: WireState[] = [];
    for (const e of this.#peers?.replicas.entries() ?? []) if (typeof e.json === 'string' && !this.#claimed.has(e.tenant)) out.push({ tenant: e.tenant, json: e.json, at: e.at });
    for (const tenant of this.#claimed) {
      const snapshot = this.#limiter.exportTenant(tenant);
      if (snapshot !== undefined) out.push({ tenant, json: JSON.stringify(snapshot), at });
    }
    return out;
  }

  /** The transport and replicas of this node's peers (undefined without). */
  get peers(): HandoffOptions['peers'] {
    return this.#peers;
  }

  /** Tenants held here in place of their suspect owner. */
  standIns(): ReadonlySet<string> {
    return new Set(this.#standIns.keys());
  }

  /** True when this node holds `tenant` in place of its suspect owner. */
  isStandIn(tenant: string): boolean {
    return this.#standIns.has(tenant);
  }

  /** Stops checkpoints and announcements (writes nothing; call `leave()` first for a graceful exit). */
  stop(): void {
    clearInterval(this.#timer);
    this.#unsubscribe?.();
    this.#store?.close();
    for (const waiters of this.#waiters.values()) for (const wake of waiters) wake();
    this.#waiters.clear();
  }

  /** Tenants this node decides for now. */
  claimed(): ReadonlySet<string> {
    return this.#claimed;
  }

  /** Resolves once every forwarded settlement sent so far was delivered or given up (call before exiting). */
  async flush(): Promise<void> {
    while (this.#sending.size > 0) await Promise.allSettled([...this.#sending]);
  }

  /** This node. */
  get self(): Member {
    return this.#self;
  }

  /** Until the handoff chain is idle (tests). */
  settledDown(): Promise<void> {
    return this.#chain;
  }

  /** True when the tenant is held here (after loading it if this node owns it); false after forwarding. */
  async #holdsOrForwards(tenant: string, settlement: ReservationOp, hops: number, from: string | undefined): Promise<boolean> {
    if (!this.#tracks || this.#claimed.has(tenant)) return true;
    const placed = this.place(tenant);
    if (placed.here) {
      await this.ready(tenant);
      return true;
    }
    if (from !== undefined && this.place(tenant, from).here) {
      // The sender handed the tenant here under a ring this node has not seen yet.
      await this.ready(tenant, 'handed');
      return true;
    }
    const owner = placed.owner;
    if (owner === undefined || hops >= MAX_FORWARD_HOPS) {
      this.stats.lost++;
      this.#log.warn({ tenant, id: settlement.id, op: settlement.op, hops }, 'settlement lost: no owner to forward it to');
      return false;
    }
    this.stats.forwarded++;
    // The receiver loads the tenant's state without waiting when it sees who sent this: store it first.
    await this.#chain;
    const sending = this.#deliver(owner, tenant, settlement, hops + 1);
    this.#sending.add(sending);
    try {
      await sending;
    } finally {
      this.#sending.delete(sending);
    }
    return false;
  }

  /** Sends a settlement, once more after 100 ms on failure (to the owner then), else logs it as lost. */
  async #deliver(owner: Member, tenant: string, settlement: ReservationOp, hops: number): Promise<void> {
    try {
      await this.#send(this.#self, owner, settlement, hops);
    } catch {
      try {
        await new Promise((resolve) => setTimeout(resolve, 100));
        await this.#send(this.#self, this.#ring.owner(tenant) ?? owner, settlement, hops);
      } catch (err) {
        this.stats.lost++;
        this.#log.warn({ tenant, id: settlement.id, op: settlement.op, to: owner.id, err: (err as Error).message }, 'settlement lost: owner unreachable');
      }
    }
  }

  async #claim(tenant: string, how: ClaimHow): Promise<void> {
    const store = this.#store;
    const fallback = how === 'fallback';
    const previous = this.#previous.owner(tenant);
    const ring = this.#ring;
    const previousAlive = previous !== undefined && ring.members.some((m) => m.id === previous.id);
    // The previous owner died (gone from the ring without announcing a handoff): the requests it had
    // in flight died with it, so their concurrency slots are freed on load. A stand-in (`fallback`)
    // never frees them: its owner is still a member, maybe only stalled, and its streams may go on
    // (see `src/coord/stand-in.ts`: the slots stay counted until their leases expire or are settled).
    const crashed = slotsDiedWithOwner(fallback, previous?.id, this.#self.id, previousAlive, previous !== undefined && this.#seen.has(`${previous.id}|${ring.version}`));
    if (store !== undefined && how === 'owner' && previous !== undefined && previous.id !== this.#self.id && previousAlive) {
      const key = `${previous.id}|${ring.version}`;
      if (!this.#seen.has(key)) {
        if (await this.#waitFor(key)) this.stats.waited++;
        else {
          this.stats.timedOut++;
          this.#log.warn({ tenant, from: previous.id, ring: ring.version, waitMs: this.#waitMs }, 'handoff not announced in time: starting from the last checkpoint');
        }
      }
    }
    let json: string | OversizedState | null = null;
    // The replica held here (a checkpoint, a handoff pushed here, a state given back): no Redis read.
    const replica = this.#peers?.replicas.take(tenant);
    if (replica !== undefined) json = replica.json;
    else if (store !== undefined) try {
      // Redis slow or frozen: the claim waits at most wait_ms for the read, as for a handoff. The
      // read is bounded (MAX_STATE_BYTES), so a large value cannot be what makes it time out.
      json = await withTimeout(store.read(tenant), this.#waitMs);
    } catch (err) {
      this.#log.warn({ tenant, err: (err as Error).message }, 'tenant state unreadable: starting fresh');
    }
    // Without a store the ring never moves a tenant: a request handed here by a leaving owner stands in for it too.
    if (this.#adopt(tenant, json, crashed, ring) && (fallback || (store === undefined && how === 'handed')) && !this.place(tenant).here) {
      const owner = this.#ring.owner(tenant);
      if (owner !== undefined) {
        const base = this.#limiter.exportTenant(tenant);
        const standIn: StandIn = { owner: owner.id, base, lastMs: this.#clock.now(), returning: false, ownerSlots: base?.reservations.some((r) => !r.released) === true };
        this.#standIns.set(tenant, standIn);
        this.#limiter.startTally(tenant);
        this.stats.stoodIn++;
        if (standIn.ownerSlots) await this.#freeIfOwnerGone([[tenant, standIn]], owner);
      }
    }
  }

  /**
   * Makes `json` (a stored state, or null for fresh) the tenant's state here and claims it, unless
   * the ring changed while it was read and this node no longer owns the tenant (then nothing).
   */
  #adopt(tenant: string, loaded: string | OversizedState | null, crashed: boolean, readUnder: Ring): boolean {
    if (this.#ring !== readUnder && !this.place(tenant).here) return false;
    // Held here when the others dropped this node: used only when nothing newer came.
    const json = this.#rejoined.newer(tenant, loaded);
    try {
      if (json === null) this.#limiter.dropTenant(tenant);
      else this.#load(tenant, json, crashed);
    } catch (err) {
      // The tenant's policy is invalid (its acquires fail the same way): nothing to restore onto.
      this.#limiter.dropTenant(tenant);
      this.#log.warn({ tenant, err: (err as Error).message }, 'tenant state not loaded: starting fresh');
    }
    const carried = this.#carried.get(tenant);
    if (carried !== undefined) {
      this.#carried.delete(tenant);
      const loaded = this.#limiter.exportTenant(tenant);
      this.#limiter.importTenant(tenant, withOpenRequests(withUsage(loaded, carried.usage, this.#clock.now()), carried.current, carried.base));
      this.#dirty.add(tenant);
    }
    this.#claimed.add(tenant);
    // Loaded from elsewhere: its replica may not hold it (a restarted replica); the next checkpoint sends it there.
    if (json !== null && this.#peers !== undefined) this.#dirty.add(tenant);
    return true;
  }

  /**
   * Loads a stored state into the limiter. Its values are clamped to the tenant's limits (counted in
   * `stats.clamped`, logged); a state that does not parse is corrupt (`stats.corrupt`, logged with
   * the reason, never the value): the tenant starts in the conservative state, every requests and
   * tokens limit used up for one window, never with fresh limits. So is a value over the byte cap
   * (`OversizedState`: never read, see `TenantStateStore.read`).
   * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
   */
  #load(tenant: string, json: string | OversizedState, crashed: boolean): void {
    let snapshot: TenantSnapshot;
    try {
      if (typeof json !== 'string') throw new Error(`tenant snapshot: ${json.bytes} bytes, over the ${MAX_STATE_BYTES}-byte cap (not read)`);
      snapshot = parseTenantSnapshot(json);
    } catch (err) {
      this.stats.corrupt++;
      this.#log.warn({ tenant, err: clip((err as Error).message) }, 'tenant state in Redis is corrupt: its requests and tokens limits start used up for one window');
      this.#limiter.importConservative(tenant);
      this.#stored.add(tenant);
      return;
    }
    const clamped = this.#limiter.importTenant(tenant, snapshot);
    this.#stored.add(tenant);
    this.stats.loaded++;
    if (clamped > 0) {
      this.stats.clamped++;
      this.#log.warn({ tenant, values: clamped }, 'tenant state in Redis out of range: values clamped to the limits');
    }
    if (crashed) {
      for (const r of snapshot.reservations) if (!r.released && this.#limiter.release(tenant, r.id)) this.stats.slotsFreed++;
    }
  }

  /**
   * Loads at once the tenants a previous owner announced it handed here (one MGET per chunk of
   * {@link PREFETCH_CHUNK}, chunk after chunk), so their first requests find them claimed. A request
   * for a tenant of the chunk being read waits for that chunk only; tenants of later chunks are
   * loaded by their own first request if it comes first. Claimed or loading tenants are skipped.
   */
  async #prefetch(tenants: readonly string[], from: string, store: TenantStateStore): Promise<void> {
    const ring = this.#ring;
    const mine = (t: string): boolean => this.place(t).here || this.place(t, from).here;
    const started = this.#clock.now();
    const before = this.stats.prefetched;
    for (let i = 0; i < tenants.length; i += PREFETCH_CHUNK) {
      const chunk = tenants.slice(i, i + PREFETCH_CHUNK).filter((t) => !this.#claimed.has(t) && !this.#loading.has(t) && mine(t));
      if (chunk.length === 0) continue;
      let failed = false;
      // Never rejects: on a Redis error the chunk's requests claim their tenants themselves.
      const load = (async () => {
        try {
          const values = await store.readMany(chunk);
          for (const [k, tenant] of chunk.entries()) if (!this.#claimed.has(tenant) && this.#adopt(tenant, values[k] ?? null, false, ring)) this.stats.prefetched++;
        } catch (err) {
          failed = true;
          this.#log.warn({ err: (err as Error).message, tenants: tenants.length - i }, 'prefetching handed-over tenants failed: they load on their first request');
        }
      })();
      for (const t of chunk) this.#loading.set(t, load);
      await load;
      for (const t of chunk) if (this.#loading.get(t) === load) this.#loading.delete(t);
      if (failed) return;
    }
    this.stats.lastPrefetchMs = this.#clock.now() - started;
    this.#onMoved?.('prefetch', this.stats.lastPrefetchMs, this.stats.prefetched - before);
  }

  /** Waits for announcement `key` up to `waitMs`. @returns whether it came. */
  #waitFor(key: string): Promise<boolean> {
    return new Promise((resolve) => {
      let waiters = this.#waiters.get(key);
      if (waiters === undefined) this.#waiters.set(key, (waiters = new Set()));
      const set = waiters;
      const wake = (): void => {
        clearTimeout(timer);
        set.delete(wake);
        resolve(this.#seen.has(key));
      };
      const timer = setTimeout(wake, this.#waitMs);
      set.add(wake);
    });
  }

  #announced(done: HandoffDone): void {
    const key = `${done.from}|${done.ring}`;
    this.#seen.add(key);
    if (this.#seen.size > SEEN_ANNOUNCEMENTS) {
      const oldest = this.#seen.values().next().value;
      if (oldest !== undefined) this.#seen.delete(oldest);
    }
    const waiters = this.#waiters.get(key);
    if (waiters !== undefined) {
      this.#waiters.delete(key);
      for (const wake of waiters) wake();
    }
    const mine = done.tenants?.[this.#self.id];
    if (mine !== undefined && this.#store !== undefined && !this.#leaving) void this.#prefetch(mine, done.from, this.#store);
  }

  #ringChanged(ring: Ring): void {
    const next = this.#leaving ? this.#without(ring) : ring;
    if (next.version === this.#ring.version) return;
    if (!this.#leaving && this.#ring.members.length > 0 && !ring.members.some((m) => m.id === this.#self.id)) {
      this.#dropped(ring);
      return;
    }
    // Replicas of tenants this node is no longer owner nor replica of: their new replica gets the owner's next checkpoint.
    this.#peers?.replicas.retain((t) => next.range(t, 2).some((m) => m.id === this.#self.id));
    // The first ring (this node joining): the tenants it gains come from the ring without it.
    this.#previous = this.#ring.members.length === 0 ? this.#without(ring) : this.#ring;
    this.#ring = next;
    this.#log.info({ ring: next.version, members: next.members.map((m) => m.id) }, 'ring changed');
    void this.#handOver(next);
  }

  /**
   * The membership found that the other nodes dropped this node from their ring while it could not
   * reach Redis (`RedisMembership`, `#rejoin`): they took its tenants over from its checkpoints and
   * have decided for them since. It hands nothing over (its states are the stale ones) and keeps
   * deciding for none of them: every claim is dropped, its state kept aside ({@link Rejoined}) in
   * case no newer one arrives (no interim owner decided for the tenant, Redis holds none), and the announcements seen are
   * forgotten (ring versions repeat: the ring it rejoins has the version of the one it had), so that
   * when the ring with it comes next each tenant is loaded like any moved tenant's: the interim
   * owner's handoff (waited for), or its checkpoint, whichever is newer than this node's own state.
   */
  #dropped(ring: Ring): void {
    const at = this.#membership.lastSyncMs?.() ?? this.#clock.now();
    for (const tenant of [...this.#claimed]) {
      const snapshot = this.#limiter.exportTenant(tenant);
      if (snapshot !== undefined) this.#rejoined.keep(tenant, snapshot, at);
      this.#unclaim(tenant);
    }
    this.#carried.clear();
    this.#seen.clear();
    this.#previous = this.#ring;
    this.#ring = ring;
    this.#log.warn({ ring: ring.version, tenants: this.#rejoined.size }, 'dropped from the ring while cut from Redis: deciding for no tenant until they are handed back');
  }

  /** Exports, drops and stores every claimed tenant not owned here under `ring`, then announces. */
  #handOver(ring: Ring): Promise<void> {
    const store = this.#store;
    const started = this.#clock.now();
    const states: StoredState[] = [];
    const byOwner: Record<string, string[]> = {};
    for (const tenant of this.#claimed) {
      const owner = ring.owner(tenant)?.id;
      if (!this.#leaving && owner === this.#self.id) {
        const standIn = this.#standIns.get(tenant);
        if (standIn !== undefined) {
          // Held in place of an owner the ring has now replaced with this node: the owner's state
          // (its handoff, or its last checkpoint if it died) is loaded like any moved tenant's,
          // and what was admitted here as its stand-in is added to it then.
          const current = this.#limiter.exportTenant(tenant);
          this.#carried.set(tenant, {
            usage: this.#usageSince(tenant, standIn.base, current),
            current,
            base: new Set(standIn.base?.reservations.map((r) => r.id)),
          });
          this.#unclaim(tenant);
        }
        continue;
      }
      const standIn = this.#standIns.get(tenant);
      // Still standing in for the same owner: given back to it with its usage, not handed over.
      if (!this.#leaving && standIn !== undefined && standIn.owner === owner) continue;
      const state = this.#state(tenant);
      if (state !== undefined) {
        states.push(state);
        if (owner !== undefined) (byOwner[owner] ??= []).push(tenant);
      }
      // Its state in Redis (handed over now, or an older checkpoint) is the new owner's to delete.
      this.#unclaim(tenant);
    }
    for (const tenant of this.#carried.keys()) if (this.#leaving || ring.owner(tenant)?.id !== this.#self.id) this.#carried.delete(tenant);
    if (store === undefined && this.#peers === undefined) return this.#chain;
    const run = async (): Promise<void> => {
      // Straight to each new owner first (it loads without a Redis read), then to Redis.
      const at = this.#clock.now();
      const json = new Map(states.map((s) => [s.tenant, s.json]));
      const pushes = Object.entries(byOwner).map(([id, tenants]) => {
        const member = ring.members.find((m) => m.id === id);
        const wire = tenants.flatMap((t) => { const j = json.get(t); return j === undefined ? [] : [{ tenant: t, json: j, at }]; });
        return member === undefined ? Promise.resolve(false) : this.#push(member, 'handoff', wire);
      });
      await Promise.all(pushes);
      if (store === undefined) {
        this.stats.handedOff += states.length;
        this.stats.lastHandoffMs = this.#clock.now() - started;
        this.#onMoved?.('out', this.stats.lastHandoffMs, states.length);
        return;
      }
      try {
        await store.write(states);
        this.stats.handedOff += states.length;
      } catch (err) {
        this.#log.warn({ err: (err as Error).message, tenants: states.length }, 'handoff write failed: new owners start from checkpoints');
      }
      try {
        await store.announce({ from: this.#self.id, ring: ring.version, tenants: byOwner });
      } catch (err) {
        this.#log.warn({ err: (err as Error).message }, 'handoff announcement failed');
      }
      this.stats.lastHandoffMs = this.#clock.now() - started;
      this.#log.info({ ring: ring.version, tenants: states.length, ms: this.stats.lastHandoffMs }, 'handed off');
      this.#onMoved?.('out', this.stats.lastHandoffMs, states.length);
    };
    this.#chain = this.#chain.then(run);
    return this.#chain;
  }

  #state(tenant: string): StoredState | undefined {
    const snapshot = this.#limiter.exportTenant(tenant);
    return snapshot === undefined ? undefined : { tenant, json: JSON.stringify(snapshot), ttlMs: this.#ttlMs(tenant) };
  }

  #without(ring: Ring): Ring {
    return createRing(
      ring.members.filter((m) => m.id !== this.#self.id),
      this.#ringOptions,
    );
  }
}

/** At most 200 characters of an error message about a stored value (it may quote the value). */
function clip(message: string): string {
  return message.length <= 200 ? message : `${message.slice(0, 200)}…`;
}

/** `promise`, or a rejection after `ms` (the promise's own outcome is then ignored). */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer from Redis within ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
