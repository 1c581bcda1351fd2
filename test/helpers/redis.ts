/**
 * A real `redis-server` for integration tests: started on a free port of 127.0.0.1 without
 * persistence, stopped afterwards. Integration tests never mock Redis.
 */
import { spawn } from 'node:child_process';
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

/** True when a RESP PING to 127.0.0.1:port answers +PONG within 200 ms. */
export function pings(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
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

/**
 * Starts `redis-server --port <free> --bind 127.0.0.1 --save '' --appendonly no` and waits until it
 * answers PING (at most 10 s; a port taken meanwhile is retried on another one, 3 tries).
 * @throws Error when `redis-server` is not on PATH (with how to install it), or with the server's
 *   output when it does not come up.
 */
export async function startRedis(): Promise<RunningRedis> {
  if (!onPath(BINARY)) {
    throw new Error(
      `${BINARY} is not on PATH; integration tests start a real Redis 7. Install it: ` +
        '`apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS), or put a redis-server binary on PATH.',
    );
  }
  let lastOutput = '';
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
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

    const deadline = Date.now() + 10_000;
    let up = false;
    while (Date.now() < deadline && proc.exitCode === null && proc.signalCode === null) {
      if (await pings(port)) {
        up = true;
        break;
      }
      await sleep(20);
    }
    if (!up) {
      proc.kill('SIGKILL');
      await exited;
      process.off('exit', killOnExit);
      lastOutput = output;
      continue;
    }

    const clients: Redis[] = [];
    let stopping: Promise<void> | undefined;
    const client = (options: RedisOptions = {}): Redis => {
      const c = new Redis({ host: '127.0.0.1', port, ...options });
      c.on('error', () => {});
      clients.push(c);
      return c;
    };
    let admin: Redis | undefined;
    return {
      url: `redis://127.0.0.1:${port}`,
      port,
      client,
      signal: (signal) => {
        proc.kill(signal);
      },
      flush: async () => {
        admin ??= client();
        await admin.flushall();
      },
      stop: () => {
        stopping ??= (async () => {
          for (const c of clients) c.disconnect();
          if (proc.exitCode === null && proc.signalCode === null) {
            proc.kill('SIGCONT'); // a frozen server would not act on SIGTERM
            proc.kill('SIGTERM');
            const timer = setTimeout(() => proc.kill('SIGKILL'), 3_000);
            await exited;
            clearTimeout(timer);
          }
          process.off('exit', killOnExit);
        })();
        return stopping;
      },
    };
  }
  throw new Error(`${BINARY} did not answer PING after 3 tries; its output:\n${lastOutput}`);
}
