/**
 * A real `redis-server` for integration tests: started on a free port of 127.0.0.1 without
 * persistence, stopped afterwards. Integration tests never mock Redis. A test can also crash it
 * (`kill()`: SIGKILL) and start a new, empty one on the same port (`restart()`), as an operator's
 * restart of a Redis without persistence would.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { connect } from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import { freePort } from './processes.ts';

/** A running `redis-server` child process. */
export interface RunningRedis {
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /**
   * A new ioredis connection to it (closed by `stop()`), with an error listener so a stopped server
   * is not logged as an unhandled error event.
   * @param options merged over `{ host: '127.0.0.1', port }`.
   */
  client(options?: RedisOptions): Redis;
  /** Sends a signal to the server process: SIGSTOP freezes it (connections stay open, nothing answers), SIGCONT thaws it. */
  signal(signal: 'SIGSTOP' | 'SIGCONT'): void;
  /** FLUSHALL: every key gone (pub/sub subscriptions stay). */
  flush(): Promise<void>;
  /**
   * SIGKILL: the server dies at once (no shutdown, nothing saved; its clients' connections are
   * reset). Resolves once the process exited. The clients of `client()` stay open and reconnect
   * by themselves after `restart()`. No-op when it is not running.
   */
  kill(): Promise<void>;
  /**
   * Starts a new `redis-server` on the same port, empty (persistence is off), after killing the
   * current one (SIGKILL) if it still runs, and resolves once it answers PING (a new `run_id`).
   * @throws Error with the server's output when it does not come up within 10 s (the port taken).
   */
  restart(): Promise<void>;
  /** Closes the clients, then SIGTERM, then SIGKILL after 3 s; resolves once it exited. Idempotent. */
  stop(): Promise<void>;
}

/** Debian's and Homebrew's names for the binary are the same. */
const BINARY = 'redis-server';

function onPath(binary: string): boolean {
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, binary), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

/** True when a RESP PING to host:port (default 127.0.0.1) answers +PONG within 200 ms. */
export function pings(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(200, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (d: Buffer) => done(d.toString().startsWith('+PONG')));
  });
}

/** One `redis-server` process on `port`. */
interface ServerProcess {
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
  output(): string;
  /** Removes the process-exit hook that SIGKILLs it. */
  release(): void;
}

/**
 * Spawns `redis-server --port <port> --bind 127.0.0.1 --save '' --appendonly no` and waits until it
 * answers PING (at most 10 s). `up` is false (the process killed and gone) when it did not come up.
 */
async function spawnServer(port: number): Promise<{ server: ServerProcess; up: boolean }> {
  const proc = spawn(BINARY, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const killOnExit = (): void => {
    proc.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const server: ServerProcess = { proc, exited, output: () => output, release: () => process.off('exit', killOnExit) };

  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && proc.exitCode === null && proc.signalCode === null) {
    if (await pings(port)) return { server, up: true };
    await sleep(20);
  }
  proc.kill('SIGKILL');
  await exited;
  server.release();
  return { server, up: false };
}

function running(server: ServerProcess): boolean {
  return server.proc.exitCode === null && server.proc.signalCode === null;
}

/**
 * Starts `redis-server --port <free> --bind 127.0.0.1 --save '' --appendonly no` and waits until it
 * answers PING (at most 10 s; a port taken meanwhile is retried on another one, 3 tries).
 * @param port start on this port instead (a test that started processes against it before Redis
 *   ran); one try.
 * @throws Error when `redis-server` is not on PATH (with how to install it), or with the server's
 *   output when it does not come up.
 */
export async function startRedis(port?: number): Promise<RunningRedis> {
  if (!onPath(BINARY)) {
    throw new Error(
      `${BINARY} is not on PATH; integration tests start a real Redis 7. Install it: ` +
        '`apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS), or put a redis-server binary on PATH.',
    );
  }
  let lastOutput = '';
  const fixed = port;
  for (let attempt = 0; attempt < (fixed === undefined ? 3 : 1); attempt++) {
    const port = fixed ?? (await freePort());
    const first = await spawnServer(port);
    if (!first.up) {
      lastOutput = first.server.output();
      continue;
    }
    let server = first.server;

    const clients: Redis[] = [];
    let stopping: Promise<void> | undefined;
    const client = (options: RedisOptions = {}): Redis => {
      const c = new Redis({ host: '127.0.0.1', port, ...options });
      c.on('error', () => {});
      clients.push(c);
      return c;
    };
    let admin: Redis | undefined;
    const kill = async (): Promise<void> => {
      if (running(server)) {
        server.proc.kill('SIGKILL');
        await server.exited;
      }
      server.release();
    };
    return {
      url: `redis://127.0.0.1:${port}`,
      port,
      client,
      signal: (signal) => {
        server.proc.kill(signal);
      },
      flush: async () => {
        admin ??= client();
        await admin.flushall();
      },
      kill,
      restart: async () => {
        if (stopping !== undefined) throw new Error('redis-server was stopped: it cannot be restarted');
        await kill();
        const next = await spawnServer(port);
        if (!next.up) throw new Error(`${BINARY} did not come back on port ${port}; its output:\n${next.server.output()}`);
        server = next.server;
      },
      stop: () => {
        stopping ??= (async () => {
          for (const c of clients) c.disconnect();
          const proc = server.proc;
          if (running(server)) {
            proc.kill('SIGCONT'); // a frozen server would not act on SIGTERM
            proc.kill('SIGTERM');
            const timer = setTimeout(() => proc.kill('SIGKILL'), 3_000);
            await server.exited;
            clearTimeout(timer);
          }
          server.release();
        })();
        return stopping;
      },
    };
  }
  throw new Error(`${BINARY} did not answer PING after 3 tries; its output:\n${lastOutput}`);
}
