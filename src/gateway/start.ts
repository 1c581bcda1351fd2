/**
 * Starts a gateway node from a config file and stops it gracefully on SIGTERM/SIGINT.
 */
import { loadConfig } from '../config/load.ts';
import { membershipFromConfig } from '../coord/from-config.ts';
import { buildGateway } from './server.ts';

/** Options of {@link startGateway}; host and port override `server.host` / `server.port`. */
export interface StartGatewayOptions {
  readonly configFile: string;
  readonly host?: string;
  readonly port?: number;
  /** This node's id in the cluster. @default `node-<port>` */
  readonly id?: string;
  /** URL routers reach this node at. @default `http://<host>:<port>` */
  readonly advertiseUrl?: string;
  /** Install SIGTERM/SIGINT handlers that close the server (in-flight requests finish) and exit 0. @default false */
  readonly handleSignals?: boolean;
}

/**
 * Loads the config, builds the gateway and listens.
 * @returns the listening URL and a `close()` that waits for requests in flight.
 * @throws ConfigError for an invalid config; listen errors (port in use) as thrown by fastify.
 */
export async function startGateway(opts: StartGatewayOptions): Promise<{ url: string; close(): Promise<void> }> {
  const config = loadConfig(opts.configFile);
  const server = config.config.server;
  const host = opts.host ?? server.host;
  const port = opts.port ?? server.port;
  const self = { id: opts.id ?? `node-${port}`, url: opts.advertiseUrl ?? `http://${host}:${port}` };
  const configured = membershipFromConfig(config.config.cluster, self);
  const app = buildGateway({ config, ...(configured === undefined ? {} : { cluster: { self, membership: configured.membership } }) });
  const url = await app.listen({ host, port });
  // Join the ring only once this node can serve.
  await configured?.membership.start();
  app.log.info({ url, node: self.id, ring: configured?.membership.ring().version, tenants: config.config.tenants.length }, 'quotaring node listening');
  const close = async (): Promise<void> => {
    // Leave the ring first, so routers stop sending here, then finish what is in flight.
    await configured?.close();
    await app.close();
  };
  if (opts.handleSignals === true) {
    const stop = (signal: string): void => {
      app.log.info({ signal }, 'shutting down');
      close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  }
  return { url, close };
}
