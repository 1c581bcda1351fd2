/**
 * `quotaring up`: a local cluster as child processes — the provider simulator, N gateway nodes and
 * M routers — with prefixed logs, stopped together on Ctrl-C. Without `--redis` the nodes form a
 * static member list; with it they heartbeat into Redis and the routers follow the live set. The
 * simulator and the nodes start together, the routers once the nodes answer. SIGUSR2 (what
 * `quotaring reload` sends) re-reads the config file given and reloads every child from it.
 * SIGHUP (the terminal closed) stops everything, like Ctrl-C.
 */
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { parse, stringify } from 'yaml';
import { buildConfig, loadConfig } from '../src/config/load.ts';
import type { LoadedConfig } from '../src/config/load.ts';
import { clusterBanner } from './banner.ts';
import { DEMO_MODELS, DEMO_TENANTS, demoConfigPath } from './demo.ts';
import { launch, LaunchInterrupted } from './launcher.ts';
import type { ChildSpec, LaunchedGroup } from './launcher.ts';
import { removeUpPidFile, writeUpPidFile } from './up-pid.ts';
import { checkUpOptions } from './up-options.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { redactUrl } from '../src/config/redis-url.ts';
import { wireFormatOf } from '../src/providers/wire-format.ts';
import type { LogLevel, UpOptions } from './up-options.ts';
export type { LogLevel, UpOptions } from './up-options.ts';

/**
 * The signal that makes a running `up` reload its config (`quotaring reload` sends it). Not SIGHUP:
 * a terminal that closes sends its foreground processes SIGHUP, and that must stop `up`, not reload it.
 */
export const RELOAD_SIGNAL = 'SIGUSR2';


/** A running local cluster. */
export interface StartedCluster {
  readonly group: LaunchedGroup;
  /** Router base URLs, first router first. */
  readonly routers: string[];
  /** Node base URLs, `node-1` first. */
  readonly nodes: string[];
  /** Base URL of the simulator; undefined when none was started (a config whose deployments are real providers). */
  readonly simulator: string | undefined;
  /** The generated config file every child loads. */
  readonly config: string;
  /** Admin APIs (with `adminPort`): the token, its variable, routers' and nodes' admin base URLs. */
  readonly admin?: { readonly token: string; readonly tokenEnv: string; readonly routers: readonly string[]; readonly nodes: readonly string[] };
}

/** Simulator key the launched deployments use (`QUOTARING_SIM_KEY`); the simulator accepts any key. */
const SIM_KEY = 'sim-demo-key';

/** The environment variable that carries `--redis`'s URL to the children (`cluster.redis.url_env` of the generated config). */
export const REDIS_URL_ENV = 'QUOTARING_REDIS_URL';

/**
 * The config file's content with the members (or Redis) of this launch, the log level if given and,
 * for the demo, the simulator's URL.
 */
function launchedConfig(source: string, isDemo: boolean, nodes: readonly { id: string; url: string }[], simulatorUrl: string, redis: string | undefined, logLevel?: LogLevel): Record<string, unknown> {
  const raw = (parse(readFileSync(source, 'utf8')) ?? {}) as Record<string, unknown>;
  const cluster = (raw.cluster ?? {}) as Record<string, unknown>;
  // The URL itself (it may carry a password) goes to the children in their environment.
  raw.cluster = redis === undefined ? { ...cluster, members: nodes } : { ...cluster, members: [], redis: { url_env: REDIS_URL_ENV } };
  if (logLevel !== undefined) raw.server = { ...((raw.server ?? {}) as Record<string, unknown>), log_level: logLevel };
  if (isDemo && Array.isArray(raw.deployments)) {
    raw.deployments = (raw.deployments as Record<string, unknown>[]).map((d) => ({ ...d, base_url: simulatorUrl }));
  }
  return raw;
}

/** What {@link startCluster} launches, before anything runs. */
export interface ClusterPlan {
  /** The children in start order: their arguments carry no secret (keys, tokens, passwords are in `env`). */
  readonly specs: readonly ChildSpec[];
  /** The generated config file's content (YAML): no secret either, only the names of the variables holding them. */
  readonly configText: string;
  readonly routers: string[];
  readonly nodes: string[];
  /** Base URL of the simulator, or undefined when it is not started (see {@link usesSimulator}). */
  readonly simulator: string | undefined;
  readonly admin?: StartedCluster['admin'];
}

/**
 * Whether a launch needs the simulator: always for the demo (its deployments are rewritten to it),
 * else when a deployment of the config sends to it (a loopback host on the simulator's port). A
 * config whose deployments are real providers starts none.
 */
export function usesSimulator(raw: Record<string, unknown>, isDemo: boolean, simPort: number): boolean {
  if (isDemo) return true;
  const deployments = Array.isArray(raw.deployments) ? (raw.deployments as unknown[]) : [];
  return deployments.some((d) => {
    const baseUrl = (d as { base_url?: unknown } | null)?.base_url;
    if (typeof baseUrl !== 'string') return false;
    try {
      const url = new URL(baseUrl);
      const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
      return ['127.0.0.1', 'localhost', '[::1]', '0.0.0.0'].includes(url.hostname) && port === simPort;
    } catch {
      return false;
    }
  });
}

/**
 * The children of a launch and the config they load from `configFile`. Every secret (the Redis
 * URL with its password, the admin token, the simulator key) is passed in the children's
 * environment — readable only by their user (`/proc/<pid>/environ` is mode 0400), while a command
 * line is readable by every user of the machine (`ps`, `/proc/<pid>/cmdline`).
 * @throws Error for invalid options (see {@link checkUpOptions}); ConfigError for a config that does not load.
 */
export function planCluster(opts: UpOptions, configFile: string): ClusterPlan {
  checkUpOptions(opts);
  const nodeCount = opts.nodes ?? 3;
  const routerCount = opts.routers ?? 1;
  const nodePort = opts.nodePort ?? 8101;
  const routerPort = opts.routerPort ?? 8080;
  const simPort = opts.simulatorPort ?? 9090;
  const simulator = `http://127.0.0.1:${simPort}`;
  const members = Array.from({ length: nodeCount }, (_, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${nodePort + i}` }));
  const raw = launchedConfig(opts.config ?? demoConfigPath(), opts.config === undefined, members, simulator, opts.redis, opts.logLevel);
  const redisEnv: Record<string, string> = opts.redis === undefined ? {} : { [REDIS_URL_ENV]: opts.redis };
  const adminPort = opts.adminPort;
  const loaded = buildConfig(raw, configFile, { ...process.env, QUOTARING_SIM_KEY: SIM_KEY, ...opts.env, ...redisEnv });
  const tokenEnv = adminPort === undefined ? undefined : loaded.config.admin.token_env;
  const token = opts.adminToken ?? randomBytes(16).toString('hex');
  // The cluster secret: the one set in the environment, else a new random one for this launch,
  // handed to the children through their environment (never on a command line).
  const secretEnv = loaded.config.cluster.secret_env;
  const secret = opts.env?.[secretEnv] || process.env[secretEnv] || randomBytes(32).toString('base64url');
  const env: Record<string, string> = { QUOTARING_SIM_KEY: SIM_KEY, ...opts.env, ...redisEnv, [secretEnv]: secret, ...(tokenEnv === undefined ? {} : { [tokenEnv]: token }) };
  const nodeAdmin = (i: number): string[] => (adminPort === undefined ? [] : ['--admin-port', String(adminPort + routerCount + i)]);
  const routerAdmin = (i: number): string[] => (adminPort === undefined ? [] : ['--admin-port', String(adminPort + i)]);
  const simulated = usesSimulator(raw, opts.config === undefined, simPort);
  const specs: ChildSpec[] = simulated
    ? [{ name: 'simulator', args: ['simulate', '--port', String(simPort), ...(opts.simulatorArgs ?? ['--tps', '200', '--ttft-ms', '150'])], env, healthUrl: `${simulator}/sim/stats`, stopLast: true }]
    : [];
  for (const [i, m] of members.entries()) {
    specs.push({ name: m.id, args: ['node', '--config', configFile, '--id', m.id, '--port', String(nodePort + i), ...nodeAdmin(i)], env, healthUrl: `${m.url}/healthz`, replaceable: true });
    // Nodes start together with the simulator (stage 0): none calls another or the simulator to start.
  }
  const routers: string[] = [];
  for (let i = 0; i < routerCount; i++) {
    const port = routerPort + i;
    routers.push(`http://127.0.0.1:${port}`);
    // With Redis, a router is up before it is ready: Redis may be down at start (it then waits for it, see `runUp`).
    const health = opts.redis === undefined ? 'readyz' : 'healthz';
    specs.push({ name: `router-${i + 1}`, args: ['router', '--config', configFile, '--port', String(port), ...routerAdmin(i)], env, healthUrl: `http://127.0.0.1:${port}/${health}`, stage: 1 });
  }
  const admin =
    adminPort === undefined || tokenEnv === undefined
      ? undefined
      : { token, tokenEnv, routers: Array.from({ length: routerCount }, (_, i) => `http://127.0.0.1:${adminPort + i}`), nodes: members.map((_, i) => `http://127.0.0.1:${adminPort + routerCount + i}`) };
  return { specs, configText: stringify(raw), routers, nodes: members.map((m) => m.url), simulator: simulated ? simulator : undefined, ...(admin === undefined ? {} : { admin }) };
}

/**
 * Starts the simulator and the nodes together, then the routers once those answer their health URLs
 * (`/sim/stats`, `/healthz`; routers `/readyz`, or with `redis` their `/healthz`: Redis may be down). Every child gets the cluster secret in its environment
 * (`cluster.secret_env`, default QUOTARING_CLUSTER_SECRET): the one set in `opts.env` or this
 * process's environment, else a random one generated for this launch.
 * @throws Error for invalid options (see {@link checkUpOptions}) before anything starts, or when a
 *   child fails to start (the others are stopped).
 */
export async function startCluster(opts: UpOptions = {}): Promise<StartedCluster> {
  checkUpOptions(opts);
  const config = join(mkdtempSync(join(tmpdir(), 'quotaring-up-')), 'cluster.yaml');
  const removeConfig = (): void => rmSync(dirname(config), { recursive: true, force: true });
  let plan: ClusterPlan;
  try {
    plan = planCluster(opts, config);
    writeFileSync(config, plan.configText, { mode: 0o600 });
  } catch (err) {
    removeConfig();
    throw err;
  }
  const { specs, routers, nodes, simulator, admin } = plan;
  let group: LaunchedGroup;
  try {
    group = await launch(specs, { handleSignals: opts.handleSignals ?? false });
  } catch (err) {
    removeConfig();
    throw err;
  }
  // The derived config lives as long as the children.
  void group.done.then(removeConfig);
  return { group, routers, nodes, simulator, config, ...(admin === undefined ? {} : { admin }) };
}

/** What one child answered to a reload. */
export interface ReloadAnswer {
  readonly name: string;
  /** HTTP status (0: no answer). */
  readonly status: number;
  /** The first problem of a refused reload, or the error of a failed call. */
  readonly problem?: string;
}

/**
 * Reloads a running cluster from `source`, the config file it was started with: regenerates the
 * children's config (same members, log level and, for the demo, simulator URL), validates it
 * (nothing is written or reloaded when it does not load), replaces the generated file, then asks
 * every router and node to reload (`POST /admin/v1/config/reload` on its admin API).
 * @throws ConfigError when the new file does not load (the running config stays); Error when the
 *   cluster runs without admin APIs.
 */
export async function reloadCluster(started: StartedCluster, opts: UpOptions, plan: { readonly names: readonly string[] }): Promise<ReloadAnswer[]> {
  const admin = started.admin;
  if (admin === undefined) throw new Error('the cluster runs without admin APIs: nothing to reload through');
  const source = opts.config ?? demoConfigPath();
  const members = started.nodes.map((url, i) => ({ id: `node-${i + 1}`, url }));
  const raw = launchedConfig(source, opts.config === undefined, members, started.simulator ?? '', opts.redis, opts.logLevel);
  buildConfig(raw, source, { ...process.env, QUOTARING_SIM_KEY: SIM_KEY, ...opts.env, ...(opts.redis === undefined ? {} : { [REDIS_URL_ENV]: opts.redis }) });
  const next = `${started.config}.next`;
  writeFileSync(next, stringify(raw), { mode: 0o600 });
  renameSync(next, started.config);
  const urls = [...admin.routers, ...admin.nodes];
  return Promise.all(
    urls.map(async (url, i): Promise<ReloadAnswer> => {
      const name = plan.names[i] ?? url;
      try {
        const res = await fetch(`${url}/admin/v1/config/reload`, { method: 'POST', headers: { authorization: `Bearer ${admin.token}` }, signal: AbortSignal.timeout(5_000) });
        const body = (await res.json().catch(() => ({}))) as { problems?: string[]; error?: { message?: string } };
        const problem = res.ok ? undefined : (body.problems?.[0] ?? body.error?.message ?? `HTTP ${res.status}`);
        return { name, status: res.status, ...(problem === undefined ? {} : { problem }) };
      } catch (err) {
        return { name, status: 0, problem: (err as Error).message };
      }
    }),
  );
}

/** The first model whose first deployment speaks `format` (Azure, Gemini, vLLM: OpenAI's), for the banner's examples. */
function modelOf(loaded: LoadedConfig, format: 'openai' | 'anthropic'): string | undefined {
  const byName = new Map(loaded.config.deployments.map((d) => [d.name, wireFormatOf(d.provider)]));
  return loaded.config.models.find((m) => byName.get(m.deployments[0] ?? '') === format)?.name;
}

/**
 * What `quotaring up` runs: validates the options and the config (before starting anything),
 * starts the cluster with signal handling, prints the banner and waits.
 * @returns the exit code: 0 after Ctrl-C/SIGTERM stopped every child, 1 when a child died.
 * @throws Error for invalid options; ConfigError for an invalid config; Error when a child fails to start.
 */
export async function runUp(opts: UpOptions = {}, out: (text: string) => void = (t) => process.stdout.write(t)): Promise<number> {
  checkUpOptions(opts);
  const source = opts.config ?? demoConfigPath();
  const env = { ...process.env, QUOTARING_SIM_KEY: SIM_KEY, ...opts.env, ...(opts.redis === undefined ? {} : { [REDIS_URL_ENV]: opts.redis }) };
  // Validated as it will run: with this launch's Redis (or members), e.g. `cluster.hot` needs `--redis`.
  let raw: Record<string, unknown>;
  try {
    raw = launchedConfig(source, opts.config === undefined, [], 'http://127.0.0.1:1', opts.redis, opts.logLevel);
  } catch {
    loadConfig(source, env); // an unreadable file or bad YAML: its ConfigError names the file and line
    throw new Error(`${source}: cannot read the config`);
  }
  const loaded = buildConfig(raw, source, env);
  const launchOpts: UpOptions = { adminPort: 9200, logLevel: 'warn', ...(process.env[loaded.config.admin.token_env] ? { adminToken: process.env[loaded.config.admin.token_env] as string } : {}), ...opts, handleSignals: true };
  // SIGUSR2 before the cluster is up would end this process (the default action): reload once it is.
  const hangup: { reload?: () => void } = {};
  const onHangup = (): void => (hangup.reload === undefined ? out('reload: still starting, send it again once the banner is shown\n') : hangup.reload());
  process.on(RELOAD_SIGNAL, onHangup);
  let started: StartedCluster;
  try {
    started = await startCluster(launchOpts);
  } catch (err) {
    process.removeListener(RELOAD_SIGNAL, onHangup);
    if (err instanceof LaunchInterrupted) {
      out('stopped during start-up; every process started was stopped\n');
      return 0;
    }
    throw err;
  }
  const routerPort = opts.routerPort ?? 8080;
  const pidFile = writeUpPidFile(routerPort, process.pid);
  const names = [...started.routers.map((_, i) => `router-${i + 1}`), ...started.nodes.map((_, i) => `node-${i + 1}`)];
  hangup.reload = () => {
    reloadCluster(started, launchOpts, { names }).then(
      (answers) => {
        for (const a of answers) out(`reload: ${a.name} ${a.status === 200 ? 'ok' : `refused (${a.status === 0 ? 'no answer' : a.status}): ${a.problem ?? ''}`}\n`);
      },
      (err: unknown) => out(`reload: ${(err as Error).message}\n  nothing was reloaded; the running config stays\n`),
    );
  };
  const isDemo = opts.config === undefined;
  const pid = (name: string): number | undefined => started.group.pids[name];
  out(
    clusterBanner({
      routers: started.routers,
      nodes: started.nodes.map((url, i) => ({ id: `node-${i + 1}`, url, ...optional('pid', pid(`node-${i + 1}`)) })),
      ...(opts.redis === undefined ? {} : { redis: opts.redis }),
      ...(started.simulator === undefined ? {} : { simulator: started.simulator }),
      configSource: isDemo ? 'cluster/demo.yaml' : source,
      ...(started.admin === undefined ? {} : { admin: started.admin }),
      ...(isDemo ? { tenants: DEMO_TENANTS } : { upstreams: upstreamsOf(loaded) }),
      models: isDemo ? DEMO_MODELS : { ...optional('openai', modelOf(loaded, 'openai')), ...optional('anthropic', modelOf(loaded, 'anthropic')) },
      pids: { up: process.pid, ...optional('simulator', pid('simulator')), ...optional('router', pid('router-1')) },
      logLevel: launchOpts.logLevel ?? 'info',
      ...(pidFile === undefined ? {} : { reload: true }),
    }),
  );
  if (opts.redis !== undefined) void reportRedisWait(started.routers[0] ?? '', opts.redis, started.group.done, out);
  const code = await started.group.done;
  process.removeListener(RELOAD_SIGNAL, onHangup);
  removeUpPidFile(routerPort, process.pid);
  return code;
}

/** A router's `/readyz`: `ready` (200), `redis` (503 naming it: Redis not reached yet), `other` (503 for another reason), or undefined (no answer). */
async function routerReadiness(router: string): Promise<'ready' | 'redis' | 'other' | undefined> {
  try {
    const res = await request(`${router}/readyz`);
    const body = (await res.body.json()) as { waiting?: unknown };
    if (res.statusCode === 200) return 'ready';
    return Array.isArray(body.waiting) && body.waiting.includes('redis') ? 'redis' : 'other';
  } catch {
    return undefined;
  }
}

/**
 * Started with `--redis` while Redis does not answer: the processes run and wait for it. Says so
 * under the banner, then once more when the first router has read the members (polled every second
 * until then, or until the group stops).
 */
async function reportRedisWait(router: string, redis: string, done: Promise<number>, out: (text: string) => void): Promise<void> {
  if ((await routerReadiness(router)) !== 'redis') return;
  out(`waiting for Redis at ${redactUrl(redis)}: nodes and routers are up but not ready (/readyz 503 naming redis; requests get 503) and join once it answers, no restart needed\n`);
  let stopped = false;
  void done.then(() => (stopped = true));
  while (!stopped) {
    await sleep(1_000);
    if ((await routerReadiness(router)) === 'ready') {
      if (!stopped) out(`Redis at ${redactUrl(redis)} answers: the cluster is ready\n`);
      return;
    }
  }
}

/** The deployments of a config the user gave, for the banner: where each sends, and the variable its key is read from. */
function upstreamsOf(loaded: LoadedConfig): { readonly name: string; readonly baseUrl: string; readonly keyEnv?: string }[] {
  return loaded.config.deployments.map((d) => ({ name: d.name, baseUrl: d.base_url, ...(d.api_key_env === undefined ? {} : { keyEnv: d.api_key_env }) }));
}

function optional<K extends string, V>(key: K, value: V | undefined): Partial<Record<K, V>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, V>);
}
