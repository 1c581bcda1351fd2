/**
 * A process started by `quotaring up` stops with it: its stdin is a pipe from `up`, which closes
 * when `up` exits however it exits (Ctrl-C twice, SIGKILL, a crash), and the process then stops as
 * on SIGTERM (a node hands its tenants over and saves its state). Outside `up` nothing changes.
 */

/** The variable `up` sets to `1` in its children's environment (see `cluster/launcher.ts`). */
export const EXIT_WITH_PARENT_ENV = 'QUOTARING_EXIT_WITH_PARENT';

/**
 * When `env[EXIT_WITH_PARENT_ENV]` is `1`, reads `stdin` until it ends, then sends SIGTERM to this
 * process (once). Data read is discarded.
 * @param kill how the signal is sent. @default process.kill of this process
 */
export function exitWithParent(env: NodeJS.ProcessEnv, stdin: NodeJS.ReadableStream = process.stdin, kill: () => void = () => process.kill(process.pid, 'SIGTERM')): void {
  if (env[EXIT_WITH_PARENT_ENV] !== '1') return;
  let sent = false;
  const parentGone = (): void => {
    if (sent) return;
    sent = true;
    kill();
  };
  stdin.on('end', parentGone);
  stdin.on('close', parentGone);
  stdin.on('error', parentGone);
  stdin.on('data', () => undefined);
}
