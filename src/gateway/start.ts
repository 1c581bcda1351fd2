/**
 * Starts a gateway node from a config file and stops it gracefully on SIGTERM/SIGINT: a graceful
 * stop saves the node's state file (`server.state_dir`), and in a cluster hands every tenant over
 * (over HTTP to the new owner, or with static members to the member that stands in; and to Redis
 * when configured), deregisters, keeps answering 421 for `cluster.handoff.drain` so routers catch
 * up, then finishes in-flight requests within `cluster.handoff.grace` and exits 0. On start, the
 * state file is loaded and a static member takes its tenants back from the others
 * (`src/coord/handoff/static-handoff.ts`) before it listens.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../config/load.ts';
import { membershipFromConfig } from '../coord/from-config.ts';
import { TenantStateStore } from '../coord/handoff/state-store.ts';
import type { Member } from '../coord/types.ts';
import { buildGateway, nodeHandoff, nodeLocalState, registerNodeAdmin } from './server.ts';
import { recoverFromPeers } from '../coord/handoff/static-handoff.ts';
import { ReloadableConfig } from '../config/reloadable.ts';
import { startAdminServer } from '../ops/admin-server.ts';
import { catalogueRoutes } from '../ops/catalogue-routes.ts';
import { openCatalogue } from '../catalogue/open.ts';
import type { OpenCatalogue } from '../catalogue/open.ts';
import { clusterSecretFor } from '../security/cluster-secret.ts';
import { startOrKeepTrying } from '../coord/membership/join.ts';
import { describeRedis } from '../config/redis-url.ts';
import { advertiseUrl } from './advertise-url.ts';
import { clusterIdentity } from './state-file.ts';
import { startTracing } from '../http/tracing.ts';

/** Options of {@link startGateway}; host and port override `server.host` / `server.port`. */
export interface StartGatewayOptions {
  readonly configFile: string;
  readonly host?: string;
  readonly port?: number;
  /** This node's id in the cluster. @default `node-<port>` */
  readonly id?: string;
  /**
   * URL routers reach this node at. @default `http://<host>:<port>`; with Redis membership and a
   * wildcard host (0.0.0.0, ::) the machine's one non-loopback address (see `defaultAdvertiseUrl`).
   */
  readonly advertiseUrl?: string;
  /**
   * Host (an IP address or DNS name) routers reach this node at, in place of `advertiseUrl`: the URL
   * is `http://<host>:<port>`, an IPv6 address in brackets (`--advertise-host`).
   */
  readonly advertiseHost?: string;
  /** Static members in place of `cluster.members` (`--members`). */
  readonly members?: readonly Member[];
  /** Install SIGTERM/SIGINT handlers that stop the node gracefully and exit 0. @default false */
  readonly handleSignals?: boolean;
  /** Admin API port in place of `admin.port` (`--admin-port`; 0: any free port). */
  readonly adminPort?: number;
  /** Readable log lines (`--pretty-logs`). */
  readonly prettyLogs?: boolean;
  /** Environment the admin token and the cluster secret (`cluster.secret_env`) are read from. @default process.env */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Loads the config, builds the gateway, listens, then joins the cluster (if one is configured).
 * @returns the listening URL and a graceful `close()`.
 * @throws ConfigError for a bad config file; Error for `members` with Redis membership, or a node id
 *   not among static members; Error naming the variable when a node of a cluster has no cluster
 *   secret (RangeError when it is too short); Error for both `advertiseUrl` and `advertiseHost`, or an
 *   `advertiseHost` that is empty, a wildcard or not a host; Error when, with Redis membership and no `advertiseUrl` or `advertiseHost`,
 *   the host is a wildcard (0.0.0.0, ::) and the machine has not exactly one non-loopback address; listen errors (port in use) as thrown by fastify.
 *   Never for an unreachable Redis: the node then listens, is not ready (`/readyz` 503 waiting for
 *   `redis`) and joins once Redis answers (`src/coord/membership/join.ts`).
 */
export async function startGateway(opts: StartGatewayOptions): Promise<{ url: string; adminUrl: string | undefined; close(): Promise<void> }> {
  const config = new ReloadableConfig(loadConfig(opts.configFile));
  const server = config.config.server;
  if (opts.members !== undefined && config.config.cluster.redis !== undefined) {
    throw new Error('--members: the config uses Redis membership (cluster.redis.url); drop one of them');
  }
  const settings = opts.members === undefined ? config.config.cluster : { ...config.config.cluster, members: [...opts.members] };
  const host = opts.host ?? server.host;
  const port = opts.port ?? server.port;
  // With Redis membership the URL is published for routers and peers on other machines: a wildcard
  // listen address is replaced by this machine's address (or refused when it has several).
  const self = { id: opts.id ?? `node-${port}`, url: advertiseUrl({ url: opts.advertiseUrl, advertiseHost: opts.advertiseHost, host, port, resolveWildcard: settings.redis !== undefined }) };
  let listenedPort = port;
  const clusterSecret = clusterSecretFor(settings, opts.env ?? process.env, 'a node');
  const configured = membershipFromConfig(settings, self, clusterSecret);
  const store = configured?.redis === undefined ? undefined : new TenantStateStore(configured.redis, settings.name);
  const tracing = startTracing('quotaring-node', opts.env ?? process.env);
  const app = buildGateway({
    config,
    ...(tracing === undefined ? {} : { tracing }),
    // Port 0: the id names the port chosen at listen.
    nodeId: () => opts.id ?? `node-${listenedPort}`,
    ...(opts.prettyLogs === true ? { prettyLogs: true } : {}),
    ...(clusterSecret === undefined ? {} : { clusterSecret }),
    // The state file carries the cluster as this node runs it (with --members in place of cluster.members).
    ...(server.state_dir === '' ? {} : { stateDir: server.state_dir, stateCluster: clusterIdentity(settings) }),
    ...(configured === undefined
      ? {}
      : {
          cluster: {
            self,
            membership: configured.membership,
            ringOptions: configured.ringOptions,
            ...(store === undefined ? {} : { store }),
            ...(configured.redis === undefined ? {} : { redis: configured.redis }),
          },
        }),
  });
  const handoff = nodeHandoff(app);
  const localState = nodeLocalState(app);
  // The catalogue is loaded before anything decides: a restored state names tenants it must know.
  let catalogue: OpenCatalogue;
  try {
    catalogue = await openCatalogue(config, self.id, app.log, opts.env ?? process.env);
  } catch (err) {
    await app.close();
    await configured?.close();
    throw err;
  }
  // Before listening: a restarted node decides its first request from its saved state, and a static
  // member from what the others held for it (no stand-in's usage can race a decision here).
  const idKnown = opts.id !== undefined || port !== 0;
  if (idKnown) await localState?.restore();
  if (handoff !== undefined && store === undefined) await recoverFromPeers(handoff, (t) => config.policies.has(t), app.log);
  const url = await app.listen({ host, port });
  listenedPort = Number(new URL(url).port);
  // Port 0: the node id (and its file) is known only now.
  if (!idKnown) await localState?.restore();
  // Join the ring only once this node can serve. Redis down: the node stays up, decides for no
  // tenant (503 node_starting; /readyz names `redis`) and joins once Redis answers (./../coord/join.ts).
  let handoffStarted = false;
  let joined = false;
  const stopJoining = new AbortController();
  const join = await startOrKeepTrying(
    async () => {
      if (!handoffStarted) {
        await handoff?.start();
        handoffStarted = true;
      }
      await configured?.membership.start();
    },
    { retryMs: settings.heartbeat, signal: stopJoining.signal, log: app.log, what: `node ${self.id}`, ...(settings.redis === undefined ? {} : { redis: describeRedis(settings.redis) }) },
  );
  const onJoined = (): void => {
    joined = true;
    handoff?.joined();
  };
  if (join.started) onJoined();
  else void join.done.then((ok) => ok && !stopJoining.signal.aborted && onJoined());
  app.log.info({ url, node: self.id, ring: handoff?.ring().version, tenants: config.config.tenants.length, ...(join.started ? {} : { waiting: 'redis' }) }, 'quotaring node listening');

  let left: Promise<number> | undefined;
  /** Hands every tenant over and leaves the ring (once); resolves to the tenants handed over. */
  const leave = (): Promise<number> =>
    (left ??= (async () => {
      stopJoining.abort();
      await join.done;
      // Never joined (Redis was away the whole time): this node decided for no tenant; its replicas stay in its state file.
      if (handoff === undefined || !joined) return 0;
      const before = handoff.stats.handedOff;
      // Hand over first (the new owners find the states before they see the new ring), then leave.
      await handoff.leave();
      await configured?.membership.stop();
      return handoff.stats.handedOff - before;
    })());

  const drain = async (): Promise<{ handedOff: number; ring: string }> => {
    if (handoff === undefined || store === undefined) throw new Error('this node cannot drain: it has no Redis membership (a single node or static cluster.members); remove it from cluster.members and restart the routers instead');
    const handedOff = await leave();
    return { handedOff, ring: handoff.ring().version };
  };
  const admin = await startAdminServer({
    settings: config.config.admin,
    env: opts.env,
    port: opts.adminPort ?? config.config.admin.port,
    log: app.log,
    what: 'admin API',
    register: (server) => {
      registerNodeAdmin(app, server, drain);
      catalogueRoutes(server, catalogue.admin);
    },
  });

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      // A cluster node saves before its handoff (the leave gives every tenant away).
      if (handoff !== undefined) await localState?.save();
      if (handoff !== undefined) {
        await leave();
        await sleep(settings.handoff.drain);
      }
      const grace = setTimeout(() => {
        app.log.warn({ graceMs: settings.handoff.grace }, 'grace period over: closing open connections');
        app.server.closeAllConnections();
      }, settings.handoff.grace);
      grace.unref();
      await admin?.close();
      await app.close();
      clearTimeout(grace);
      // Settlements of the last streams go to the tenants' new owners: wait until they are delivered.
      await handoff?.flush();
      // A single node saves once its last requests are settled.
      if (handoff === undefined) await localState?.save();
      // In-flight settlements were forwarded during close; now stop the Redis connection.
      await configured?.close();
      await catalogue.close();
      // The last spans (this close's requests included) are exported before the process ends.
      await tracing?.shutdown();
    })();
    return closing;
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
  return { url, adminUrl: admin === undefined ? undefined : admin.url, close };
}
