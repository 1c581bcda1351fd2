/**
 * The HTTP listener's own limits, shared by the gateway node (`server:`) and the router
 * (`router:`): header and request timeouts, keep-alive and idle timeouts, header size and count.
 * A client over any of them gets a 4xx in the provider's shape (see `client-errors.ts`).
 */
import type { Server } from 'node:http';
import type { FastifyBaseLogger, FastifyHttpOptions, FastifyInstance } from 'fastify';
import type { RouterConfig } from '../config/schema.ts';
import { answerClientFault, clientErrorHandler, sendCatalogueError } from './client-errors.ts';

/** The listener settings (the same keys under `server:` and `router:`; durations in ms, sizes in bytes). */
export type ListenerConfig = Pick<RouterConfig, 'headers_timeout' | 'request_timeout' | 'keep_alive_timeout' | 'idle_timeout' | 'max_header_size' | 'max_headers'>;

/**
 * fastify options that apply `limits`:
 * - `headers_timeout` → node's `headersTimeout`, `request_timeout` → fastify's `requestTimeout`
 *   (node's: the time to receive the whole request, headers and body; the response is not bounded,
 *   so streams may last longer). Both answer 408 and close the socket; node checks them every
 *   `connectionsCheckingInterval`, here min(1 s, half the shorter of the two).
 * - `keep_alive_timeout` → `keepAliveTimeout` (idle between requests), `idle_timeout` →
 *   `connectionTimeout` (a socket with no traffic either way; 0 = none).
 * - `max_header_size` → node's `maxHeaderSize` (431 beyond it).
 * - parser errors and timeouts in the provider's shape (`clientErrorHandler`), and fastify's
 *   framework errors (a URL with bad percent-encoding ...) as 4xx in that shape (`frameworkErrors`).
 * @param log the instance's logger, read when a client error happens (the instance does not exist yet).
 */
export function listenerOptions(limits: ListenerConfig, log: () => FastifyBaseLogger): FastifyHttpOptions<Server> {
  const shortest = limits.request_timeout > 0 ? Math.min(limits.headers_timeout, limits.request_timeout) : limits.headers_timeout;
  return {
    connectionTimeout: limits.idle_timeout,
    keepAliveTimeout: limits.keep_alive_timeout,
    requestTimeout: limits.request_timeout,
    http: {
      headersTimeout: limits.headers_timeout,
      maxHeaderSize: limits.max_header_size,
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(shortest / 2))),
    },
    clientErrorHandler: clientErrorHandler(log),
    frameworkErrors: (err, request, reply) => {
      answerClientFault(err, request, reply) ?? sendCatalogueError(request, reply, 'invalid_request', err.message);
    },
  };
}

/**
 * Answers 431 `headers_too_large` to a request with more than `max` header fields, before any
 * other hook (node's own `maxHeadersCount` would silently drop the extra ones: it is set to one
 * more than `max`, so that going over is seen and the parser stores no more than that).
 */
export function limitHeaderCount(app: FastifyInstance, max: number): void {
  app.server.maxHeadersCount = max + 1;
  app.addHook('onRequest', (request, reply, done) => {
    if (request.raw.rawHeaders.length <= 2 * max) {
      done();
      return;
    }
    sendCatalogueError(request, reply, 'headers_too_large', `The request has more than ${max} header fields (max_headers).`);
  });
}
