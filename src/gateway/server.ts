/**
 * The gateway node: a fastify server that authenticates tenants, limits them in RAM, and proxies
 * OpenAI- and Anthropic-compatible requests to the deployments.
 */
import { randomUUID } from 'node:crypto';
import { SpreadTenants } from './spread.ts';
import type { GatewayOptions, ReadinessWait } from './gateway-options.ts';
import { guardResults } from './guard-series.ts';
import { hotDetector, limitUsage, seedUsage } from './hot-wiring.ts';
import { warmExactCounters } from './warm-up.ts';
import { centralDecisions } from '../central/from-config.ts';
import { HotSet } from '../coord/hot/hot-set.ts';
import Fastify, { LogController } from 'fastify';
import type { FastifyError, FastifyInstance } from 'fastify';
import type { TenantConfig } from '../config/schema.ts';
import { systemClock, wallNow } from '../clock.ts';
import { Handoff } from '../coord/handoff/handoff.ts';
import { Fence } from '../coord/handoff/fence.ts';
import { processGone } from '../coord/handoff/process-gone.ts';
import { membersUnread } from '../coord/membership/join.ts';
import { GatewayError, noRouteMessage } from '../errors.ts';
import { answerClientFault, sendCatalogueError } from '../http/client-errors.ts';
import { NODE_HEADER_ALLOWANCE, applyListenerLimits, listenerOptions } from '../http/listener.ts';
import { quotasFromConfig } from '../globalcap/quotas-from-config.ts';
import { Limiter } from '../limiter/limiter.ts';
import { AdmissionQueues } from './admission-queue.ts';
import { DeploymentHealth } from './deployment-health.ts';
import { PromptCounter } from '../tokens/index.ts';
import { authHook } from './auth.ts';
import type { GatewayContext } from './context.ts';
import { requestIdGenerator } from './context.ts';
import { reservationKeepers } from './reservations.ts';
import { registerJsonBody } from './json-body.ts';
import { ownershipHook } from './ownership.ts';
import { anthropicRoutes } from './routes/anthropic.ts';
import { openAIRoutes } from './routes/openai.ts';
import { completionsRoutes } from './routes/completions.ts';
import { azureRoutes } from './routes/azure.ts';
import { countTokensRoutes } from './routes/count-tokens.ts';
import { responsesRoutes } from './routes/responses.ts';
import { moderationsRoutes } from './routes/moderations.ts';
import { sendSettlement, settlementRoutes } from '../peer/settlements.ts';
import { tenantStateRoutes } from '../peer/tenant-usage.ts';
import { Upstreams } from './upstream.ts';
import { NodeMetrics } from '../ops/metrics.ts';
import { NodeActivity } from '../ops/node-activity.ts';
import { nodeOpsRoutes } from '../ops/node-routes.ts';
import { levelEnabled, loggerOptions } from '../ops/logging.ts';
import { nodeAdminRoutes, withUsage } from '../ops/admin-routes.ts';
import { allShareViews, fairShareSeries, tenantFairShare } from '../ops/fair-share-report.ts';
import type { LimitUsage, NodeAdminSources, TenantUsage } from '../ops/admin-routes.ts';
import { budgetUsage } from '../ops/spend-admin.ts';
import { changeTenantSpend, tenantSpendRoutes } from '../peer/tenant-spend.ts';
import type { SpendDeps } from '../peer/tenant-spend.ts';
import { ReloadableConfig } from '../config/reloadable.ts';
import { missingSecret } from '../security/cluster-secret.ts';
import { RequestSigner } from '../security/request-signature.ts';
import { clusterAuthHooks } from './cluster-auth.ts';
import { ReplicaStore } from '../coord/handoff/replicas.ts';
import { httpPeerTransport, transferRoutes } from '../peer/transfer.ts';
import { nodeStateFile, stateTtlMs } from './state-file.ts';
import type { NodeLocalState } from './state-file.ts';

export type { GatewayOptions, NodeClusterOptions, ReadinessWait } from './gateway-options.ts';

const handoffs = new WeakMap<FastifyInstance, Handoff>();
export type { NodeLocalState } from './state-file.ts';
const localStates = new WeakMap<FastifyInstance, NodeLocalState>();

/** The state file of a node built by {@link buildGateway} with `stateDir`; undefined without. */
export function nodeLocalState(app: FastifyInstance): NodeLocalState | undefined {
  return localStates.get(app);
}
const adminSources = new WeakMap<FastifyInstance, Omit<NodeAdminSources, 'drain'> & { readonly drained: () => void }>();

/**
 * Registers a node's admin routes (`src/ops/admin-routes.ts`) on `admin`, its admin server.
 * @param drain leaves the ring and hands the tenants over (see `startGateway`).
 * @throws Error for a fastify instance not built by {@link buildGateway}.
 */
export function registerNodeAdmin(app: FastifyInstance, admin: FastifyInstance, drain: NodeAdminSources['drain']): void {
  const sources = adminSources.get(app);
  if (sources === undefined) throw new Error('not a gateway built by buildGateway()');
  nodeAdminRoutes(admin, {
    ...sources,
    drain: async () => {
      const done = await drain();
      sources.drained();
      return done;
    },
  });
}

/** The handoff of a node built by {@link buildGateway} with a cluster; undefined for a single node. */
export function nodeHandoff(app: FastifyInstance): Handoff | undefined {
  return handoffs.get(app);
}

/**
 * Builds the gateway (not listening). The limiter's idle sweep runs every `server.sweep_interval`;
 * `app.close()` stops it, the token pool and the upstream pools.
 */
export function buildGateway(opts: GatewayOptions): FastifyInstance {
  const config = opts.config instanceof ReloadableConfig ? opts.config : new ReloadableConfig(opts.config);
  if (opts.cluster !== undefined && opts.clusterSecret === undefined) throw new Error(missingSecret(config.config.cluster.secret_env, 'a node'));
  // Wall time, not opts.clock: the other end of a signature is another process.
  const signer = opts.clusterSecret === undefined ? undefined : new RequestSigner(opts.clusterSecret);
  const server = config.config.server;
  const clock = opts.clock ?? systemClock;
  const app: FastifyInstance = Fastify({
    logger: opts.logger === false ? false : loggerOptions(opts.prettyLogs === true ? { ...server, log_format: 'pretty' } : server, opts.logStream),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: server.body_limit,
    return503OnClosing: true,
    ...listenerOptions(server, () => app.log, NODE_HEADER_ALLOWANCE),
  });
  applyListenerLimits(app, server, NODE_HEADER_ALLOWANCE);
  const metrics = new NodeMetrics();
  const activity = new NodeActivity(metrics, (tenant) => config.policies.has(tenant));
  // Spread (hot) tenants keep only their split concurrency limits in this limiter.
  let spread: SpreadTenants | undefined;
  // Refused requests that may wait, woken when the limiter frees capacity for their tenant.
  const queues = new AdmissionQueues({ clock, maxDepth: config.config.queue.max_depth });
  const limiter = new Limiter({
    clock,
    policyFor: (tenant) => (spread?.isSpread(tenant) === true ? spread.localPolicy(tenant) : config.policies.get(tenant)),
    onFreed: (tenant) => queues.wake(tenant),
  });
  const clusterOpts = opts.cluster;
  const handoffSettings = config.config.cluster.handoff;
  // This process's incarnation: written into every state it stores and told on /healthz, so a
  // member that finds another one answering at this URL knows this process is gone (process-gone.ts).
  const INCARNATION = randomUUID();
  const handoff =
    clusterOpts === undefined
      ? undefined
      : new Handoff({
          self: clusterOpts.self,
          membership: clusterOpts.membership,
          limiter,
          ...(clusterOpts.store === undefined ? {} : { store: clusterOpts.store }),
          ...(signer === undefined ? {} : { peers: { replicas: new ReplicaStore({ now: () => clock.now() }), transport: httpPeerTransport(signer) } }),
          clock,
          ...(clusterOpts.ringOptions === undefined ? {} : { ringOptions: clusterOpts.ringOptions }),
          waitMs: handoffSettings.wait_ms,
          checkpointMs: handoffSettings.checkpoint,
          stateTtlMs: (tenant) => stateTtlMs(config.policies.get(tenant)),
          send: (from, to, settlement, hops) => sendSettlement(from, to, settlement, hops, signer as RequestSigner),
          ownerGone: processGone,
          incarnation: INCARNATION,
          log: app.log,
          onMoved: (kind, ms, tenants) => metrics.handoff(kind, ms, tenants),
        });
  if (handoff !== undefined) handoffs.set(app, handoff);
  const staticMembers = config.config.cluster.members.length;
  const hotConfig = config.config.cluster.hot;
  const hotRedis = hotConfig.threshold_rps === undefined ? undefined : clusterOpts?.redis;
  const hotSet =
    hotRedis === undefined
      ? undefined
      : new HotSet({
          redis: hotRedis,
          cluster: config.config.cluster.name,
          clock,
          onError: (err) => app.log.warn({ err: err.message }, 'hot set unreadable: keeping the last view'),
          onChange: (cooled) => (cooled.length > 0 ? app.log.info({ cooled }, 'hot tenants cooled: back on their owners') : undefined),
          maxSpread: () => handoff?.ring().members.length ?? Math.max(1, staticMembers),
          maxTtlMs: hotConfig.cooldown,
          onInvalid: (tenant, problem) => app.log.warn({ tenant, problem }, 'hot set entry in Redis not valid'),
        });
  const quotas = quotasFromConfig(config, {
    clock,
    liveNodes: () => handoff?.ring().members.length ?? Math.max(1, staticMembers),
    log: app.log,
    always: hotSet !== undefined,
    onFallbackChange: (active) => metrics.fallback(active),
    ...(clusterOpts === undefined ? {} : { nodeId: clusterOpts.self.id }),
  });
  if (quotas !== undefined && (hotSet !== undefined || config.config.tenants.some((t) => t.spread !== undefined))) {
    spread = new SpreadTenants({
      config,
      leases: quotas.leases,
      ring: () => handoff?.ring(),
      selfId: clusterOpts?.self.id,
      ...(hotSet === undefined ? {} : { hot: { set: hotSet, usage: (tenant: TenantConfig) => limitUsage(limiter, tenant), seed: (tenant: string, used: { requests: number; tokens: number }) => seedUsage(limiter, tenant, used, clock, app.log) } }),
    });
  }
  const hot =
    hotSet === undefined || spread === undefined || hotConfig.threshold_rps === undefined
      ? undefined
      : hotDetector(hotSet, spread, { thresholdRps: hotConfig.threshold_rps, k: hotConfig.spread, sustainMs: hotConfig.sustain, cooldownMs: hotConfig.cooldown }, clock, app.log);
  const central = centralDecisions(config);
  // A node woken from a stall decides for no tenant until it caught up (src/coord/handoff/fence.ts).
  const membership = clusterOpts?.membership;
  const fence =
    clusterOpts === undefined || handoff === undefined || central !== undefined
      ? undefined
      : new Fence({
          clock,
          deadAfterMs: config.config.cluster.dead_after,
          waitMs: handoffSettings.wait_ms,
          ...(membership?.syncNow === undefined ? {} : { syncNow: (ms: number) => (membership.syncNow as (ms: number) => Promise<boolean>).call(membership, ms) }),
          takeBack: (ms) => handoff.takeBack(ms),
          log: app.log,
        });
  const ctx: GatewayContext = {
    config,
    clock,
    limiter,
    queues,
    ...(central === undefined ? {} : { central }),
    ...(quotas === undefined ? {} : { quotas }),
    ...(spread === undefined ? {} : { spread }),
    ...(hot === undefined ? {} : { hot }),
    ...(handoff === undefined ? {} : { handoff }),
    ...(fence === undefined ? {} : { fence }),
    ...(opts.tracing === undefined ? {} : { tracing: opts.tracing }),
    reservations: reservationKeepers({ limiter, ...(handoff === undefined ? {} : { handoff }), ...(central === undefined ? {} : { central }), ...(spread === undefined ? {} : { spread }) }),
    tokens: new PromptCounter({
      poolSize: config.config.tokens.pool_size,
      workerThresholdChars: config.config.tokens.worker_threshold_chars,
      mergeBudgetBytes: config.config.tokens.merge_budget_bytes,
      cacheEntries: config.config.tokens.cache_entries,
    }),
    upstreams: new Upstreams(),
    health: new DeploymentHealth(clock),
    activity,
    nextRequestId: requestIdGenerator(),
  };
  const nodeId = (): string => clusterOpts?.self.id ?? opts.nodeId?.() ?? 'single';
  // Fallback means "Redis is configured and unreachable": a node without Redis is never in it.
  const inFallback = (): boolean => quotas?.guard !== undefined && quotas.leases.inFallback;
  const decidesFor = (tenant: string): boolean => central === undefined && (spread?.isSpread(tenant) === true || handoff === undefined || handoff.holds(tenant));
  metrics.setSources({
    queueDepth: () => {
      let n = 0;
      for (const d of queues.depths().values()) n += d;
      return n;
    },
    inFlight: () => activity.inFlight,
    fallbackActive: () => (inFallback() ? 1 : 0),
    ring: () => (handoff === undefined ? undefined : { members: handoff.ring().members.length, version: handoff.ring().version }),
    // Only the tenant's owner on this node's ring exports its levels: a stand-in, a node of a spread
    // tenant's range or one still holding a moved tenant has its own partial view.
    tenantLevels: () =>
      [...config.catalogue.meteredTenants()]
        .filter((t) => decidesFor(t) && (handoff === undefined || handoff.place(t).here))
        .flatMap((t) => limiter.peekAll(t).map((l) => ({ tenant: t, limit: l.name, remaining: l.remaining, capacity: l.limit }))),
    leaseRenewals: () => quotas?.leases.renewals ?? { granted: 0, partial: 0, denied: 0, failed: 0 },
    leaseGivenBack: () => quotas?.leases.givenBack ?? { sent: 0, answered: 0 },
    guardCalls: () => [
      ...(quotas?.guard === undefined ? [] : guardResults('cap', quotas.guard.stats)),
      ...(central === undefined ? [] : guardResults('central', central.guard.stats)),
    ],
    memberEntriesRejected: () => clusterOpts?.membership.rejectedEntries?.() ?? 0,
    clusterAuthRefused: () => ({ internalCalls: clusterAuth.stats.refused, standInHeaders: clusterAuth.stats.headersDropped }),
    fairShares: () => {
      if (quotas?.fair === undefined) return [];
      const metered = new Set(config.catalogue.meteredTenants());
      return metered.size === 0 ? [] : fairShareSeries(allShareViews(quotas.fair), (t) => metered.has(t));
    },
    fairExchanges: () => quotas?.exchange?.counts,
    providerFeedback: () => quotas?.feedback?.counts() ?? [],
  });
  clusterOpts?.membership.onRejectedEntry?.((entry) => app.log.warn({ member: entry.id ?? null, problem: entry.problem, count: entry.count ?? 1 }, entry.problem === 'too_many_entries' ? 'membership reads hit their entry cap: junk member entries in Redis' : 'member entries in Redis ignored: not signed with the cluster secret'));
  app.decorateRequest('tenant', null);
  app.decorateRequest('tier', null);
  app.decorateRequest('keyId', null);
  app.decorateRequest('trail', null);
  registerJsonBody(app, server.body_limit, server.json_depth, server.json_max_members);
  const clusterAuth = clusterAuthHooks(app, signer);

  app.setErrorHandler((err: FastifyError | GatewayError, request, reply) => {
    if (err instanceof GatewayError) return sendCatalogueError(request, reply, err.code, err.message, err.param);
    const answered = answerClientFault(err, request, reply);
    if (answered !== undefined) return answered;
    request.log.error({ err }, 'unhandled error');
    return sendCatalogueError(request, reply, 'internal_error');
  });
  app.setNotFoundHandler((request, reply) => sendCatalogueError(request, reply, 'not_found', noRouteMessage(request.method, request.url)));

  let ready = false;
  app.get('/healthz', async () => (clusterOpts === undefined || handoff === undefined ? { status: 'ok' } : { status: 'ok', node: clusterOpts.self.id, incarnation: INCARNATION, ring: handoff.ring().version }));
  let drained = false;
  /**
   * What a node waits for before it is ready, in this order: `start` (listening and warmed up),
   * `redis` (a Redis membership that has not read the member list yet: Redis unreachable since the
   * node started; it retries every heartbeat), `ring` (its own id is in its membership's ring: static members at once, a Redis node after its
   * first heartbeat), `handoff` (the handoffs of the ring it joined received, or `cluster.handoff.wait_ms`
   * waited: `Handoff.handoffsReceived`), `scripts` (Redis configured for the leases: connected and
   * every script loaded). Empty when ready.
   */
  const waitingFor = (): ReadinessWait[] => {
    const waiting: ReadinessWait[] = [];
    if (!ready) waiting.push('start');
    if (clusterOpts !== undefined && handoff !== undefined) {
      if (membersUnread(clusterOpts.membership)) waiting.push('redis');
      if (!handoff.ring().members.some((m) => m.id === clusterOpts.self.id)) waiting.push('ring');
      if (!handoff.handoffsReceived) waiting.push('handoff');
    }
    if (quotas !== undefined && !quotas.scriptsLoaded()) waiting.push('scripts');
    return waiting;
  };
  app.get('/readyz', async (_request, reply) => {
    if (drained) return reply.code(503).send({ status: 'drained' });
    const waiting = waitingFor();
    return waiting.length === 0 ? { status: 'ready' } : reply.code(503).send({ status: 'starting', waiting });
  });

  app.register(async (v1) => {
    // One info line per request: exchanges write theirs (with the decision); this covers the rest (400, 401, 404 ...).
    // (Callback style: no promise per request.)
    v1.addHook('onResponse', (request, reply, done) => {
      if (request.trail === null && levelEnabled(request.log, 'info')) request.log.info({ tenant: request.tenant?.id ?? null, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10, error: reply.getHeader('x-quotaring-error') ?? null }, 'request');
      done();
    });
    v1.addHook('onRequest', authHook(ctx));
    // Central mode: any node decides for any tenant (its limits are in Redis), so no ownership check.
    if (clusterOpts !== undefined && handoff !== undefined && central === undefined) v1.addHook('preHandler', ownershipHook({ ...clusterOpts, handoff, ...(spread === undefined ? {} : { spread }), ...(fence === undefined ? {} : { fence }) }));
    openAIRoutes(v1, ctx);
    completionsRoutes(v1, ctx);
    azureRoutes(v1, ctx);
    anthropicRoutes(v1, ctx);
    countTokensRoutes(v1, ctx);
    responsesRoutes(v1, ctx);
    moderationsRoutes(v1, ctx);
  });

  if (handoff !== undefined) {
    settlementRoutes(app, config, handoff);
    transferRoutes(app, config, handoff, config.config.cluster.dead_after);
  }
  if (opts.stateDir !== undefined) localStates.set(app, nodeStateFile({ dir: opts.stateDir, nodeId, config, limiter, handoff, log: app.log, ...(opts.stateCluster === undefined ? {} : { cluster: opts.stateCluster }) }));
  /** A tenant's limits where this node decides for it, else its owner (admin API and `/_quotaring/v1/tenants/:id`). */
  const limitsOf = (tenant: string): LimitUsage[] => withUsage(limiter.peekAll(tenant), limiter.budgets(tenant).map((b) => budgetUsage(b, clock.now())));
  const tenantUsage = async (tenant: string): Promise<TenantUsage | undefined> => {
    if (!config.policies.has(tenant)) return undefined;
    const placed = handoff?.place(tenant) ?? { here: true as const };
    const self = nodeId();
    // Fair shares are per node: any node where the tenant asks has its own (owner or not).
    const fair = quotas?.fair === undefined ? {} : { fair_share: tenantFairShare(quotas.fair, tenant) };
    if (!placed.here) {
      const owner = placed.owner?.id ?? null;
      if (handoff?.isStandIn(tenant) === true) return { tenant, node: self, here: false, owner, standIn: true, limits: limitsOf(tenant), queued: queues.depth(tenant), ...fair };
      return { tenant, node: self, here: false, owner, limits: [], queued: queues.depth(tenant), ...fair };
    }
    await handoff?.ready(tenant);
    return { tenant, node: self, here: true, owner: self, limits: limitsOf(tenant), queued: queues.depth(tenant), ...fair };
  };
  tenantStateRoutes(app, nodeId, handoff, tenantUsage);
  const spendDeps: SpendDeps = { config, limiter, handoff, node: nodeId, clock, log: app.log };
  tenantSpendRoutes(app, spendDeps);
  adminSources.set(app, {
    get self() {
      return nodeId();
    },
    config,
    ring: () => handoff?.ring(),
    ...(hotSet === undefined ? {} : { hot: hotSet }),
    tenant: tenantUsage,
    changeSpend: (tenant, body, who) => changeTenantSpend(spendDeps, tenant, body, who),
    deploymentShares: (deployment) => quotas?.fair?.view(deployment),
    // A drained node is out of the ring: orchestrators see it not ready.
    drained: () => {
      ready = false;
      drained = true;
    },
  });
  nodeOpsRoutes(app, { node: nodeId, activity, limiter, queues, ring: () => handoff?.ring().version, fallback: inFallback, decidesFor, ...(quotas?.fair === undefined ? {} : { fair: quotas.fair }) });

  const sweep = setInterval(() => {
    ctx.limiter.sweep();
    hot?.sweep();
    void handoff?.forgetIdle();
    clusterAuth.prune(wallNow()); // wall time: replay windows follow the signers' timestamps (other processes)
  }, server.sweep_interval);
  sweep.unref();
  app.addHook('onReady', async () => {
    activity.start();
    await hotSet?.start();
    await central?.ready();
    warmExactCounters(config, config.config.tokens.cache_entries);
    // The stall watch starts once start-up work (which may hold the event loop) is done.
    fence?.start();
    ready = true;
  });
  app.addHook('preClose', async () => {
    ready = false;
    // Requests still waiting for capacity are answered now (421 to the new owner, or 503), not held through the close.
    queues.close();
  });
  app.addHook('onClose', async () => {
    clearInterval(sweep);
    activity.stop();
    hotSet?.stop();
    fence?.stop();
    handoff?.stop();
    await Promise.all([ctx.tokens.close(), ctx.upstreams.close(), quotas?.close()]);
    central?.close();
  });
  return app;
}
