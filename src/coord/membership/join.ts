/**
 * Joining a cluster whose membership store (Redis) may be unreachable when the process starts.
 *
 * A node or router started while Redis is down does not exit: it listens, answers `/readyz` 503
 * naming `redis`, and keeps trying to start its membership every retry period until Redis answers;
 * it then joins (a node: handoffs, ring, scripts) and becomes ready without a restart. Until its
 * membership has read the member list once ({@link membersUnread}), a node decides for no tenant
 * (`node_starting`, see `src/gateway/ownership.ts`) and a router has no member to route to.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Membership } from '../types.ts';
import { wallNow } from '../../clock.ts';

/**
 * True while a membership read from a shared store (Redis) has never read the member list: the
 * process is not in the cluster yet. False for memberships that need no read (static members).
 */
export function membersUnread(membership: Membership): boolean {
  return membership.lastSyncMs !== undefined && membership.lastSyncMs() === undefined;
}

/** Log sink (pino's shape). */
export interface JoinLog {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** Options of {@link startOrKeepTrying}. */
export interface KeepTryingOptions {
  /** Wait after a failed attempt before the next, ms (the membership's heartbeat period). */
  readonly retryMs: number;
  /** Aborted when the process closes: no attempt starts after that, and `done` resolves false. */
  readonly signal: AbortSignal;
  /** Where the waits are reported: the first failure, then at most once per `logEveryMs` (and when the error changes), and the join. */
  readonly log: JoinLog;
  /** What is waiting, for the log lines (e.g. `node node-1`, `router`). */
  readonly what: string;
  /** The Redis URL, password removed (`redactUrl`), for the log lines. */
  readonly redis?: string;
  /** A wait is logged again after this long without a log line, ms. @default 30000 */
  readonly logEveryMs?: number;
}

/** The outcome of the first attempt of {@link startOrKeepTrying}. */
export interface FirstAttempt {
  /** True when the first attempt succeeded. */
  readonly started: boolean;
  /** Resolves true once an attempt succeeded (at once when `started`), false when aborted first. Never rejects. */
  readonly done: Promise<boolean>;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/**
 * Runs `attempt` once and resolves with its outcome; when it failed, keeps running it every
 * `retryMs` in the background until it succeeds or `signal` aborts (see {@link FirstAttempt.done}).
 * `attempt` must be safe to run again after it threw (each step of it starts at most once).
 * Failures are logged as warnings (Redis unreachable: the process is up but not in the cluster).
 */
export async function startOrKeepTrying(attempt: () => Promise<void>, opts: KeepTryingOptions): Promise<FirstAttempt> {
  const logEveryMs = opts.logEveryMs ?? 30_000;
  const began = wallNow(); // wall time: only logged (waitedMs) and paces warnings; no clock reaches here
  let tries = 0;
  let lastLog = { at: -Infinity, message: '' };
  const once = async (): Promise<boolean> => {
    tries++;
    try {
      await attempt();
      if (tries > 1) opts.log.info({ waitedMs: wallNow() - began, attempts: tries }, `Redis answers: ${opts.what} joined the cluster`);
      return true;
    } catch (err) {
      const message = asError(err).message;
      const now = wallNow();
      if (tries === 1 || message !== lastLog.message || now - lastLog.at >= logEveryMs) {
        lastLog = { at: now, message };
        opts.log.warn(
          { err: message, ...(opts.redis === undefined ? {} : { redis: opts.redis }), retryMs: opts.retryMs, waitedMs: now - began },
          `Redis unreachable: ${opts.what} is up but not in the cluster (/readyz 503 waiting for redis); retrying until Redis answers`,
        );
      }
      return false;
    }
  };
  if (await once()) return { started: true, done: Promise.resolve(true) };
  const done = (async (): Promise<boolean> => {
    while (!opts.signal.aborted) {
      try {
        await sleep(opts.retryMs, undefined, { signal: opts.signal });
      } catch {
        return false; // aborted
      }
      if (await once()) return true;
    }
    return false;
  })();
  return { started: false, done };
}
