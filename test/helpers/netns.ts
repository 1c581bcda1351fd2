/**
 * A private network of Linux network namespaces for partition tests: each host (Redis, the
 * simulator, a router, each node) runs in its own namespace, and the links between them can be cut
 * and healed while the processes keep running.
 *
 * Topology (iproute2 only: `ip netns`, veth pairs, policy rules; needs root):
 *
 * ```
 *   root namespace (the test process, "client")     qrn<pid> 10.213.X.2/30 ──┐
 *   <prefix>redis  eth0 10.213.X.6/30  ────────────────────────────────────── ├─ <prefix>sw: a router
 *   <prefix>node-1 eth0 10.213.X.10/30 ────────────────────────────────────── │  (ip_forward=1), one
 *   ...                                                                       ┘  /30 per link, .1 on its side
 * ```
 *
 * The "switch" is a namespace that routes between one /30 per host rather than a bridge, so that a
 * cut between two hosts is a pair of policy rules there (`ip rule add from A to B blackhole`):
 * forwarded packets are dropped silently, as in a real partition (no ICMP, no reset; TCP retries),
 * while every other path stays up. A host cut from everyone is its switch port set down (`ip link
 * set … down`). The root namespace gets one veth into the switch and a route to the /24 only, so
 * the test process reaches every host (health URLs, the router) and nothing else of the machine's
 * networking changes. X is chosen per run among /24s no route of the root namespace uses.
 *
 * Names carry the test's pid (`qrnet<pid>-`), so parallel runs never clash; namespaces of runs
 * whose pid is gone are swept (their processes killed) at the next start. {@link Netns.destroy}
 * (also run on process exit, SIGINT and SIGTERM) kills the processes started here and deletes the
 * namespaces, which removes every veth.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { CLI, freePort, runCli as runLocalCli } from './processes.ts';
import type { Running } from './processes.ts';
import { TEST_SECRET_ENV } from './cluster-secret.ts';
import { pings, startRedis as startLocalRedis } from './redis.ts';

/** Namespace names start with this, then the owning pid and a dash. */
const PREFIX = 'qrnet';

/** Why partition tests cannot run here, or undefined when they can (root, and `ip netns` works). */
export function netnsUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'network namespaces need root (`ip netns add`)';
  const probe = `${PREFIX}${process.pid}-probe`;
  const add = spawnSync('ip', ['netns', 'add', probe], { encoding: 'utf8' });
  if (add.error !== undefined) return `iproute2's \`ip\` is not installed (apt-get install iproute2): ${add.error.message}`;
  if (add.status !== 0) return `\`ip netns add\` failed: ${add.stderr.trim()}`;
  spawnSync('ip', ['netns', 'del', probe]);
  return undefined;
}

/** Runs `ip <args>`; throws with its stderr when it fails. */
function ip(...args: string[]): string {
  try {
    return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? '';
    throw new Error(`ip ${args.join(' ')} failed: ${stderr.trim() || (err as Error).message}`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Kills every process inside namespace `ns` (SIGKILL: works on stopped ones too) and deletes it. */
function removeNamespace(ns: string): void {
  const pids = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout ?? '';
  for (const pid of pids.split(/\s+/).filter((p) => p !== '')) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
  spawnSync('ip', ['netns', 'del', ns]);
}

/** Deletes namespaces (and their processes) left by runs whose pid no longer exists. */
export function sweepStale(): string[] {
  const swept: string[] = [];
  const list = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout ?? '';
  for (const line of list.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}(\\d+)-`).exec(name);
    if (m === null || alive(Number(m[1]))) continue;
    removeNamespace(name);
    swept.push(name);
  }
  return swept;
}

/** A /24 of 10.213.0.0/16 that no route or address of the root namespace touches. */
function freeSubnet(): number {
  const used = ip('-4', 'route', 'show', 'table', 'all') + ip('-4', 'addr', 'show');
  const start = process.pid % 250;
  for (let i = 0; i < 250; i++) {
    const x = ((start + i) % 250) + 1;
    if (!used.includes(`10.213.${x}.`)) return x;
  }
  throw new Error('no free 10.213.x.0/24 for the test network');
}

/** One host of the network. */
export interface Host {
  readonly name: string;
  /** Its namespace. */
  readonly ns: string;
  /** Its address, reachable from every other host and from the test process. */
  readonly ip: string;
}

/** A process started in a host's namespace. */
export interface HostProcess extends Running {
  readonly host: Host;
}

/** The network of one test run. */
export interface Netns {
  readonly hosts: ReadonlyMap<string, Host>;
  host(name: string): Host;
  /**
   * Runs `node dist/src/cli.js <args>` in `host`'s namespace and waits until `healthUrl` answers 200
   * (from the test process). The child gets the test cluster secret plus `env`.
   * @throws Error with the child's output when it exits or `healthUrl` stays silent for `timeoutMs` (15 s).
   */
  runCli(host: string, args: readonly string[], healthUrl: string, env?: Record<string, string>, timeoutMs?: number): Promise<HostProcess>;
  /** Spawns any command in `host`'s namespace (stopped by {@link destroy} if still running). */
  spawn(host: string, command: string, args: readonly string[]): ChildProcess;
  /** Drops every packet between hosts `a` and `b` (both directions), silently; other links stay up. Idempotent. */
  cut(a: string, b: string): void;
  /** Undoes {@link cut}. Idempotent. */
  heal(a: string, b: string): void;
  /** Sets `host`'s switch port down: it is cut from every other host and from the test process. */
  isolate(host: string): void;
  /** Sets `host`'s switch port up again. */
  rejoin(host: string): void;
  /** Kills every process started here, deletes the namespaces. Idempotent. */
  destroy(): void;
}

/**
 * Creates a namespace per host name, the switch namespace and the root namespace's link to it.
 * Sweeps stale namespaces of earlier runs first.
 * @throws Error when an `ip` command fails (everything made so far is removed first).
 */
export function createNetwork(names: readonly string[]): Netns {
  if (names.length > 60) throw new Error('at most 60 hosts');
  sweepStale();
  const base = `${PREFIX}${process.pid}-`;
  const sw = `${base}sw`;
  const rootLink = `qrn${process.pid}`.slice(0, 15);
  const x = freeSubnet();
  const net = `10.213.${x}`;
  const namespaces: string[] = [];
  const children = new Set<ChildProcess>();
  const hosts = new Map<string, Host>();
  const portOf = new Map<string, string>();
  let destroyed = false;

  const destroy = (): void => {
    if (destroyed) return;
    destroyed = true;
    for (const child of children) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
      }
    }
    for (const ns of namespaces) removeNamespace(ns);
    spawnSync('ip', ['link', 'del', rootLink]);
    process.off('exit', destroy);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    destroy();
    process.kill(process.pid, signal);
  };
  process.once('exit', destroy);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    ip('netns', 'add', sw);
    namespaces.push(sw);
    ip('-n', sw, 'link', 'set', 'lo', 'up');
    ip('netns', 'exec', sw, 'sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward');
    // The test process's link: .1 on the switch, .2 here; only the /24 is routed through it.
    ip('-n', sw, 'link', 'add', 'c0', 'type', 'veth', 'peer', 'name', rootLink, 'netns', '1');
    ip('-n', sw, 'addr', 'add', `${net}.1/30`, 'dev', 'c0');
    ip('-n', sw, 'link', 'set', 'c0', 'up');
    ip('addr', 'add', `${net}.2/30`, 'dev', rootLink);
    ip('link', 'set', rootLink, 'up');
    ip('route', 'add', `${net}.0/24`, 'via', `${net}.1`, 'dev', rootLink);
    names.forEach((name, i) => {
      const k = i + 1;
      const ns = `${base}${name}`;
      const port = `h${k}`;
      ip('netns', 'add', ns);
      namespaces.push(ns);
      ip('-n', ns, 'link', 'set', 'lo', 'up');
      ip('-n', sw, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      ip('-n', sw, 'addr', 'add', `${net}.${4 * k + 1}/30`, 'dev', port);
      ip('-n', sw, 'link', 'set', port, 'up');
      ip('-n', ns, 'addr', 'add', `${net}.${4 * k + 2}/30`, 'dev', 'eth0');
      ip('-n', ns, 'link', 'set', 'eth0', 'up');
      ip('-n', ns, 'route', 'add', 'default', 'via', `${net}.${4 * k + 1}`);
      hosts.set(name, { name, ns, ip: `${net}.${4 * k + 2}` });
      portOf.set(name, port);
    });
  } catch (err) {
    destroy();
    throw err;
  }

  const host = (name: string): Host => {
    const h = hosts.get(name);
    if (h === undefined) throw new Error(`no host ${name}`);
    return h;
  };
  const spawnIn = (name: string, command: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): ChildProcess => {
    // `ip netns exec` execs the command: the child's pid is the command's (signals reach it directly).
    const child = spawn('ip', ['netns', 'exec', host(name).ns, command, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    child.once('exit', () => children.delete(child));
    return child;
  };
  const rules = (a: string, b: string): [string, string][] => [
    [host(a).ip, host(b).ip],
    [host(b).ip, host(a).ip],
  ];
  const ruleExists = (from: string, to: string): boolean => ip('-n', sw, 'rule', 'show').includes(`from ${from} to ${to} blackhole`);

  return {
    hosts,
    host,
    spawn: (name, command, args) => spawnIn(name, command, args),
    runCli: async (name, args, healthUrl, env = {}, timeoutMs = 15_000) => {
      const proc = spawnIn(name, process.execPath, [CLI, ...args], { ...process.env, ...TEST_SECRET_ENV, ...env });
      let out = '';
      proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
      proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
      const running: HostProcess = {
        host: host(name),
        proc,
        output: () => out,
        stop: async () => {
          if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
          const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
          proc.kill('SIGCONT');
          proc.kill('SIGTERM');
          const timer = setTimeout(() => proc.kill('SIGKILL'), 3_000);
          const code = await exited;
          clearTimeout(timer);
          return code;
        },
      };
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        if (proc.exitCode !== null) throw new Error(`${name}: ${args.join(' ')} exited with ${proc.exitCode}:\n${out}`);
        try {
          const res = await request(healthUrl, { headersTimeout: 1_000, bodyTimeout: 1_000 });
          await res.body.dump();
          if (res.statusCode === 200) return running;
        } catch {
          // not up yet
        }
        await sleep(50);
      }
      await running.stop();
      throw new Error(`${name}: ${args.join(' ')} did not answer ${healthUrl}:\n${out}`);
    },
    cut: (a, b) => {
      for (const [from, to] of rules(a, b)) if (!ruleExists(from, to)) ip('-n', sw, 'rule', 'add', 'from', from, 'to', to, 'blackhole', 'priority', '100');
    },
    heal: (a, b) => {
      for (const [from, to] of rules(a, b)) while (ruleExists(from, to)) ip('-n', sw, 'rule', 'del', 'from', from, 'to', to, 'blackhole', 'priority', '100');
    },
    isolate: (name) => ip('-n', sw, 'link', 'set', portOf.get(host(name).name) as string, 'down'),
    rejoin: (name) => {
      const port = portOf.get(host(name).name) as string;
      ip('-n', sw, 'link', 'set', port, 'up');
    },
    destroy,
  };
}

/** A `redis-server` started on a {@link TestHosts} host. */
export interface HostRedis {
  /** `redis://<host address>:<port>` */
  readonly url: string;
  /** SIGTERM (SIGKILL after 3 s); resolves once it exited. Idempotent. */
  stop(): Promise<void>;
}

/**
 * The hosts of a multi-process test: each in its own network namespace ({@link createNetwork}) when
 * this machine allows it, else all on 127.0.0.1 of this machine (same names, same calls), so a test
 * written against it runs either way. Every listener binds its host's address, and URLs name it.
 */
export interface TestHosts {
  /** The namespaces, or undefined on loopback. */
  readonly net: Netns | undefined;
  /** Why the hosts share loopback ({@link netnsUnavailable} or the error creating the network); undefined in namespaces. */
  readonly loopbackBecause: string | undefined;
  /** The address `host` listens on and is reached at (127.0.0.1 on loopback). */
  address(host: string): string;
  /** A port for a new listener on `host`: 8080, 8081, … per namespace; a free port of 127.0.0.1 on loopback. */
  port(host: string): Promise<number>;
  /** `http://<address>:<port>` */
  url(host: string, port: number): string;
  /**
   * Runs `node dist/src/cli.js <args>` on `host` and waits until `healthUrl` answers 200 (15 s); it
   * gets the test cluster secret plus `env`, and is stopped by {@link destroy} if still running.
   * @throws Error with the child's output when it exits or stays silent.
   */
  runCli(host: string, args: readonly string[], healthUrl: string, env?: Record<string, string>): Promise<Running>;
  /**
   * Starts `redis-server` on `host` bound to its address, without persistence, once it answers PING.
   * @throws Error with its output when it does not come up within 10 s.
   */
  startRedis(host: string): Promise<HostRedis>;
  /** Stops every process and Redis started here so far (the hosts stay, for the next test). */
  stopAll(): Promise<void>;
  /** {@link stopAll}, then removes the namespaces. Idempotent. */
  destroy(): Promise<void>;
}

/**
 * Hosts named `names` in network namespaces when possible (root, `ip netns` working), else on
 * loopback with the reason in {@link TestHosts.loopbackBecause}.
 */
export function createTestHosts(names: readonly string[]): TestHosts {
  let why = netnsUnavailable();
  let net: Netns | undefined;
  if (why === undefined) {
    try {
      net = createNetwork(names);
    } catch (err) {
      why = `the test network could not be made: ${(err as Error).message}`;
    }
  }
  const started: Running[] = [];
  const redises: HostRedis[] = [];
  const nextPort = new Map<string, number>();
  const address = (host: string): string => (net === undefined ? '127.0.0.1' : net.host(host).ip);
  const port = async (host: string): Promise<number> => {
    if (net === undefined) return freePort();
    net.host(host);
    const p = nextPort.get(host) ?? 8080;
    nextPort.set(host, p + 1);
    return p;
  };
  const startRedisOn = async (host: string): Promise<HostRedis> => {
    if (net === undefined) {
      const redis = await startLocalRedis();
      redises.push(redis);
      return redis;
    }
    const p = await port(host);
    const ip = address(host);
    const proc = net.spawn(host, 'redis-server', ['--port', String(p), '--bind', ip, '--protected-mode', 'no', '--save', '', '--appendonly', 'no']);
    let out = '';
    proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    let stopping: Promise<void> | undefined;
    const redis: HostRedis = {
      url: `redis://${ip}:${p}`,
      stop: () =>
        (stopping ??= (async () => {
          if (proc.exitCode !== null || proc.signalCode !== null) return;
          proc.kill('SIGCONT');
          proc.kill('SIGTERM');
          const timer = setTimeout(() => proc.kill('SIGKILL'), 3_000);
          await exited;
          clearTimeout(timer);
        })()),
    };
    redises.push(redis);
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && proc.exitCode === null) {
      if (await pings(p, ip)) return redis;
      await sleep(50);
    }
    await redis.stop();
    throw new Error(`redis-server on ${host} (${ip}:${p}) did not answer PING:\n${out}`);
  };
  const stopAll = async (): Promise<void> => {
    const procs = started.splice(0);
    await Promise.all(procs.map((p) => p.stop()));
    const servers = redises.splice(0);
    await Promise.all(servers.map((r) => r.stop()));
  };
  return {
    net,
    loopbackBecause: why,
    address,
    port,
    url: (host, p) => `http://${address(host)}:${p}`,
    runCli: async (host, args, healthUrl, env = {}) => {
      const proc = net === undefined ? await runLocalCli(args, healthUrl, env) : await net.runCli(host, args, healthUrl, env);
      started.push(proc);
      return proc;
    },
    startRedis: startRedisOn,
    stopAll,
    destroy: async () => {
      await stopAll();
      net?.destroy();
    },
  };
}
