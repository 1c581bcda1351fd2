/**
 * A lingering close for refused bodies. A server that answers before it has read the request body
 * (413 over the body limit, a body that does not parse) and then closes the socket makes the
 * kernel reset the connection while the client is still writing: the client sees EPIPE or
 * ECONNRESET instead of the answer, depending on which it meets first. Like nginx's lingering
 * close, the rest of the body is read and discarded after the answer — within a budget of bytes
 * and time, past which the connection is destroyed — so an honest client reads its 4xx.
 */
import type { IncomingMessage } from 'node:http';

/** How much of a refused body is read and thrown away before the connection is cut. */
export interface LingerBudget {
  /** Bytes read after the answer; past them the socket is destroyed. */
  readonly maxBytes: number;
  /** Ms from the answer; a body still arriving then has its socket destroyed. */
  readonly maxMs: number;
}

/** nginx's `lingering_time` is 30 s and `lingering_timeout` 5 s; a gateway's clients are near. */
export const LINGER_MS = 2_000;

/**
 * Discards the rest of `raw`'s body within `budget`, the connection kept alive if it all arrives
 * in time (Node then reads the next request on it).
 */
export function drainRefusedBody(raw: IncomingMessage, budget: LingerBudget): void {
  if (raw.complete || raw.destroyed) return;
  let seen = 0;
  const cut = (): void => {
    clearTimeout(timer);
    raw.off('data', onData);
    raw.socket?.destroy();
  };
  const onData = (chunk: Buffer): void => {
    seen += chunk.length;
    if (seen > budget.maxBytes) cut();
  };
  const timer = setTimeout(cut, budget.maxMs);
  timer.unref();
  raw.once('close', () => clearTimeout(timer));
  raw.once('end', () => clearTimeout(timer));
  // A body piped to a stream that failed (the router's LimitedBody) is paused and unpiped: resume it here.
  raw.unpipe();
  raw.on('data', onData);
  raw.resume();
}

/** The answer being prepared: a fastify reply, or the raw `ServerResponse` of the router's fast path. */
export interface RefusalAnswer {
  removeHeader(name: string): unknown;
}

/**
 * Prepares an error answer sent while the request body `raw` is still arriving (fastify marks those
 * `connection: close`; the header is removed from `answer`): the body is drained by
 * {@link drainRefusedBody} instead, within `maxBytes` (the servers pass twice `server.body_limit`:
 * a refused body costs at most twice what an accepted one does) and {@link LINGER_MS}. Call before
 * the answer is sent.
 */
export function lingerOnRefusal(raw: IncomingMessage, answer: RefusalAnswer, maxBytes: number): void {
  if (raw.complete) return;
  answer.removeHeader('connection');
  drainRefusedBody(raw, { maxBytes, maxMs: LINGER_MS });
}
