/**
 * The `server:` section: a node's listener, request size limits, housekeeping, saved state and logging.
 */
import { z } from 'zod';
import { listenerLimits } from './schema-listeners.ts';
import { byteSize, duration, positiveInt } from './units.ts';

/** Listening and housekeeping settings of a node. */
export const ServerSchema = z.strictObject({
  /** @default 127.0.0.1 */
  host: z.string().default('127.0.0.1'),
  /** @default 8080 */
  port: z.number().int().min(0).max(65535).default(8080),
  /** Largest request body accepted (routers enforce it too, before forwarding). @default 4mb */
  body_limit: byteSize.default(4 * 1_048_576),
  /** Deepest nesting of arrays and objects in a JSON body; deeper gets 400 `invalid_request`. 1..1000. @default 64 */
  json_depth: z.number().int().min(1).max(1_000).default(64),
  /**
   * Most members in a JSON body: keys, and array elements other than numbers (each costs the parse an
   * allocation; number arrays such as embedding token ids are free). More gets 400 `invalid_request`
   * before parsing: it bounds how long one request's parse blocks the node (200,000: 30-40 ms on one core). @default 200000
   */
  json_max_members: positiveInt.default(200_000),
  /** Most `messages` in one chat or messages request; more gets 400 `invalid_request`. @default 10000 */
  max_messages: positiveInt.default(10_000),
  /** Most tool definitions (`tools`, and `functions`) in one request; more gets 400 `invalid_request`. @default 512 */
  max_tools: positiveInt.default(512),
  /**
   * What `POST /v1/messages/count_tokens` (passed through to the model's Anthropic deployment) costs
   * the tenant: `free` (nothing: Anthropic does not bill it and limits it apart from messages) or
   * `request` (one request of the tenant's requests limits and a concurrency slot, no tokens; no
   * deployment quota). @default free
   */
  count_tokens: z.enum(['free', 'request']).default('free'),
  /**
   * Rate-limit header dialects sent on every limited reply (JSON, streams, 429s) beside OpenAI's
   * `x-ratelimit-*` (always sent; Anthropic's `anthropic-ratelimit-*` too on `/v1/messages`):
   * `ietf` adds `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10), with
   * the same values as the `x-ratelimit-*` headers (docs/http-api.md "IETF RateLimit header fields").
   * @default []
   */
  ratelimit_headers: z.array(z.enum(['ietf'])).refine((a) => new Set(a).size === a.length, 'ratelimit_headers: each dialect once').default([]),
  ...listenerLimits,
  /** Period of the idle-tenant sweep. @default 10s */
  sweep_interval: duration.default(10_000),
  /**
   * Directory where a node saves its limiter state on a graceful stop (SIGTERM) and loads it on
   * start (`<state_dir>/<node id>@<cluster>.json`, written atomically; the file names its cluster and
   * node, and one of another cluster or node is refused with a log line), so a restarted single node
   * or cluster keeps every limit; relative to the working directory; `''` turns it off. @default .quotaring-state
   */
  state_dir: z.string().max(4_096).default('.quotaring-state'),
  /** Logging level: one line per request at info, one per decision at debug. @default info */
  log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** `json` (pino's lines) or `pretty` (pino-pretty, for a terminal; `--pretty-logs`). @default json */
  log_format: z.enum(['json', 'pretty']).default('json'),
});
