/**
 * Starts a gateway node from a config file and stops it gracefully on SIGTERM/SIGINT.
 */
import { loadConfig } from '../config/load.ts';
import { buildGateway } from './server.ts';

/** Options of {@link startGateway}; host and port override `server.host` / `server.port`. */
export interface StartGatewayOptions {
  readonly configFile: string;
  readonly host?: string;
  readonly port?: number;
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
  const app = buildGateway({ config });
  const server = config.config.server;
  const url = await app.listen({ host: opts.host ?? server.host, port: opts.port ?? server.port });
  app.log.info({ url, tenants: config.config.tenants.length, models: config.config.models.length }, 'quotaring node listening');
  if (opts.handleSignals === true) {
    const stop = (signal: string): void => {
      app.log.info({ signal }, 'shutting down');
      app.close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  }
  return { url, close: () => app.close() };
}
