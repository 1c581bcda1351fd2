/**
 * The router's hot path below fastify: the HTTP server is created here (fastify's `serverFactory`
 * option) and its request handler serves the proxied POSTs — `/v1/…` and `/openai/…` — itself, with
 * a {@link RawExchange} and no fastify request, reply, child logger or hook chain. Every other
 * request goes to fastify's handler, and so does any POST fastify would answer before the route's
 * handler runs, so that the answer is fastify's own:
 * - more header fields than `max_headers` (431 from `applyListenerLimits`' `onRequest` hook);
 * - a `content-type` fastify does not parse as a media type (415);
 * - a `%` anywhere in the URL (fastify decodes the path: a bad percent-encoding is a 400);
 * - an `accept-version` header (fastify's routing constraint);
 * - the router closing (fastify's `return503OnClosing` 503; set by a `preClose` hook, see {@link FastPath.close}).
 * What fastify does after routing — the route's handler and its `onResponse` hook — the fast path
 * does with the same functions (`RouterPaths`).
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import type { FastifyServerFactoryHandler } from 'fastify';
import { clientErrorOf } from '../http/client-errors.ts';
import { RawExchange } from './exchange.ts';
import { clientGone } from './forward.ts';
import type { ProxyExchange, RawExchangeContext } from './exchange.ts';

/** What the router serves on the fast path, set once its routes exist (see {@link FastPath.serve}). */
export interface RouterPaths extends RawExchangeContext {
  /** The proxied routes' handler (the one fastify's `/v1/*` and `/openai/*` routes run too). */
  readonly proxy: (exchange: ProxyExchange) => Promise<void>;
}

/** A token (RFC 9110 §5.6.2), as fastify's `ContentType` checks a media type's type and subtype. */
const TOKEN = /^[\w!#$%&'*+.^`|~-]+$/;

/**
 * Whether fastify takes `value` as a valid media type (else it answers 415 before the handler):
 * `type/subtype` tokens before any `;` (fastify's `lib/content-type.js`, which ignores what follows).
 * Exact for ASCII; a value this check refuses only goes to fastify, which decides.
 */
export function validMediaType(value: string): boolean {
  if (value === 'application/json') return true;
  const semicolon = value.indexOf(';');
  const media = semicolon === -1 ? value : value.slice(0, semicolon);
  const slash = media.indexOf('/');
  return slash !== -1 && TOKEN.test(media.slice(0, slash).trimStart()) && TOKEN.test(media.slice(slash + 1).trimEnd());
}

/** Whether `url` is under one of the proxied prefixes with nothing fastify would decode. */
function isProxiedUrl(url: string): boolean {
  return (url.startsWith('/v1/') || url.startsWith('/openai/')) && !url.includes('%');
}

/** fastify's default request ids (`req-<n base 36>`), from one counter for both paths. */
export function requestIds(): () => string {
  let next = 0;
  return () => {
    next = (next + 1) & 0x7fffffff;
    return `req-${next.toString(36)}`;
  };
}

/** The router's HTTP server and its fast path. */
export class FastPath {
  readonly #maxHeaderFields: number;
  #paths: RouterPaths | undefined;
  #closing = false;
  /** Requests the fast path took. */
  served = 0;

  /** @param maxHeaders `router.max_headers`: a request with more fields goes to fastify (431). */
  constructor(maxHeaders: number) {
    this.#maxHeaderFields = maxHeaders;
  }

  /**
   * fastify's `serverFactory`: the HTTP/1 server fastify would create (`lib/server.js`: `options.http`,
   * `keepAliveTimeout`, `requestTimeout`, `connectionTimeout`, `maxRequestsPerSocket`), whose
   * requests go to the fast path or to fastify's `handler`.
   */
  readonly serverFactory = (handler: FastifyServerFactoryHandler, options: Record<string, unknown>): Server => {
    const server = createServer((options['http'] ?? {}) as ServerOptions, (req, res) => {
      if (this.#takes(req)) {
        this.served++;
        void serve(this.#paths as RouterPaths, req, res);
      } else {
        handler(req, res);
      }
    });
    server.keepAliveTimeout = options['keepAliveTimeout'] as number;
    server.requestTimeout = options['requestTimeout'] as number;
    server.setTimeout(options['connectionTimeout'] as number);
    const perSocket = options['maxRequestsPerSocket'];
    if (typeof perSocket === 'number' && perSocket > 0) server.maxRequestsPerSocket = perSocket;
    return server;
  };

  /** Starts serving the fast path with `paths`. */
  serve(paths: RouterPaths): void {
    this.#paths = paths;
  }

  /** The router is closing: every request goes to fastify (which answers 503 from then on). Call from a `preClose` hook. */
  close(): void {
    this.#closing = true;
  }

  #takes(req: IncomingMessage): boolean {
    if (req.method !== 'POST' || this.#paths === undefined || this.#closing) return false;
    if (!isProxiedUrl(req.url as string) || req.rawHeaders.length > 2 * this.#maxHeaderFields) return false;
    const { headers } = req;
    const type = headers['content-type'];
    return (type === undefined || validMediaType(type)) && headers['accept-version'] === undefined;
  }
}

/** Serves one fast-path request; what the route's handler throws is answered as the router's fastify error handler answers it. */
async function serve(paths: RouterPaths, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const exchange = new RawExchange(paths, req, res);
  try {
    await paths.proxy(exchange);
  } catch (err) {
    try {
      answerFault(exchange, err);
    } catch (again) {
      exchange.log.error({ err: again }, 'answering an error failed');
      res.destroy();
    }
  }
}

/**
 * What fastify does with a handler's rejection, with the router's error handler: after the answer
 * started, an error line only; a client that left gets nothing (a debug line); a client error its
 * 4xx; anything else is logged and answered 500 `internal_error`.
 */
function answerFault(exchange: RawExchange, err: unknown): void {
  const { req, res } = exchange;
  if (exchange.hijacked || res.writableEnded) {
    exchange.log.error({ err }, 'Promise errored, but reply.sent = true was set');
    return;
  }
  if (req.aborted || res.destroyed || req.socket === null || req.socket.destroyed) {
    exchange.log.debug({ err: (err as Error).message }, 'client closed the connection');
    clientGone(exchange);
    return;
  }
  const client = clientErrorOf(err);
  if (client !== undefined) {
    exchange.sendError(client.code, client.message);
    return;
  }
  exchange.log.error({ err }, 'unhandled error');
  exchange.sendError('internal_error');
}
