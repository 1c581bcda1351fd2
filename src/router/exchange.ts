/**
 * What proxying one request needs from the HTTP layer, whichever serves it: the raw request and
 * response, a logger, and a way to answer a catalogue error. The router's hot path (POST under
 * `/v1/` and `/openai/`, see `fast-path.ts`) is served below fastify with a {@link RawExchange};
 * everything else goes through fastify, adapted by {@link FastifyExchange}. `forward()`, the relay
 * and the router's error answers take this interface, so both paths run the same code.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { TenantConfig } from '../config/schema.ts';
import { ERRORS, errorBody } from '../errors.ts';
import { sendError } from '../error-reply.ts';
import type { ErrorCode } from '../errors.ts';
import { dialectOf, endStatus } from '../http/client-errors.ts';
import { levelEnabled } from '../ops/logging.ts';

/** The log lines a proxied request writes (pino's signature: fields first, then the message). */
export interface ExchangeLog {
  debug(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
}

/** One proxied request and its response. */
export interface ProxyExchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** Lines about this request (they carry its `reqId`). */
  readonly log: ExchangeLog;
  /** The request's tenant once its key is resolved (for its log line); null before. */
  tenant: TenantConfig | null;
  /** Answers a catalogue error in the route's dialect, with `x-quotaring-error: <code>`. */
  sendError(code: ErrorCode, message?: string): void;
  /** The response is written on `res` directly from now on (fastify: `reply.hijack()`). */
  hijack(): void;
  /** Removes a header set for the answer not sent yet. */
  removeHeader(name: string): void;
}

/** A request served by fastify (GET and DELETE under the proxied prefixes, and `inject()`). */
export class FastifyExchange implements ProxyExchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly log: FastifyBaseLogger;
  readonly #request: FastifyRequest;
  readonly #reply: FastifyReply;

  constructor(request: FastifyRequest, reply: FastifyReply) {
    this.req = request.raw;
    this.res = reply.raw;
    this.log = request.log;
    this.#request = request;
    this.#reply = reply;
  }

  get tenant(): TenantConfig | null {
    return this.#request.tenant;
  }

  set tenant(tenant: TenantConfig | null) {
    this.#request.tenant = tenant;
  }

  sendError(code: ErrorCode, message?: string): void {
    sendError(this.#reply, dialectOf(this.#request.url), code, { ...(message === undefined ? {} : { message }) });
  }

  hijack(): void {
    this.#reply.hijack();
  }

  removeHeader(name: string): void {
    this.#reply.removeHeader(name);
  }
}

/** The fast path's own per-request state, kept off the response until it finishes. */
const EXCHANGE = Symbol('quotaring.exchange');
type TrackedResponse = ServerResponse & { [EXCHANGE]?: RawExchange | undefined };

/** What a {@link RawExchange} shares with every other of its router (one object, no closure per request). */
export interface RawExchangeContext {
  /** The router's logger (no child per request: the request's `reqId` is added to the lines it writes). */
  readonly log: FastifyBaseLogger;
  /** The next request id, from the counter fastify's requests use too (`genReqId`). */
  readonly nextRequestId: () => string;
  /** Called once when the response finished, failed or closed unfinished (like fastify's `onResponse` hook, and see the router's `onRequest` hook for the last). */
  readonly onResponse: (exchange: RawExchange) => void;
}

/**
 * A request served below fastify: answers are written on the `ServerResponse` as fastify would
 * write them (same status line, headers and JSON body), and the response's end is reported to
 * {@link RawExchangeContext.onResponse} on `finish` or `error`, as fastify reports it to `onResponse`
 * hooks, and on a `close` before either (the client left: status 499), which fastify does not report.
 */
export class RawExchange implements ProxyExchange, ExchangeLog {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  tenant: TenantConfig | null = null;
  /** `performance.now()` when the request was taken, ms. */
  readonly start: number;
  readonly #ctx: RawExchangeContext;
  #id: string | undefined;

  constructor(ctx: RawExchangeContext, req: IncomingMessage, res: ServerResponse) {
    this.#ctx = ctx;
    this.req = req;
    this.res = res;
    this.start = performance.now();
    (res as TrackedResponse)[EXCHANGE] = this;
    res.on('finish', onResponseEnd);
    res.on('error', onResponseEnd);
    // Closed before it finished: the client left (or the answer was cut), a 499 (see status()).
    res.on('close', onResponseEnd);
  }

  /** Lines about this request: the router's logger, the request's `reqId` added to each. */
  get log(): ExchangeLog {
    return this;
  }

  /** Ms since the request was taken. */
  elapsed(): number {
    return performance.now() - this.start;
  }

  /** The status the request ends with for metrics and its log line: 499 when the client left before its answer was complete (see `endStatus`). */
  status(): number {
    return endStatus(this.res);
  }

  sendError(code: ErrorCode, message?: string): void {
    const body = JSON.stringify(errorBody(dialectOf(this.req.url as string), code, message));
    // The headers fastify's reply.send() writes for an object, in its order.
    this.res.writeHead(ERRORS[code].status, { 'x-quotaring-error': code, 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(body)) });
    this.res.end(body);
  }

  /** Whether the response is written directly (a relayed answer, a client gone): fastify's `reply.sent` once hijacked. */
  hijacked = false;

  hijack(): void {
    this.hijacked = true;
  }

  removeHeader(name: string): void {
    this.res.removeHeader(name);
  }

  debug(fields: object, msg: string): void {
    this.#line('debug', fields, msg);
  }

  info(fields: object, msg: string): void {
    this.#line('info', fields, msg);
  }

  warn(fields: object, msg: string): void {
    this.#line('warn', fields, msg);
  }

  error(fields: object, msg: string): void {
    this.#line('error', fields, msg);
  }

  /** Writes one line at `level` with the request's `reqId`, when the router's logger writes that level. */
  #line(level: 'debug' | 'info' | 'warn' | 'error', fields: object, msg: string): void {
    const log = this.#ctx.log;
    if (levelEnabled(log, level)) log[level]({ reqId: this.#reqId(), ...fields }, msg);
  }

  /** The request's id, taken from the shared counter at its first log line. */
  #reqId(): string {
    this.#id ??= this.#ctx.nextRequestId();
    return this.#id;
  }

  /** @internal the response finished or failed: report it once. */
  ended(): void {
    const res = this.res as TrackedResponse;
    res.off('finish', onResponseEnd);
    res.off('error', onResponseEnd);
    res.off('close', onResponseEnd);
    res[EXCHANGE] = undefined;
    this.#ctx.onResponse(this);
  }
}

function onResponseEnd(this: TrackedResponse): void {
  this[EXCHANGE]?.ended();
}
