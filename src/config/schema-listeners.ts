/**
 * The limits shared by the HTTP listeners of nodes (`server:`) and routers (`router:`): timeouts,
 * header sizes and header counts.
 */
import { z } from 'zod';
import { byteSize, duration } from './units.ts';

/**
 * Limits of an HTTP listener (node and router alike), against clients that hold sockets open or
 * send oversized headers. Answers are in the provider's error shape (see `src/http/client-errors.ts`).
 */
export const listenerLimits = {
  /** Longest time to receive a request's headers; then 408 and the socket is closed. Checked every min(1 s, half of it). @default 10s */
  headers_timeout: duration.refine((ms) => ms > 0, 'headers_timeout: a duration above 0, e.g. 10s').default(10_000),
  /**
   * Longest time to receive a whole request (headers and body); then 408 and the socket is closed.
   * Only the request: a response may stream for longer. 0: no limit. @default 60s
   */
  request_timeout: duration.default(60_000),
  /** An idle keep-alive connection (between requests) is closed after this. @default 72s */
  keep_alive_timeout: duration.refine((ms) => ms > 0, 'keep_alive_timeout: a duration above 0, e.g. 72s').default(72_000),
  /**
   * A connection with no byte in either direction for this long is closed (a client that stopped
   * reading a stream). Must exceed the longest queue wait plus the longest deployment
   * headers_timeout, and every body_timeout. 0: no limit. @default 5m
   */
  idle_timeout: duration.default(300_000),
  /** Largest size of a request's headers (all of them, with the request line); larger gets 431. @default 16kb */
  max_header_size: byteSize.default(16 * 1_024),
  /** Most header fields in one request; more gets 431. @default 100 */
  max_headers: z.number().int().min(1).max(10_000).default(100),
};
