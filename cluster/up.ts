/**
 * `quotaring up`: a local cluster as child processes — the provider simulator, N gateway nodes and
 * M routers — with prefixed logs, stopped together on Ctrl-C. Without `--redis` the nodes form a
 * static member list; with it they heartbeat into Redis and the routers follow the live set.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { demoConfigPath } from './demo.ts';
import { launch } from './launcher.ts';
import type { ChildSpec, LaunchedGroup } from './launcher.ts';

/** Options of {@link startCluster}. */
export interface UpOptions {
  /** Config file whose tenants, models and deployments the cluster serves. @default cluster/demo.yaml */
  readonly config?: string;
  /** Gateway nodes. @default 3 */
  readonly nodes?: number;
  /** Routers. @default 1 */
  readonly routers?: number;
  /** Redis URL for membership; absent = static members. */
  readonly redis?: string;
  /** First router port; routers take consecutive ports. @default 8080 */
  readonly routerPort?: number;
  /** First node port; nodes take consecutive ports. @default 8101 */
  readonly nodePort?: number;
  /** Simulator port; the config's deployments must point at it. @default 9090 */
  readonly simulatorPort?: number;
  /** Extra `quotaring simulate` arguments. @default ['--tps', '200', '--ttft-ms', '150'] */
  readonly simulatorArgs?: readonly string[];
  /** Environment for every child (provider keys). */
  readonly env?: Readonly<Record<string, string>>;
  /** Stop on SIGINT/SIGTERM. @default false */
  readonly handleSignals?: boolean;
}

/** The config the cluster runs with: the given one plus the members (or Redis) of this launch. */
function clusterConfig(opts: Required<Pick<UpOptions, 'nodes' | 'nodePort'>> & UpOptions): string {
  const raw = parse(readFileSync(opts.config ?? demoConfigPath(), 'utf8')) as Record<string, unknown>;
  const members = Array.from({ length: opts.nodes }, (_, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${opts.nodePort + i}` }));
  const cluster = (raw.cluster ?? {}) as Record<string, unknown>;
  raw.cluster = opts.redis === undefined ? { ...cluster, members } : { ...cluster, members: [], redis: { url: opts.redis } };
  const file = join(mkdtempSync(join(tmpdir(), 'quotaring-up-')), 'cluster.yaml');
  writeFileSync(file, stringify(raw));
  return file;
}

/**
 * Starts the simulator, then the nodes, then the routers, each once the previous answers its health
 * URL. @returns the group (stop(), done) and the router URLs.
 * @throws Error when a child fails to start (the others are stopped).
 */
export async function startCluster(opts: UpOptions = {}): Promise<{ group: LaunchedGroup; routers: string[]; nodes: string[]; config: string }> {
  const nodes = opts.nodes ?? 3;
  const routers = opts.routers ?? 1;
  const nodePort = opts.nodePort ?? 8101;
  const routerPort = opts.routerPort ?? 8080;
  const simPort = opts.simulatorPort ?? 9090;
  const config = clusterConfig({ ...opts, nodes, nodePort });
  const env = { QUOTARING_SIM_KEY: 'sim-demo-key', ...opts.env };
  const specs: ChildSpec[] = [
    { name: 'simulator', args: ['simulate', '--port', String(simPort), ...(opts.simulatorArgs ?? ['--tps', '200', '--ttft-ms', '150'])], env, healthUrl: `http://127.0.0.1:${simPort}/sim/stats` },
  ];
  const nodeUrls: string[] = [];
  for (let i = 0; i < nodes; i++) {
    const port = nodePort + i;
    nodeUrls.push(`http://127.0.0.1:${port}`);
    specs.push({ name: `node-${i + 1}`, args: ['node', '--config', config, '--id', `node-${i + 1}`, '--port', String(port)], env, healthUrl: `http://127.0.0.1:${port}/healthz` });
  }
  const routerUrls: string[] = [];
  for (let i = 0; i < routers; i++) {
    const port = routerPort + i;
    routerUrls.push(`http://127.0.0.1:${port}`);
    specs.push({ name: `router-${i + 1}`, args: ['router', '--config', config, '--port', String(port)], env, healthUrl: `http://127.0.0.1:${port}/readyz` });
  }
  const group = await launch(specs, { handleSignals: opts.handleSignals ?? false });
  return { group, routers: routerUrls, nodes: nodeUrls, config };
}
