/**
 * The gateway node: a fastify server that authenticates tenants, limits them in RAM, and proxies
 * OpenAI- and Anthropic-compatible requests to the deployments.
 */
import Fastify, { LogController } from 'fastify';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import { GatewayError, errorBody } from '../errors.ts';
import type { ErrorCode, ErrorDialect } from '../errors.ts';
import { Limiter } from '../limiter/limiter.ts';
import { PromptCounter } from '../tokens/index.ts';
import { authHook } from './auth.ts';
import type { GatewayContext } from './context.ts';
import { requestIdGenerator } from './context.ts';
import { registerJsonBody } from './json-body.ts';
import { ownershipHook } from './ownership.ts';
import type { NodeCluster } from './ownership.ts';
import { anthropicRoutes } from './routes/anthropic.ts';
import { openAIRoutes } from './routes/openai.ts';
import { Upstreams } from './upstream.ts';

/** Options of {@link buildGateway}. */
export interface GatewayOptions {
  readonly config: LoadedConfig;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Use fastify's pino logger at `server.log_level`. @default true */
  readonly logger?: boolean;
  /** This node's place in a cluster; absent for a single node, which owns every tenant. */
  readonly cluster?: NodeCluster;
}

/** Error dialect of a URL: Anthropic's shape on `/v1/messages`, OpenAI's elsewhere. */
function dialectOf(url: string): ErrorDialect {
  return url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
}

const FASTIFY_ERRORS: Readonly<Record<string, ErrorCode>> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_CTP_BODY_TOO_LARGE: 'body_too_large',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
};

function sendError(request: FastifyRequest, reply: FastifyReply, code: ErrorCode, message?: string, param: string | null = null): FastifyReply {
  const body = errorBody(dialectOf(request.url), code, message, { param });
  const status = new GatewayError(code).statusCode;
  return reply.code(status).header('x-quotaring-error', code).send(body);
}

/**
 * Builds the gateway (not listening). The limiter's idle sweep runs every `server.sweep_interval`;
 * `app.close()` stops it, the token pool and the upstream pools.
 */
export function buildGateway(opts: GatewayOptions): FastifyInstance {
  const { config } = opts;
  const server = config.config.server;
  const clock = opts.clock ?? systemClock;
  const app = Fastify({
    logger: opts.logger === false ? false : { level: server.log_level, redact: ['req.headers.authorization', 'req.headers["x-api-key"]'] },
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: server.body_limit,
    return503OnClosing: true,
  });
  const ctx: GatewayContext = {
    config,
    clock,
    limiter: new Limiter({ clock, policyFor: (tenant) => config.policies.get(tenant) }),
    tokens: new PromptCounter({
      poolSize: config.config.tokens.pool_size,
      workerThresholdChars: config.config.tokens.worker_threshold_chars,
      cacheEntries: config.config.tokens.cache_entries,
    }),
    upstreams: new Upstreams(),
    nextRequestId: requestIdGenerator(),
  };
  app.decorateRequest('tenant', null);
  registerJsonBody(app, server.body_limit);

  app.setErrorHandler((err: FastifyError | GatewayError, request, reply) => {
    if (err instanceof GatewayError) return sendError(request, reply, err.code, err.message, err.param);
    const mapped = FASTIFY_ERRORS[err.code];
    if (mapped !== undefined) return sendError(request, reply, mapped);
    request.log.error({ err }, 'unhandled error');
    return sendError(request, reply, 'internal_error');
  });
  app.setNotFoundHandler((request, reply) => sendError(request, reply, 'not_found', `No route for ${request.method} ${request.url.split('?')[0]}.`));

  let ready = false;
  const cluster = opts.cluster;
  app.get('/healthz', async () => (cluster === undefined ? { status: 'ok' } : { status: 'ok', node: cluster.self.id, ring: cluster.membership.ring().version }));
  app.get('/readyz', async (_request, reply) => (ready ? { status: 'ready' } : reply.code(503).send({ status: 'starting' })));

  app.register(async (v1) => {
    v1.addHook('onRequest', authHook(ctx));
    if (opts.cluster !== undefined) v1.addHook('preHandler', ownershipHook(opts.cluster));
    openAIRoutes(v1, ctx);
    anthropicRoutes(v1, ctx);
  });

  const sweep = setInterval(() => ctx.limiter.sweep(), server.sweep_interval);
  sweep.unref();
  app.addHook('onReady', async () => {
    ready = true;
  });
  app.addHook('preClose', async () => {
    ready = false;
  });
  app.addHook('onClose', async () => {
    clearInterval(sweep);
    await Promise.all([ctx.tokens.close(), ctx.upstreams.close()]);
  });
  return app;
}
