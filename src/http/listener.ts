/**
 * The HTTP listener's own limits, shared by the gateway node (`server:`) and the router
 * (`router:`): header and request timeouts, keep-alive and idle timeouts, header size and count.
 * A client over any of them gets a 4xx in the provider's shape (see `client-errors.ts`).
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger, FastifyHttpOptions, FastifyInstance } from 'fastify';
import type { RouterConfig } from '../config/schema.ts';
import { answerClientFault, clientErrorHandler, sendCatalogueError } from './client-errors.ts';

/** The listener settings (the same keys under `server:` and `router:`; durations in ms, sizes in bytes). */
export type ListenerConfig = Pick<RouterConfig, 'headers_timeout' | 'request_timeout' | 'keep_alive_timeout' | 'idle_timeout' | 'max_header_size' | 'max_headers'>;

/**
 * Room a node leaves on top of its own header limits for what routers and nodes add between
 * themselves (`x-quotaring-*` fields: tenant, ring, stand-in, credentials): a request a router
 * accepted is never refused by its node for the router's own headers.
 */
export interface HeaderAllowance {
  /** Extra `x-quotaring-*` header fields. */
  readonly fields: number;
  /** Extra bytes of headers. */
  readonly bytes: number;
}

/** What a node allows on top of `server.max_headers` / `server.max_header_size`. */
export const NODE_HEADER_ALLOWANCE: HeaderAllowance = { fields: 16, bytes: 4_096 };
/** A router adds nothing: its clients get exactly `router.max_headers` / `router.max_header_size`. */
export const NO_ALLOWANCE: HeaderAllowance = { fields: 0, bytes: 0 };

/**
 * fastify options that apply `limits`:
 * - `headers_timeout` → node's `headersTimeout`, `request_timeout` → fastify's `requestTimeout`
 *   (node's: the time to receive the whole request, headers and body; the response is not bounded,
 *   so streams may last longer). Both answer 408 and close the socket; node checks them every
 *   `connectionsCheckingInterval`, here min(1 s, half the shorter of the two).
 * - `keep_alive_timeout` → `keepAliveTimeout` (idle between requests), `idle_timeout` →
 *   `connectionTimeout` (a socket with no traffic either way; 0 = none).
 * - `max_header_size` (+ `allowance.bytes`) → node's `maxHeaderSize` (431 beyond it).
 * - parser errors and timeouts in the provider's shape (`clientErrorHandler`), and fastify's
 *   framework errors (a URL with bad percent-encoding ...) as 4xx in that shape (`frameworkErrors`).
 * @param log the instance's logger, read when a client error happens (the instance does not exist yet).
 * @param allowance {@link NODE_HEADER_ALLOWANCE} on nodes.
 */
export function listenerOptions(limits: ListenerConfig, log: () => FastifyBaseLogger, allowance: HeaderAllowance = NO_ALLOWANCE): FastifyHttpOptions<Server> {
  const shortest = limits.request_timeout > 0 ? Math.min(limits.headers_timeout, limits.request_timeout) : limits.headers_timeout;
  return {
    connectionTimeout: limits.idle_timeout,
    keepAliveTimeout: limits.keep_alive_timeout,
    requestTimeout: limits.request_timeout,
    http: {
      headersTimeout: limits.headers_timeout,
      maxHeaderSize: limits.max_header_size + allowance.bytes,
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(shortest / 2))),
    },
    clientErrorHandler: clientErrorHandler(log),
    frameworkErrors: (err, request, reply) => {
      if (answerClientFault(err, request, reply) === undefined) sendCatalogueError(request, reply, 'invalid_request', err.message);
    },
  };
}

/**
 * What fastify options cannot say, applied to `app`'s server:
 * - more than `max_headers` header fields (not counting up to `allowance.fields` `x-quotaring-*`
 *   ones): 431 `headers_too_large`, before any other hook. node's own `maxHeadersCount` silently
 *   drops fields past it: it is set one above what may be accepted, so going over is seen and the
 *   parser stores no more than that;
 * - a connection that sends no byte within `headers_timeout` is closed (node's header timer only
 *   starts with a request's first byte).
 */
export function applyListenerLimits(app: FastifyInstance, limits: ListenerConfig, allowance: HeaderAllowance = NO_ALLOWANCE): void {
  const max = limits.max_headers;
  app.server.maxHeadersCount = max + allowance.fields + 1;
  app.addHook('onRequest', (request, reply, done) => {
    const names = request.raw.rawHeaders;
    const fields = names.length / 2;
    if (fields <= max) {
      done();
      return;
    }
    let internal = 0;
    for (let i = 0; i < names.length; i += 2) if (names[i]?.toLowerCase().startsWith('x-quotaring-') === true) internal++;
    if (fields - Math.min(internal, allowance.fields) <= max) {
      done();
      return;
    }
    sendCatalogueError(request, reply, 'headers_too_large', `The request has more than ${max} header fields (max_headers).`);
  });
  app.server.on('connection', (socket: Socket) => {
    const timer = setTimeout(() => {
      if (socket.bytesRead === 0) socket.destroy();
    }, limits.headers_timeout);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  });
}
