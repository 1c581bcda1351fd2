/**
 * Ownership and handoff of tenants on one node: which tenants this node decides for, how their
 * limiter state arrives when they move here, leaves when they move away, and survives a crash.
 * `Handoff` composes one part per rule, each in its own file:
 *
 * | rule | file |
 * |---|---|
 * | who decides for a tenant (owner, replica, stand-in for a suspect owner; leaving) | `src/coord/ring/placement.ts` |
 * | claiming a tenant: wait for the previous owner's handoff, load its state (replica, Redis), clamp it | `src/coord/handoff/claims.ts` |
 * | the previous owner's handoff announcements, and the wait for them | `src/coord/handoff/announcements.ts` |
 * | standing in for a suspect owner, and giving its tenant back with the usage admitted | `src/coord/handoff/stand-in.ts` |
 * | slots of an owner that may be alive, held until it is proven gone | `src/coord/handoff/held-slots.ts`, `src/coord/handoff/process-gone.ts` |
 * | a node woken from a stall: fenced, then its tenants taken back from their stand-ins | `src/coord/handoff/fence.ts`, `src/coord/handoff/take-back.ts` |
 * | handing tenants over on a ring change or a graceful leave (peers, then Redis, then announce) | `src/coord/handoff/hand-over.ts` |
 * | checkpoints to each tenant's replica and to Redis; replicas taken from other nodes | `src/coord/handoff/checkpoints.ts`, `src/coord/handoff/replicas.ts` |
 * | settlements of requests admitted here for a tenant that has moved | `src/coord/handoff/settlement-forwarding.ts` |
 * | a node the others dropped from their ring while it was cut from Redis | `src/coord/handoff/rejoin.ts` |
 * | static members: leave, stand-in and restart rules and their bounds | `src/coord/handoff/static-handoff.ts` |
 * | a single node's state across restarts | `src/coord/handoff/local-state.ts` |
 *
 * The rules in prose, with their bounds: docs/internals.md, "Membership, ownership and handoff".
 *
 * With `peers` (every cluster node; `src/peer/transfer.ts`, `src/coord/handoff/replicas.ts`), states
 * also travel straight between nodes over signed HTTP, with or without Redis: a handoff is pushed to
 * each new owner before it is written to Redis; every checkpoint goes to each tenant's replica (the
 * next member of its range, the member that takes over if the owner dies); a claim loads the replica
 * held here first (no Redis read) and reads Redis only when there is none.
 */
import { randomUUID } from 'node:crypto';
import type { UsageDelta } from '../../limiter/usage-delta.ts';
import type { SettleDetail } from '../../limiter/types.ts';
import { Announcements } from './announcements.ts';
import { Checkpoints } from './checkpoints.ts';
import { Claims } from './claims.ts';
import type { ClaimHow } from './claims.ts';
import { HandOver } from './hand-over.ts';
import { JoinHandoffs } from './join-handoffs.ts';
import { ringChanged } from './ring-change.ts';
import { zeroStats } from './handoff-context.ts';
import type { HandoffContext, HandoffOptions, HandoffPeers, HandoffStats } from './handoff-context.ts';
import { RingPlacement } from '../ring/placement.ts';
import type { Placement } from '../ring/placement.ts';
import type { Reclaimed, WireState } from './peer-wire.ts';
import { SettlementForwarding } from './settlement-forwarding.ts';
import { takeBack } from './take-back.ts';
import type { StandIns } from './stand-in.ts';
import type { HandoffDone } from './state-store.ts';
import type { Member, Membership, Ring } from '../types.ts';

export type { ClaimHow } from './claims.ts';
export type { HandoffLog, HandoffOptions, HandoffPeers, HandoffStats } from './handoff-context.ts';
export type { Placement } from '../ring/placement.ts';
export { MAX_FORWARD_HOPS } from './peer-wire.ts';
export type { ForwardedSettlement, SettlementSender } from './peer-wire.ts';

/** A repeated handoff subscriber error is logged at most this often, ms. */
const SUBSCRIBER_LOG_EVERY_MS = 30_000;

/** A node's ownership of tenants and the handoff of their limiter state. See the module comment. */
export class Handoff {
  readonly #ctx: HandoffContext;
  readonly #membership: Membership;
  readonly #checkpointMs: number;
  readonly #placement: RingPlacement;
  readonly #announcements: Announcements;
  readonly #claims: Claims;
  readonly #standIns: StandIns;
  readonly #checkpoints: Checkpoints;
  readonly #handOver: HandOver;
  readonly #settlements: SettlementForwarding;
  readonly #joinHandoffs: JoinHandoffs;
  #timer: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void) | undefined;
  /** The counters (see {@link HandoffStats}). */
  readonly stats: HandoffStats = zeroStats();

  /** Builds (does not start) a node's handoff; see {@link HandoffOptions} for units and defaults. */
  constructor(opts: HandoffOptions) {
    const waitMs = opts.waitMs ?? 250;
    this.#checkpointMs = opts.checkpointMs ?? 1_000;
    this.#ctx = {
      self: opts.self,
      limiter: opts.limiter,
      store: opts.store,
      peers: opts.peers,
      tracks: opts.store !== undefined || opts.peers !== undefined,
      clock: opts.clock,
      waitMs,
      standInIdleMs: opts.standInIdleMs ?? this.#checkpointMs,
      ttlMs: opts.stateTtlMs,
      send: opts.send,
      log: opts.log,
      onMoved: opts.onMoved,
      ownerGone: opts.ownerGone,
      incarnation: opts.incarnation ?? randomUUID(),
      stats: this.stats,
    };
    this.#membership = opts.membership;
    this.#placement = new RingPlacement(opts.self, opts.ringOptions ?? {});
    this.#announcements = new Announcements(waitMs);
    this.#claims = new Claims(this.#ctx, this.#placement, this.#announcements);
    this.#standIns = this.#claims.standIns;
    this.#checkpoints = new Checkpoints(this.#ctx, this.#placement, this.#claims);
    this.#handOver = new HandOver(this.#ctx, this.#placement, this.#claims);
    this.#settlements = new SettlementForwarding(this.#ctx, this.#placement, this.#claims, this.#handOver);
    this.#joinHandoffs = new JoinHandoffs(this.#ctx, this.#placement, this.#claims, this.#announcements);
  }

  /**
   * Subscribes to handoff announcements and starts checkpoints. Call before the membership starts,
   * so the first ring (and the ring before this node joined) are seen.
   * @throws the Redis error when subscribing fails.
   */
  async start(): Promise<void> {
    // While Redis is down the subscriber fails at every reconnect (about every 2 s): log an error
    // when it changes, or once every 30 s while it repeats.
    let last = { message: '', at: -Infinity };
    await this.#ctx.store?.subscribe(
      (done) => this.#announced(done),
      (err) => {
        const now = this.#ctx.clock.now();
        if (err.message === last.message && now - last.at < SUBSCRIBER_LOG_EVERY_MS) return;
        last = { message: err.message, at: now };
        this.#ctx.log.warn({ err: err.message }, 'handoff subscriber error');
      },
    );
    this.#unsubscribe = this.#membership.onChange((ring) => this.#ringChanged(ring));
    if (this.#ctx.tracks) {
      this.#timer = setInterval(() => {
        void this.checkpoint();
        void this.returnStandIns();
        void this.checkHeldSlots();
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
    if (ring.version !== this.#placement.ring.version) {
      this.#placement.previous = this.#placement.without(ring);
      this.#placement.ring = ring;
    }
    this.#joinHandoffs.await();
  }

  /**
   * True once this node has received its handoffs after {@link joined} (see `JoinHandoffs` in
   * `./join-handoffs.ts`); false before `joined()` (`/readyz` waits for it: `handoff`).
   */
  get handoffsReceived(): boolean {
    return this.#joinHandoffs.received;
  }

  /** The ring this node decides by (without itself once leaving). */
  ring(): Ring {
    return this.#placement.ring;
  }

  /**
   * Where a tenant's request is decided. Here when this node owns it, or when `fallbackFor` names
   * the owner (a router routes around it as suspect) and this node is not leaving.
   */
  place(tenant: string, fallbackFor?: string): Placement {
    return this.#placement.place(tenant, fallbackFor);
  }

  /**
   * Resolves once this node may decide for `tenant` (its state loaded). Undefined when it already
   * may: the per-request fast path. Never rejects: a Redis failure starts the tenant fresh (logged).
   * @param how `owner`: this node owns the tenant (waits for a live previous owner's handoff);
   *   `fallback`: a router routes around the suspect owner (no wait; the slots and reservations of
   *   the requests the owner had in flight stay counted until their leases expire, see
   *   `src/coord/handoff/stand-in.ts`); `handed`: the node that handed the tenant here said so (its
   *   handoff is stored already: no wait). @default owner
   */
  ready(tenant: string, how: ClaimHow = 'owner'): Promise<void> | undefined {
    return this.#claims.ready(tenant, how);
  }

  /** True when this node's limiter holds the tenant's state now (settle it here, synchronously). */
  holds(tenant: string): boolean {
    return this.#claims.holds(tenant);
  }

  /**
   * True when a settlement, release or renewal of `tenant`'s requests applies here at once: this
   * node holds it and no stand-in give-back of it is under way (then use {@link finish} / {@link renew},
   * which wait for the give-back and apply here or at the owner).
   */
  settlesHere(tenant: string): boolean {
    return this.#claims.holds(tenant) && !this.#standIns.returning(tenant);
  }

  /** Marks a tenant's state as changed, for the next checkpoint. */
  touched(tenant: string): void {
    this.#claims.touched(tenant);
  }

  /**
   * Settles reservation `id` on `tokens` actually used (and `detail`: its cost and token kinds, see
   * `Limiter.settle`) and releases its slot: here when this node holds the tenant, otherwise at the tenant's owner (forwarded, retried for a few seconds, then logged as lost).
   * @param hops nodes the settlement went through (0 when it starts here).
   * @param from the node that forwarded it: when this node's ring still names that node as the owner,
   *   the sender's ring is newer (it handed the tenant here), so the settlement is applied here.
   */
  finish(tenant: string, id: string, tokens: number, hops = 0, from?: string, detail?: SettleDetail): Promise<{ settled: boolean; released: boolean }> {
    return this.#settlements.finish(tenant, id, tokens, hops, from, detail);
  }

  /** Renews reservation `id` (a long stream) here or at the tenant's owner; `hops` and `from` as for {@link finish}. */
  renew(tenant: string, id: string, hops = 0, from?: string): Promise<boolean> {
    return this.#settlements.renew(tenant, id, hops, from);
  }

  /**
   * Graceful leave: from now on this node decides for no tenant; every claimed tenant is handed to
   * its owner in the ring without this node, and the handoff announced. Call before the membership
   * deregisters, so the new owners find the states before they see the new ring.
   */
  async leave(): Promise<void> {
    // Stand-in claims go back to their owners with their usage first (requests still running here
    // are counted as reserved); any left (owner unreachable) are handed over with the rest.
    await this.#standIns.giveBackAll();
    this.#placement.leaving = true;
    this.#placement.ring = this.#placement.without(this.#membership.ring());
    await this.#handOver.handOver(this.#placement.ring);
  }

  /** Writes the tenants touched since the last checkpoint (one `HSET` per 1,000 tenants) and sends them to their replicas. Never rejects. */
  checkpoint(): Promise<void> {
    return this.#checkpoints.checkpoint();
  }

  /**
   * Stores states another node sent (its handoff or its replicated checkpoint) among this node's
   * replicas, each expiring after the tenant's state TTL; tenants this node claims already keep
   * their own state, unless claimed without the handoff of `handedBy` (the node that sent this
   * handoff): then it is merged (`src/coord/handoff/late-handoff.ts`). Tenants `known` rejects (not in the
   * config) are ignored.
   * @returns how many were stored or merged.
   */
  receive(states: readonly WireState[], known: (tenant: string) => boolean, handedBy?: string): number {
    return this.#checkpoints.receive(states, known, handedBy);
  }

  /**
   * Deletes the stored states of claimed tenants the limiter no longer holds (swept idle: their
   * state is fresh); they stay claimed. Never rejects; on a Redis error they are tried again at the next sweep.
   */
  forgetIdle(): Promise<void> {
    return this.#checkpoints.forgetIdle();
  }

  /**
   * Gives back the stand-in claims no request stood in for during `standInIdleMs` and whose
   * requests admitted here have all ended (their usage sent to the owner: `absorb`). Never rejects.
   */
  returnStandIns(): Promise<void> {
    return this.#standIns.returnDue();
  }

  /**
   * Asks again whether the writers of the slots held here (loaded from an owner that left the ring
   * without a handoff: `src/coord/handoff/held-slots.ts`) are gone, and frees the slots of those that are.
   * Runs every checkpoint period. Never rejects.
   */
  checkHeldSlots(): Promise<void> {
    return this.#claims.held.check();
  }

  /**
   * Adds the usage a stand-in admitted for `tenant` to this node's state of it (see `withUsage`),
   * loading the tenant first if this node had not claimed it.
   * @returns false when this node does not own the tenant under its ring (nothing changes).
   */
  absorb(tenant: string, usage: UsageDelta): Promise<boolean> {
    return this.#standIns.absorb(tenant, usage);
  }

  /**
   * Gives `owner` back every tenant of it held here: the stand-in claims for it (dropped here, their
   * state kept as a replica) and the replicas of its tenants. Called when a restarted static member
   * asks (`src/coord/handoff/static-handoff.ts`).
   */
  surrender(owner: string): WireState[] {
    return this.#standIns.surrender(owner);
  }

  /**
   * A fenced owner woke (`src/coord/handoff/fence.ts`): ends every claim held here in place of `owner` and
   * returns what was admitted for each; stands in for it no more during `backForMs`
   * (`StandIns.reclaim`).
   */
  reclaim(owner: string, backForMs: number): Reclaimed[] {
    return this.#standIns.reclaim(owner, backForMs);
  }

  /** True while `owner` took its tenants back lately: this node does not stand in for it (`StandIns.ownerBack`). */
  ownerBack(owner: string): boolean {
    return this.#standIns.ownerBack(owner);
  }

  /**
   * This node woke from a stall: asks every other member of its ring for the claims it held in
   * place of this node and adds what each admitted to this node's state (`absorb`), then marks
   * every claimed tenant for the next checkpoint, so the replicas learn what this node admitted
   * since its last one. Each member is waited for at most `timeoutMs`; one that fails is skipped,
   * one that answers later is absorbed then (both logged: `src/coord/handoff/take-back.ts`). Never rejects.
   * @returns the tenants taken back.
   */
  takeBack(timeoutMs: number): Promise<number> {
    return takeBack(this.#ctx, this.#placement, this.#claims, timeoutMs);
  }

  /** The state of every tenant claimed here and of every replica held (for the local state file). */
  states(): WireState[] {
    return this.#checkpoints.states();
  }

  /** The transport and replicas of this node's peers (undefined without). */
  get peers(): HandoffPeers | undefined {
    return this.#ctx.peers;
  }

  /** Tenants held here in place of their suspect owner. */
  standIns(): ReadonlySet<string> {
    return this.#standIns.tenants();
  }

  /** True when this node holds `tenant` in place of its suspect owner. */
  isStandIn(tenant: string): boolean {
    return this.#standIns.has(tenant);
  }

  /**
   * Node `from` handed this node its share of a handoff for ring version `ring` (its last push,
   * `src/peer/transfer.ts`; the states are among the replicas already): recorded as its
   * announcement, so the claims waiting for it load them now, whether or not Redis pub/sub brings
   * the announcement (a node whose subscriber connection is still recovering from a cut).
   */
  handedHere(from: string, ring: string): void {
    this.#announcements.record({ from, ring });
  }

  /**
   * A member waits for this node's handoff (it claimed a tenant this node owned before it joined):
   * reads the member list now rather than at the next heartbeat, so a ring it joined is seen and
   * handed over at once. Repeated nudges coalesce into one read in flight and one after it.
   */
  nudged(): void {
    this.#membership.refresh?.();
  }

  /** Stops checkpoints and announcements (writes nothing; call `leave()` first for a graceful exit). */
  stop(): void {
    clearInterval(this.#timer);
    this.#unsubscribe?.();
    this.#ctx.store?.close();
    this.#announcements.stop();
  }

  /** Tenants this node decides for now. */
  claimed(): ReadonlySet<string> {
    return this.#claims.tenants();
  }

  /** Resolves once every forwarded settlement sent so far was delivered or given up (call before exiting). */
  flush(): Promise<void> {
    return this.#settlements.flush();
  }

  /** This node. */
  get self(): Member {
    return this.#ctx.self;
  }

  /** Until the handoff chain is idle (tests). */
  settledDown(): Promise<void> {
    return this.#handOver.idle();
  }

  #announced(done: HandoffDone): void {
    this.#announcements.record(done);
    const mine = done.tenants?.[this.#ctx.self.id];
    const store = this.#ctx.store;
    if (mine !== undefined && store !== undefined && !this.#placement.leaving) void this.#claims.prefetch(mine, done.from, store);
  }

  #ringChanged(ring: Ring): void {
    ringChanged({ ctx: this.#ctx, placement: this.#placement, claims: this.#claims, announcements: this.#announcements, handOver: this.#handOver, membership: this.#membership }, ring);
  }
}
