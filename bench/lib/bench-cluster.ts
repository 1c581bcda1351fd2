/**
 * A benchmark cluster: its own `redis-server`, n gateway nodes and one router, all children of a
 * {@link ProcessGroup}, in either mode (`sharded`: Redis membership, decisions in RAM; `central`:
 * every decision a Redis Lua call, routers round-robin). Used by `npm run bench:cluster` and
 * `npm run bench`.
 */
import type { BenchRedis, Child, ProcessGroup } from './cluster-processes.ts';
import { freePort, waitUntil, writeConfig } from './cluster-processes.ts';

/** How a cluster decides: in each owner's RAM, or in Redis for every request. */
export type BenchMode = 'sharded' | 'central';

/** Options of {@link startBenchCluster}. */
export interface BenchClusterOptions {
  /** Short unique name: the cluster is `bench-<tag>`, its children `<tag>-node i`, `<tag>-router`. */
  readonly tag: string;
  /** Number of gateway nodes (≥ 1). */
  readonly nodes: number;
  readonly mode: BenchMode;
  /**
   * The rest of the quotaring config (`tenants`, `models`, `deployments`, ...): `mode`,
   * `cluster.name`, `cluster.redis.url` and `server.log_level: warn` are added.
   */
  readonly config: Record<string, unknown>;
  /** Environment of the nodes and the router (e.g. the deployment's API key variable). */
  readonly env?: Readonly<Record<string, string>>;
}

/** A running benchmark cluster. */
export interface BenchCluster {
  /** Human name, e.g. `2 nodes + router, central`. */
  readonly name: string;
  readonly mode: BenchMode;
  readonly nodes: number;
  /** The router's base URL. */
  readonly url: string;
  readonly redis: BenchRedis;
  /** The node processes (for their CPU time). */
  readonly nodeChildren: readonly Child[];
  /** Each node's base URL, in the order of `nodeChildren` (a one-node cluster owns every tenant: load may go to it directly). */
  readonly nodeUrls: readonly string[];
  readonly router: Child;
}

/**
 * Starts Redis, `nodes` nodes and a router; resolves once the router's `/readyz` shows every node.
 * @throws Error with a child's output when one does not come up within 30 s.
 */
export async function startBenchCluster(group: ProcessGroup, opts: BenchClusterOptions): Promise<BenchCluster> {
  const { tag, nodes: n, mode } = opts;
  const redis = await group.redis(`redis-${tag}`);
  const config = writeConfig({
    ...opts.config,
    mode,
    server: { log_level: 'warn' },
    cluster: { name: `bench-${tag}`, redis: { url: redis.url } },
  });
  const env = { ...opts.env };
  const ports = await Promise.all(Array.from({ length: n }, () => freePort()));
  const nodeChildren = await Promise.all(
    ports.map((port, i) => group.cli(`${tag}-node ${i + 1}`, ['node', '--config', config, '--id', `node-${i + 1}`, '--port', String(port)], `http://127.0.0.1:${port}/readyz`, env)),
  );
  const routerPort = await freePort();
  const url = `http://127.0.0.1:${routerPort}`;
  const router = await group.cli(`${tag}-router`, ['router', '--config', config, '--port', String(routerPort)], `${url}/readyz`, env);
  await waitUntil(`the ${n}-node router to see ${n} members`, async () => {
    const res = await fetch(`${url}/readyz`);
    return ((await res.json()) as { members?: number }).members === n;
  });
  const name = `${n} node${n === 1 ? '' : 's'} + router${mode === 'sharded' ? '' : `, ${mode}`}`;
  return { name, mode, nodes: n, url, redis, nodeChildren, nodeUrls: ports.map((p) => `http://127.0.0.1:${p}`), router };
}
