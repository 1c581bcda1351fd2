/**
 * The options of `quotaring up` (`startCluster`, `runUp` in `up.ts`) and their checks before
 * anything starts: counts in range, a Redis URL that parses, ports that exist and do not collide
 * (routers and nodes take consecutive ports).
 */
import { redactUrl } from '../src/config/redis-url.ts';
import { hasPassword } from '../src/config/url-password.ts';

/** Options of `startCluster` and `runUp` (`up.ts`). */
export interface UpOptions {
  /**
   * Config file whose tenants, models and deployments the cluster serves; its deployments are used
   * as written. Without it, `cluster/demo.yaml` with every deployment pointed at the launched
   * simulator. @default cluster/demo.yaml
   */
  readonly config?: string;
  /** Gateway nodes, ids `node-1`..`node-N`. @default 3 */
  readonly nodes?: number;
  /** Routers. @default 1 */
  readonly routers?: number;
  /**
   * Redis URL for membership; absent = static members. It may carry a password: children get it
   * in their environment (the variable `REDIS_URL_ENV` of `up.ts`, named by
   * `cluster.redis.url_env` in the generated config), never on a command line or in the config file.
   */
  readonly redis?: string;
  /** First router port; routers take consecutive ports. @default 8080 */
  readonly routerPort?: number;
  /** First node port; nodes take consecutive ports. @default 8101 */
  readonly nodePort?: number;
  /** Simulator port; a `--config` file's deployments must point at it. @default 9090 */
  readonly simulatorPort?: number;
  /** Extra `quotaring simulate` arguments. @default ['--tps', '200', '--ttft-ms', '150'] */
  readonly simulatorArgs?: readonly string[];
  /**
   * First admin port: routers' admin APIs (dashboard, live stream) take the first ports, nodes' the
   * next ones. Absent: no admin API (unless the config's token variable is set in `env`, in which
   * case each process uses the config's admin ports). `runUp` sets 9200.
   */
  readonly adminPort?: number;
  /** Admin bearer token for every child, with `adminPort`. @default a random one */
  readonly adminToken?: string;
  /** Environment for every child (provider keys). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * `server.log_level` of every node and router (the generated config's). `info` writes one line
   * per request, `debug` also one per decision. Absent: the config file's own (default `info`).
   * `runUp` sets `warn`: the banner stays in view.
   */
  readonly logLevel?: LogLevel;
  /** Stop on SIGINT/SIGTERM. @default false */
  readonly handleSignals?: boolean;
}

/** Levels of `server.log_level` (pino's), for `up --log-level`. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Bounds of `quotaring up`. A local cluster bigger than this is a mistake, not a test. */
export const UP_LIMITS = { nodes: { min: 1, max: 16 }, routers: { min: 1, max: 8 } } as const;

/**
 * Validates the options of a launch.
 * @throws Error naming the flag and the accepted values, e.g.
 *   `--nodes must be an integer from 1 to 16 (got 20)`.
 */
export function checkUpOptions(opts: UpOptions): void {
  const nodes = opts.nodes ?? 3;
  const routers = opts.routers ?? 1;
  count('--nodes', nodes, UP_LIMITS.nodes);
  count('--routers', routers, UP_LIMITS.routers);
  if (opts.redis !== undefined) checkRedisUrl(opts.redis);
  const ranges = [
    { flag: '--port', first: opts.routerPort ?? 8080, n: routers, what: `the ${routers} router${routers === 1 ? '' : 's'}` },
    { flag: '--node-port', first: opts.nodePort ?? 8101, n: nodes, what: `the ${nodes} node${nodes === 1 ? '' : 's'}` },
    { flag: '--simulator-port', first: opts.simulatorPort ?? 9090, n: 1, what: 'the simulator' },
    ...(opts.adminPort === undefined ? [] : [{ flag: '--admin-port', first: opts.adminPort, n: routers + nodes, what: `the admin APIs of ${routers + nodes} processes` }]),
  ];
  for (const r of ranges) {
    if (!Number.isInteger(r.first) || r.first < 1 || r.first + r.n - 1 > 65_535) {
      throw new Error(`${r.flag} must leave ${r.n} port${r.n === 1 ? '' : 's'} within 1..65535 for ${r.what} (got ${r.first})`);
    }
  }
  for (let i = 0; i < ranges.length; i++) {
    for (let j = i + 1; j < ranges.length; j++) {
      const a = ranges[i]!;
      const b = ranges[j]!;
      if (a.first <= b.first + b.n - 1 && b.first <= a.first + a.n - 1) {
        throw new Error(`${a.flag} ${a.first} (${span(a.first, a.n)} for ${a.what}) overlaps ${b.flag} ${b.first} (${span(b.first, b.n)} for ${b.what}); choose ports that do not collide`);
      }
    }
  }
}

function count(flag: string, value: number, bounds: { readonly min: number; readonly max: number }): void {
  if (!Number.isInteger(value) || value < bounds.min || value > bounds.max) {
    throw new Error(`${flag} must be an integer from ${bounds.min} to ${bounds.max} (got ${value})`);
  }
}

function checkRedisUrl(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`--redis must be a redis:// or rediss:// URL such as redis://127.0.0.1:6379 (got "${redactUrl(url)}")`);
  }
  if ((parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') || parsed.hostname === '') {
    throw new Error(`--redis must be a redis:// or rediss:// URL such as redis://127.0.0.1:6379 (got "${redactUrl(url)}")`);
  }
}

/**
 * The Redis URL of `up --redis <url>` / `up --redis-env <NAME>`. A command line is readable by every
 * user of the machine (`ps`, `/proc/<pid>/cmdline`): `--redis` must not carry a password; a URL with
 * one is read from the variable `--redis-env` names.
 * @param env where `--redis-env`'s variable is read.
 * @returns the URL, or undefined when neither flag is given.
 * @throws Error for both flags, a password in `--redis`, or an unset variable (never echoing a password).
 */
export function redisUrlFromFlags(flags: { readonly redis?: string | undefined; readonly redisEnv?: string | undefined }, env: NodeJS.ProcessEnv): string | undefined {
  if (flags.redis !== undefined && flags.redisEnv !== undefined) throw new Error('--redis and --redis-env: give one of them');
  if (flags.redis !== undefined) {
    if (hasPassword(flags.redis)) {
      throw new Error(`--redis: the URL carries a password, and a command line is readable by every user of this machine (ps); put the URL in an environment variable and pass its name: --redis-env NAME (got "${redactUrl(flags.redis)}")`);
    }
    return flags.redis;
  }
  if (flags.redisEnv === undefined) return undefined;
  const url = env[flags.redisEnv];
  if (url === undefined || url === '') throw new Error(`--redis-env: environment variable ${flags.redisEnv} is not set`);
  return url;
}

function span(first: number, n: number): string {
  return n === 1 ? `port ${first}` : `ports ${first}-${first + n - 1}`;
}
