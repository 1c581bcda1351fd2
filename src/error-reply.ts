/**
 * The one renderer of an error reply: a catalogue error (`src/errors.ts`) written on a reply with
 * its status, `x-quotaring-error` naming its code, and its body in the client's dialect. Used by
 * the node's and the router's routes and by the node-to-node routes alike.
 */
import { ERRORS, errorBody } from './errors.ts';
import type { ErrorCode, ErrorDialect } from './errors.ts';

/** The part of a reply (fastify's) an error is written with; each call returns the reply. */
export interface ErrorReply<R> {
  code(status: number): R;
  headers(values: Record<string, string>): R;
  send(body: unknown): R;
}

/** How {@link sendError} writes an error beyond its code. */
export interface ErrorReplyOptions {
  /** The message (the catalogue's by default). */
  readonly message?: string;
  /** The HTTP status, when it is not the catalogue's (a provider's error relayed in the client's format). */
  readonly status?: number;
  /** Headers sent with it (limit headers, retry hints). */
  readonly headers?: Record<string, string>;
  /** Whether `x-quotaring-error` names the code: false for a provider's error relayed, which is not quotaring's. @default true */
  readonly marked?: boolean;
  /** OpenAI `error.param`: the field at fault. */
  readonly param?: string | null;
  /** OpenAI `error.type` when it is not the catalogue's. */
  readonly openaiType?: string;
}

/** Writes catalogue error `code` on `reply` in `dialect` (see {@link ErrorReplyOptions}). @returns what `send` returns. */
export function sendError<R extends ErrorReply<R>>(reply: R, dialect: ErrorDialect, code: ErrorCode, o: ErrorReplyOptions = {}): R {
  const headers = o.marked === false ? (o.headers ?? {}) : { ...o.headers, 'x-quotaring-error': code };
  const opts = { ...(o.param === undefined ? {} : { param: o.param }), ...(o.openaiType === undefined ? {} : { openaiType: o.openaiType }) };
  return reply.code(o.status ?? ERRORS[code].status).headers(headers).send(errorBody(dialect, code, o.message, opts));
}
