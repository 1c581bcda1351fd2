/**
 * The body a proxied request carries: none, a small body read into memory so a failed attempt can
 * be replayed on another member, or the client's stream itself (never buffered).
 */
import type { IncomingMessage } from 'node:http';
import { Transform } from 'node:stream';
import type { TransformCallback } from 'node:stream';

/** Bodies up to this size (bytes, known from `content-length`) are buffered so a retry can resend them. */
export const MAX_REPLAY_BYTES = 64 * 1024;

/** A request body for one or two attempts. */
export type RequestBody =
  /** GET/HEAD, or no body: replayable. */
  | { readonly kind: 'none' }
  /** The whole body in memory: replayable. */
  | { readonly kind: 'buffer'; readonly bytes: Buffer }
  /**
   * The client's stream (large or of unknown length): one attempt only. `stream` is a pass-through
   * piped from the request, so undici destroying it on a failed attempt leaves the client's
   * connection open for the router's error answer; it fails once the body passes the limit
   * (`exceeded`). `source` is the request itself.
   */
  | { readonly kind: 'stream'; readonly stream: LimitedBody; readonly source: IncomingMessage; readonly length: number | undefined };

/** Why a {@link LimitedBody} failed. */
export class BodyTooLargeError extends Error {
  readonly code = 'QR_BODY_TOO_LARGE';
  /** @param limit bytes. */
  constructor(readonly limit: number) {
    super(`request body over ${limit} bytes`);
  }
}

/** A pass-through that fails with {@link BodyTooLargeError} before forwarding a byte past `limit`. */
export class LimitedBody extends Transform {
  /** Whether the body went past the limit (the stream failed for that reason). */
  exceeded = false;
  #seen = 0;
  /** Bytes. */
  readonly limit: number;

  /** @param limit bytes; the body's first byte past it fails the stream. */
  constructor(limit: number) {
    super();
    this.limit = limit;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.limit) {
      this.exceeded = true;
      callback(new BodyTooLargeError(this.limit));
      return;
    }
    callback(null, chunk);
  }
}

/** Whether the request declares (`content-length`) a body longer than `limit` bytes. */
export function declaresMoreThan(raw: IncomingMessage, limit: number): boolean {
  const header = raw.headers['content-length'];
  return header !== undefined && Number(header) > limit;
}

/** Whether a streamed body failed because it went past the body limit. */
export function exceededLimit(body: RequestBody): boolean {
  return body.kind === 'stream' && body.stream.exceeded;
}

/** Discards what is left of a streamed body that will not be forwarded, so the router can answer on the same connection. */
export function drainUnsent(body: RequestBody): void {
  if (body.kind !== 'stream' || body.source.readableEnded) return;
  body.source.unpipe(body.stream);
  body.source.resume();
}

/** Whether a body can be sent a second time. */
export function isReplayable(body: RequestBody): boolean {
  return body.kind !== 'stream';
}

/**
 * Reads the body of `raw` when it is small (`content-length` ≤ `maxReplayBytes`), else leaves the
 * stream untouched, passed through a {@link LimitedBody} of `bodyLimit` bytes (a declared length
 * over the limit is the caller's to refuse first, see {@link declaresMoreThan}).
 * @param maxReplayBytes @default MAX_REPLAY_BYTES (64 KiB)
 * @param bodyLimit bytes (`server.body_limit`). @default Infinity
 * @throws the stream's error when the client aborts while a small body is being read.
 */
export async function requestBodyOf(raw: IncomingMessage, maxReplayBytes: number = MAX_REPLAY_BYTES, bodyLimit = Number.POSITIVE_INFINITY): Promise<RequestBody> {
  if (raw.method === 'GET' || raw.method === 'HEAD') return { kind: 'none' };
  const header = raw.headers['content-length'];
  const length = header === undefined ? undefined : Number(header);
  if (raw.headers['transfer-encoding'] === undefined && (length === undefined || length === 0)) return { kind: 'none' };
  if (length === undefined || !Number.isSafeInteger(length) || length > maxReplayBytes) {
    return { kind: 'stream', stream: raw.pipe(new LimitedBody(bodyLimit)), source: raw, length };
  }
  return { kind: 'buffer', bytes: await readAll(raw) };
}

/** The whole stream as one Buffer (events, not an async iterator: cheaper per request). */
function readAll(raw: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
    };
    const onError = (err: Error): void => {
      raw.off('data', onData);
      reject(err);
    };
    raw.on('data', onData);
    raw.once('error', onError);
    raw.once('aborted', () => onError(new Error('client aborted the request body')));
    raw.once('end', () => {
      raw.off('error', onError);
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
    });
  });
}
