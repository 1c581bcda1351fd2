/**
 * Runs several quotaring processes (simulator, nodes, later routers) as children of one command:
 * prefixes each one's log lines with its name, waits until each answers `/healthz`, and stops them
 * all on Ctrl-C / SIGTERM, or when one dies (a gateway node may leave or die while another runs).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

/** How long after a child's exit a SIGINT/SIGTERM of this process still counts as the cause, ms. */
const UNEXPECTED_EXIT_GRACE_MS = 200;

/** One child process: `quotaring <args...>` with extra environment. */
export interface ChildSpec {
  readonly name: string;
  readonly args: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  /** URL answering GET /healthz once the child is up. */
  readonly healthUrl: string;
  /**
   * A gateway node: its exit (a graceful leave, a crash) does not stop the group while another
   * replaceable child runs — routers route around it. @default false
   */
  readonly replaceable?: boolean;
  /** Stopped only after every other child exited (the simulator: nodes drain through it). @default false */
  readonly stopLast?: boolean;
}

/** Path of the CLI entry next to this file's build (`src/cli.ts` under tsx, `dist/src/cli.js` built). */
function cliPath(): string {
  const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
  return fileURLToPath(new URL(`../src/cli.${ext}`, import.meta.url));
}

/** The parent's module-loader flags (`--import tsx` when running from TypeScript), and nothing else. */
function loaderArgs(): string[] {
  const out: string[] = [];
  const argv = process.execArgv;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '--import' || a === '--loader') out.push(a, argv[++i] ?? '');
    else if (a.startsWith('--import=') || a.startsWith('--loader=')) out.push(a);
  }
  return out;
}

async function waitHealthy(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`exited with code ${child.exitCode} before answering ${url}`);
    try {
      const res = await request(url);
      await res.body.dump();
      if (res.statusCode === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`no answer from ${url} within ${timeoutMs} ms`);
}

/** A running group of children. */
export interface LaunchedGroup {
  /** Sends SIGTERM to every child, then SIGKILL after `graceMs`; resolves when all exited. */
  stop(graceMs?: number): Promise<void>;
  /** Resolves when the group stopped (by stop(), a signal, or a child dying). */
  readonly done: Promise<number>;
}

/**
 * Starts children in order, each after the previous answers its health URL. With `handleSignals`,
 * SIGINT/SIGTERM stop every child (SIGTERM, SIGKILL after 5 s) and resolve `done` with 0, also
 * during the start.
 * @throws Error when a child exits or stays silent for 20 s during start, or a signal arrives during
 *   start (all started ones are stopped).
 */
export async function launch(specs: readonly ChildSpec[], opts: { handleSignals?: boolean } = {}): Promise<LaunchedGroup> {
  const children: { spec: ChildSpec; proc: ChildProcess }[] = [];
  let stopping = false;
  /** What `done` resolves with: 1 once a child died unexpectedly, 0 otherwise. */
  let outcome = 0;
  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((resolve) => {
    resolveDone = resolve;
  });
  const width = Math.max(...specs.map((s) => s.name.length));

  const isAlive = (c: { proc: ChildProcess }): boolean => c.proc.exitCode === null && c.proc.signalCode === null;
  /** SIGTERM to `wave`, SIGKILL after `graceMs`; resolves when all exited. */
  const stopWave = async (wave: readonly { proc: ChildProcess }[], graceMs: number): Promise<void> => {
    const alive = wave.filter(isAlive);
    const exits = alive.map((c) => new Promise<void>((resolve) => c.proc.once('exit', () => resolve())));
    for (const c of [...alive].reverse()) c.proc.kill('SIGTERM');
    const timer = setTimeout(() => alive.forEach((c) => c.proc.kill('SIGKILL')), graceMs);
    await Promise.all(exits);
    clearTimeout(timer);
  };
  const stop = async (graceMs = 5_000): Promise<void> => {
    stopping = true;
    await stopWave(
      children.filter((c) => c.spec.stopLast !== true),
      graceMs,
    );
    await stopWave(
      children.filter((c) => c.spec.stopLast === true),
      graceMs,
    );
  };

  if (opts.handleSignals === true) {
    const onSignal = (): void => {
      process.stdout.write('\nstopping...\n');
      void stop().then(() => resolveDone(outcome));
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  }

  for (const spec of specs) {
    if (stopping) break;
    const proc = spawn(process.execPath, [...loaderArgs(), cliPath(), ...spec.args], {
      env: { ...process.env, ...spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const prefix = `[${spec.name.padEnd(width)}] `;
    for (const stream of [proc.stdout, proc.stderr]) {
      if (stream !== null) createInterface({ input: stream }).on('line', (line) => process.stdout.write(prefix + line + '\n'));
    }
    proc.once('exit', (code, signal) => {
      if (stopping) {
        if (children.every((c) => c.proc.exitCode !== null || c.proc.signalCode !== null)) resolveDone(outcome);
        return;
      }
      // Ctrl-C in a terminal signals the whole process group: a child may exit before this process
      // has run its own SIGINT handler. Only an exit not followed by a stop is unexpected.
      setTimeout(() => {
        if (stopping) return;
        const others = children.filter((c) => c.proc !== proc && c.spec.replaceable === true && isAlive(c)).length;
        if (spec.replaceable === true && others > 0) {
          process.stdout.write(`${prefix}left (${signal ?? code}); ${others} node${others === 1 ? '' : 's'} remain${others === 1 ? 's' : ''}\n`);
          return;
        }
        process.stdout.write(`${prefix}exited unexpectedly (${signal ?? code}); stopping the others\n`);
        outcome = 1;
        void stop().then(() => resolveDone(1));
      }, UNEXPECTED_EXIT_GRACE_MS);
    });
    children.push({ spec, proc });
    try {
      await waitHealthy(spec.healthUrl, proc, 20_000);
    } catch (err) {
      const interrupted = stopping;
      await stop();
      throw new Error(interrupted ? 'stopped by a signal while starting' : `${spec.name}: ${(err as Error).message}`);
    }
  }
  if (stopping) {
    await stop();
    throw new Error('stopped by a signal while starting');
  }
  return { stop, done };
}
