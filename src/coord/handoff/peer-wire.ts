/**
 * What nodes send each other, as types first: tenant states (handoffs, checkpoints, reclaims) and
 * forwarded settlements, and the transports that carry them. The routes and clients are
 * `src/peer/transfer.ts` and `src/peer/settlements.ts`.
 */
import type { UsageDelta } from '../../limiter/usage-delta.ts';
import type { TokenKinds } from '../../limiter/types.ts';
import type { Member } from '../types.ts';

/** A tenant's state on the wire between nodes: snapshot JSON (untrusted) and when it was taken (sender's clock ms). */
export interface WireState {
  readonly tenant: string;
  readonly json: string;
  readonly at: number;
}

/** Why states are sent: a `handoff` (the receiver is or stands in for the new owner) or a replica `checkpoint`. */
export type TransferKind = 'handoff' | 'checkpoint';

/** How nodes send each other tenant states (`src/peer/transfer.ts` over signed HTTP). */
export interface PeerTransport {
  /**
   * Sends `states` from `from` to `to`. A `handoff` made for ring version `ring` names it in its last
   * push (sent even without states): the receiver takes that as `from`'s announcement of the handoff.
   * @throws when `to` did not store them.
   */
  push(from: Member, to: Member, kind: TransferKind, states: readonly WireState[], ring?: string): Promise<void>;
  /**
   * Asks `to` to read the member list now: `from` waits for its handoff under ring version `ring`.
   * @throws when `to` cannot be reached or answers other than 200.
   */
  nudge(from: Member, to: Member, ring: string): Promise<void>;
  /**
   * Asks `to` for every state it holds for tenants `from` owns (replicas, stand-in claims it gives back).
   * @throws when `to` cannot be reached or answers other than 200.
   */
  pull(from: Member, to: Member): Promise<WireState[]>;
  /**
   * `from` woke from a stall (it is fenced, `src/coord/handoff/fence.ts`): asks `to` to end every claim it
   * holds in place of `from` and send back what it admitted there (`StandIns.reclaim`).
   * @throws when `to` cannot be reached, answers other than 200 or with a reply that is not one.
   */
  reclaim?(from: Member, to: Member): Promise<Reclaimed[]>;
}

/** What a stand-in admitted for one tenant of an owner that took it back: see `StandIns.reclaim`. */
export interface Reclaimed {
  readonly tenant: string;
  readonly usage: UsageDelta;
}

/**
 * A settlement or renewal of a reservation, sent to the tenant's owner; or (`absorb`) the usage a
 * stand-in admitted for the owner's tenant, sent when it gives the tenant back.
 */
export type ForwardedSettlement =
  | {
      readonly op: 'finish';
      readonly tenant: string;
      readonly id: string;
      /** Actual tokens used. */
      readonly tokens: number;
      /** Actual cost, pico-dollars as a decimal integer string; absent: the reserved cost stays charged. */
      readonly cost?: string;
      /** Token kinds among `tokens`, for weighted tokens limits; absent: every token weighs 1. */
      readonly kinds?: TokenKinds;
    }
  | { readonly op: 'renew'; readonly tenant: string; readonly id: string }
  | { readonly op: 'absorb'; readonly tenant: string; readonly usage: UsageDelta };

/**
 * Sends a settlement from node `from` to node `to`; `hops` counts the nodes it went through.
 * @throws when the node did not accept it.
 */
export type SettlementSender = (from: Member, to: Member, settlement: ForwardedSettlement, hops: number) => Promise<void>;

/** Forwarding hops before a settlement is dropped (owner changed again while it travelled). */
export const MAX_FORWARD_HOPS = 2;
