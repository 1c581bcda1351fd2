/** Pushing tenant states to a peer over the handoff context's transport, counted in its stats. */
import type { HandoffContext } from './handoff-context.ts';
import type { TransferKind, WireState } from './peer-wire.ts';
import type { Member } from '../types.ts';

/**
 * Pushes `states` from this node to member `to` over the context's peer transport, counting them
 * (`stats.replicated` for a checkpoint, `stats.pushed` for a handoff). A handoff for ring version
 * `ring` is sent even without states (it announces the handoff to `to`). Never rejects: a failure
 * is logged, and the receiver gets the tenant's next checkpoint or loads it from Redis.
 * @returns whether `to` stored them (true when there is nothing to send or no peers).
 */
export async function pushStates(ctx: HandoffContext, to: Member, kind: TransferKind, states: readonly WireState[], ring?: string): Promise<boolean> {
  if (ctx.peers === undefined || (states.length === 0 && ring === undefined)) return true;
  try {
    await ctx.peers.transport.push(ctx.self, to, kind, states, ring);
    if (kind === 'checkpoint') ctx.stats.replicated += states.length;
    else ctx.stats.pushed += states.length;
    return true;
  } catch (err) {
    ctx.log.warn({ to: to.id, kind, tenants: states.length, err: (err as Error).message }, kind === 'checkpoint' ? 'replica checkpoint not delivered' : 'handoff to a peer not delivered');
    return false;
  }
}
