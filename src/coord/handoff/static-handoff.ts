/**
 * Handoff with static members (`cluster.members`, with or without Redis): the ring never changes,
 * so a tenant never moves to another owner; it is only *stood in for* while its owner is down.
 * What keeps its limits through a rolling restart, a crash and a full restart:
 *
 * - **Replicas.** Every `cluster.handoff.checkpoint` (C, default 1 s) an owner sends the state of
 *   each tenant touched since the last checkpoint to the tenant's replica, `ring.range(t, 2)[1]`:
 *   the member routers send the tenant to when the owner is suspect (the first member of the range
 *   after the owner), and the one a leaving owner's 421 names (the owner under the ring without it).
 * - **Graceful stop (SIGTERM).** The node saves its state file (`src/coord/handoff/local-state.ts`), hands
 *   every tenant it decides for to that same member (`Handoff.leave`: pushed over HTTP, and to
 *   Redis when configured), answers 421 naming it for `cluster.handoff.drain`, then exits. The
 *   member stands in for the owner from the handed state (the stand-in claim of `Handoff`).
 * - **Restart.** Before it listens, the restarted member pulls from every other member the states
 *   they hold for its tenants ({@link recoverFromPeers}; `Handoff.surrender` on their side: a
 *   stand-in gives its claim back with everything it admitted; a replica gives the last checkpoint).
 *   Where no member answers, its own state file fills in. Its first decision for a tenant then
 *   starts from the newest of those states (`ReplicaStore` keeps the latest by time taken).
 *
 * Bounds (admitted over any window, beyond the tenant's limit L):
 * - Rolling restart, one node at a time, each waiting for the previous to answer health checks:
 *   0 in the common case. A request routed to the stand-in after it gave the tenant back (a
 *   router that has not yet seen the owner healthy again: at most one `cluster.health_check`
 *   interval H) is decided there from the state given back and its usage is returned to the owner
 *   (`absorb`): over-admission ≤ the tenant's traffic during H on the stand-in, counted by both
 *   afterwards. A member that restarts before its replica restarted in turn keeps everything.
 * - SIGKILL of an owner: its replica decides from the last checkpoint it received, so at most the
 *   owner's admissions since that checkpoint are missing: ≤ the tenant's traffic over one
 *   checkpoint period C plus one push's latency (the push is sent at the end of the period).
 *   Its concurrency slots in flight are freed (those requests died with it).
 * - Full restart (every node stopped, then started): each node's state file; nothing is lost
 *   beyond what SIGKILL would lose when a node was killed rather than stopped.
 * - Not covered: a stand-in that is stopped while it still stands in for a dead owner hands its
 *   claims to the owner (down): those states live only in its state file until it restarts.
 */
import type { Handoff, HandoffLog } from './handoff.ts';

/**
 * Pulls from every other member the states it holds for this node's tenants and stores them among
 * the replicas here (each member at most 2 s; one that is down gives nothing). Call before
 * listening, so that a stand-in's usage cannot race a request decided here.
 * @returns how many states were stored.
 */
export async function recoverFromPeers(handoff: Handoff, known: (tenant: string) => boolean, log: HandoffLog): Promise<number> {
  const peers = handoff.peers;
  if (peers === undefined) return 0;
  const self = handoff.self;
  const others = handoff.ring().members.filter((m) => m.id !== self.id);
  const counts = await Promise.all(
    others.map(async (member) => {
      try {
        const states = await peers.transport.pull(self, member);
        return handoff.receive(states, known);
      } catch (err) {
        log.info({ from: member.id, err: (err as Error).message }, 'no tenant states from this member on restart');
        return 0;
      }
    }),
  );
  const stored = counts.reduce((a, b) => a + b, 0);
  handoff.stats.recovered += stored;
  log.info({ members: others.length, tenants: stored }, 'tenant states taken back from the other members');
  return stored;
}
