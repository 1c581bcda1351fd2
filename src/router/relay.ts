/**
 * One attempt's answer relayed from a gateway node to the client as bytes: an undici dispatch
 * handler that writes the node's status, end-to-end headers (a raw name/value array, never parsed
 * into an object) and body chunks straight to the client's `ServerResponse` — no Readable, no
 * pipe, no abort emitter per response.
 *
 * - Backpressure: a chunk the client's socket does not take at once pauses undici's reading from the
 *   node until the socket drains (a slow client never makes the router buffer more than a chunk).
 * - Client aborts: one `close` listener per client connection aborts whichever attempt the
 *   connection is waiting on (the node sees its connection closed). A client that closes after the
 *   answer's last byte (a stream's terminal event, a `content-length` body) was written is not
 *   counted as gone: the response's status stays the node's (`stream-end.ts`).
 * - A held answer: an attempt that may be retried (a replayable body's first attempt) stops at the
 *   headers of a 421 or a 503 for the caller to decide: relay it ({@link Relay.relayHeld}) or
 *   discard it and retry ({@link Relay.discard}). Every other answer is relayed from its headers on.
 *
 * Uses undici's handler callbacks (`onConnect` … `onComplete`): the ones its HTTP/1 client calls
 * itself. The newer controller API wraps them and parses every response's headers into an object,
 * which a relay never needs.
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ProxyExchange } from './exchange.ts';
import { followDelivery } from '../http/client-errors.ts';
import { endToEndRawHeaders } from './hop-by-hop.ts';
import { AnswerEnd } from './stream-end.ts';

/** What an attempt came to once the node's headers came (or did not). */
export type Head =
  /** The node answered; `relayed`: its answer is on its way to the client (else it is held for the caller). */
  | { readonly ok: true; readonly statusCode: number; readonly rawHeaders: readonly Buffer[]; readonly relayed: boolean }
  /** No answer: the connection failed or was aborted before the node's headers. */
  | { readonly ok: false; readonly err: unknown };

/** Statuses an attempt that may be retried holds for a decision: 421 misdirected, 503 (node_starting). */
const HELD_STATUSES: ReadonlySet<number> = new Set([421, 503]);

/** The relay a client connection waits on, set on its socket (one `close` listener per connection). */
const CURRENT = Symbol('quotaring.relay');
type WatchedSocket = Socket & { [CURRENT]?: Relay | null };

function onClientClose(this: WatchedSocket): void {
  const relay = this[CURRENT];
  this[CURRENT] = null;
  relay?.clientGone();
}

/** Options of a {@link Relay}. */
export interface RelayOptions {
  /** Hold a 421 or 503 answer for the caller instead of relaying it (the attempt may be retried). */
  readonly hold: boolean;
  /**
   * Called right before the node's headers go out (after the hop-by-hop ones were dropped): may
   * append name/value pairs (the router's `connection: close` after an early answer).
   */
  readonly beforeHead?: ((headers: string[]) => void) | undefined;
}

type Mode = 'head' | 'held' | 'relay' | 'discard' | 'done';

/** An undici dispatch handler relaying one attempt; `head` settles when the node's headers come or the attempt fails first. */
export class Relay {
  /** Settles once: the node's headers, or the failure before them. Never rejects. */
  readonly head: Promise<Head>;
  readonly #exchange: ProxyExchange;
  readonly #res: ServerResponse;
  readonly #opts: RelayOptions;
  #settle!: (head: Head) => void;
  #mode: Mode = 'head';
  #abort: ((err?: Error) => void) | undefined;
  #resume: (() => void) | undefined;
  #gone = false;
  /** A failure that came while the answer was held. */
  #heldError: Error | undefined;
  #onDrain: (() => void) | undefined;
  /** Whether the relayed answer's last byte was written (set at its headers, for a body that can be judged). */
  #answer: AnswerEnd | undefined;

  /** @param exchange hijacked when the node's headers are relayed; until then the caller may still answer on it. */
  constructor(exchange: ProxyExchange, opts: RelayOptions) {
    this.#exchange = exchange;
    this.#res = exchange.res;
    this.#opts = opts;
    this.head = new Promise<Head>((resolve) => {
      this.#settle = resolve;
    });
    const socket = exchange.req.socket as WatchedSocket | null;
    if (socket === null || socket.destroyed) {
      this.#gone = true;
      return;
    }
    if (socket[CURRENT] === undefined) socket.once('close', onClientClose);
    socket[CURRENT] = this;
  }

  /** The client's connection closed: the attempt is aborted (before or while its answer is relayed). */
  clientGone(): void {
    this.#gone = true;
    if (this.#mode === 'head' || this.#mode === 'relay') this.#abort?.(new ClientGoneError());
  }

  /** Relays a held answer (status and headers as the node sent them, then its body). */
  relayHeld(): void {
    if (this.#mode !== 'held') return;
    const { statusCode, rawHeaders } = this.#held as { statusCode: number; rawHeaders: Buffer[] };
    this.#held = undefined;
    if (this.#heldError !== undefined || this.#gone) {
      // The node's connection broke, or the client left, while the answer was held.
      this.#mode = 'done';
      this.#detach();
      if (this.#heldError === undefined) this.#abort?.(new ClientGoneError());
      this.#exchange.hijack();
      this.#res.destroy();
      return;
    }
    this.#writeHead(statusCode, rawHeaders);
    if (this.#heldComplete) this.onComplete();
    else this.#resume?.();
  }

  /** Reads a held answer's body to its end without relaying it (the caller retries elsewhere). */
  discard(): void {
    if (this.#mode !== 'held') return;
    this.#held = undefined;
    this.#mode = this.#heldComplete ? 'done' : 'discard';
    this.#detach();
    this.#resume?.();
  }

  #held: { statusCode: number; rawHeaders: Buffer[] } | undefined;
  /** The held answer's body already ended (undici may finish a short body before the caller decides). */
  #heldComplete = false;

  // undici's handler callbacks.

  onConnect(abort: (err?: Error) => void): void {
    this.#abort = abort;
    if (this.#gone) abort(new ClientGoneError());
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true;
    this.#resume = resume;
    if (this.#opts.hold && HELD_STATUSES.has(statusCode)) {
      this.#mode = 'held';
      this.#held = { statusCode, rawHeaders };
      this.#settle({ ok: true, statusCode, rawHeaders, relayed: false });
      return false;
    }
    this.#writeHead(statusCode, rawHeaders);
    this.#settle({ ok: true, statusCode, rawHeaders, relayed: true });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.#mode !== 'relay') return true;
    const written = this.#res.write(chunk);
    this.#answer?.push(chunk);
    if (written) return true;
    this.#onDrain ??= () => this.#resume?.();
    this.#res.once('drain', this.#onDrain);
    return false;
  }

  onComplete(): void {
    if (this.#mode === 'held') {
      this.#heldComplete = true;
      return;
    }
    const relaying = this.#mode === 'relay';
    this.#mode = 'done';
    this.#detach();
    if (relaying) this.#res.end();
  }

  onError(err: Error): void {
    const mode = this.#mode;
    if (mode === 'held') {
      this.#heldError = err;
      return;
    }
    this.#mode = 'done';
    this.#detach();
    if (mode === 'head') this.#settle({ ok: false, err });
    // The answer broke after its headers: the client sees its stream break (its framing is lost).
    else if (mode === 'relay') this.#res.destroy();
  }

  #writeHead(statusCode: number, rawHeaders: readonly Buffer[]): void {
    this.#mode = 'relay';
    const answer = new AnswerEnd(rawHeader(rawHeaders, 'content-type'), rawHeader(rawHeaders, 'content-length'));
    if (answer.judged) {
      this.#answer = answer;
      followDelivery(this.#res, answer);
    }
    const headers = endToEndRawHeaders(rawHeaders);
    this.#opts.beforeHead?.(headers);
    this.#exchange.hijack();
    this.#res.writeHead(statusCode, headers);
  }

  /** This attempt no longer follows its client connection. */
  #detach(): void {
    const socket = this.#exchange.req.socket as WatchedSocket | null;
    if (socket !== null && socket[CURRENT] === this) socket[CURRENT] = null;
  }
}

/** Why an attempt was aborted: its client closed the connection. */
export class ClientGoneError extends Error {
  readonly code = 'QR_CLIENT_GONE';
  constructor() {
    super('the client closed the connection');
  }
}

/** The first value of a header in undici's raw array (`name` lower case), or undefined. */
export function rawHeader(rawHeaders: readonly Buffer[], name: string): string | undefined {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const n = rawHeaders[i] as Buffer;
    if (n.length === name.length && n.toString('latin1').toLowerCase() === name) return (rawHeaders[i + 1] as Buffer).toString('latin1');
  }
  return undefined;
}
