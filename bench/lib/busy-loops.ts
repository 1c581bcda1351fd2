/**
 * CPU hogs for benchmarks that measure a cluster on a machine whose cores are busy: `n` shell busy
 * loops (`sh -c 'while :; do :; done'`), children of a {@link ProcessGroup} (so a crash or Ctrl-C
 * stops them too), killed with SIGKILL by {@link BusyLoops.stop}.
 */
import type { Child, ProcessGroup } from './cluster-processes.ts';

/** Busy loops started by {@link startBusyLoops}. */
export interface BusyLoops {
  /** Their pids (for the report). */
  readonly pids: readonly number[];
  /** SIGKILLs every loop and resolves once each exited. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Starts `n` busy loops in `group` (names `busy-1`…).
 * @throws Error when `sh` cannot be started.
 */
export function startBusyLoops(group: ProcessGroup, n: number): BusyLoops {
  const loops: Child[] = [];
  for (let i = 1; i <= n; i++) loops.push(group.spawn(`busy-${i}`, 'sh', ['-c', 'while :; do :; done']));
  const pids = loops.map((c) => {
    if (c.proc.pid === undefined) throw new Error('a busy loop (sh) did not start');
    return c.proc.pid;
  });
  let stopping: Promise<void> | undefined;
  return {
    pids,
    stop: () =>
      (stopping ??= Promise.all(
        loops.map(
          (c) =>
            new Promise<void>((resolve) => {
              if (c.proc.exitCode !== null || c.proc.signalCode !== null) return resolve();
              c.proc.once('exit', () => resolve());
              c.proc.kill('SIGKILL');
            }),
        ),
      ).then(() => undefined)),
  };
}
