/**
 * Where a reservation made on this node is settled, released and renewed, by how its tenant is
 * decided: in this node's limiter while it decides for the tenant (or the tenant is spread), at the
 * tenant's new owner once it moved (handoff), in Redis in central mode.
 */
import type { SettleDetail } from '../limiter/types.ts';
import type { GatewayContext } from './context.ts';

/**
 * Settles reservation `id` on `actual` tokens and releases its slot: in this node's limiter while it
 * holds the tenant (synchronously: the next decision sees it), at the tenant's new owner otherwise.
 */
export function finish(ctx: GatewayContext, tenant: string, id: string, actual: number, spread: boolean, detail: SettleDetail): void {
  const handoff = ctx.handoff;
  const central = ctx.central;
  if (central !== undefined) {
    // One call settles and frees the slot; if it fails the slot expires with its lease.
    void central.guard.run(() => central.limiter.finish(tenant, id, actual));
  } else if (spread) {
    // A spread tenant's slot is always this node's; its tokens were settled on the leases.
    ctx.limiter.release(tenant, id);
  } else if (handoff === undefined || handoff.settlesHere(tenant)) {
    ctx.limiter.settle(tenant, id, actual, detail);
    ctx.limiter.release(tenant, id);
    handoff?.touched(tenant);
  } else {
    void handoff.finish(tenant, id, actual, 0, undefined, detail);
  }
}

/**
 * Frees the concurrency slot of reservation `id` and keeps its tokens reserved (see `Exchange.onReply`).
 * @returns false when this node no longer decides for the tenant (then the request settles at once).
 */
export function releaseSlot(ctx: GatewayContext, tenant: string, id: string, spread: boolean): boolean {
  const handoff = ctx.handoff;
  if (!spread && handoff !== undefined && !handoff.settlesHere(tenant)) return false;
  ctx.limiter.release(tenant, id);
  if (!spread) handoff?.touched(tenant);
  return true;
}

/**
 * Renews the concurrency lease of reservation `id` while its stream flows: in this node's limiter
 * while it holds the tenant (or the tenant is spread), at the tenant's new owner otherwise, in Redis
 * in central mode.
 */
export function renewSlot(ctx: GatewayContext, tenant: string, id: string): void {
  const central = ctx.central;
  if (central !== undefined) {
    void central.guard.run(() => central.limiter.renew(tenant, id));
  } else if (ctx.spread?.isSpread(tenant) === true) {
    ctx.limiter.renew(tenant, id);
  } else if (ctx.handoff === undefined || ctx.handoff.settlesHere(tenant)) {
    ctx.limiter.renew(tenant, id);
    ctx.handoff?.touched(tenant);
  } else {
    void ctx.handoff.renew(tenant, id);
  }
}
