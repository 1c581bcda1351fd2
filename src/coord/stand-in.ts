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
 * - When no request stood in for the owner for `standInIdleMs` and every request admitted here has
 *   ended, the stand-in gives the tenant back: the usage it admitted (window entries, bucket units)
 *   is sent to the owner (`absorb`), which adds it to its own state.
 *
 * Bound (beyond each limit, across both nodes, while the owner stays a member):
 * - Concurrency: 0 while the owner is silent: the owner's slots in the checkpoint stay held.
 *   Missing are only the owner's admissions after its last checkpoint reached the replica (at most
 *   one checkpoint period of the tenant's traffic plus one push), and, once the owner answers
 *   again, the stand-in's requests still running then (the owner learns of them when they end and
 *   the stand-in gives back) and any of the owner's own streams whose lease expired during the
 *   stall (an expired lease frees its slot on the owner too).
 * - Requests and tokens: the owner's admissions after its last replicated checkpoint (≤ one
 *   checkpoint period of the tenant's traffic), plus, after the owner answers again, the stand-in's
 *   admissions not yet absorbed (≤ `standInIdleMs` + one checkpoint period of the tenant's traffic
 *   on the stand-in).
 */

import { connect } from 'node:net';

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

/**
 * Whether nothing listens at `url` any more: a TCP connection to its host and port is refused
 * (ECONNREFUSED), so the process that served there is gone and the requests it had in flight died
 * with it. A stalled process (SIGSTOP, a CPU stall) still has its listening socket (the kernel
 * accepts the connection), and a cut link times out: both answer false, as does any other error.
 * @param timeoutMs longest wait for the connection, ms. @default 500
 */
export function listenerGone(url: string, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      resolve(false);
      return;
    }
    const port = Number(parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : parsed.port);
    const socket = connect({ host: parsed.hostname.replace(/^\[|\]$/g, ''), port });
    const done = (gone: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(gone);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(false));
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code === 'ECONNREFUSED'));
  });
}
