/**
 * Loading a stored tenant state (a handoff, a checkpoint or a replica) into the limiter for a
 * claim: parsed and clamped as untrusted, the conservative state for one that does not parse or is
 * over the byte cap, and the slots of a writer that stopped without a handoff held until it is
 * proven gone (`./held-slots.ts`).
 */
import { MAX_STATE_BYTES } from '../../limiter/snapshot-bounds.ts';
import { parseTenantSnapshot } from '../../limiter/snapshot.ts';
import type { TenantSnapshot } from '../../limiter/snapshot.ts';
import type { Announcements } from './announcements.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { HeldSlots } from './held-slots.ts';
import type { RingPlacement } from '../ring/placement.ts';
import type { ProcessIdentity } from './process-gone.ts';
import type { OversizedState } from './state-store.ts';
import type { Member, Ring } from '../types.ts';

/** What a load reads and fills of the claim table. */
export interface LoadParts {
  readonly ctx: HandoffContext;
  readonly placement: RingPlacement;
  readonly announcements: Announcements;
  readonly held: HeldSlots;
  /** Claimed tenants whose state Redis may hold: a loaded tenant joins it. */
  readonly stored: Set<string>;
  /** Holds begun by a load, awaited by the claim that made it. */
  readonly holding: Map<string, Promise<void>>;
}

/**
 * Loads a stored state into the limiter. Its values are clamped to the tenant's limits (counted in
 * `stats.clamped`, logged); a state that does not parse is corrupt (`stats.corrupt`, logged with
 * the reason, never the value): the tenant starts in the conservative state, every requests and
 * tokens limit used up for one window, never with fresh limits. So is a value over the byte cap
 * (`OversizedState`: never read, see `TenantStateStore.read`). When its writer stopped deciding
 * for the tenant without a handoff (`crashed`, or a checkpoint of a node gone from `ownerUnder`),
 * the slots of its open requests are held until the writer is proven gone (`HeldSlots.hold`,
 * which the claim awaits).
 * @throws RangeError when the tenant's policy is invalid (see `compilePolicy`).
 */
export function loadStoredState(p: LoadParts, tenant: string, json: string | OversizedState, crashed: boolean, ownerUnder?: Ring, previous?: Member): void {
  const { limiter, log, stats } = p.ctx;
  let snapshot: TenantSnapshot;
  try {
    if (typeof json !== 'string') throw new Error(`tenant snapshot: ${json.bytes} bytes, over the ${MAX_STATE_BYTES}-byte cap (not read)`);
    snapshot = parseTenantSnapshot(json);
  } catch (err) {
    stats.corrupt++;
    log.warn({ tenant, err: clip((err as Error).message) }, 'tenant state in Redis is corrupt: its requests and tokens limits start used up for one window');
    limiter.importConservative(tenant);
    p.stored.add(tenant);
    return;
  }
  const clamped = limiter.importTenant(tenant, snapshot);
  p.stored.add(tenant);
  stats.loaded++;
  if (clamped > 0) {
    stats.clamped++;
    log.warn({ tenant, values: clamped }, 'tenant state in Redis out of range: values clamped to the limits');
  }
  // Its writer stopped deciding for the tenant without a handoff: crashed, or only stalled. Its
  // open requests keep their slots until it is proven gone (src/coord/handoff/held-slots.ts).
  if (crashed || (ownerUnder !== undefined && writerGone(p, snapshot, ownerUnder))) {
    const writer = writerOf(p.placement, snapshot, previous);
    const open = snapshot.reservations.filter((r) => !r.released).map((r) => r.id);
    if (writer !== undefined) p.holding.set(tenant, p.held.hold(tenant, writer, open, p.ctx.waitMs));
  }
}

/**
 * The process that wrote `snapshot`: its `by`, `byUrl` and `byInc`, or for a state of an older
 * version (no `byUrl`) the previous owner's id and URL, or a member of either ring with its id.
 * Undefined when no URL is known (the slots then stay held until their leases expire).
 */
function writerOf(placement: RingPlacement, snapshot: TenantSnapshot, previous: Member | undefined): ProcessIdentity | undefined {
  const id = snapshot.by ?? previous?.id;
  if (id === undefined) return undefined;
  const url = snapshot.byUrl ?? [previous, ...placement.previous.members, ...placement.ring.members].find((m) => m?.id === id)?.url;
  return url === undefined ? undefined : { id, url, inc: snapshot.byInc };
}

/**
 * Whether `snapshot` is a checkpoint of a node gone from `ring` without announcing a handoff for
 * it: the node was deciding for the tenant when it wrote it and died since, so the requests open in
 * it died with it. Catches a dead owner's checkpoint that reaches a claim through another previous
 * owner (a join moved the tenant again before the member that took it over claimed it).
 */
function writerGone(p: LoadParts, snapshot: TenantSnapshot, ring: Ring): boolean {
  const by = snapshot.by;
  if (snapshot.how !== 'checkpoint' || by === undefined || by === p.ctx.self.id) return false;
  return !ring.members.some((m) => m.id === by) && !p.announcements.has(by, ring.version);
}

/** At most 200 characters of an error message about a stored value (it may quote the value). */
export function clip(message: string): string {
  return message.length <= 200 ? message : `${message.slice(0, 200)}…`;
}
