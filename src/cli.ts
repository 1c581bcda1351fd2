#!/usr/bin/env node
/**
 * The `quotaring` command: `node`, `router`, `up`, `demo`, `simulate`, `config check`, `replay`.
 */
import { Command, InvalidArgumentError } from 'commander';
// Each command imports what it runs when it runs (dynamic imports below): a process started by
// `quotaring up` loads only its own part, which shortens the cluster's start on a small machine.
import { LOG_LEVELS, redisUrlFromFlags } from '../cluster/up-options.ts';
import type { LogLevel, UpOptions } from '../cluster/up.ts';
import { findUp } from '../cluster/up-pid.ts';
import { ConfigError, loadConfig } from './config/load.ts';
import type { ClusterConfig } from './config/schema.ts';
import { parseMemberList } from './coord/membership/member-list.ts';
import { replayCommand } from './replay/cli.ts';
import { clusterSecretFor } from './security/cluster-secret.ts';
import { packageVersion } from './version.ts';
import { exitWithParent } from './exit-with-parent.ts';
import { addCatalogueCommands } from './ops/catalogue-cli.ts';

function int(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a non-negative integer');
  return n;
}

function rate(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
}

/**
 * The cluster settings with `--members` (if given) in place of `cluster.members`.
 * @throws Error for a bad list, or one given with Redis membership.
 */
function withMembers(cluster: ClusterConfig, list: string | undefined): ClusterConfig {
  if (list === undefined) return cluster;
  if (cluster.redis !== undefined) throw new Error('--members: the config uses Redis membership (cluster.redis.url); drop one of them');
  return { ...cluster, members: parseMemberList(list) };
}

function fail(err: unknown): never {
  process.stderr.write(`${err instanceof ConfigError ? err.message : `error: ${(err as Error).message}`}\n`);
  process.exit(err instanceof ConfigError ? 2 : 1);
}

// Under `quotaring up`: stop when up exits, however it exits.
exitWithParent(process.env);

const program = new Command('quotaring')
  .description('Rate-limiting gateway for LLM APIs: per-tenant requests, tokens and concurrency limits, decided in RAM.')
  .version(packageVersion(), '-V, --version', 'print the version and exit')
  .showHelpAfterError();

program
  .command('node')
  .description('run a gateway node')
  .requiredOption('-c, --config <file>', 'YAML config file')
  .option('--host <host>', 'listen address (overrides server.host)')
  .option('-p, --port <port>', 'listen port (overrides server.port)', int)
  .option('--id <id>', 'node id in the cluster (default: node-<port>)')
  .option('--url <url>', 'URL routers reach this node at (default: http://<host>:<port>; for host 0.0.0.0 or :: with Redis membership, this machine\'s one non-loopback address)')
  .option('--advertise-host <host>', 'address or DNS name routers reach this node at, in place of --url: advertises http://<host>:<port>, an IPv6 address in brackets')
  .option('--members <list>', 'static members id=url[,id=url...] (overrides cluster.members)')
  .option('--admin-port <port>', 'admin API port (overrides admin.port; the API runs when the admin.token_env variable is set)', int)
  .option('--pretty-logs', 'readable log lines instead of JSON (server.log_format: pretty)')
  .action(async (opts: { config: string; host?: string; port?: number; id?: string; url?: string; advertiseHost?: string; members?: string; adminPort?: number; prettyLogs?: boolean }) => {
    try {
      const { startGateway } = await import('./gateway/start.ts');
      await startGateway({
        configFile: opts.config,
        ...(opts.adminPort === undefined ? {} : { adminPort: opts.adminPort }),
        ...(opts.prettyLogs === true ? { prettyLogs: true } : {}),
        ...(opts.members === undefined ? {} : { members: parseMemberList(opts.members) }),
        handleSignals: true,
        ...(opts.host === undefined ? {} : { host: opts.host }),
        ...(opts.port === undefined ? {} : { port: opts.port }),
        ...(opts.id === undefined ? {} : { id: opts.id }),
        ...(opts.url === undefined ? {} : { advertiseUrl: opts.url }),
        ...(opts.advertiseHost === undefined ? {} : { advertiseHost: opts.advertiseHost }),
      });
    } catch (err) {
      fail(err);
    }
  });

program
  .command('router')
  .description('run a router: proxies each request to its tenant\'s owner on the ring (members from cluster.members or Redis)')
  .requiredOption('-c, --config <file>', 'YAML config file (the one the nodes load)')
  .option('--host <host>', 'listen address (overrides router.host)')
  .option('-p, --port <port>', 'listen port (overrides router.port)', int)
  .option('--members <list>', 'static members id=url[,id=url...] (overrides cluster.members)')
  .option('--admin-port <port>', 'admin API, dashboard and live stream port (overrides admin.router_port; runs when the admin.token_env variable is set)', int)
  .option('--pretty-logs', 'readable log lines instead of JSON (server.log_format: pretty)')
  .action(async (opts: { config: string; host?: string; port?: number; members?: string; adminPort?: number; prettyLogs?: boolean }) => {
    try {
      const [{ membershipFromConfig }, { HotSet }, { startRouter }] = await Promise.all([import('./coord/from-config.ts'), import('./coord/hot/hot-set.ts'), import('./router/server.ts')]);
      const config = loadConfig(opts.config);
      const cluster = withMembers(config.config.cluster, opts.members);
      const clusterSecret = clusterSecretFor(cluster, process.env, 'a router');
      const configured = membershipFromConfig(cluster, undefined, clusterSecret);
      if (configured === undefined) throw new Error(`${opts.config}: a router needs cluster.members, --members or cluster.redis.url`);
      const hotConfig = config.config.cluster.hot;
      const hot =
        hotConfig.threshold_rps === undefined || configured.redis === undefined
          ? undefined
          : new HotSet({
              redis: configured.redis,
              cluster: config.config.cluster.name,
              maxSpread: () => configured.membership.ring().members.length,
              maxTtlMs: hotConfig.cooldown,
            });
      await startRouter({
        config,
        membership: configured.membership,
        ...(clusterSecret === undefined ? {} : { clusterSecret }),
        ...(hot === undefined ? {} : { hot }),
        handleSignals: true,
        ...(opts.adminPort === undefined ? {} : { adminPort: opts.adminPort }),
        ...(opts.prettyLogs === true ? { prettyLogs: true } : {}),
        ...(opts.host === undefined ? {} : { host: opts.host }),
        ...(opts.port === undefined ? {} : { port: opts.port }),
      });
    } catch (err) {
      fail(err);
    }
  });

program
  .command('top')
  .description('live view of the cluster in the terminal: nodes, busiest tenants, hot tenants, events (a router\'s live stream); q or Ctrl-C quits')
  .option('--url <url>', 'router admin URL (admin.router_port)', 'http://127.0.0.1:9200')
  .option('--token-env <name>', 'environment variable holding the admin token', 'QUOTARING_ADMIN_TOKEN')
  .option('--once', 'print one snapshot without ANSI codes and exit')
  .action(async (opts: { url: string; tokenEnv: string; once?: boolean }) => {
    const token = process.env[opts.tokenEnv];
    if (token === undefined || token === '') {
      process.stderr.write(`error: ${opts.tokenEnv} is not set: export the router's admin token in it (or name another variable with --token-env)\n`);
      process.exit(1);
    }
    const { runTop } = await import('./ops/top.ts');
    process.exit(await runTop({ url: opts.url, token, out: process.stdout, ...(opts.once === true ? { once: true } : {}) }));
  });

program
  .command('simulate')
  .description('run the provider simulator (OpenAI, Azure OpenAI, Anthropic and Bedrock Converse wire formats, no key needed; Bedrock signatures: the AWS docs example key, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)')
  .option('--host <host>', 'listen address', '127.0.0.1')
  .option('-p, --port <port>', 'listen port', int, 9090)
  .option('--ttft-ms <ms>', 'time to first token, ms', int, 0)
  .option('--tps <n>', 'streamed tokens per second (0: as fast as possible)', int, 0)
  .option('--rpm <n>', 'requests per minute per API key (default: unlimited)', int)
  .option('--tpm <n>', 'tokens per minute per API key (default: unlimited)', int)
  .option('--error-rate <p>', 'fraction of requests answered 5xx', rate, 0)
  .option('--drop-rate <p>', 'fraction of streams dropped mid-way', rate, 0)
  .option('--slow-rate <p>', 'fraction of requests with a slow first token', rate, 0)
  .option('--slow-ms <ms>', 'extra delay of a slow first token, ms', int, 5_000)
  .option('--outside <fraction>', 'an outside client spending this fraction of --outside-key\'s quota per minute (also POST /sim/outside)', rate)
  .option('--outside-key <key>', 'the API key the outside client spends from', 'sim-key')
  .action(async (opts: { host: string; port: number; ttftMs: number; tps: number; rpm?: number; tpm?: number; errorRate: number; dropRate: number; slowRate: number; slowMs: number; outside?: number; outsideKey: string }) => {
    try {
      const quota = { ...(opts.rpm === undefined ? {} : { rpm: opts.rpm }), ...(opts.tpm === undefined ? {} : { tpm: opts.tpm }) };
      const { startSimulator } = await import('./simulator/server.ts');
      const { simulatorAwsCredentials } = await import('./simulator/options.ts');
      const sim = await startSimulator({
        host: opts.host,
        port: opts.port,
        ttftMs: opts.ttftMs,
        tokensPerSecond: opts.tps,
        ...(Object.keys(quota).length > 0 ? { quota } : {}),
        faults: { errorRate: opts.errorRate, dropRate: opts.dropRate, slowRate: opts.slowRate, slowMs: opts.slowMs },
        bedrockCredentials: simulatorAwsCredentials(process.env),
        ...(opts.outside === undefined || opts.outside === 0 ? {} : { outside: { key: opts.outsideKey, fraction: opts.outside } }),
      });
      process.stdout.write(`provider simulator listening on ${sim.url}\n`);
      const stop = (): void => {
        sim.close().then(() => process.exit(0), () => process.exit(1));
      };
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    } catch (err) {
      fail(err);
    }
  });

program
  .command('config')
  .description('config tools')
  .command('check')
  .description('validate a config file offline (secrets are never printed); variables it names that are not set here are warnings')
  .argument('<file>', 'YAML config file')
  .option('--require-env', 'fail (exit 2) when a variable the config names is not set, as a node or router would at start')
  .option('--no-env', 'do not read the environment at all (no warnings about unset variables)')
  .action((file: string, opts: { env: boolean; requireEnv?: boolean }) => {
    try {
      // Checking a file needs no secrets: a variable that is not set here reads as a placeholder
      // (a valid Redis URL too, for cluster.redis.url_env) and is reported as a warning.
      const unset = new Set<string>();
      const env =
        opts.requireEnv === true
          ? process.env
          : new Proxy({}, {
              get: (_target, name) => {
                const value = opts.env && typeof name === 'string' ? process.env[name] : undefined;
                if (value !== undefined && value !== '') return value;
                unset.add(String(name));
                return `redis://unchecked/${String(name)}`;
              },
            });
      const loaded = loadConfig(file, env);
      const c = loaded.config;
      process.stdout.write(`${file}: ok (tenants: ${c.tenants.length}, keys: ${c.tenants.reduce((n, t) => n + t.keys.length, 0)}, plans: ${c.plans.length}, models: ${c.models.length}, deployments: ${c.deployments.length})\n`);
      unset.delete(c.admin.token_env); // unset = no admin API, a choice rather than a missing secret
      if (opts.env) {
        for (const name of [...unset].sort()) {
          process.stderr.write(`warning: environment variable ${name} is not set here; nodes and routers started with this config need it (--require-env makes this an error)\n`);
        }
      }
    } catch (err) {
      fail(err);
    }
  });

/** Options of `up` and `demo` as commander parses them. */
interface UpFlags {
  config?: string;
  nodes?: number;
  routers?: number;
  redis?: string;
  redisEnv?: string;
  port?: number;
  nodePort?: number;
  simulatorPort?: number;
  adminPort?: number;
  logs?: boolean;
  logLevel?: LogLevel;
}

function logLevel(value: string): LogLevel {
  if (!(LOG_LEVELS as readonly string[]).includes(value)) throw new InvalidArgumentError(`must be one of ${LOG_LEVELS.join(', ')}`);
  return value as LogLevel;
}

/**
 * `up` / `demo` flags as {@link UpOptions} (ranges are checked by runUp before anything starts).
 * @throws Error for a password in `--redis` (see {@link redisUrlFromFlags}).
 */
function upOptions(flags: UpFlags, nodes = flags.nodes): UpOptions {
  const redis = redisUrlFromFlags(flags, process.env);
  return {
    ...(flags.config === undefined ? {} : { config: flags.config }),
    ...(nodes === undefined ? {} : { nodes }),
    ...(flags.routers === undefined ? {} : { routers: flags.routers }),
    ...(redis === undefined ? {} : { redis }),
    ...(flags.port === undefined ? {} : { routerPort: flags.port }),
    ...(flags.nodePort === undefined ? {} : { nodePort: flags.nodePort }),
    ...(flags.simulatorPort === undefined ? {} : { simulatorPort: flags.simulatorPort }),
    ...(flags.adminPort === undefined ? {} : { adminPort: flags.adminPort }),
    ...(flags.logLevel !== undefined ? { logLevel: flags.logLevel } : flags.logs === true ? { logLevel: 'info' as const } : {}),
  };
}

/** Adds the flags shared by `up` and `demo`. */
function withClusterFlags(command: Command, nodes: boolean): Command {
  command.option('-c, --config <file>', 'config file (default: cluster/demo.yaml, pointed at the launched simulator; a file you give is used as written)');
  if (nodes) command.option('-n, --nodes <n>', 'gateway nodes, 1 to 16 (default: 3)', int);
  return command
    .option('-r, --routers <n>', 'routers, 1 to 8, on consecutive ports (default: 1)', int)
    .option('--redis <url>', 'Redis membership (redis://host:port, no password) instead of a static member list')
    .option('--redis-env <name>', 'Redis membership, the URL (password included) read from this environment variable')
    .option('-p, --port <port>', 'port of the first router (default: 8080)', int)
    .option('--node-port <port>', 'port of the first node; nodes take consecutive ports (default: 8101)', int)
    .option('--simulator-port <port>', 'port of the provider simulator (default: 9090)', int)
    .option('--admin-port <port>', 'first admin port: routers\' admin APIs (dashboard, live stream), then the nodes\' (default: 9200)', int)
    .option('--logs', 'a log line per request from every node and router (= --log-level info)')
    .option('--log-level <level>', `server.log_level of every node and router: ${LOG_LEVELS.join(', ')} (default: warn, no request lines)`, logLevel);
}

withClusterFlags(
  program.command('up').description('run a local cluster: the provider simulator, gateway nodes and routers as child processes, until Ctrl-C (what `npm start` runs)'),
  true,
).action(async (flags: UpFlags) => {
  try {
    const { runUp } = await import('../cluster/up.ts');
    process.exit(await runUp(upOptions(flags)));
  } catch (err) {
    fail(err);
  }
});

withClusterFlags(program.command('demo').description('`quotaring up --nodes 1`: the simulator, one gateway node and a router'), false).action(async (flags: UpFlags) => {
  try {
    const { runUp } = await import('../cluster/up.ts');
    process.exit(await runUp(upOptions(flags, 1)));
  } catch (err) {
    fail(err);
  }
});

program
  .command('reload')
  .description('reload a running `quotaring up` from the config file it was started with (sends it SIGUSR2): every router and node')
  .option('-p, --port <port>', 'the first router port of that up', int, 8080)
  .action((opts: { port: number }) => {
    try {
      const pid = findUp(opts.port);
      process.kill(pid, 'SIGUSR2');
      process.stdout.write(`reload sent to quotaring up (pid ${pid}); its output shows each process's answer\n`);
    } catch (err) {
      fail(err);
    }
  });

program.addCommand(replayCommand());
addCatalogueCommands(program);

await program.parseAsync();
