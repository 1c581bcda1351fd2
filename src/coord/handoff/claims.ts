/**
 * Claims: the tenants a node decides for, and how a tenant's state gets here before its first
 * decision. A node decides for a tenant once it has *claimed* it: it owns the tenant under its ring
 * (or a router sent the request here because the owner is suspect: a stand-in claim,
 * `src/coord/handoff/stand-in.ts`) and has loaded the tenant's state. Claimed tenants cost nothing more per
 * request: no Redis command.
 *
 * Loading a claim, in order:
 * - When the tenant's previous owner is still in the ring (a join) and has not announced its
 *   handoff for this ring, wait for the announcement up to `waitMs` (`src/coord/handoff/announcements.ts`):
 *   Redis pub/sub, or the handoff's last push straight from the previous owner. The previous owner
 *   is nudged first (once per ring) to read the member list now, so it sees the ring and hands
 *   over within a round trip rather than at its next heartbeat.
 * - Take the replica held here (a checkpoint, a handoff pushed here, a state given back;
 *   `src/coord/handoff/replicas.ts`): no Redis read. Else read Redis (at most `waitMs`): the handoff, or the
 *   last checkpoint, at most one checkpoint period old (the conservative start: usage that old is
 *   still counted, only the last period can be missing), or nothing (fresh limits).
 * - What was read is not trusted: its values are clamped to the tenant's limits, and a value that
 *   does not parse starts the tenant with its requests and tokens limits used up for one window
 *   (docs/security.md, "Values read from Redis").
 * - When the previous owner crashed (left the ring without a handoff), the concurrency slots of its
 *   in-flight requests are freed (those requests died with it; their tokens stay charged; see
 *   `slotsDiedWithOwner`). So are those of a checkpoint whose writer (stored states name it) is gone
 *   from the ring without a handoff, whoever the previous owner is (a join moved the tenant again
 *   before the member that took it over from the dead owner claimed it).
 * - When the wait ended without the handoff, a handoff that comes later is merged into the state
 *   decided from since (`src/coord/handoff/late-handoff.ts`).
 * - A state this node kept when the others dropped it from their ring (`src/coord/handoff/rejoin.ts`) is
 *   used only when nothing newer came; what it admitted as a stand-in for a tenant the ring then
 *   gave it (`carry`) is added on top.
 *
 * An announcement that lists tenants for this node loads them at once ({@link Claims.prefetch}), so
 * most first requests after a ring change find their tenant claimed.
 */
import { parseTenantSnapshot } from '../../limiter/snapshot.ts';
import type { TenantSnapshot } from '../../limiter/snapshot.ts';
import { withOpenRequests, withUsage } from '../../limiter/usage-delta.ts';
import type { UsageDelta } from '../../limiter/usage-delta.ts';
import type { Announcements } from './announcements.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';
import { LateHandoffs, mergeLateHandoff } from './late-handoff.ts';
import { HeldSlots } from './held-slots.ts';
import { clip, loadStoredState } from './stored-state-load.ts';
import { Rejoined } from './rejoin.ts';
import { StandIns, slotsDiedWithOwner } from './stand-in.ts';
import type { OversizedState, StoredState, TenantStateStore } from './state-store.ts';
import type { Member, Ring } from '../types.ts';

/** Why a node claims a tenant: see {@link Claims.ready}. */
export type ClaimHow = 'owner' | 'fallback' | 'handed';

/**
 * What was admitted here as a stand-in for a tenant a ring change then gave this node, added once
 * its state is loaded: the usage, and the requests still running (`current`'s reservations not in `base`).
 */
export interface Carried {
  readonly usage: UsageDelta;
  readonly current: TenantSnapshot | undefined;
  readonly base: ReadonlySet<string>;
}

/** Tenants per MGET when loading a handoff at once. */
const PREFETCH_CHUNK = 100;

/** The tenants a node has claimed, and their loading. See the module comment. */
export class Claims {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #announcements: Announcements;
  readonly #claimed = new Set<string>();
  readonly #carried = new Map<string, Carried>();
  readonly #loading = new Map<string, Promise<void>>();
  /** States of the tenants this node decided for when the others dropped it from their ring (see {@link dropAll}). */
  readonly #rejoined = new Rejoined();
  /** Claimed tenants whose state changed since the last checkpoint. */
  readonly dirty = new Set<string>();
  /** Claimed tenants whose state Redis may hold (checkpointed here, or loaded from a handoff or checkpoint). */
  readonly stored = new Set<string>();
  /** The claims held in place of a suspect owner. */
  readonly standIns: StandIns;
  /** Slots of open requests loaded from a writer that may still be alive (`src/coord/handoff/held-slots.ts`). */
  readonly held: HeldSlots;
  /** Holds begun by a load, awaited by the claim that made it. */
  readonly #holding = new Map<string, Promise<void>>();

  /** Builds an empty claim table. */
  constructor(ctx: HandoffContext, placement: RingPlacement, announcements: Announcements) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#announcements = announcements;
    this.standIns = new StandIns(ctx, placement, this);
    this.held = new HeldSlots(ctx.limiter, ctx.ownerGone, ctx.log, (tenant, slots) => {
      ctx.stats.slotsFreed += slots;
      this.touched(tenant);
    });
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
    if (how === 'fallback') this.standIns.stoodIn(tenant);
    return this.#ready(tenant, how, true);
  }

  #ready(tenant: string, how: ClaimHow, again: boolean): Promise<void> | undefined {
    if (!this.#ctx.tracks || this.#claimed.has(tenant)) return undefined;
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
    return !this.#ctx.tracks || this.#claimed.has(tenant);
  }

  /** True when this node has claimed `tenant` (false for every tenant without a store or peers). */
  has(tenant: string): boolean {
    return this.#claimed.has(tenant);
  }

  /** Tenants this node decides for now. */
  tenants(): ReadonlySet<string> {
    return this.#claimed;
  }

  /** Marks a tenant's state as changed, for the next checkpoint. */
  touched(tenant: string): void {
    if (this.#ctx.tracks) this.dirty.add(tenant);
  }

  /** The loads under way (claims and prefetch chunks). */
  pending(): Promise<void>[] {
    return [...this.#loading.values()];
  }

  /**
   * The state of a tenant to store (snapshot JSON naming this node and `how`, and TTL), or undefined
   * when the limiter holds none.
   */
  state(tenant: string, how: 'checkpoint' | 'handoff'): StoredState | undefined {
    const snapshot = this.#ctx.limiter.exportTenant(tenant);
    const { self, incarnation } = this.#ctx;
    return snapshot === undefined ? undefined : { tenant, json: JSON.stringify({ ...snapshot, by: self.id, byUrl: self.url, byInc: incarnation, how }), ttlMs: this.#ctx.ttlMs(tenant) };
  }

  /** Forgets a claimed tenant here: its stand-in role (and tally), limiter state, claim, pending checkpoint and stored-state note. */
  unclaim(tenant: string): void {
    this.standIns.forget(tenant);
    this.held.forget(tenant);
    this.#late.forget(tenant);
    this.#ctx.limiter.stopTally(tenant);
    this.#ctx.limiter.dropTenant(tenant);
    this.#claimed.delete(tenant);
    this.dirty.delete(tenant);
    this.stored.delete(tenant);
  }

  /** Keeps what was admitted here as a stand-in for `tenant`, to add once its state is loaded here as its owner. */
  carry(tenant: string, carried: Carried): void {
    this.#carried.set(tenant, carried);
  }

  /** Forgets the carried usage of the tenants `keep` rejects. */
  keepCarried(keep: (tenant: string) => boolean): void {
    for (const tenant of this.#carried.keys()) if (!keep(tenant)) this.#carried.delete(tenant);
  }

  /**
   * Drops every claim, keeping each tenant's state aside (valid as of `atMs`, clock ms) in case no
   * newer one arrives when it is claimed again (`src/coord/handoff/rejoin.ts`); forgets the carried usage.
   * @returns how many states are kept aside.
   */
  dropAll(atMs: number): number {
    for (const tenant of [...this.#claimed]) {
      const snapshot = this.#ctx.limiter.exportTenant(tenant);
      if (snapshot !== undefined) this.#rejoined.keep(tenant, snapshot, atMs);
      this.unclaim(tenant);
    }
    this.#carried.clear();
    return this.#rejoined.size;
  }

  async #claim(tenant: string, how: ClaimHow): Promise<void> {
    const { store, stats, log, waitMs, self } = this.#ctx;
    const fallback = how === 'fallback';
    const previous = this.#placement.previous.owner(tenant);
    const ring = this.#placement.ring;
    const previousAlive = previous !== undefined && ring.members.some((m) => m.id === previous.id);
    // The previous owner died (gone from the ring without announcing a handoff): the requests it had
    // in flight died with it, so their concurrency slots are freed on load. A stand-in (`fallback`)
    // never frees them: its owner is still a member, maybe only stalled, and its streams may go on
    // (see `src/coord/handoff/stand-in.ts`: the slots stay counted until their leases expire or are settled).
    const crashed = slotsDiedWithOwner(fallback, previous?.id, self.id, previousAlive, previous !== undefined && this.#announcements.has(previous.id, ring.version));
    let lateFrom: string | undefined;
    if (store !== undefined && how === 'owner' && previous !== undefined && previous.id !== self.id && previousAlive) {
      if (!this.#announcements.has(previous.id, ring.version)) {
        this.#nudge(previous, ring.version);
        if (await this.#announcements.waitFor(previous.id, ring.version)) stats.waited++;
        else {
          stats.timedOut++;
          lateFrom = previous.id;
          log.warn({ tenant, from: previous.id, ring: ring.version, waitMs }, 'handoff not announced in time: starting from the last checkpoint');
        }
      }
    }
    let json: string | OversizedState | null = null;
    // The replica held here (a checkpoint, a handoff pushed here, a state given back): no Redis read.
    const replica = this.#ctx.peers?.replicas.take(tenant);
    if (replica !== undefined) json = replica.json;
    else if (store !== undefined) try {
      // Redis slow or frozen: the claim waits at most wait_ms for the read, as for a handoff. The
      // read is bounded (MAX_STATE_BYTES), so a large value cannot be what makes it time out.
      json = await withTimeout(store.read(tenant), waitMs);
    } catch (err) {
      log.warn({ tenant, err: (err as Error).message }, 'tenant state unreadable: starting fresh');
    }
    const adopted = this.#adopt(tenant, json, crashed, ring, !fallback, previous);
    const holding = this.#holding.get(tenant);
    if (holding !== undefined) {
      this.#holding.delete(tenant);
      await holding;
    }
    // Its handoff, if it comes now, is merged into what this node decides from (src/coord/handoff/late-handoff.ts).
    if (adopted && lateFrom !== undefined) this.#late.expect(tenant, lateFrom, this.#ctx.limiter.exportTenant(tenant));
    // Without a store the ring never moves a tenant: a request handed here by a leaving owner stands in for it too.
    if (adopted && (fallback || (store === undefined && how === 'handed')) && !this.#placement.place(tenant).here) {
      const owner = this.#placement.ring.owner(tenant);
      if (owner !== undefined) await this.standIns.begin(tenant, owner);
    }
  }

  /** Claims made without their previous owner's handoff (the wait ended first). */
  readonly #late = new LateHandoffs();

  /**
   * The handoff of claimed `tenant` from `from` came after the claim stopped waiting for it: merged
   * into the state this node decides from (`src/coord/handoff/late-handoff.ts`). A state that does not parse
   * changes nothing (logged).
   * @returns false (nothing done) unless this claim was made without `from`'s handoff.
   */
  lateHandoff(tenant: string, json: string, from: string): boolean {
    const { limiter, clock, log, stats } = this.#ctx;
    if (!this.#claimed.has(tenant)) return false;
    const late = this.#late.take(tenant, from);
    if (late === null) return false;
    let handed: TenantSnapshot;
    try {
      handed = parseTenantSnapshot(json);
    } catch (err) {
      log.warn({ tenant, from, err: clip((err as Error).message) }, 'late handoff does not parse: not merged');
      return false;
    }
    const clamped = limiter.importTenant(tenant, mergeLateHandoff(limiter.exportTenant(tenant), late.base, handed, clock.now()));
    if (clamped > 0) stats.clamped++;
    this.dirty.add(tenant);
    stats.lateMerged++;
    log.info({ tenant, from }, 'late handoff merged');
    return true;
  }

  /** `from|ring` of the previous owners nudged, so each is asked once per ring. */
  readonly #nudged = new Set<string>();

  /**
   * Asks `previous` (over the peer transport, when there is one) to read the member list now: it
   * hands over as soon as it sees the ring this node claims under, instead of at its next
   * heartbeat. Once per previous owner and ring; never rejects (a failure is logged: the claim
   * then waits for the announcement as without peers).
   */
  #nudge(previous: Member, ring: string): void {
    const { peers, self, log } = this.#ctx;
    const k = `${previous.id}|${ring}`;
    if (peers === undefined || this.#nudged.has(k)) return;
    if (this.#nudged.size >= 256) this.#nudged.clear();
    this.#nudged.add(k);
    peers.transport.nudge(self, previous, ring).catch((err: unknown) => log.warn({ to: previous.id, ring, err: (err as Error).message }, 'nudging the previous owner failed'));
  }

  /**
   * Makes `json` (a stored state, or null for fresh) the tenant's state here and claims it, unless
   * the ring changed while it was read and this node no longer owns the tenant (then nothing).
   */
  #adopt(tenant: string, loaded: string | OversizedState | null, crashed: boolean, readUnder: Ring, asOwner = false, previous?: Member): boolean {
    const { limiter, log, clock } = this.#ctx;
    if (this.#placement.ring !== readUnder && !this.#placement.place(tenant).here) return false;
    // Held here when the others dropped this node: used only when nothing newer came.
    const json = this.#rejoined.newer(tenant, loaded);
    try {
      if (json === null) limiter.dropTenant(tenant);
      else loadStoredState({ ctx: this.#ctx, placement: this.#placement, announcements: this.#announcements, held: this.held, stored: this.stored, holding: this.#holding }, tenant, json, crashed, asOwner ? readUnder : undefined, previous);
    } catch (err) {
      // The tenant's policy is invalid (its acquires fail the same way): nothing to restore onto.
      limiter.dropTenant(tenant);
      log.warn({ tenant, err: (err as Error).message }, 'tenant state not loaded: starting fresh');
    }
    const carried = this.#carried.get(tenant);
    if (carried !== undefined) {
      this.#carried.delete(tenant);
      const loaded = limiter.exportTenant(tenant);
      limiter.importTenant(tenant, withOpenRequests(withUsage(loaded, carried.usage, clock.now()), carried.current, carried.base));
      this.dirty.add(tenant);
    }
    this.#claimed.add(tenant);
    // Loaded from elsewhere: its replica may not hold it (a restarted replica); the next checkpoint sends it there.
    if (json !== null && this.#ctx.peers !== undefined) this.dirty.add(tenant);
    return true;
  }

  /**
   * Loads at once the tenants a previous owner (`from`) announced it handed here (one MGET per
   * chunk of {@link PREFETCH_CHUNK}, chunk after chunk), so their first requests find them claimed.
   * A request for a tenant of the chunk being read waits for that chunk only; tenants of later
   * chunks are loaded by their own first request if it comes first. Claimed or loading tenants are
   * skipped. Never rejects: on a Redis error the remaining tenants load on their first request.
   */
  async prefetch(tenants: readonly string[], from: string, store: TenantStateStore): Promise<void> {
    const { stats, log, clock, onMoved } = this.#ctx;
    const ring = this.#placement.ring;
    const mine = (t: string): boolean => this.#placement.place(t).here || this.#placement.place(t, from).here;
    const started = clock.now();
    const before = stats.prefetched;
    for (let i = 0; i < tenants.length; i += PREFETCH_CHUNK) {
      const chunk = tenants.slice(i, i + PREFETCH_CHUNK).filter((t) => !this.#claimed.has(t) && !this.#loading.has(t) && mine(t));
      if (chunk.length === 0) continue;
      let failed = false;
      // Never rejects: on a Redis error the chunk's requests claim their tenants themselves.
      const load = (async () => {
        try {
          const values = await store.readMany(chunk);
          for (const [k, tenant] of chunk.entries()) if (!this.#claimed.has(tenant) && this.#adopt(tenant, values[k] ?? null, false, ring)) stats.prefetched++;
        } catch (err) {
          failed = true;
          log.warn({ err: (err as Error).message, tenants: tenants.length - i }, 'prefetching handed-over tenants failed: they load on their first request');
        }
      })();
      for (const t of chunk) this.#loading.set(t, load);
      await load;
      for (const t of chunk) if (this.#loading.get(t) === load) this.#loading.delete(t);
      if (failed) return;
    }
    stats.lastPrefetchMs = clock.now() - started;
    onMoved?.('prefetch', stats.lastPrefetchMs, stats.prefetched - before);
  }
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
