/**
 * Client errors that happen below the routes, answered in the provider's error shape like every
 * other error: HTTP parser errors and header/request timeouts (written on the raw socket, as there
 * is no request yet), fastify's own 4xx errors (content type, body size, bad URL encoding), and
 * clients that leave (not an error at all: nothing to answer, logged at debug).
 * Shared by the gateway node and the router.
 */
import { STATUS_CODES } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import { ERRORS, errorBody } from '../errors.ts';
import { sendError } from '../error-reply.ts';
import { lingerOnRefusal } from '../lingering-drain.ts';
import type { ErrorCode, ErrorDialect } from '../errors.ts';

/** Error dialect of a URL: Anthropic's shape on `/v1/messages`, OpenAI's elsewhere. */
export function dialectOf(url: string): ErrorDialect {
  return url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
}

/** A catalogue error to answer: code and, when more specific than the catalogue's, a message. */
export interface ClientError {
  readonly code: ErrorCode;
  readonly message?: string;
}

/** fastify error codes with a catalogue code of their own (the rest map by their 4xx status). */
const FASTIFY_CODES: Readonly<Record<string, ClientError>> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type' },
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'body_too_large' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { code: 'invalid_json' },
  FST_ERR_CTP_INVALID_JSON_BODY: { code: 'invalid_json' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'invalid_request', message: 'The body\'s length differs from its Content-Length header.' },
  FST_ERR_BAD_URL: { code: 'invalid_request', message: 'The request URL is not valid (bad percent-encoding).' },
};

/** Catalogue codes of 4xx statuses that have one; any other 4xx is `invalid_request`. */
const BY_STATUS: Readonly<Record<number, ErrorCode>> = {
  404: 'not_found',
  408: 'request_timeout',
  413: 'body_too_large',
  415: 'unsupported_media_type',
  431: 'headers_too_large',
};

/**
 * The catalogue error for an error thrown below the routes when it is the client's fault: a
 * fastify error code of {@link FASTIFY_CODES}, or any error whose `statusCode` is 4xx (its own
 * message kept). @returns undefined for anything else (a fault of the gateway).
 */
export function clientErrorOf(err: unknown): ClientError | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { code, statusCode, message } = err as { code?: unknown; statusCode?: unknown; message?: unknown };
  const known = typeof code === 'string' ? FASTIFY_CODES[code] : undefined;
  if (known !== undefined) return known;
  if (typeof statusCode !== 'number' || !Number.isInteger(statusCode) || statusCode < 400 || statusCode > 499) return undefined;
  const mapped = BY_STATUS[statusCode] ?? 'invalid_request';
  return typeof message === 'string' && message.length > 0 ? { code: mapped, message } : { code: mapped };
}

/** Whether the client of `request` has gone: its request aborted or its socket closed. */
export function clientLeft(request: FastifyRequest, reply: FastifyReply): boolean {
  const socket = request.raw.socket as Socket | null;
  return request.raw.aborted || reply.raw.destroyed || socket === null || socket.destroyed;
}

/** Sends a catalogue error in the route's dialect, with `x-quotaring-error: <code>`. */
export function sendCatalogueError(request: FastifyRequest, reply: FastifyReply, code: ErrorCode, message?: string, param: string | null = null): FastifyReply {
  return sendError(reply, dialectOf(request.url), code, { ...(message === undefined ? {} : { message }), param });
}

/**
 * What the node's and the router's error handlers do before concluding a gateway fault: a client
 * that left gets nothing (a debug line; the request is not an error), a client error its 4xx.
 * @returns the reply when handled, undefined when `err` is a fault of the gateway (log it, answer 500).
 */
export function answerClientFault(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply | undefined {
  if (clientLeft(request, reply)) {
    request.log.debug({ err: (err as Error).message }, 'client closed the connection');
    reply.hijack();
    if (!reply.raw.destroyed) reply.raw.destroy();
    return reply;
  }
  const client = clientErrorOf(err);
  if (client === undefined) return undefined;
  // fastify refused the body before reading all of it: drain the rest so the client reads this answer.
  if (reply.getHeader('connection') === 'close') lingerOnRefusal(request.raw, reply, 2 * request.routeOptions.bodyLimit);
  return sendCatalogueError(request, reply, client.code, client.message);
}

/** The dialect of a request that failed before fastify saw it: its URL when the parser got that far, else `anthropic-version` among the bytes, else OpenAI's. */
function rawDialect(err: ConnectionError, socket: Socket): ErrorDialect {
  const incoming = (socket as Socket & { parser?: { incoming?: IncomingMessage | null } | null }).parser?.incoming;
  if (typeof incoming?.url === 'string') return dialectOf(incoming.url);
  // node passes the parser's buffer (fastify's type says otherwise).
  const raw: unknown = err.rawPacket;
  if (!Buffer.isBuffer(raw)) return 'openai';
  const head = raw.subarray(0, 8_192).toString('latin1');
  const line = /^[A-Z]+ (\S+)/.exec(head);
  if (line?.[1] !== undefined) return dialectOf(line[1]);
  return /(^|\r\n)anthropic-version:/i.test(head) ? 'anthropic' : 'openai';
}

/** The catalogue error of a connection error, or undefined when nothing should be written (a reset, or not an HTTP-level error). */
function connectionErrorOf(err: ConnectionError): ClientError | undefined {
  if (typeof err.code !== 'string') return undefined;
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return { code: 'request_timeout' };
  if (err.code === 'HPE_HEADER_OVERFLOW') return { code: 'headers_too_large', message: 'The request headers are larger than the server\'s max_header_size.' };
  if (err.code.startsWith('HPE_')) return { code: 'invalid_request', message: `The HTTP request could not be parsed (${err.code}).` };
  return undefined;
}

/** Set on an in-flight response whose connection broke with a client error: the status of the answer written in its place. */
const REPLACED_BY = Symbol('quotaring.replaced-by');
type ReplacedResponse = ServerResponse & { [REPLACED_BY]?: number };

/** Set on a relayed response: whether every byte of the answer was written (see `src/router/stream-end.ts`). */
const DELIVERY = Symbol('quotaring.delivery');
type FollowedResponse = ServerResponse & { [DELIVERY]?: { readonly complete: boolean } };

/**
 * Lets {@link endStatus} ask `delivery` whether the answer on `res` was complete when its
 * connection closed (the router's relay knows; the response's end may still be on its way).
 */
export function followDelivery(res: ServerResponse, delivery: { readonly complete: boolean }): void {
  (res as FollowedResponse)[DELIVERY] = delivery;
}

/**
 * The status a response ended with, for request log lines and metrics: `res.statusCode` once it
 * finished, or when it closed after its last byte was written (see {@link followDelivery}); 499 when
 * it closed before because the client left; the status of the connection error's answer (400 ...)
 * that {@link clientErrorHandler} wrote in its place.
 */
export function endStatus(res: ServerResponse): number {
  if (!res.destroyed || res.writableFinished || (res as FollowedResponse)[DELIVERY]?.complete === true) return res.statusCode;
  return (res as ReplacedResponse)[REPLACED_BY] ?? 499;
}

/**
 * fastify's `clientErrorHandler`: node's HTTP server failed a request before fastify saw it (a
 * parser error, headers over `max_header_size`, `headers_timeout` or `request_timeout` passed).
 * Writes 400 / 431 / 408 in the provider's shape (Anthropic's on `/v1/messages`, when the URL is
 * known) unless a response already started on the socket or the client never sent a byte, then
 * destroys the socket, like node's own handler. Logged at debug: a client's mistake or a slow client, not the server's.
 */
export function clientErrorHandler(log: () => FastifyBaseLogger): (err: ConnectionError, socket: Socket) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    // A connection that never sent a byte is closed without an answer, as applyListenerLimits's own
    // timer does: node's header timer also runs from the connection's start and, when it fires first, would write a 408.
    const client = socket.bytesRead === 0 ? undefined : connectionErrorOf(err);
    log().debug({ err: err.message, code: err.code }, 'client error before a request');
    const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (client !== undefined && socket.writable && (inFlight === undefined || inFlight === null || !inFlight.headersSent)) {
      const status = ERRORS[client.code].status;
      // The request in flight (if any) ends with this answer: its status for logs and metrics (see endStatus).
      // Not when the client closed its side mid-request (HPE_INVALID_EOF_STATE): that client left (499).
      if (inFlight !== undefined && inFlight !== null && err.code !== 'HPE_INVALID_EOF_STATE') (inFlight as ReplacedResponse)[REPLACED_BY] = status;
      const body = JSON.stringify(errorBody(rawDialect(err, socket), client.code, client.message));
      socket.write(
        `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-quotaring-error: ${client.code}\r\nconnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}
