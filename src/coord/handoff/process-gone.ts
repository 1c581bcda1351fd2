/**
 * Whether the process that wrote a tenant's state is gone, so that the requests it had in flight
 * died with it and their concurrency slots may be freed. A crash and a stall look the same from
 * outside until the stalled process wakes (SIGSTOP, a long GC pause, a frozen VM): a member that
 * left the ring, or that routers route around, is *not* proof. Proof is one of:
 * - its port refuses connections (ECONNREFUSED): nothing listens there any more;
 * - another process answers there: `/healthz` names another node id, or the same id with another
 *   incarnation (a random id each process draws at start, written into every state it stores as
 *   `byInc`), i.e. the member was restarted.
 * A stalled process still has its listening socket (the kernel accepts the connection, `/healthz`
 * never answers) and a cut link times out: both are "not proven", and the slots stay held.
 */
import { connect } from 'node:net';
import { request } from 'undici';

/** Who wrote a state: a node id, the URL it served at, and its process incarnation when known. */
export interface ProcessIdentity {
  readonly id: string;
  readonly url: string;
  /** The writer's incarnation (`byInc` of its stored state); undefined for states of older versions. */
  readonly inc?: string | undefined;
}

/** Answers whether the process `who` is proven gone; never rejects. */
export type GoneProbe = (who: ProcessIdentity) => Promise<boolean>;

/**
 * Whether nothing listens at `url` any more: a TCP connection to its host and port is refused
 * (ECONNREFUSED). A stalled process still has its listening socket (the kernel accepts the
 * connection), and a cut link times out: both answer false, as does any other error.
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

/**
 * Whether the process `who` is proven gone (see the module comment): its port refuses
 * connections, or its `/healthz` answers (200, JSON) naming another node id, or `who.inc` is known
 * and the answer names another incarnation. Never rejects; false on a timeout or any other error.
 * @param timeoutMs longest wait for each of the connection and the `/healthz` answer, ms. @default 500
 */
export async function processGone(who: ProcessIdentity, timeoutMs = 500): Promise<boolean> {
  if (await listenerGone(who.url, timeoutMs)) return true;
  try {
    const res = await request(new URL('/healthz', who.url), { headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return false;
    }
    const body = (await res.body.json()) as { node?: unknown; incarnation?: unknown };
    if (typeof body.node === 'string' && body.node !== who.id) return true;
    return who.inc !== undefined && typeof body.incarnation === 'string' && body.incarnation !== who.inc;
  } catch {
    return false;
  }
}
