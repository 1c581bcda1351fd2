/**
 * The stand-in rule: what a node may admit for a tenant whose owner is still a member of the ring
 * but that routers route around as suspect (`x-quotaring-fallback-for`: SIGSTOP, a long CPU stall, a
 * router cut from the owner). The owner is not known dead, so it may still run the streams it
 * admitted and, once it answers again, admit more. The tenant must not exceed a limit across both.
 *
 * Rule:
 * - The stand-in starts from the owner's replicated checkpoint (or its Redis checkpoint) and keeps
 *   every reservation and concurrency lease in it: they stay counted until their own leases expire
 *   (`lease_ttl` after the owner last renewed them; a stalled owner renews nothing) or a settlement
 *   of them reaches the stand-in. They are never freed as if the owner had crashed: only a previous
 *   owner that has *left the ring* without a handoff frees them (see {@link slotsDiedWithOwner}), or
 *   an owner whose port refuses connections (its process is gone: {@link listenerGone}, asked when
 *   the stand-in claims the tenant and every checkpoint period while the slots stay held; with
 *   static members the ring never drops a dead member, so this is how a SIGKILL frees them there).
 * - The stand-in decides from that state plus what it admits itself, like an owner.
 * - When no request stood in for the owner for `standInIdleMs`, the stand-in gives the tenant back:
 *   the usage it admitted (window entries, bucket units, spend) and the requests it admitted that
 *   still run (their reservations and slots) are sent to the owner (`absorb`), which adds them to
 *   its own state; the settlements of those requests then go to the owner (forwarded).
 *
 * Bound (beyond each limit, across both nodes, while the owner stays a member):
 * - Concurrency: 0 while the owner is silent: the owner's slots in the checkpoint stay held.
 *   Missing are only the owner's admissions after its last checkpoint reached the replica (at most
 *   one checkpoint period of the tenant's traffic plus one push), and, once the owner answers
 *   again, the stand-in's requests running until the give-back (≤ `standInIdleMs` + one checkpoint
 *   period after routers stop routing around the owner), and any of the owner's own streams whose
 *   lease expired during the stall (an expired lease frees its slot on the owner too).
 * - Requests and tokens: the owner's admissions after its last replicated checkpoint (≤ one
 *   checkpoint period of the tenant's traffic), plus, after the owner answers again, the stand-in's
 *   admissions not yet absorbed (≤ `standInIdleMs` + one checkpoint period of the tenant's traffic
 *   on the stand-in).
 */

import type { TenantSnapshot } from '../../limiter/snapshot.ts';
import { budgetUsageSince, isEmptyUsage, openRequestsSince, windowUsageSince } from '../../limiter/usage-delta.ts';
import type { UsageDelta } from '../../limiter/usage-delta.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';
import type { Reclaimed, WireState } from './peer-wire.ts';
import type { Member } from '../types.ts';

const DONE: Promise<void> = Promise.resolve();

/**
 * Whether the requests the previous owner had in flight died with it, so that their concurrency
 * slots are freed when its state is loaded here: only when it left the ring (crashed) without
 * announcing a handoff for this ring. Never for a stand-in claim (`fallback`): that owner is still a
 * member and its streams may go on.
 * @param fallback the claim stands in for a suspect owner.
 * @param previousOwner id of the tenant's owner under the previous ring (undefined: none).
 * @param self this node's id.
 * @param previousInRing the previous owner is a member of the current ring.
 * @param announced the previous owner announced its handoff for the current ring.
 */
export function slotsDiedWithOwner(fallback: boolean, previousOwner: string | undefined, self: string, previousInRing: boolean, announced: boolean): boolean {
  return !fallback && previousOwner !== undefined && previousOwner !== self && !previousInRing && !announced;
}

export { listenerGone } from './process-gone.ts';

/** A tenant this node holds in place of its suspect owner. */
export interface StandIn {
  /** The owner it stands in for. */
  readonly owner: string;
  /** The state as loaded when standing in began (undefined: fresh), or as last sent to the owner. */
  base: TenantSnapshot | undefined;
  /** Clock ms of the last request that stood in for the owner. */
  lastMs: number;
  /** Set while a return is being sent: resolves when it ended (sent or failed). */
  returned?: Promise<void> | undefined;
  /** The owner's requests in flight in `base` hold slots here until the owner is known gone. */
  ownerSlots: boolean;
}

/** What stand-ins need of the node's claims: `Claims` (`src/coord/handoff/claims.ts`) implements it. */
export interface ClaimSet {
  /** Waits for the tenant's state when this node must load it first (undefined: nothing to wait for). */
  ready(tenant: string): Promise<void> | undefined;
  /** True when this node has claimed `tenant`. */
  has(tenant: string): boolean;
  /** Marks a tenant's state as changed, for the next checkpoint. */
  touched(tenant: string): void;
  /** Forgets a claimed tenant here. */
  unclaim(tenant: string): void;
}

/**
 * The claims a node holds in place of a suspect owner, and the rule above applied to them: a
 * stand-in claim is not checkpointed (Redis keeps the owner's state), and is given back once no
 * request stood in for the owner for `standInIdleMs`: the usage admitted here since the claim
 * (`windowUsageSince`, `Limiter.bucketUsage`) and the requests still running here
 * (`openRequestsSince`) are sent to the owner, which adds them to its own state ({@link absorb}),
 * and the claim is dropped. Without this the
 * owner, healthy again, would decide on a state that lacks the stand-in's admissions, and the
 * stand-in, routed to again later, on one that lacks the owner's. If the owner leaves the ring
 * instead, the ring change hands the stand-in's state on like any claimed tenant's; if it gives the
 * tenant to the stand-in itself, the stand-in loads the owner's state (its handoff, or its last
 * checkpoint) like any moved tenant's and adds its own usage to it (`Claims.carry`).
 */
export class StandIns {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #claims: ClaimSet;
  readonly #standIns = new Map<string, StandIn>();

  /** @param claims the claim table the stand-in claims belong to (it builds this). */
  constructor(ctx: HandoffContext, placement: RingPlacement, claims: ClaimSet) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#claims = claims;
  }

  /** Owners that took their tenants back on waking from a stall: until when (clock ms) this node stands in for them no more. */
  readonly #ownerBack = new Map<string, number>();

  /**
   * The stand-in's side of a fenced owner's wake-up (`src/coord/handoff/fence.ts`): every claim held here
   * in place of `owner` ends now. For each, the usage admitted here since its base and the
   * requests admitted here still running (their reservations and slots) are returned, as a
   * give-back would send them; their settlements then go to the owner (forwarded). Until `backForMs`
   * from now this node stands in for `owner` no more ({@link ownerBack}): a router that still
   * routes around it is told to send the request to it (421 naming the owner), so the two never
   * decide for one tenant side by side. A claim whose give-back is under way is left to it.
   */
  reclaim(owner: string, backForMs: number): Reclaimed[] {
    const { limiter, clock, stats, log } = this.#ctx;
    this.#ownerBack.set(owner, clock.now() + backForMs);
    const out: Reclaimed[] = [];
    let running = 0;
    for (const [tenant, standIn] of [...this.#standIns]) {
      if (standIn.owner !== owner || standIn.returned !== undefined) continue;
      const current = limiter.exportTenant(tenant);
      const open = openRequestsSince(current, new Set(standIn.base?.reservations.map((r) => r.id)));
      const usage: UsageDelta = { ...this.usageSince(tenant, standIn.base, current), ...(open === undefined ? {} : { open }) };
      this.#claims.unclaim(tenant);
      stats.returned++;
      running += open?.reservations.length ?? 0;
      if (!isEmptyUsage(usage)) out.push({ tenant, usage });
    }
    log.info({ owner, tenants: out.length, running }, 'owner woke from a stall and took its tenants back: not standing in for it until it is silent again');
    return out;
  }

  /** True while `owner` took its tenants back lately (see {@link reclaim}): this node does not stand in for it. */
  ownerBack(owner: string): boolean {
    const until = this.#ownerBack.get(owner);
    if (until === undefined) return false;
    if (this.#ctx.clock.now() < until) return true;
    this.#ownerBack.delete(owner);
    return false;
  }

  /** True when this node holds `tenant` in place of its suspect owner. */
  has(tenant: string): boolean {
    return this.#standIns.has(tenant);
  }

  /** The stand-in claim of `tenant`, or undefined. */
  get(tenant: string): StandIn | undefined {
    return this.#standIns.get(tenant);
  }

  /** Tenants held here in place of their suspect owner. */
  tenants(): ReadonlySet<string> {
    return new Set(this.#standIns.keys());
  }

  /** Notes that a request stood in for the owner of `tenant` now (when this node holds it as a stand-in). */
  stoodIn(tenant: string): void {
    const standIn = this.#standIns.get(tenant);
    if (standIn !== undefined) standIn.lastMs = this.#ctx.clock.now();
  }

  /**
   * Makes the claim of `tenant`, just loaded, a stand-in for `owner`: its state now is the base its
   * usage is counted from. Frees the slots of the owner's requests in flight when the owner is
   * known gone (see {@link returnDue}). Never rejects.
   */
  async begin(tenant: string, owner: Member): Promise<void> {
    const { limiter, clock, stats } = this.#ctx;
    const base = limiter.exportTenant(tenant);
    const standIn: StandIn = { owner: owner.id, base, lastMs: clock.now(), ownerSlots: base?.reservations.some((r) => !r.released) === true };
    this.#standIns.set(tenant, standIn);
    limiter.startTally(tenant);
    stats.stoodIn++;
    if (standIn.ownerSlots) await this.#freeIfOwnerGone([[tenant, standIn]], owner);
  }

  /** Forgets the stand-in role of `tenant` (its claim is being dropped). */
  forget(tenant: string): void {
    this.#standIns.delete(tenant);
  }

  /**
   * Gives back the stand-in claims no request stood in for during `standInIdleMs`: sends each owner
   * the usage admitted here since the claim and the requests still running here (one `absorb` per
   * tenant, skipped when there is none), then drops the claim. A claim that a
   * request stood in for while its usage travelled is kept, with what was sent as its new base. An
   * owner that cannot be reached, or no longer owns the tenant under its ring, is tried again at the
   * next period. First frees the slots of the requests in flight of owners known gone. Never rejects.
   */
  async returnDue(): Promise<void> {
    const now = this.#ctx.clock.now();
    const holding = [...this.#standIns].filter(([, s]) => s.ownerSlots);
    for (const id of new Set(holding.map(([, s]) => s.owner))) {
      const owner = this.#placement.ring.members.find((m) => m.id === id);
      if (owner !== undefined) await this.#freeIfOwnerGone(holding.filter(([, s]) => s.owner === id), owner);
    }
    const due: [string, StandIn][] = [];
    for (const [tenant, standIn] of this.#standIns) if (standIn.returned === undefined && now - standIn.lastMs >= this.#ctx.standInIdleMs) due.push([tenant, standIn]);
    await Promise.all(due.map(([tenant, standIn]) => this.#giveBack(tenant, standIn)));
  }

  /**
   * Gives every stand-in claim back to its owner now, requests admitted here and still running
   * included (their reservations and slots): a graceful leave. Claims whose owner cannot be reached stay. Never rejects.
   */
  async giveBackAll(): Promise<void> {
    await Promise.all([...this.#standIns].map(([tenant, standIn]) => this.#giveBack(tenant, standIn)));
  }

  /**
   * Frees the slots of the owner's requests in flight that `standIns` loaded from its checkpoint,
   * when `ownerGone` says its process is gone (see the rule above). Never rejects.
   */
  async #freeIfOwnerGone(standIns: readonly (readonly [string, StandIn])[], owner: Member): Promise<void> {
    const { ownerGone, limiter, stats, log } = this.#ctx;
    if (ownerGone === undefined || standIns.length === 0) return;
    let gone = false;
    try {
      gone = await ownerGone({ id: owner.id, url: owner.url, inc: standIns[0]?.[1].base?.byInc });
    } catch {
      gone = false;
    }
    if (!gone) return;
    for (const [tenant, standIn] of standIns) {
      if (this.#standIns.get(tenant) !== standIn || !standIn.ownerSlots) continue;
      standIn.ownerSlots = false;
      for (const r of standIn.base?.reservations ?? []) if (!r.released && limiter.release(tenant, r.id)) stats.slotsFreed++;
      this.#claims.touched(tenant);
    }
    log.info({ owner: owner.id, tenants: standIns.length }, 'owner gone (connection refused, or another process answers at its URL): the slots of its requests in flight are freed');
  }

  /**
   * Resolves when no give-back of `tenant` is under way (at once when none is): a settlement of a
   * request admitted here waits for it, then applies here if the claim stayed, else at the owner,
   * which received the request with the give-back.
   */
  returned(tenant: string): Promise<void> {
    return this.#standIns.get(tenant)?.returned ?? DONE;
  }

  /** True while a give-back of `tenant` is under way: its settlements must wait (see {@link returned}). */
  returning(tenant: string): boolean {
    // Per settlement on the request path: no lookup while this node stands in for nobody.
    return this.#standIns.size !== 0 && this.#standIns.get(tenant)?.returned !== undefined;
  }

  /**
   * Gives one stand-in claim back (see {@link returnDue}): the usage admitted here since the base,
   * and the requests admitted here still running, carried to the owner with their reservations and
   * slots (`openRequestsSince`); their settlements then go to the owner. While the usage travels,
   * settlements here wait ({@link returned}).
   */
  async #giveBack(tenant: string, standIn: StandIn): Promise<void> {
    const { limiter, clock, send, self, log, stats, onMoved } = this.#ctx;
    const owner = this.#placement.ring.owner(tenant);
    // The ring moved the tenant since (the ring change handed it on, or made it ours): not a stand-in any more.
    if (owner === undefined || owner.id !== standIn.owner) return;
    const current = limiter.exportTenant(tenant);
    const open = openRequestsSince(current, new Set(standIn.base?.reservations.map((r) => r.id)));
    const usage: UsageDelta = { ...this.usageSince(tenant, standIn.base, current), ...(open === undefined ? {} : { open }) };
    const lastMs = standIn.lastMs;
    const started = clock.now();
    if (!isEmptyUsage(usage)) {
      let done = (): void => undefined;
      standIn.returned = new Promise((resolve) => (done = resolve));
      try {
        await send(self, owner, { op: 'absorb', tenant, usage }, 1);
      } catch (err) {
        log.warn({ tenant, owner: owner.id, err: (err as Error).message }, 'giving a stand-in tenant back failed: tried again at the next checkpoint');
        return;
      } finally {
        standIn.returned = undefined;
        // Settlements waiting run after the claim below is dropped or kept.
        queueMicrotask(done);
      }
    }
    if (this.#standIns.get(tenant) !== standIn) return;
    if (standIn.lastMs !== lastMs) {
      // A request stood in for the owner meanwhile: keep standing in; what was sent is counted there.
      // (The requests carried settle here then; the owner holds their copies until their leases
      // expire: it refuses more, never admits more.)
      standIn.base = current;
      limiter.untally(tenant, usage.buckets);
      return;
    }
    this.#claims.unclaim(tenant);
    stats.returned++;
    log.info({ tenant, owner: owner.id, windows: usage.windows.length, buckets: usage.buckets.length, running: open?.reservations.length ?? 0 }, 'stand-in tenant given back to its owner');
    onMoved?.('return', clock.now() - started, 1);
  }

  /**
   * The owner's side: adds the usage a stand-in admitted for `tenant` to this node's state of it
   * (see `withUsage`), loading the tenant first if this node had not claimed it.
   * @returns false when this node does not own the tenant under its ring (nothing changes).
   */
  async absorb(tenant: string, usage: UsageDelta): Promise<boolean> {
    const { tracks, limiter, stats } = this.#ctx;
    if (!tracks || !this.#placement.place(tenant).here || this.#standIns.has(tenant)) return false;
    await this.#claims.ready(tenant);
    if (!this.#claims.has(tenant) || !this.#placement.place(tenant).here) return false;
    limiter.absorbUsage(tenant, usage);
    this.#claims.touched(tenant);
    stats.absorbed++;
    return true;
  }

  /** The usage admitted here for `tenant` since `base`, its state then; `current` is its state now. */
  usageSince(tenant: string, base: TenantSnapshot | undefined, current: TenantSnapshot | undefined): UsageDelta {
    const budgets = budgetUsageSince(base, current);
    return { windows: windowUsageSince(base, current), buckets: this.#ctx.limiter.bucketUsage(tenant), ...(budgets.length === 0 ? {} : { budgets }) };
  }

  /**
   * Gives `owner` back every tenant of it held here: the stand-in claims for it (their state now,
   * requests admitted here included; the claim is dropped and the state kept as a replica, so a
   * request still routed here before routers see the owner again starts from it) and the replicas
   * of its tenants (its checkpoints, kept). Called when a restarted static member asks
   * (`src/coord/handoff/static-handoff.ts`). Settlements of requests still running here are then forwarded to it.
   */
  surrender(owner: string): WireState[] {
    const { clock, peers, limiter, ttlMs, stats } = this.#ctx;
    const at = clock.now();
    const out: WireState[] = [];
    const replicas = peers?.replicas;
    for (const e of replicas?.entries() ?? []) if (typeof e.json === 'string' && this.#placement.ring.owner(e.tenant)?.id === owner) out.push({ tenant: e.tenant, json: e.json, at: e.at });
    for (const [tenant, standIn] of [...this.#standIns]) {
      if (standIn.owner !== owner) continue;
      const snapshot = limiter.exportTenant(tenant);
      this.#claims.unclaim(tenant);
      if (snapshot === undefined) continue;
      const json = JSON.stringify(snapshot);
      out.push({ tenant, json, at });
      replicas?.put({ tenant, json, at, expiresAtMs: clock.now() + ttlMs(tenant) });
      stats.returned++;
    }
    return out;
  }
}
