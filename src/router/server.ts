/**
 * The router: a stateless fastify proxy in front of the gateway nodes. It resolves the tenant from
 * the API key, finds the tenant's owner on the ring and streams request and response through.
 * Its hot path (POSTs under `/v1/` and `/openai/`) is served below fastify, by the same handler
 * (see `fast-path.ts`).
 */
import Fastify, { LogController } from 'fastify';
import type { ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { Membership } from '../coord/types.ts';
import { membersUnread, startOrKeepTrying } from '../coord/membership/join.ts';
import { describeRedis } from '../config/redis-url.ts';
import { CONFLICTING_KEYS_MESSAGE, apiKeyOf, hasConflictingKeys } from '../http/api-key.ts';
import { bodyTooLarge, forward } from './forward.ts';
import type { ForwardContext } from './forward.ts';
import { Departures } from './departures.ts';
import { HealthCheck } from './health-check.ts';
import { MemberPools } from './member-pools.ts';
import { MAX_REPLAY_BYTES, declaresMoreThan } from './request-body.ts';
import { noRouteMessage } from '../errors.ts';
import { answerClientFault, endStatus, sendCatalogueError } from '../http/client-errors.ts';
import { applyListenerLimits, listenerOptions } from '../http/listener.ts';
import { Suspects } from './suspects.ts';
import { FastifyExchange } from './exchange.ts';
import type { ExchangeLog, ProxyExchange } from './exchange.ts';
import { FastPath, requestIds } from './fast-path.ts';
import type { TenantConfig } from '../config/schema.ts';
import type { HotSet } from '../coord/hot/hot-set.ts';
import { RouterMetrics } from '../ops/metrics.ts';
import { levelEnabled, loggerOptions } from '../ops/logging.ts';
import { ReloadableConfig } from '../config/reloadable.ts';
import { startAdminServer } from '../ops/admin-server.ts';
import { catalogueRoutes } from '../ops/catalogue-routes.ts';
import { openCatalogue } from '../catalogue/open.ts';
import type { OpenCatalogue } from '../catalogue/open.ts';
import { routerAdminRoutes } from '../ops/admin-routes.ts';
import { LiveHub } from '../ops/live.ts';
import type { ClusterSecret } from '../security/cluster-secret.ts';
import { clusterSecretFromEnv, missingSecret } from '../security/cluster-secret.ts';
import { RequestSigner } from '../security/request-signature.ts';
import { startTracing } from '../http/tracing.ts';
import type { Tracing } from '../http/tracing.ts';

/** Options of {@link buildRouter}. */
export interface RouterOptions {
  /** Tenants and their keys (the same file the nodes load). */
  readonly config: LoadedConfig;
  /** Where the ring comes from; must be started before the router serves (see {@link startRouter}). */
  readonly membership: Membership;
  /** The cluster secret: every request forwarded to a node is signed with it (`src/security/request-signature.ts`). */
  readonly clusterSecret: ClusterSecret;
  /** Use fastify's pino logger at `server.log_level`. @default true */
  readonly logger?: boolean;
  /** Readable log lines (pino-pretty) whatever `server.log_format` says. @default false */
  readonly prettyLogs?: boolean;
  /** Where JSON log lines go in place of stdout (tests). */
  readonly logStream?: NodeJS.WritableStream;
  /** Period of member health checks, ms; also how long a member that refused a connection stays suspect. @default config `cluster.health_check` (1000) */
  readonly healthCheckMs?: number;
  /** Time source of suspect marks. @default systemClock */
  readonly clock?: Clock;
  /** The cluster's hot set (`cluster.hot`): found-hot tenants are spread like configured ones. Started and stopped by {@link startRouter}. */
  readonly hot?: HotSet;
  /** Number of live-stream clients, for `quotaring_live_clients` (set by {@link startRouter} when the admin API runs). */
  readonly liveClients?: () => number;
  /** OpenTelemetry tracing (`src/http/tracing.ts`): a span per forwarded request; shut down by {@link startRouter}. @default off */
  readonly tracing?: Tracing;
}

/** Introspection and manual control of a router, for tests and operators. */
export interface RouterControl {
  /** Runs one health-check round now; resolves when every member answered or timed out (500 ms). */
  checkHealth(): Promise<void>;
  /** Ids of the members routed around now, sorted. */
  suspects(): string[];
  /** Member URLs with an open connection pool, sorted. */
  pooledUrls(): string[];
  /** Requests served on the fast path (below fastify) so far. */
  fastPathServed(): number;
}

const controls = new WeakMap<FastifyInstance, RouterControl>();

/** Set on a response of the fastify path once its request line and metric are written. */
const COUNTED = Symbol('quotaring.counted');
type CountedResponse = ServerResponse & { [COUNTED]?: true };

/** The message of a 503 `no_healthy_node` while the router has never read its members (Redis unreachable since it started). */
const NO_MEMBERS_YET = 'No gateway node is known yet: this router has not reached Redis (cluster.redis) to read the cluster members; it keeps trying. Retry shortly.';

/** The control of a router built by {@link buildRouter}. @throws Error for another fastify instance. */
export function routerControl(app: FastifyInstance): RouterControl {
  const control = controls.get(app);
  if (control === undefined) throw new Error('not a router built by buildRouter()');
  return control;
}

/**
 * Builds the router (not listening). Routes: `GET|POST|DELETE /v1/*` and `/openai/*` (Azure OpenAI's paths) proxied to the tenant's owner;
 * `GET /healthz`; `GET /readyz` (503 while the ring is empty, naming `redis` while the members were never read). Health checks run every
 * `healthCheckMs` from `onReady` until `close()`, which also closes the member pools. The
 * membership is not started or stopped here.
 */
export function buildRouter(opts: RouterOptions): FastifyInstance {
  const { config, membership } = opts;
  const server = config.config.server;
  const clock = opts.clock ?? systemClock;
  const healthCheckMs = opts.healthCheckMs ?? config.config.cluster.health_check;
  const fastPath = new FastPath(config.config.router.max_headers);
  const nextRequestId = requestIds();
  const app: FastifyInstance = Fastify({
    logger: opts.logger === false ? false : loggerOptions(opts.prettyLogs === true ? { ...server, log_format: 'pretty' } : server, opts.logStream),
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    // The hot path is served by the server's own request handler; fastify serves the rest.
    serverFactory: fastPath.serverFactory,
    genReqId: nextRequestId,
    ...listenerOptions(config.config.router, () => app.log),
  });
  applyListenerLimits(app, config.config.router);
  // Wall time, not opts.clock: the other end of a signature is another process.
  const signer = new RequestSigner(opts.clusterSecret);
  membership.onRejectedEntry?.((entry) => app.log.warn({ member: entry.id ?? null, problem: entry.problem, count: entry.count ?? 1 }, entry.problem === 'too_many_entries' ? 'membership reads hit their entry cap: junk member entries in Redis' : 'member entries in Redis ignored: not signed with the cluster secret'));
  const pools = new MemberPools();
  const suspects = new Suspects(clock);
  // A member that only misses health checks is suspect after dead_after, like membership's own patience.
  const health = new HealthCheck({ ring: () => membership.ring(), pools, suspects, intervalMs: healthCheckMs, graceMs: config.config.cluster.dead_after, clock, log: app.log });
  const departures = new Departures(clock);
  const metrics = new RouterMetrics({
    ring: () => ({ members: membership.ring().members.length, version: membership.ring().version }),
    suspects: () => suspects.list().length,
    liveClients: () => opts.liveClients?.() ?? 0,
    memberEntriesRejected: () => membership.rejectedEntries?.() ?? 0,
  });
  const ctx: ForwardContext = { membership, pools, signer, suspects, departures, suspectMs: healthCheckMs, maxReplayBytes: MAX_REPLAY_BYTES, bodyLimit: () => config.config.server.body_limit, onRetry: (reason) => metrics.retry(reason), onAnswer: (id) => health.noteAnswer(id), ...(opts.tracing === undefined ? {} : { tracing: opts.tracing }) };
  controls.set(app, { checkHealth: () => health.checkOnce(), suspects: () => suspects.list(), pooledUrls: () => pools.urls(), fastPathServed: () => fastPath.served });

  // The request's tenant, once its key is resolved (for its log line).
  app.decorateRequest('tenant', null);
  // Bodies are never parsed: the raw stream is handed to undici as it arrives.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  app.setErrorHandler((err, request, reply) => {
    const answered = answerClientFault(err, request, reply);
    if (answered !== undefined) return answered;
    request.log.error({ err }, 'unhandled error');
    return sendCatalogueError(request, reply, 'internal_error');
  });
  app.setNotFoundHandler((request, reply) => sendCatalogueError(request, reply, 'not_found', noRouteMessage(request.method, request.url)));

  app.get('/metrics', async (_request, reply) => reply.header('content-type', metrics.registry.contentType).send(await metrics.registry.metrics()));
  app.get('/healthz', async () => ({ status: 'ok', ring: membership.ring().version }));
  app.get('/readyz', async (_request, reply) => {
    const ring = membership.ring();
    if (ring.members.length > 0) return { status: 'ready', ring: ring.version, members: ring.members.length };
    return reply.code(503).send(membersUnread(membership) ? { status: 'no members', waiting: ['redis'] } : { status: 'no members' });
  });
  // One info line per request (tenant, status, ms; never the key), and the router's metrics.
  const answered = (log: ExchangeLog, tenant: TenantConfig | null, status: number, ms: number): void => {
    metrics.request(status, ms);
    if (levelEnabled(app.log, 'info')) log.info({ tenant: tenant?.id ?? null, status, ms: Math.round(ms * 10) / 10 }, 'request');
  };
  // The proxied routes' handler, on the fast path and through fastify alike.
  const proxy = async (ex: ProxyExchange): Promise<void> => {
    const { req } = ex;
    const key = apiKeyOf(req);
    const tenant = key === undefined ? undefined : config.tenantByKey.get(key);
    if (tenant === undefined) {
      const why = key !== undefined ? 'Incorrect API key provided. Use a key configured for a tenant of this gateway.' : hasConflictingKeys(req) ? CONFLICTING_KEYS_MESSAGE : undefined;
      return ex.sendError('invalid_api_key', why);
    }
    ex.tenant = tenant;
    // The nodes' body limit, enforced here: a body over it is never sent to a node.
    const bodyLimit = config.config.server.body_limit;
    if (declaresMoreThan(req, bodyLimit)) return bodyTooLarge(ex, bodyLimit);
    // Central mode: any node decides for any tenant (every limit is in Redis): round-robin over all.
    const spread = config.config.mode === 'central' ? Number.POSITIVE_INFINITY : (tenant.spread ?? opts.hot?.spreadOf(tenant.id));
    if (membership.ring().members.length === 0 && membersUnread(membership)) return ex.sendError('no_healthy_node', NO_MEMBERS_YET);
    return forward(ctx, ex, tenant.id, spread);
  };
  fastPath.serve({ log: app.log, nextRequestId, proxy, onResponse: (ex) => answered(ex, ex.tenant, ex.status(), ex.elapsed()) });
  // Requests arriving from now on get fastify's 503 (return503OnClosing), fast path included.
  app.addHook('preClose', (done) => {
    fastPath.close();
    done();
  });
  app.register(async (v1) => {
    // Once per request: fastify's onResponse (finished or failed), or the response closing before
    // either (the client left: 499), which fastify reports to no hook — as RawExchange does.
    const once = (request: FastifyRequest, reply: FastifyReply): void => {
      const raw = reply.raw as CountedResponse;
      if (raw[COUNTED] === true) return;
      raw[COUNTED] = true;
      answered(request.log, request.tenant, endStatus(raw), reply.elapsedTime);
    };
    v1.addHook('onRequest', (request, reply, done) => {
      reply.raw.once('close', () => {
        if (!reply.raw.writableFinished) once(request, reply);
      });
      done();
    });
    v1.addHook('onResponse', (request, reply, done) => {
      once(request, reply);
      done();
    });
    // The provider APIs: OpenAI's and Anthropic's under /v1, Azure OpenAI's under /openai. POSTs
    // reach these routes only through inject() and in the cases fast-path.ts leaves to fastify.
    const handler = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
      await proxy(new FastifyExchange(request, reply));
      return reply;
    };
    v1.route({ method: ['GET', 'POST', 'DELETE'], url: '/v1/*', handler });
    v1.route({ method: ['GET', 'POST', 'DELETE'], url: '/openai/*', handler });
  });

  let unsubscribe: (() => void) | undefined;
  app.addHook('onReady', async () => {
    let last = membership.ring();
    unsubscribe = membership.onChange((ring) => {
      departures.update(last, ring);
      last = ring;
      suspects.retain(new Set(ring.members.map((m) => m.id)));
      pools.retain(ring.members).catch((err: unknown) => app.log.warn({ err }, 'closing the pool of a departed member failed'));
    });
    health.start();
  });
  app.addHook('onClose', async () => {
    health.stop();
    unsubscribe?.();
    await pools.close();
  });
  return app;
}

/** Options of {@link startRouter}; host and port override `router.host` / `router.port`. */
export interface StartRouterOptions extends Omit<RouterOptions, 'clusterSecret'> {
  /** @default read from `env` (`cluster.secret_env`, default QUOTARING_CLUSTER_SECRET) */
  readonly clusterSecret?: ClusterSecret;
  readonly host?: string;
  readonly port?: number;
  /** Install SIGTERM/SIGINT handlers that close the router (in-flight requests finish) and exit 0. @default false */
  readonly handleSignals?: boolean;
  /** Admin API port in place of `admin.router_port` (`--admin-port`; 0: any free port). */
  readonly adminPort?: number;
  /** Environment the admin token and the cluster secret are read from. @default process.env */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Builds the router, starts the membership and listens. A membership that cannot start (Redis
 * unreachable) is retried every `cluster.heartbeat` in the background: the router listens with an
 * empty ring meanwhile (503 `no_healthy_node` to clients, `/readyz` 503 waiting for `redis`).
 * @returns the listening URL and a `close()` that waits for requests in flight, then stops the membership.
 * @throws Error naming the variable when no cluster secret is given or set (RangeError when too short);
 *   listen errors (port in use) as thrown by fastify.
 */
export async function startRouter(opts: StartRouterOptions): Promise<{ url: string; adminUrl: string | undefined; close(): Promise<void> }> {
  const config = opts.config instanceof ReloadableConfig ? opts.config : new ReloadableConfig(opts.config);
  const variable = config.config.cluster.secret_env;
  const clusterSecret = opts.clusterSecret ?? clusterSecretFromEnv(opts.env ?? process.env, variable);
  if (clusterSecret === undefined) throw new Error(missingSecret(variable, 'a router'));
  let live: LiveHub | undefined;
  const tracing = opts.tracing ?? startTracing('quotaring-router', opts.env ?? process.env);
  const app = buildRouter({ ...opts, config, clusterSecret, liveClients: () => live?.clients() ?? 0, ...(tracing === undefined ? {} : { tracing }) });
  // The last spans are exported when the router closes.
  if (tracing !== undefined) app.addHook('onClose', () => tracing.shutdown());
  // Redis down at start: the router listens with an empty ring (503 no_healthy_node, /readyz waiting
  // for redis) and reads the members once Redis answers (src/coord/membership/join.ts).
  const stopJoining = new AbortController();
  const join = await startOrKeepTrying(() => opts.membership.start(), {
    retryMs: config.config.cluster.heartbeat,
    signal: stopJoining.signal,
    log: app.log,
    what: 'router',
    ...(config.config.cluster.redis === undefined ? {} : { redis: describeRedis(config.config.cluster.redis) }),
  });
  await opts.hot?.start();
  const signer = new RequestSigner(clusterSecret);
  const settings = config.config.router;
  // The catalogue is loaded before the router listens: its first request finds every key.
  let catalogue: OpenCatalogue;
  try {
    catalogue = await openCatalogue(config, `router-${opts.port ?? settings.port}`, app.log, opts.env ?? process.env);
  } catch (err) {
    stopJoining.abort();
    await join.done;
    await app.close();
    await opts.membership.stop();
    throw err;
  }
  let url: string;
  let admin: { url: string; close(): Promise<void> } | undefined;
  try {
    url = await app.listen({ host: opts.host ?? settings.host, port: opts.port ?? settings.port });
    const self = `router-${new URL(url).port}`;
    admin = await startAdminServer({
      settings: config.config.admin,
      env: opts.env,
      port: opts.adminPort ?? config.config.admin.router_port,
      log: app.log,
      what: 'admin API, dashboard and live stream',
      register: (server, token) => {
        live = new LiveHub({ router: self, membership: opts.membership, config, signer, ...(opts.hot === undefined ? {} : { hot: opts.hot }), log: app.log });
        live.attach(server, token);
        routerAdminRoutes(server, { self, config, signer, ring: () => opts.membership.ring(), ...(opts.hot === undefined ? {} : { hot: opts.hot }) });
        catalogueRoutes(server, catalogue.admin);
      },
    });
    if (admin !== undefined) app.log.info({ dashboard: `${admin.url}/dashboard` }, 'dashboard');
    live?.start();
  } catch (err) {
    stopJoining.abort();
    await join.done;
    await live?.stop();
    await app.close();
    await opts.membership.stop();
    await catalogue.close();
    throw err;
  }
  const ring = opts.membership.ring();
  app.log.info({ url, ring: ring.version, members: ring.members.length, ...(join.started ? {} : { waiting: 'redis' }) }, 'quotaring router listening');
  const close = async (): Promise<void> => {
    stopJoining.abort();
    await join.done;
    await live?.stop();
    await admin?.close();
    await app.close();
    opts.hot?.stop();
    await opts.membership.stop();
    await catalogue.close();
  };
  if (opts.handleSignals === true) {
    let signalled = false;
    const stop = (signal: string): void => {
      // Ctrl-C in a terminal reaches every process of the group, and `quotaring up` then sends SIGTERM too.
      if (signalled) return;
      signalled = true;
      app.log.info({ signal }, 'shutting down');
      close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  }
  return { url, adminUrl: admin?.url, close };
}
