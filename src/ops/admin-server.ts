/**
 * The admin listener of a node or a router: a fastify server on its own port whose every route
 * needs `Authorization: Bearer <token>` (the token from the environment variable `admin.token_env`).
 * Routes opt out only with `config: { public: true }` (the dashboard page, which carries no data).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import Fastify, { LogController } from 'fastify';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { AdminSchema } from '../config/schema.ts';
import type { z } from 'zod';
import { adminExposureProblem } from '../security/admin-exposure.ts';

/** The `admin` section of the config. */
export type AdminSettings = z.infer<typeof AdminSchema>;

/** Route config flag: `{ config: { public: true } }` skips the token check. */
declare module 'fastify' {
  interface FastifyContextConfig {
    /** Served without the admin token (static pages only: never data). */
    public?: boolean;
  }
}

/** Subprotocol prefix a browser uses to send the token on a WebSocket (`new WebSocket(url, ['quotaring', 'bearer.' + token])`). */
export const WS_TOKEN_PREFIX = 'bearer.';

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/**
 * The token a request carries: `Authorization: Bearer <token>`, or for a WebSocket upgrade from a
 * browser (which cannot set headers) a `Sec-WebSocket-Protocol` entry `bearer.<token>`.
 */
export function presentedToken(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (auth !== undefined) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    return m?.[1];
  }
  const protocols = headers['sec-websocket-protocol'];
  if (protocols === undefined) return undefined;
  for (const p of protocols.split(',')) {
    const t = p.trim();
    if (t.startsWith(WS_TOKEN_PREFIX)) return t.slice(WS_TOKEN_PREFIX.length);
  }
  return undefined;
}

/** Whether `presented` is `token`, compared in constant time (digests of both). */
export function tokenMatches(presented: string | undefined, token: string): boolean {
  return presented !== undefined && token !== '' && timingSafeEqual(digest(presented), digest(token));
}

/** The body of an admin 401 (OpenAI's error shape). */
export const UNAUTHORIZED_BODY = Object.freeze({
  error: { message: 'Missing or wrong admin token: send Authorization: Bearer <token> (the value of the admin.token_env variable).', type: 'authentication_error', param: null, code: 'unauthorized' },
});

/** An admin error in OpenAI's shape. */
export function adminError(message: string, code: string, type = 'invalid_request_error'): { error: { message: string; type: string; param: null; code: string } } {
  return { error: { message, type, param: null, code } };
}

/** The admin token from the environment, or undefined (admin API off) when the variable is unset or empty. */
export function adminToken(settings: AdminSettings, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const token = env[settings.token_env];
  return token === undefined || token === '' ? undefined : token;
}

/**
 * Builds the admin server (not listening) sharing `log`. Every request without the token gets 401
 * `unauthorized` with `WWW-Authenticate: Bearer`, unknown routes 404 (after the token check, so
 * they reveal nothing either).
 */
export function buildAdminServer(token: string, log: FastifyBaseLogger): FastifyInstance {
  const app = Fastify({ loggerInstance: log.child({ admin: true }), logController: new LogController({ disableRequestLogging: true }), return503OnClosing: true });
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.config.public === true) return;
    if (!tokenMatches(presentedToken(request.headers), token)) {
      return reply.code(401).header('www-authenticate', 'Bearer realm="quotaring-admin"').send(UNAUTHORIZED_BODY);
    }
  });
  app.setNotFoundHandler((request, reply) => reply.code(404).send(adminError(`No admin route for ${request.method} ${request.url.split('?')[0]}.`, 'not_found')));
  app.setErrorHandler((err: Error & { statusCode?: number }, request, reply) => {
    const status = err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) request.log.error({ err }, 'admin route failed');
    return reply.code(status).send(adminError(status === 500 ? 'The admin route failed; see the server log.' : err.message, status === 500 ? 'internal_error' : 'invalid_request'));
  });
  return app;
}

/** Options of {@link startAdminServer}. */
export interface StartAdminOptions {
  readonly settings: AdminSettings;
  /** Where the token variable is read. @default process.env */
  readonly env?: NodeJS.ProcessEnv | undefined;
  /** Port to listen on (0: any free port). */
  readonly port: number;
  readonly log: FastifyBaseLogger;
  /** What the listener serves, for the log lines (e.g. `admin API`). */
  readonly what: string;
  /** Registers the routes on the admin server (before it listens), with the token. */
  register(admin: FastifyInstance, token: string): void;
}

/**
 * Builds, registers and starts the admin listener when the token variable (`settings.token_env`)
 * is set; logs why not otherwise and resolves undefined.
 * @returns its URL and `close()`.
 * @throws Error when `settings.host` is not a loopback address and the token is a placeholder or
 *   too short (see `adminExposureProblem`; the config loader refuses that config already);
 *   listen errors (the admin port in use), after closing the admin server.
 */
export async function startAdminServer(o: StartAdminOptions): Promise<{ url: string; close(): Promise<void> } | undefined> {
  const token = adminToken(o.settings, o.env);
  if (token === undefined) {
    o.log.info({ tokenEnv: o.settings.token_env }, `${o.what} off: its token variable is not set`);
    return undefined;
  }
  const exposure = adminExposureProblem(o.settings.host, o.settings.token_env, token);
  if (exposure !== undefined) throw new Error(`${o.what} not started: ${exposure}`);
  const admin = buildAdminServer(token, o.log);
  o.register(admin, token);
  let url: string;
  try {
    url = await admin.listen({ host: o.settings.host, port: o.port });
  } catch (err) {
    await admin.close();
    throw err;
  }
  o.log.info({ url }, `${o.what} listening`);
  return { url, close: () => admin.close() };
}
