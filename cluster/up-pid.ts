/**
 * How `quotaring reload` finds a running `quotaring up`: up writes its pid to a file named after its
 * first router port (unique on a machine: up listens on it), in `$XDG_RUNTIME_DIR` or the temp
 * directory; reload sends that pid SIGUSR2. The file is trusted only when this user owns it, it is
 * not writable by others, and the pid's command line is a `quotaring up` (Linux `/proc`).
 */
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The pid file of the `up` whose first router listens on `routerPort`. */
export function upPidFile(routerPort: number, env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_RUNTIME_DIR || tmpdir(), `quotaring-up-${routerPort}.pid`);
}

/** Writes `pid` to the pid file (mode 0600). @returns its path, or undefined when it cannot be written. */
export function writeUpPidFile(routerPort: number, pid: number): string | undefined {
  const file = upPidFile(routerPort);
  try {
    rmSync(file, { force: true });
    writeFileSync(file, `${pid}\n`, { mode: 0o600, flag: 'wx' });
    return file;
  } catch {
    return undefined;
  }
}

/** Removes the pid file if it still names `pid`. */
export function removeUpPidFile(routerPort: number, pid: number): void {
  const file = upPidFile(routerPort);
  try {
    if (readFileSync(file, 'utf8').trim() === String(pid)) rmSync(file, { force: true });
  } catch {
    // already gone
  }
}

/**
 * The pid of the `quotaring up` whose first router listens on `routerPort`.
 * @throws Error saying why not: no such up, a file someone else could have written, a stale pid.
 */
export function findUp(routerPort: number): number {
  const file = upPidFile(routerPort);
  if (!existsSync(file)) throw new Error(`no quotaring up with a router on port ${routerPort} runs as this user (no ${file}); give its --port`);
  const st = statSync(file);
  if ((typeof process.getuid === 'function' && st.uid !== process.getuid()) || (st.mode & 0o022) !== 0) throw new Error(`${file} is not owned by this user or is writable by others: not trusted`);
  const pid = Number(readFileSync(file, 'utf8').trim());
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`${file} does not hold a pid`);
  const cmdline = `/proc/${pid}/cmdline`;
  if (existsSync('/proc/self/cmdline') && (!existsSync(cmdline) || !/\0(up|demo)(\0|$)/.test(readFileSync(cmdline, 'utf8')))) {
    throw new Error(`process ${pid} (from ${file}) is not a running quotaring up: it has stopped`);
  }
  return pid;
}
