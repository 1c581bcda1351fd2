/**
 * What the benchmarks load side by side: a target (where the load goes, and the processes whose CPU
 * and memory it costs, by role), the bare fastify + undici proxy (bench/lib/bare-proxy.ts) as one, and
 * the per-role readings of /proc. Used by `npm run bench`, `bench:router` and `bench:streams`.
 */
import { fileURLToPath } from 'node:url';
import { freePort, processCpuSeconds, processRssKiB } from './cluster-processes.ts';
import type { Child, ProcessGroup } from './cluster-processes.ts';

/** A measured target: where the load goes, and the processes whose CPU and memory it costs, by role (`proxy`, `router`, `node`). */
export interface Target {
  readonly name: string;
  /** Base URL; requests go to `<url>/v1/chat/completions`. */
  readonly url: string;
  readonly procs: Readonly<Record<string, Child>>;
}

/** CPU seconds (user + system) used so far by each process of `procs`, by role (NaN for one that exited). */
export function cpuByRole(procs: Readonly<Record<string, Child>>): Record<string, number> {
  return Object.fromEntries(Object.entries(procs).map(([role, c]) => [role, processCpuSeconds(c.proc.pid)]));
}

/** Resident set size of each process of `procs` now, KiB, by role (NaN for one that exited). */
export function rssByRole(procs: Readonly<Record<string, Child>>): Record<string, number> {
  return Object.fromEntries(Object.entries(procs).map(([role, c]) => [role, processRssKiB(c.proc.pid)]));
}

/**
 * Starts the bare fastify + undici proxy (bench/lib/bare-proxy.ts) in front of `upstream` and waits
 * until it answers `/healthz`.
 * @param mode `buffer`: reads each upstream answer whole before sending it; `stream`: pipes the
 *   upstream body to the client as it comes (a bare stream pass-through, for SSE).
 * @param env extra environment of the child (e.g. a CPU profiler's).
 * @throws Error with the child's output when it does not come up within 30 s.
 */
export async function startBareProxy(group: ProcessGroup, name: string, upstream: string, mode: 'buffer' | 'stream', env: Record<string, string> = {}): Promise<{ url: string; child: Child }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const script = fileURLToPath(new URL('bare-proxy.ts', import.meta.url));
  const child = await group.start(name, process.execPath, ['--import', 'tsx', script, String(port), upstream, mode], `${url}/healthz`, env);
  return { url, child };
}
