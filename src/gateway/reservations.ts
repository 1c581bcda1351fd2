/**
 * Where a reservation made on this node is settled, released and renewed, as a value: one
 * {@link ReservationKeeper} per way its tenant is decided — in this node's limiter while it decides
 * for the tenant (`local`), a spread tenant's slot here and its tokens on the leases (`spread`), at
 * the tenant's new owner once it moved (`forwarded`, through the handoff), in Redis in central mode
 * (`central`). {@link ReservationKeepers.of} chooses one when the reservation is touched, since a
 * tenant may move between admission and settlement; the stages call it and branch on nothing.
 */
import type { Handoff } from '../coord/handoff/handoff.ts';
import type { Limiter } from '../limiter/limiter.ts';
import type { AcquireRequest, SettleDetail } from '../limiter/types.ts';
import type { CentralDecisions } from '../central/decisions.ts';
import type { SpreadTenants } from './spread.ts';

/** What a request asks of its tenant's limits besides its reservation id, for a wait-time estimate. */
export type WaitAsk = Omit<AcquireRequest, 'id'>;

/** One way of keeping a tenant's reservations. Never throws; a call to another node or Redis runs in the background. */
export interface ReservationKeeper {
  readonly kind: 'local' | 'spread' | 'forwarded' | 'central';
  /** Settles reservation `id` of `tenant` on `actual` tokens (priced by `detail`) and frees its concurrency slot. */
  finish(tenant: string, id: string, actual: number, detail: SettleDetail): void;
  /**
   * Frees the slot of reservation `id` and keeps its tokens reserved (see `Exchange.onReply`).
   * @returns false when this keeper cannot hold the tokens apart (the request then settles at once).
   */
  releaseSlot(tenant: string, id: string): boolean;
  /** Renews the slot's lease while a stream flows. */
  renew(tenant: string, id: string): void;
  /**
   * A provider 429 ends the request: gives its reservation back now (settled on 0 tokens, slot
   * freed) and @returns how long a request asking `ask` would wait on the tenant's own limits, ms
   * (Infinity: never fits); undefined where this node cannot tell (the limits are kept elsewhere).
   */
  refundForRetry(tenant: string, id: string, ask: WaitAsk): number | undefined;
}

/** What the keepers are built from: the node's limiter and, where configured, its handoff, central store and spread tenants. */
export interface KeeperSources {
  readonly limiter: Limiter;
  readonly handoff?: Handoff;
  readonly central?: CentralDecisions;
  readonly spread?: SpreadTenants;
}

/** The node's keepers, and the choice of one for a reservation. */
export interface ReservationKeepers {
  /**
   * The keeper of a reservation of `tenant` now. @param spread whether the request was admitted as a
   * spread tenant's (settlement and release); renewal passes whether the tenant is spread now.
   */
  of(tenant: string, spread: boolean): ReservationKeeper;
  /** Whether `tenant` is spread over several nodes now. */
  spreadNow(tenant: string): boolean;
}

/** Builds the keepers of a node from its sources. */
export function reservationKeepers(s: KeeperSources): ReservationKeepers {
  const { limiter, handoff, central, spread } = s;
  const local: ReservationKeeper = {
    kind: 'local',
    finish(tenant, id, actual, detail) {
      limiter.settle(tenant, id, actual, detail);
      limiter.release(tenant, id);
      handoff?.touched(tenant);
    },
    releaseSlot(tenant, id) {
      limiter.release(tenant, id);
      handoff?.touched(tenant);
      return true;
    },
    renew(tenant, id) {
      limiter.renew(tenant, id);
      handoff?.touched(tenant);
    },
    refundForRetry(tenant, id, ask) {
      limiter.settle(tenant, id, 0);
      limiter.release(tenant, id);
      return limiter.waitMs(tenant, ask);
    },
  };
  // A spread tenant's slot is always this node's; its tokens are settled on the group's leases.
  const spreadKeeper: ReservationKeeper = {
    kind: 'spread',
    finish: (tenant, id) => limiter.release(tenant, id),
    releaseSlot(tenant, id) {
      limiter.release(tenant, id);
      return true;
    },
    renew: (tenant, id) => limiter.renew(tenant, id),
    refundForRetry: () => undefined,
  };
  const forwarded: ReservationKeeper | undefined =
    handoff === undefined
      ? undefined
      : {
          kind: 'forwarded',
          finish: (tenant, id, actual, detail) => void handoff.finish(tenant, id, actual, 0, undefined, detail),
          releaseSlot: () => false,
          renew: (tenant, id) => void handoff.renew(tenant, id),
          refundForRetry: () => undefined,
        };
  // One call settles and frees the slot; if it fails the slot expires with its lease.
  const centralKeeper: ReservationKeeper | undefined =
    central === undefined
      ? undefined
      : {
          kind: 'central',
          finish: (tenant, id, actual) => void central.guard.run(() => central.limiter.finish(tenant, id, actual)),
          releaseSlot: () => false,
          renew: (tenant, id) => void central.guard.run(() => central.limiter.renew(tenant, id)),
          refundForRetry: () => undefined,
        };
  return {
    of(tenant, isSpread) {
      if (centralKeeper !== undefined) return centralKeeper;
      if (isSpread) return spreadKeeper;
      return forwarded === undefined || handoff?.settlesHere(tenant) === true ? local : forwarded;
    },
    spreadNow: (tenant) => spread?.isSpread(tenant) === true,
  };
}
