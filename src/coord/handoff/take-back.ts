/**
 * The owner's side of a wake-up from a stall (`src/coord/handoff/fence.ts`): take every tenant back from
 * the members that stood in for this node while it was silent. Each member ends its stand-in
 * claims for this node and answers what it admitted there, the requests still running included
 * (`StandIns.reclaim`, over `POST /_quotaring/v1/handoff/reclaim`); this node adds it to its own
 * state (`StandIns.absorb`). Every claimed tenant is marked for the next checkpoint, so the
 * replicas learn what this node admitted since its last one.
 */
import type { Claims } from './claims.ts';
import type { HandoffContext } from './handoff-context.ts';
import type { RingPlacement } from '../ring/placement.ts';

/**
 * Asks every other member of this node's ring for the claims it holds in this node's place and
 * absorbs what each admitted. Each member is waited for at most `timeoutMs` (ms); one that fails
 * is skipped (logged). A member that answers later is absorbed then all the same (logged): it ended
 * its stand-in claims when it answered, so its answer is the only record of what it admitted, and a
 * node just woken from a stall may read it late (its own backlog of queued work runs first).
 * Never rejects.
 * @returns the tenants taken back within `timeoutMs`.
 */
export async function takeBack(ctx: HandoffContext, placement: RingPlacement, claims: Claims, timeoutMs: number): Promise<number> {
  const { peers, self, log } = ctx;
  for (const tenant of claims.tenants()) claims.touched(tenant);
  const reclaim = peers?.transport.reclaim;
  if (peers === undefined || reclaim === undefined) return 0;
  const counts = await Promise.all(
    placement.ring.members
      .filter((m) => m.id !== self.id)
      .map(async (member) => {
        let timer: NodeJS.Timeout | undefined;
        let late = false;
        const absorbed = (async (): Promise<number> => {
          const reclaimed = await reclaim.call(peers.transport, self, member);
          let taken = 0;
          for (const r of reclaimed) if (await claims.standIns.absorb(r.tenant, r.usage)) taken++;
          if (late && taken > 0) log.warn({ member: member.id, tenants: taken }, 'tenants taken back from a stand-in after the wait: absorbed late');
          return taken;
        })();
        try {
          return await Promise.race([
            absorbed,
            new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs))),
          ]);
        } catch (err) {
          late = true;
          absorbed.catch(() => undefined);
          log.warn({ member: member.id, err: (err as Error).message }, 'taking tenants back from a stand-in failed');
          return 0;
        } finally {
          clearTimeout(timer);
        }
      }),
  );
  return counts.reduce((n, c) => n + c, 0);
}
