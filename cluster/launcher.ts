/**
 * Runs several quotaring processes (simulator, nodes, routers) as children of one command: starts
 * them stage by stage (the children of a stage together), prefixes each one's log lines with its
 * name, waits until each answers its health URL, and stops them all on Ctrl-C / SIGTERM, or when one
 * dies (a gateway node may leave or die while another runs). No child outlives this process: each
 * holds a pipe from it as stdin and stops when the pipe closes (see {@link EXIT_WITH_PARENT_ENV}),
 * so even a SIGKILL of the launcher stops them.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { EXIT_WITH_PARENT_ENV } from '../src/exit-with-parent.ts';
import { wallNow } from '../src/clock.ts';

/** How long after a child's exit a SIGINT/SIGTERM of this process still counts as the cause, ms. */
const UNEXPECTED_EXIT_GRACE_MS = 200;


/** Thrown by {@link launch} when a signal stopped the start (every child started so far was stopped). */
export class LaunchInterrupted extends Error {
  constructor() {
    super('stopped by a signal while starting');
    this.name = 'LaunchInterrupted';
  }
}

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
  /**
   * Start stage: every child of a stage starts at once, and the next stage once all of them answer
   * their health URL (routers after the nodes, so their first health checks find the nodes up). @default 0
   */
  readonly stage?: number;
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
  const deadline = wallNow() + timeoutMs; // wall time: waits for a child process, sleeping on real timers
  while (wallNow() < deadline) {
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
  /** Process id of each child by name. */
  readonly pids: Readonly<Record<string, number>>;
}

/**
 * Starts the children stage by stage (see {@link ChildSpec.stage}): those of one stage together,
 * each stage once the previous one answers its health URLs. With `handleSignals`, a first
 * SIGINT/SIGTERM stops every child (SIGTERM, SIGKILL after 5 s) and resolves `done` with 0, also
 * during the start; a second one SIGKILLs every child at once.
 * @throws LaunchInterrupted when a signal arrives during the start; Error when a child exits or
 *   stays silent for 20 s during the start. Either way every child started is stopped first.
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
    let signals = 0;
    const onSignal = (): void => {
      if (++signals > 1) {
        process.stdout.write('\nstopping now (SIGKILL)...\n');
        for (const c of children) if (isAlive(c)) c.proc.kill('SIGKILL');
        return;
      }
      process.stdout.write('\nstopping... (again to stop at once)\n');
      void stop().then(() => resolveDone(outcome));
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // The terminal closed (its hangup reaches the whole foreground group): stop like Ctrl-C.
    process.on('SIGHUP', onSignal);
    void done.then(() => {
      process.removeListener('SIGINT', onSignal);
      process.removeListener('SIGTERM', onSignal);
      process.removeListener('SIGHUP', onSignal);
    });
  }

  const spawnChild = (spec: ChildSpec): ChildProcess => {
    const proc = spawn(process.execPath, [...loaderArgs(), cliPath(), ...spec.args], {
      env: { ...process.env, ...spec.env, [EXIT_WITH_PARENT_ENV]: '1' },
      // stdin: a pipe the child watches; it closes when this process exits, however it exits.
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    proc.stdin?.on('error', () => undefined);
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
    return proc;
  };

  const stages = [...new Set(specs.map((s) => s.stage ?? 0))].sort((a, b) => a - b);
  for (const stage of stages) {
    if (stopping) break;
    const started = specs.filter((s) => (s.stage ?? 0) === stage).map((spec) => ({ spec, proc: spawnChild(spec) }));
    try {
      await Promise.all(started.map(({ spec, proc }) => waitHealthy(spec.healthUrl, proc, 20_000).catch((err: unknown) => Promise.reject(new Error(`${spec.name}: ${(err as Error).message}`)))));
    } catch (err) {
      const interrupted = stopping;
      await stop();
      throw interrupted ? new LaunchInterrupted() : err;
    }
  }
  if (stopping) {
    await stop();
    throw new LaunchInterrupted();
  }
  return { stop, done, pids: Object.fromEntries(children.map((c) => [c.spec.name, c.proc.pid ?? 0])) };
}
