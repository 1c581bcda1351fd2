/**
 * fastify's pino options for nodes and routers: JSON lines by default, pino-pretty with
 * `server.log_format: pretty` (`--pretty-logs`). Credentials in request headers are redacted
 * should a request ever be logged whole.
 */
import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify';

/** Paths pino replaces with `[Redacted]`. */
const REDACT = ['req.headers.authorization', 'req.headers["x-api-key"]', 'req.headers["api-key"]'];

/** Logger options for `Fastify({ logger })`; `stream` (JSON lines) in place of stdout, for tests. */
export function loggerOptions(server: { readonly log_level: string; readonly log_format: 'json' | 'pretty' }, stream?: NodeJS.WritableStream): NonNullable<FastifyServerOptions['logger']> {
  return {
    level: server.log_level,
    redact: REDACT,
    ...(stream === undefined ? {} : { stream }),
    ...(server.log_format === 'pretty' ? { transport: { target: 'pino-pretty', options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } } } : {}),
  };
}

/** pino's numeric levels. */
const LEVELS: Readonly<Record<string, number>> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Infinity };

/** Whether `log` writes lines of `level` (so that a line is not built for nothing). */
export function levelEnabled(log: FastifyBaseLogger, level: 'debug' | 'info' | 'warn' | 'error'): boolean {
  return (LEVELS[log.level] ?? 30) <= (LEVELS[level] as number);
}
