/**
 * Settlement forwarding: settlements, releases and renewals of requests admitted on a node for a
 * tenant that has since moved are forwarded to its owner, which applies them to the reservation it
 * received in the handoff (retried after each of {@link RETRY_DELAYS_MS}, to the owner under the
 * ring then; at most {@link MAX_FORWARD_HOPS} nodes; else counted in `stats.lost` and logged: the
 * reservation then stays charged at its estimate, and its slot held, until its lease expires). A node that receives one
 * from the node that handed it the tenant, under a ring it has not seen yet, applies it. A stand-in
 * gives the usage it admitted back to the owner the same way (`absorb`, `src/coord/handoff/stand-in.ts`).
 * The route that receives them is `src/peer/settlements.ts`.
 */
import type { SettleDetail } from '../../limiter/types.ts';
import type { Claims } from './claims.ts';
import type { HandOver } from './hand-over.ts';
import type { HandoffContext } from './handoff-context.ts';
import { MAX_FORWARD_HOPS } from './peer-wire.ts';
import type { ForwardedSettlement } from './peer-wire.ts';
import type { RingPlacement } from '../ring/placement.ts';
import type { Member } from '../types.ts';

/** A forwarded settlement or renewal of one reservation. */
type ReservationOp = Extract<ForwardedSettlement, { readonly id: string }>;


/**
 * Waits before each retry of a forwarded settlement the owner did not accept, ms. The owner is
 * often a node that has just joined the ring: with both cores busy its first seconds can leave a
 * call unanswered for the transport's 2 s, so retries span a few seconds, not one.
 */
export const RETRY_DELAYS_MS: readonly number[] = [100, 500, 2_000];

/** A node's settlements: applied here when it holds the tenant, else forwarded. See the module comment. */
export class SettlementForwarding {
  readonly #ctx: HandoffContext;
  readonly #placement: RingPlacement;
  readonly #claims: Claims;
  readonly #handOver: HandOver;
  /** Forwarded settlements not yet answered. */
  readonly #sending = new Set<Promise<void>>();

  /** @param handOver the node's handoffs: a settlement is forwarded only after the handoffs started before it are stored. */
  constructor(ctx: HandoffContext, placement: RingPlacement, claims: Claims, handOver: HandOver) {
    this.#ctx = ctx;
    this.#placement = placement;
    this.#claims = claims;
    this.#handOver = handOver;
  }

  /**
   * Settles reservation `id` on `tokens` actually used (and `detail`: its cost and token kinds, see
   * `Limiter.settle`) and releases its slot: here when this node
   * holds the tenant, otherwise at the tenant's owner (forwarded, retried for a few seconds, then logged as lost).
   * @param hops nodes the settlement went through (0 when it starts here).
   * @param from the node that forwarded it: when this node's ring still names that node as the owner,
   *   the sender's ring is newer (it handed the tenant here), so the settlement is applied here.
   */
  async finish(tenant: string, id: string, tokens: number, hops = 0, from?: string, detail: SettleDetail = {}): Promise<{ settled: boolean; released: boolean }> {
    const wire = { ...(detail.cost === undefined ? {} : { cost: detail.cost.toString() }), ...(detail.kinds === undefined ? {} : { kinds: detail.kinds }) };
    // A stand-in giving the tenant back: the request may be travelling to the owner with it.
    await this.#claims.standIns.returned(tenant);
    if (await this.#holdsOrForwards(tenant, { op: 'finish', tenant, id, tokens, ...wire }, hops, from)) {
      const settled = this.#ctx.limiter.settle(tenant, id, tokens, detail).settled;
      const released = this.#ctx.limiter.release(tenant, id);
      this.#claims.touched(tenant);
      return { settled, released };
    }
    return { settled: false, released: false };
  }

  /** Renews reservation `id` (a long stream) here or at the tenant's owner; `hops` and `from` as for {@link finish}. */
  async renew(tenant: string, id: string, hops = 0, from?: string): Promise<boolean> {
    await this.#claims.standIns.returned(tenant);
    if (await this.#holdsOrForwards(tenant, { op: 'renew', tenant, id }, hops, from)) {
      const renewed = this.#ctx.limiter.renew(tenant, id);
      this.#claims.touched(tenant);
      return renewed;
    }
    return false;
  }

  /** Resolves once every forwarded settlement sent so far was delivered or given up (call before exiting). */
  async flush(): Promise<void> {
    while (this.#sending.size > 0) await Promise.allSettled([...this.#sending]);
  }

  /** True when the tenant is held here (after loading it if this node owns it); false after forwarding. */
  async #holdsOrForwards(tenant: string, settlement: ReservationOp, hops: number, from: string | undefined): Promise<boolean> {
    const { stats, log } = this.#ctx;
    if (this.#claims.holds(tenant)) return true;
    const placed = this.#placement.place(tenant);
    if (placed.here) {
      await this.#claims.ready(tenant);
      return true;
    }
    if (from !== undefined && this.#placement.place(tenant, from).here) {
      // The sender handed the tenant here under a ring this node has not seen yet.
      await this.#claims.ready(tenant, 'handed');
      return true;
    }
    const owner = placed.owner;
    if (owner === undefined || hops >= MAX_FORWARD_HOPS) {
      stats.lost++;
      log.warn({ tenant, id: settlement.id, op: settlement.op, hops }, 'settlement lost: no owner to forward it to');
      return false;
    }
    stats.forwarded++;
    // The receiver loads the tenant's state without waiting when it sees who sent this: store it first.
    await this.#handOver.idle();
    const sending = this.#deliver(owner, tenant, settlement, hops + 1);
    this.#sending.add(sending);
    try {
      await sending;
    } finally {
      this.#sending.delete(sending);
    }
    return false;
  }

  /** Sends a settlement, again after each of {@link RETRY_DELAYS_MS} on failure (to the owner then), else logs it as lost. */
  async #deliver(owner: Member, tenant: string, settlement: ReservationOp, hops: number): Promise<void> {
    const { send, self, stats, log } = this.#ctx;
    let to = owner;
    for (let attempt = 0; ; attempt++) {
      try {
        await send(self, to, settlement, hops);
        return;
      } catch (err) {
        const delay = RETRY_DELAYS_MS[attempt];
        if (delay === undefined) {
          stats.lost++;
          log.warn({ tenant, id: settlement.id, op: settlement.op, to: to.id, attempts: attempt + 1, err: (err as Error).message }, 'settlement lost: owner unreachable');
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        to = this.#placement.ring.owner(tenant) ?? owner;
      }
    }
  }
}
