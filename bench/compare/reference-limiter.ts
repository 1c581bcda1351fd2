/**
 * The outside reference of the sharded-vs-central benchmark (issue 5): the same OpenAI chat proxy
 * as `bench/lib/bare-proxy.ts`, with each tenant's limits decided by `rate-limiter-flexible`'s
 * `RateLimiterRedis` — the usual way a Node service puts a central Redis store in front of an API —
 * instead of by quotaring. It measures what a well-known central-store limiter costs per request
 * (latency, Redis commands) on the same replay, and how it admits.
 *
 *   node --import tsx bench/compare/reference-limiter.ts --port <p> --redis <redis://...> \
 *     --upstream <http://simulator> --tenants <file.json>
 *
 * Tenants file: `{ "upstreamKey": "sim-key", "tenants": [{ "id": "t0", "key": "k0",
 * "requestsPerMinute": 600, "tokensPerMinute": 100000 }] }` (either limit may be absent).
 *
 * Per request on `POST /v1/chat/completions`:
 * 1. bearer key → tenant (401 `invalid_api_key` otherwise); body must be JSON (400 `invalid_json`).
 * 2. reservation = prompt tokens, counted exactly as quotaring counts them (`countOpenAIChat` with
 *    the exact o200k_base counter, as `bench/lib/load.ts` does), + `max_tokens` (or
 *    `max_completion_tokens`; 4096 when neither is a non-negative integer).
 * 3. `consume(tenant, 1)` on the tenant's requests limiter (Redis keys `ref-rpm:<tenant id>`), then
 *    `consume(tenant, reservation)` on its tokens limiter (`ref-tpm:<tenant id>`); both are
 *    RateLimiterRedis with `duration: 60`. A refusal is a 429 in OpenAI's shape (`type` `requests` or
 *    `tokens`, code `rate_limit_exceeded`) with `retry-after` (ceil s) and `retry-after-ms` from
 *    `msBeforeNext`. When the tokens consume is refused, the request point is `reward`ed back.
 * 4. forward to `<upstream>/v1/chat/completions` (undici Pool, `authorization: Bearer <upstreamKey>`,
 *    `x-sim-output-tokens` passed on), relay status and body; then settle the tokens limiter on
 *    `usage.total_tokens` (`reward` what was not used, `penalty` what was used beyond the
 *    reservation) before the reply is sent, or `reward` the whole reservation when the upstream
 *    failed or answered without usage.
 * Every response of the route to a known tenant carries `x-ratelimit-limit-requests` /
 * `x-ratelimit-limit-tokens` (the replay reads them), and `x-ratelimit-remaining-*` when a consume
 * told it.
 *
 * How rate-limiter-flexible limits, used as documented, not re-implemented:
 * - **Fixed windows**, one per key, starting at the key's first consume (the library's "flexible
 *   fixed window"): not aligned to the minute, not sliding. A tenant can pass up to twice its limit
 *   across a window boundary. quotaring's default is a token bucket / sliding window.
 * - A consume is one EVALSHA of the library's Lua script (SET NX EX, INCRBY, PTTL inside); so is a
 *   `reward` or `penalty`. An admitted request therefore costs 3 script calls (requests consume,
 *   tokens consume, settlement), a settlement exactly on the reservation 2.
 * - A refused consume still adds its points to the counter (the library's documented behaviour:
 *   "actions over points are rejected, but the counter keeps growing"). By default this proxy
 *   `reward`s the refused points back at once, so that a refusal leaves the window as it was, as
 *   quotaring's refusals do; `--charge-refused` keeps the library's behaviour (a big refused
 *   reservation then blocks the tenant until the window ends).
 * - A `reward` or `penalty` that arrives after its window expired starts a new window (SET NX
 *   then INCRBY): a late refund opens the next window with a negative count (extra room).
 *
 * What it does not do: no concurrency limit (rate-limiter-flexible has none), no streaming usage
 * accounting (a streamed reply has no JSON usage, so its reservation is refunded whole), no other
 * routes or wire formats, no model routing, no retries, no insurance limiter: a Redis error is a
 * 503 `limiter_unavailable`.
 */
import { readFileSync } from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import Fastify from 'fastify';
import type { FastifyReply } from 'fastify';
import { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { Pool } from 'undici';
import { z } from 'zod';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import type { OpenAIChatPrompt } from '../../src/tokens/index.ts';

/** Reservation's output part when the body gives neither max_tokens nor max_completion_tokens. */
const DEFAULT_MAX_TOKENS = 4096;
/** Window of both limits, seconds. */
const WINDOW_S = 60;

const tenantsFileSchema = z.strictObject({
  upstreamKey: z.string().min(1),
  tenants: z
    .array(
      z.strictObject({
        id: z.string().min(1),
        key: z.string().min(1),
        requestsPerMinute: z.number().int().positive().optional(),
        tokensPerMinute: z.number().int().positive().optional(),
      }),
    )
    .min(1),
});
type TenantsFile = z.infer<typeof tenantsFileSchema>;

/** One tenant with its limiters (absent limit: no limiter). */
interface Tenant {
  readonly id: string;
  readonly requestsPerMinute: number | undefined;
  readonly tokensPerMinute: number | undefined;
  readonly requests: RateLimiterRedis | undefined;
  readonly tokens: RateLimiterRedis | undefined;
}

interface CliOptions {
  readonly host: string;
  readonly port: number;
  readonly redis: string;
  readonly upstream: string;
  readonly tenants: string;
  readonly connections: number;
  readonly chargeRefused: boolean;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function port(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65_535) throw new InvalidArgumentError('must be a port (0-65535)');
  return n;
}

function url(protocols: readonly string[]): (v: string) => string {
  return (v) => {
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw new InvalidArgumentError('must be a URL');
    }
    if (!protocols.includes(u.protocol)) throw new InvalidArgumentError(`must be a ${protocols.join(' or ')} URL`);
    return v;
  };
}

function readTenants(file: string): TenantsFile {
  const parsed = tenantsFileSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`${file}: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

/** OpenAI's error body. */
function openAIError(reply: FastifyReply, status: number, message: string, type: string, code: string): FastifyReply {
  return reply.code(status).header('content-type', 'application/json').send(JSON.stringify({ error: { message, type, param: null, code } }));
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function bearerKey(authorization: string | undefined): string | undefined {
  if (authorization === undefined) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return m?.[1];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/** The output part of the reservation: max_tokens, else max_completion_tokens, else {@link DEFAULT_MAX_TOKENS}. */
function maxTokensOf(body: Record<string, unknown>): number {
  if (isCount(body['max_tokens'])) return body['max_tokens'];
  if (isCount(body['max_completion_tokens'])) return body['max_completion_tokens'];
  return DEFAULT_MAX_TOKENS;
}

/** `usage.total_tokens` of a chat completion's JSON text, or undefined. */
function totalTokensOf(text: string): number | undefined {
  try {
    const body: unknown = JSON.parse(text);
    if (!isObject(body) || !isObject(body['usage'])) return undefined;
    const total = body['usage']['total_tokens'];
    return isCount(total) ? total : undefined;
  } catch {
    return undefined;
  }
}

async function main(opts: CliOptions): Promise<void> {
  const file = readTenants(opts.tenants);
  const redis = new Redis(opts.redis);
  redis.on('error', (err: Error) => console.error(`reference-limiter: redis: ${err.message}`));
  await redis.ping();

  // One RateLimiterRedis per distinct limit value; the tenant id is the consumed key.
  const limiters = new Map<string, RateLimiterRedis>();
  const limiter = (prefix: 'ref-rpm' | 'ref-tpm', points: number | undefined): RateLimiterRedis | undefined => {
    if (points === undefined) return undefined;
    const id = `${prefix}:${points}`;
    let l = limiters.get(id);
    if (l === undefined) {
      l = new RateLimiterRedis({ storeClient: redis, keyPrefix: prefix, points, duration: WINDOW_S });
      limiters.set(id, l);
    }
    return l;
  };
  const byKey = new Map<string, Tenant>();
  for (const t of file.tenants) {
    if (byKey.has(t.key)) throw new Error(`${opts.tenants}: key of tenant ${t.id} is used twice`);
    byKey.set(t.key, {
      id: t.id,
      requestsPerMinute: t.requestsPerMinute,
      tokensPerMinute: t.tokensPerMinute,
      requests: limiter('ref-rpm', t.requestsPerMinute),
      tokens: limiter('ref-tpm', t.tokensPerMinute),
    });
  }

  const counter = exactCounter('o200k_base');
  const upstream = new Pool(opts.upstream, { connections: opts.connections });
  const upstreamAuth = `Bearer ${file.upstreamKey}`;

  /** `consume`; a refusal is a RateLimiterRes, a store fault an Error (rethrown). */
  const consume = async (l: RateLimiterRedis, key: string, points: number): Promise<{ ok: boolean; res: RateLimiterRes }> => {
    try {
      return { ok: true, res: await l.consume(key, points) };
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      if (!opts.chargeRefused) await l.reward(key, points);
      return { ok: false, res: err };
    }
  };

  const refuse = (reply: FastifyReply, tenant: Tenant, kind: 'requests' | 'tokens', res: RateLimiterRes, points: number): FastifyReply => {
    const ms = Math.max(0, res.msBeforeNext);
    const limit = kind === 'requests' ? tenant.requestsPerMinute : tenant.tokensPerMinute;
    reply.header('retry-after', String(Math.max(1, Math.ceil(ms / 1000)))).header('retry-after-ms', String(ms));
    const unit = kind === 'requests' ? 'requests per min (RPM)' : 'tokens per min (TPM)';
    return openAIError(
      reply,
      429,
      `Rate limit reached for ${tenant.id} on ${unit}: Limit ${String(limit)}, Requested ${points}. Please try again in ${ms}ms.`,
      kind,
      'rate_limit_exceeded',
    );
  };

  const app = Fastify({ logger: false, bodyLimit: 4 * 1_048_576 });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async () => ({ status: 'ok' }));

  app.post('/v1/chat/completions', async (request, reply) => {
    const key = bearerKey(header(request.headers.authorization));
    const tenant = key === undefined ? undefined : byKey.get(key);
    if (tenant === undefined) {
      return openAIError(reply, 401, 'Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key');
    }
    if (tenant.requestsPerMinute !== undefined) reply.header('x-ratelimit-limit-requests', String(tenant.requestsPerMinute));
    if (tenant.tokensPerMinute !== undefined) reply.header('x-ratelimit-limit-tokens', String(tenant.tokensPerMinute));

    const raw = request.body;
    let body: unknown;
    try {
      body = JSON.parse(Buffer.isBuffer(raw) ? raw.toString('utf8') : '');
    } catch {
      body = undefined;
    }
    if (!isObject(body)) {
      return openAIError(reply, 400, 'We could not parse the JSON body of your request: send a JSON object.', 'invalid_request_error', 'invalid_json');
    }
    const reservation = countOpenAIChat(body as OpenAIChatPrompt, counter) + maxTokensOf(body);

    try {
      let requestTaken = false;
      if (tenant.requests !== undefined) {
        const r = await consume(tenant.requests, tenant.id, 1);
        if (!r.ok) return refuse(reply, tenant, 'requests', r.res, 1);
        requestTaken = true;
        reply.header('x-ratelimit-remaining-requests', String(r.res.remainingPoints));
      }
      if (tenant.tokens !== undefined) {
        const t = await consume(tenant.tokens, tenant.id, reservation);
        if (!t.ok) {
          if (requestTaken && tenant.requests !== undefined) await tenant.requests.reward(tenant.id, 1);
          return refuse(reply, tenant, 'tokens', t.res, reservation);
        }
        reply.header('x-ratelimit-remaining-tokens', String(t.res.remainingPoints));
      }
    } catch (err) {
      console.error(`reference-limiter: limiter: ${err instanceof Error ? err.message : String(err)}`);
      return openAIError(reply, 503, 'The rate limiter store (Redis) did not answer.', 'server_error', 'limiter_unavailable');
    }

    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: upstreamAuth };
    const outputTokens = header(request.headers['x-sim-output-tokens']);
    if (outputTokens !== undefined) headers['x-sim-output-tokens'] = outputTokens;
    let status: number;
    let text: string;
    let contentType: string | undefined;
    try {
      const res = await upstream.request({ method: 'POST', path: '/v1/chat/completions', headers, body: raw as Buffer });
      status = res.statusCode;
      contentType = header(res.headers['content-type']);
      text = await res.body.text();
    } catch (err) {
      await settle(tenant, reservation, undefined);
      console.error(`reference-limiter: upstream: ${err instanceof Error ? err.message : String(err)}`);
      return openAIError(reply, 502, 'The upstream could not be reached.', 'server_error', 'upstream_unavailable');
    }
    await settle(tenant, reservation, status >= 200 && status < 300 ? totalTokensOf(text) : undefined);
    return reply.code(status).header('content-type', contentType ?? 'application/json').send(text);
  });

  /** Moves the tokens window by (used − reservation); the whole reservation back when `used` is unknown. Logs store faults. */
  async function settle(tenant: Tenant, reservation: number, used: number | undefined): Promise<void> {
    if (tenant.tokens === undefined) return;
    const diff = (used ?? 0) - reservation;
    try {
      if (diff < 0) await tenant.tokens.reward(tenant.id, -diff);
      else if (diff > 0) await tenant.tokens.penalty(tenant.id, diff);
    } catch (err) {
      console.error(`reference-limiter: settle: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  await app.listen({ host: opts.host, port: opts.port });
  console.log(`reference-limiter: listening on http://${opts.host}:${opts.port}, ${byKey.size} tenants, redis ${opts.redis}, upstream ${opts.upstream}`);

  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    void (async () => {
      try {
        await app.close();
        await upstream.close();
        await redis.quit();
      } catch (err) {
        console.error(`reference-limiter: shutdown: ${err instanceof Error ? err.message : String(err)}`);
      }
      process.exit(0);
    })();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const program = new Command('reference-limiter')
  .description('OpenAI chat proxy limited by rate-limiter-flexible RateLimiterRedis (fixed 60 s windows): the outside reference of the sharded-vs-central benchmark')
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .requiredOption('--port <p>', 'port to listen on', port)
  .requiredOption('--redis <url>', 'Redis URL (redis:// or rediss://)', url(['redis:', 'rediss:']))
  .requiredOption('--upstream <url>', 'upstream base URL (the simulator)', url(['http:', 'https:']))
  .requiredOption('--tenants <file>', 'tenants JSON file')
  .option('--connections <n>', 'upstream connections (undici Pool)', positiveInt, 128)
  .option('--charge-refused', 'keep the points of a refused consume counted (the library\'s default) instead of rewarding them back', false)
  .action(async (opts: CliOptions) => {
    await main(opts);
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`reference-limiter: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}
