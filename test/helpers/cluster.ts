/**
 * A cluster of real processes for end-to-end tests: `n` nodes and one router started with the CLI
 * on free ports from one config file, returned once every one of them builds the same ring of the
 * `n` nodes; and the simulator, nodes and routers started on the hosts of a {@link TestHosts}
 * (each in its own network namespace, or all on loopback), bound to their host's address.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { ringVersion } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { freePort, runCli } from './processes.ts';
import type { Running } from './processes.ts';
import type { TestHosts } from './netns.ts';

/** The processes of {@link startNodesAndRouter}. */
export interface TestCluster {
  /** Node `i` is `node-<i + 1>`. */
  readonly nodes: readonly Running[];
  /** The nodes as members (id, URL), in the same order. */
  readonly members: readonly Member[];
  readonly router: Running;
  /** The router's base URL. */
  readonly routerUrl: string;
  /** Every process, for `stop()`. */
  readonly all: readonly Running[];
}

/** The ring version a process reports on `/healthz` ('' when none). */
export async function ringOf(url: string): Promise<string> {
  const res = await request(`${url}/healthz`);
  return ((await res.body.json()) as { ring?: string }).ring ?? '';
}

/**
 * Waits until every process at `urls` reports the ring of exactly `members` on `/healthz` (a
 * process that does not answer counts as another ring).
 * @param ms longest wait. @default 15000
 * @throws AssertionError naming the rings seen when they do not agree in time.
 */
export async function ringIs(urls: readonly string[], members: readonly Member[], ms = 15_000): Promise<void> {
  const expected = ringVersion([...members]);
  const deadline = Date.now() + ms;
  for (;;) {
    const versions = await Promise.all(urls.map((u) => ringOf(u).catch(() => '')));
    if (versions.every((v) => v === expected)) return;
    assert.ok(Date.now() < deadline, `rings ${JSON.stringify(versions)}, expected ${expected} (${members.map((m) => m.id).join(', ')})`);
    await sleep(50);
  }
}

/**
 * Starts `n` nodes (`node-1`…) then a router from `config`, and waits (≤ 10 s) until the router and
 * every node report the ring of exactly those nodes. @throws AssertionError when they do not agree.
 */
export async function startNodesAndRouter(config: string, env: Record<string, string>, n = 3): Promise<TestCluster> {
  const nodes: Running[] = [];
  const members: Member[] = [];
  for (let i = 1; i <= n; i++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    nodes.push(await runCli(['node', '--config', config, '--id', `node-${i}`, '--port', String(port)], `${url}/healthz`, env));
    members.push({ id: `node-${i}`, url });
  }
  const port = await freePort();
  const routerUrl = `http://127.0.0.1:${port}`;
  const router = await runCli(['router', '--config', config, '--port', String(port)], `${routerUrl}/readyz`, env);
  await ringIs([routerUrl, ...members.map((m) => m.url)], members, 10_000);
  return { nodes, members, router, routerUrl, all: [...nodes, router] };
}

/**
 * Starts one node per member of a static cluster (`members`' ids and URLs, which `config` lists under
 * `cluster.members`), each once the previous answers `/readyz`, then a router on a free port.
 * Every process started is pushed to `procs` (router last), so the caller's `after` stops them all
 * even when a later start throws.
 * @returns the nodes by member id and the router's base URL.
 * @throws Error (from `runCli`) when a process exits or does not answer within 15 s.
 */
export async function startStaticNodesAndRouter(
  config: string,
  env: Record<string, string>,
  members: readonly Member[],
  procs: Running[],
): Promise<{ readonly nodes: Map<string, Running>; readonly routerUrl: string }> {
  const nodes = new Map<string, Running>();
  for (const m of members) {
    const proc = await runCli(['node', '--config', config, '--id', m.id, '--port', new URL(m.url).port], `${m.url}/readyz`, env);
    procs.push(proc);
    nodes.set(m.id, proc);
  }
  const routerUrl = `http://127.0.0.1:${await freePort()}`;
  procs.push(await runCli(['router', '--config', config, '--port', new URL(routerUrl).port], `${routerUrl}/readyz`, env));
  return { nodes, routerUrl };
}

/** How a node started by {@link startHostNode} learns the URL it advertises. */
export type Advertise =
  /** `--host <address> --port <port>`: the node derives `http://<address>:<port>`. */
  | 'derived'
  /** The same plus `--url http://<address>:<port>`. */
  | 'url-flag'
  /**
   * `--host 0.0.0.0 --port <port>`: listens on every address; the node must advertise its host's one
   * non-loopback address (in a namespace, its own; on loopback there are several: use only in namespaces).
   */
  | 'wildcard';

/**
 * Starts the provider simulator on host `sim` of `hosts`, bound to its address.
 * @returns its base URL. @throws Error (from `runCli`) when it does not answer `/sim/stats`.
 */
export async function startHostSimulator(hosts: TestHosts, env: Record<string, string>, host = 'sim'): Promise<string> {
  const port = await hosts.port(host);
  const url = hosts.url(host, port);
  await hosts.runCli(host, ['simulate', '--host', hosts.address(host), '--port', String(port)], `${url}/sim/stats`, env);
  return url;
}

/**
 * Starts node `id` on `host` of `hosts` from `config`, bound to the host's address (never
 * 127.0.0.1 in namespaces), once it answers `/<health>`.
 * @param opts.args more CLI arguments (`--members …`). @param opts.port the port (default: `hosts.port(host)`).
 * @returns the member it should advertise (`http://<address>:<port>`) and its process.
 * @throws Error (from `runCli`) when it exits or stays silent.
 */
export async function startHostNode(
  hosts: TestHosts,
  host: string,
  config: string,
  env: Record<string, string>,
  opts: { readonly id?: string; readonly advertise?: Advertise; readonly args?: readonly string[]; readonly port?: number; readonly health?: 'healthz' | 'readyz' } = {},
): Promise<{ readonly member: Member; readonly proc: Running }> {
  const id = opts.id ?? host;
  const port = opts.port ?? (await hosts.port(host));
  const url = hosts.url(host, port);
  const bind = opts.advertise === 'wildcard' ? '0.0.0.0' : hosts.address(host);
  const args = ['node', '--config', config, '--id', id, '--host', bind, '--port', String(port), ...(opts.advertise === 'url-flag' ? ['--url', url] : []), ...(opts.args ?? [])];
  const proc = await hosts.runCli(host, args, `${url}/${opts.health ?? 'healthz'}`, env);
  return { member: { id, url }, proc };
}

/**
 * Starts a router on each of `names` (hosts of `hosts`) from `config`, one after the other, each
 * bound to its host's address, once it answers `/<health>`.
 * @returns their base URLs. @throws Error (from `runCli`) when one exits or stays silent.
 */
export async function startHostRouters(
  hosts: TestHosts,
  names: readonly string[],
  config: string,
  env: Record<string, string>,
  opts: { readonly args?: readonly string[]; readonly health?: 'healthz' | 'readyz' } = {},
): Promise<string[]> {
  const urls: string[] = [];
  for (const host of names) {
    const port = await hosts.port(host);
    const url = hosts.url(host, port);
    await hosts.runCli(host, ['router', '--config', config, '--host', hosts.address(host), '--port', String(port), ...(opts.args ?? [])], `${url}/${opts.health ?? 'readyz'}`, env);
    urls.push(url);
  }
  return urls;
}
