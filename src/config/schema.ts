/**
 * The one config schema: it validates the YAML and gives the TypeScript types (`z.output`).
 * Unknown keys are refused everywhere (strict objects); defaults sit beside each field.
 */
import { z } from 'zod';
import { CATALOGUE_ID, CatalogueSchema } from './catalogue-schema.ts';
import { parseDuration } from './duration.ts';
import { hasPassword } from './url-password.ts';
import { parseUsdMicros } from '../pricing/usd.ts';
import type { PriceTable } from '../pricing/prices.ts';
import { isTimeZone } from '../limiter/budget-period.ts';

/** A duration: ms as a number, or a string like `1m`, `500ms`, `1h30m`. Output: ms. */
const duration = z.union([z.number().nonnegative(), z.string()]).transform((value, ctx) => {
  if (typeof value === 'number') return value;
  const ms = parseDuration(value);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is not a duration (use e.g. 500ms, 1s, 1m, 1h, 1d)` });
    return z.NEVER;
  }
  return ms;
}).meta({ format: 'duration' });

const positiveInt = z.number().int().positive();

/** Byte sizes: a number, or `512kb`, `1mb`. Output: bytes. */
const byteSize = z.union([z.number().int().positive(), z.string()]).transform((value, ctx) => {
  if (typeof value === 'number') return value;
  const m = /^(\d+)\s*(b|kb|mb)$/i.exec(value);
  if (m === null) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is not a size (use e.g. 1048576, 512kb, 1mb)` });
    return z.NEVER;
  }
  const unit = (m[2] ?? 'b').toLowerCase();
  return Number(m[1]) * (unit === 'mb' ? 1_048_576 : unit === 'kb' ? 1_024 : 1);
}).meta({ format: 'bytes' });

/**
 * A US-dollar amount: a number (`2.5`) or a decimal string (`"0.075"`, `"$50"`), at most 6 decimal
 * places. Output: integer micro-dollars, read exactly from the decimal text (see `src/pricing/usd.ts`).
 */
const usd = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const micros = parseUsdMicros(value);
  if (micros === undefined) {
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(value)} is not an amount of US dollars (a number ≥ 0 with at most 6 decimals, e.g. 2.5 or "0.075")` });
    return z.NEVER;
  }
  return micros;
});

/**
 * A price table in US dollars per million tokens, e.g. `{input: 2.50, cached_input: 1.25, output:
 * 10.00}`. Output: a {@link PriceTable} in integer micro-dollars per million tokens, with
 * `cached_input` and `cache_write` defaulting to `input` and `reasoning` to `output`.
 */
export const PriceSchema = z
  .strictObject({
    /** Uncached input tokens, USD per million. */
    input: usd,
    /** Output tokens, USD per million. */
    output: usd,
    /** Input tokens read from the prompt cache, USD per million. @default input */
    cached_input: usd.optional(),
    /** Input tokens written to the prompt cache (Anthropic's cache writes), USD per million. @default input */
    cache_write: usd.optional(),
    /** Reasoning tokens, USD per million, where they are priced apart from output. @default output */
    reasoning: usd.optional(),
  })
  .transform((p): PriceTable => ({
    input: p.input,
    cachedInput: p.cached_input ?? p.input,
    cacheWrite: p.cache_write ?? p.input,
    output: p.output,
    reasoning: p.reasoning ?? p.output,
  }));

/** Calendar periods of a cost limit. */
export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
/** Longest window of a cost limit: 366 days, ms. */
const MAX_BUDGET_WINDOW_MS = 366 * 86_400_000;

/** Algorithms of a requests/tokens limit. */
export const ALGORITHMS = ['token_bucket', 'sliding_window'] as const;
/** Tokenizers a model may name; `none` = no public tokenizer. */
export const ENCODINGS = ['o200k_base', 'cl100k_base', 'none'] as const;
/** Prompt counting modes at admission. */
export const ESTIMATORS = ['estimate', 'exact'] as const;

/**
 * One limit. Exactly one of `requests`, `tokens`, `concurrent` or `usd`:
 * `{requests: 600, window: 1m}`, `{tokens: 200000, window: 1m, algorithm: sliding_window}`,
 * `{concurrent: 20, lease_ttl: 10m}`, `{usd: 50, window: 1d}`, `{usd: 1000, period: month,
 * time_zone: Europe/Paris}`; `model` scopes it to one model.
 */
export const LimitSchema = z
  .strictObject({
    requests: positiveInt.optional(),
    tokens: positiveInt.optional(),
    concurrent: positiveInt.optional(),
    /** A cost limit (a budget): US dollars of spend per window or calendar period (> 0). */
    usd: usd.optional(),
    /** Window of a requests/tokens limit, 1s ..= 1d; of a cost limit, 1s ..= 366d (fixed windows aligned to the Unix epoch). */
    window: duration.optional(),
    /** A cost limit's calendar period (instead of a window): starts at local midnight in `time_zone`; weeks start on Monday. */
    period: z.enum(BUDGET_PERIODS).optional(),
    /** IANA time zone of a calendar `period`. @default UTC */
    time_zone: z.string().refine(isTimeZone, 'time_zone: an IANA time zone such as UTC, Europe/Paris or America/New_York').optional(),
    /**
     * A tokens limit only: how much a cached input token, a cache-write token and a reasoning token
     * count at settlement (0 ..= 10; 1 = a full token). @default 1 each
     */
    weights: z
      .strictObject({
        cache_read: z.number().min(0).max(10).optional(),
        cache_write: z.number().min(0).max(10).optional(),
        reasoning: z.number().min(0).max(10).optional(),
      })
      .optional(),
    /** @default token_bucket */
    algorithm: z.enum(ALGORITHMS).optional(),
    /** TTL of a concurrency slot that is neither released nor renewed. @default 10m */
    lease_ttl: duration.optional(),
    model: z.string().min(1).optional(),
  })
  .superRefine((limit, ctx) => {
    const kinds = (['requests', 'tokens', 'concurrent', 'usd'] as const).filter((k) => limit[k] !== undefined);
    if (kinds.length !== 1) {
      ctx.addIssue({ code: 'custom', message: 'a limit sets exactly one of requests, tokens, concurrent or usd' });
      return;
    }
    if (limit.weights !== undefined && kinds[0] !== 'tokens') ctx.addIssue({ code: 'custom', path: ['weights'], message: 'weights apply to tokens limits only' });
    if (kinds[0] !== 'usd' && (limit.period !== undefined || limit.time_zone !== undefined)) {
      ctx.addIssue({ code: 'custom', path: [limit.period !== undefined ? 'period' : 'time_zone'], message: 'period and time_zone apply to cost (usd) limits only' });
    }
    if (kinds[0] === 'usd') {
      if (limit.usd === 0) ctx.addIssue({ code: 'custom', path: ['usd'], message: 'usd: a budget above 0' });
      if (limit.algorithm !== undefined || limit.lease_ttl !== undefined) ctx.addIssue({ code: 'custom', message: 'a cost (usd) limit takes no algorithm or lease_ttl' });
      if ((limit.window === undefined) === (limit.period === undefined)) {
        ctx.addIssue({ code: 'custom', path: ['window'], message: 'a cost (usd) limit needs either a window (e.g. 1d, 30d) or a calendar period (day, week, month)' });
      } else if (limit.window !== undefined && (limit.window < 1_000 || limit.window > MAX_BUDGET_WINDOW_MS || !Number.isInteger(limit.window))) {
        ctx.addIssue({ code: 'custom', path: ['window'], message: 'the window of a cost limit must be a whole number of ms from 1s to 366d' });
      }
      if (limit.time_zone !== undefined && limit.period === undefined) ctx.addIssue({ code: 'custom', path: ['time_zone'], message: 'time_zone applies to a calendar period (period: day, week or month); windows are aligned to the Unix epoch' });
      return;
    }
    if (kinds[0] === 'concurrent') {
      if (limit.window !== undefined || limit.algorithm !== undefined) {
        ctx.addIssue({ code: 'custom', message: 'a concurrent limit takes no window or algorithm' });
      }
      return;
    }
    if (limit.lease_ttl !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['lease_ttl'], message: 'lease_ttl applies to concurrent limits only' });
    }
    if (limit.window === undefined) {
      ctx.addIssue({ code: 'custom', path: ['window'], message: 'a requests or tokens limit needs a window (1s to 1d)' });
    } else if (limit.window < 1_000 || limit.window > 86_400_000 || !Number.isInteger(limit.window)) {
      ctx.addIssue({ code: 'custom', path: ['window'], message: 'window must be a whole number of ms from 1s to 1d' });
    }
  });

/**
 * A tenant key: the literal key, or an object with the key (`key`) or the environment variable
 * holding it (`env`, read at start), and optionally the key's own default priority tier and the
 * tiers it may ask for (within the tenant's).
 */
const ApiKeySchema = z.union([
  z.string().min(8),
  z
    .strictObject({
      key: z.string().min(8).optional(),
      env: z.string().min(1).optional(),
      /** A name for this key (never the key itself): its limits are named after it (`tokens/1m#ci`), and so are its headers and errors. Required with `limits`. */
      id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'key id: 1-64 of A-Z a-z 0-9 . _ -').optional(),
      /** This key's own limits, applied on top of its tenant's (any kind; kept with the tenant on its owner). @default [] */
      limits: z.array(LimitSchema).optional(),
      /** Default tier of this key's requests (else the tenant's). */
      priority: z.string().min(1).optional(),
      /** Tiers this key may ask for with `x-quotaring-priority` (else the tenant's). */
      priorities: z.array(z.string().min(1)).min(1).optional(),
    })
    .refine((k) => (k.key === undefined) !== (k.env === undefined), 'give the key itself (key) or the environment variable holding it (env), one of the two')
    .refine((k) => k.limits === undefined || k.limits.length === 0 || k.id !== undefined, { message: 'a key with limits needs an id (a name for it: its limits are named after it)', path: ['id'] }),
]);

/**
 * A priority tier. Tiers are listed highest first. A request of a tier with a `floor` may not take
 * the last `floor` fraction of any requests or tokens limit of its tenant (that part is kept for
 * higher tiers); a refused request waits in its tenant's queue up to `max_wait` (0: an immediate 429).
 */
export const PrioritySchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9._-]{1,32}$/, 'tier name: 1-32 of A-Z a-z 0-9 . _ -'),
  /** Fraction (0 ≤ floor < 1) of each requests/tokens limit this tier leaves to higher tiers. @default 0 */
  floor: z.number().min(0, 'floor: a fraction from 0 up to (not including) 1, e.g. 0.2').lt(1, 'floor: a fraction from 0 up to (not including) 1, e.g. 0.2').default(0),
  /** Longest wait in the tenant's queue, ms; 0 = refused at once. @default 0 */
  max_wait: duration.default(0),
});

/** Default tiers: interactive first (never waits, no floor), then batch (keeps 20% for interactive, waits up to 60 s). */
export const DEFAULT_PRIORITIES = [
  { name: 'interactive', floor: 0, max_wait: 0 },
  { name: 'batch', floor: 0.2, max_wait: 60_000 },
] as const;

/**
 * A plan: a named set of limits (and default tiers) that tenants reference with `plan:`, so that many
 * tenants share one compiled policy. A tenant's own `limits` override the plan's limit of the same
 * name (`requests/1m`, `tokens/1d`, …) and add the others.
 */
export const PlanSchema = z.strictObject({
  name: z.string().regex(CATALOGUE_ID, 'plan name: 1-64 of A-Z a-z 0-9 . _ -'),
  limits: z.array(LimitSchema).default([]),
  /** Default tier of the plan's tenants (else the first of their tiers). */
  priority: z.string().min(1).optional(),
  /** Tiers the plan's tenants may ask for. @default every tier */
  priorities: z.array(z.string().min(1)).min(1).optional(),
  /** Overrides the model's estimator for the plan's tenants. */
  estimator: z.enum(ESTIMATORS).optional(),
});

/** A tenant: id, API keys, limits, default priority, optional estimator override. */
export const TenantSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'tenant id: 1-64 of A-Z a-z 0-9 . _ -'),
  keys: z.array(ApiKeySchema).min(1),
  /** The plan whose limits and tiers this tenant takes (its own `limits` override those of the same name). */
  plan: z.string().min(1).optional(),
  limits: z.array(LimitSchema).default([]),
  /** Default priority tier of the tenant's requests. @default the first of its tiers (interactive with the default tiers) */
  priority: z.string().min(1).optional(),
  /** Tiers the tenant's keys may ask for (`x-quotaring-priority`). @default every tier */
  priorities: z.array(z.string().min(1)).min(1).optional(),
  /** Overrides the model's estimator for this tenant's requests. */
  estimator: z.enum(ESTIMATORS).optional(),
  /**
   * A hot tenant: routed over this many nodes (`ring.range`), its requests/tokens limits kept in the
   * global cap and leased by each node, its concurrency limits split across them. 2..64.
   */
  spread: z.number().int().min(2).max(64).optional(),
  /** Export this tenant's remaining and size per limit (`quotaring_tenant_remaining`, `quotaring_tenant_limit`) and its settled spend (`quotaring_tenant_spend_usd_total`; docs/metrics.md). @default false */
  metrics: z.boolean().default(false),
});

/** A model clients name: tokenizer, counting mode, default output reservation, deployments. */
export const ModelSchema = z.strictObject({
  name: z.string().min(1),
  /** Tokenizer of the model; `none` = no public tokenizer (character estimate only). */
  encoding: z.enum(ENCODINGS),
  /** Prompt counting at admission. @default estimate */
  estimator: z.enum(ESTIMATORS).default('estimate'),
  /** Output reserved when a request sets no max_tokens, in tokens. @default 4096 */
  default_max_output: positiveInt.default(4096),
  /**
   * Prompt tokens reserved at admission for each piece of context a Responses request names but does
   * not carry (`previous_response_id` this node has not seen answered, `conversation`, a stored
   * `prompt`, a file or image by `file_id`, an `item_reference`); settlement uses the provider's
   * reported usage either way. @default 4096
   */
  stored_context_tokens: z.number().int().min(0).default(4096),
  /** Deployment names, in order of preference (failover follows this order). */
  deployments: z.array(z.string().min(1)).min(1),
  /** Prices of this model, USD per million tokens (what cost limits charge). A deployment's own `prices` replace them for the requests it serves. @default none */
  prices: PriceSchema.optional(),
  /**
   * Relative weights, one per deployment: new requests are spread over the deployments of the
   * endpoint's format in these proportions (smooth weighted round-robin, skipping a deployment whose
   * quota is spent) instead of going to the one with the most headroom. @default none (headroom)
   */
  weights: z.array(z.number().int('weights: whole numbers from 0 to 1000').min(0, 'weights: whole numbers from 0 to 1000').max(1_000, 'weights: whole numbers from 0 to 1000')).optional(),
});

/**
 * Providers a deployment may be: `openai` and `anthropic` (their own APIs and any server of the same
 * wire format), `azure` (Azure OpenAI: OpenAI's wire format on Azure's URLs and key header),
 * `bedrock` (AWS Bedrock Converse, SigV4-signed; serves both client formats, always translated),
 * `gemini` and `vllm` (OpenAI's wire format from Google's and vLLM's OpenAI-compatible servers, with
 * their own paths, error bodies, 429 waits and usage; see `src/providers/gemini/`, `src/providers/vllm/`).
 */
export const PROVIDERS = ['openai', 'anthropic', 'azure', 'bedrock', 'gemini', 'vllm'] as const;
/** A provider of {@link PROVIDERS}. */
export type Provider = (typeof PROVIDERS)[number];

/** An upstream deployment: provider kind, base URL, key from the environment, quota, timeouts. */
export const DeploymentSchema = z.strictObject({
  name: z.string().min(1),
  provider: z.enum(PROVIDERS),
  /**
   * Base URL without the `/v1` path, e.g. `https://api.openai.com`; its query string is kept on every
   * call. Azure: the whole prefix of the API paths, either a classic deployment URL with its
   * `api-version` (`https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21`)
   * or the v1 API (`https://RESOURCE.openai.azure.com/openai/v1`). Bedrock: `https://bedrock-runtime.<region>.amazonaws.com`.
   * Gemini: the OpenAI-compatibility prefix, `https://generativelanguage.googleapis.com/v1beta/openai`
   * (paths go below it without `/v1`). vLLM: the server's root, e.g. `http://vllm:8000`.
   */
  base_url: z.url({ protocol: /^https?$/ }),
  /**
   * Environment variable holding the provider key (never written in config). Bedrock: a Bedrock API
   * key (sent as a bearer token); without it, requests are signed with SigV4 from the AWS_* variables.
   */
  api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'an environment variable name').optional(),
  /**
   * How the key of `api_key_env` is sent (azure only): `api-key` (an Azure resource key, header
   * `api-key`) or `bearer` (a Microsoft Entra ID token, `Authorization: Bearer`). @default api-key
   */
  auth: z.enum(['api-key', 'bearer']).optional(),
  /**
   * Bedrock only: the AWS region requests are signed for. @default the region in a
   * `bedrock-runtime.<region>.amazonaws.com` base_url, else AWS_REGION, else AWS_DEFAULT_REGION
   */
  region: z.string().regex(/^[a-z]{2}(-[a-z]+)+-\d+$/, 'an AWS region such as us-east-1').optional(),
  /**
   * Wait before retrying a provider 429 that names no wait (Bedrock's ThrottlingException sends no
   * retry-after), doubled at each retry, within max_retry_wait. @default 1s for bedrock; unset: such a 429 is relayed
   */
  retry_backoff: duration.optional(),
  /** Model name to send upstream when it differs from the public one. */
  upstream_model: z.string().min(1).optional(),
  /**
   * How an openai, azure or vllm deployment serves `POST /v1/responses`: `native` (its own Responses API)
   * or `chat` (translated to chat completions, for OpenAI-compatible servers without it; requests
   * that need stored state, such as `previous_response_id` or `background`, skip it). Anthropic,
   * Gemini and Bedrock deployments always translate. @default native; chat for vllm (vLLM's Responses
   * API is recent and keeps no responses unless told to)
   */
  responses_api: z.enum(['native', 'chat']).optional(),
  /**
   * Prices of this deployment, USD per million tokens, replacing its model's for the requests it
   * serves (Azure and Bedrock prices differ from the provider's own). @default the model's prices
   */
  prices: PriceSchema.optional(),
  /** Provider quota (enforced cluster-wide by the global cap; see issue 4). */
  quota: z.strictObject({ rpm: positiveInt.optional(), tpm: positiveInt.optional() }).default({}),
  /** Fraction of the quota to use. @default 0.9 */
  headroom: z.number().gt(0).lte(1).default(0.9),
  /** Timeout for the upstream's response headers (a non-stream reply comes whole). @default 120s */
  headers_timeout: duration.default(120_000),
  /** Timeout between two body chunks from upstream. @default 60s */
  body_timeout: duration.default(60_000),
  /** Client request headers passed to this deployment (lower case), e.g. the simulator's `x-sim-output-tokens`. @default [] */
  forward_headers: z.array(z.string().regex(/^[a-z0-9-]+$/, 'a lower-case header name')).default([]),
  /**
   * A provider 429 (not `insufficient_quota`, not `x-should-retry: false`) is retried after the
   * provider's wait (retry-after, reset headers) while the waits of one request add up to at most
   * this; beyond it the 429 goes to the client with the provider's wait. 0 relays every 429. @default 10s
   */
  max_retry_wait: duration.default(10_000),
  /**
   * A soft failure: when this deployment's replies start later than this (time to the first byte,
   * a moving average), `soft_share` of the new requests that would start on it go to another
   * deployment of the model (same wire format) until it recovers. Off when unset.
   */
  soft_ttft: duration.optional(),
  /** Share of requests moved off a slow deployment (0 < share ≤ 1). @default 0.5 */
  soft_share: z.number().gt(0).lte(1).default(0.5),
  /**
   * Upper bound on each node's keep-alive connections to this deployment; unset: none (undici's own
   * default), a connection opened per request in flight and closed after 30 s idle. Over HTTP/1.1 a
   * stream holds its connection for its whole life, so a bound queues every stream beyond it inside
   * the node, where no limit, timeout or metric sees it: with the former default of 128, 5,000
   * streams at 20 tokens/s (`npm run bench:streams`, docs/benchmarks.md) waited 147 s p50 / 296 s
   * p99 for their headers and 1,030 were cut by the router's 5-min idle_timeout. A bound saves no
   * file descriptors (each stream holds its client's socket anyway); set one only for a provider
   * that refuses more connections. HTTP/2 (undici `allowH2`) is not used: undici 7.30 holds a POST
   * on an h2 session until every other request on it has finished (client-h2.js `busy()`), so a
   * stream would serialise every request behind it. @default unlimited
   */
  connections: positiveInt.optional(),
});

/**
 * Limits of an HTTP listener (node and router alike), against clients that hold sockets open or
 * send oversized headers. Answers are in the provider's error shape (see `src/gateway/client-errors.ts`).
 */
const listenerLimits = {
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

/** Token counting settings: worker pool and cache sizes. */
export const TokensSchema = z.strictObject({
  /** Worker threads for exact counting of large prompts. @default 2 */
  pool_size: positiveInt.default(2),
  /**
   * Exact counts of more new (uncached) characters than this run in the worker pool; smaller ones
   * run inline, on the event loop, for at most ~2 µs per character (`npm run bench:tokens`), so
   * the default blocks it for a few ms at worst. @default 2048
   */
  worker_threshold_chars: positiveInt.default(2048),
  /**
   * UTF-8 bytes of pre-tokenizer pieces one request may byte-pair merge in an exact count (pieces
   * that are a single token need no merge and are free). Once a piece does not fit, it and the
   * request's remaining uncounted text are charged their byte length: an upper bound of their
   * tokens, so counts err high, never low. Bounds one request's merging to about 0.5 s of a worker
   * thread at worst (~1 µs per byte). @default 524288
   */
  merge_budget_bytes: positiveInt.default(524_288),
  /** Per-message counts kept in the exact-count cache. @default 50000 */
  cache_entries: positiveInt.default(50_000),
});

/** A node of a static member list. */
export const MemberSchema = z.strictObject({
  /** Unique node id, e.g. `node-1`. */
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'member id: 1-64 of A-Z a-z 0-9 . _ -'),
  /** Where the node serves clients, e.g. `http://127.0.0.1:8081`. */
  url: z.url({ protocol: /^https?$/, error: 'member url: an http:// or https:// URL such as http://127.0.0.1:8101' }),
  /** Relative share of the ring. @default 1 */
  weight: z.number().int({ error: 'member weight: a positive integer' }).positive({ error: 'member weight: a positive integer' }).optional(),
});

/** The name of an environment variable. */
const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');

/** One Redis Sentinel: host and port (default 26379). */
const SentinelSchema = z.strictObject({
  host: z.string().min(1),
  /** @default 26379 */
  port: z.number().int().min(1).max(65535).default(26379),
});

/**
 * Where Redis is: exactly one of `url` (in the file: no password there, the file is not a secret
 * store), `url_env` (an environment variable holding the whole URL, password included) and
 * `sentinels` + `name` (Redis Sentinel: the sentinels are asked for the current primary, and again
 * after a failover), plus optionally ACL credentials from the environment (`username_env`,
 * `password_env`; `sentinel_username_env`, `sentinel_password_env` for the sentinels) and TLS
 * options (`tls`). Resolved at load (`src/config/redis-url.ts`); the resolved URL and credentials
 * are never logged unredacted.
 */
export const RedisSchema = z
  .strictObject({
    /** `redis://[user@]host:port[/db]` or `rediss://...`, without a password. */
    url: z
      .string()
      .regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')
      .refine((url) => !hasPassword(url), 'a password in the config file: put the whole URL in an environment variable named by url_env, or the password in one named by password_env')
      .optional(),
    /** Environment variable holding the URL (it may carry the password). */
    url_env: envName.optional(),
    /** Environment variable holding the ACL user name (Redis 6+ `AUTH <user> <password>`). */
    username_env: envName.optional(),
    /** Environment variable holding the password (of the ACL user when `username_env` or the URL names one). */
    password_env: envName.optional(),
    /** Redis Sentinel: the sentinels to ask where the primary named `name` is (3 or more, on separate machines). */
    sentinels: z.array(SentinelSchema).min(1, 'sentinels: list at least one sentinel (three for a quorum of two)').optional(),
    /** The primary's name in the sentinels' configuration (`sentinel monitor <name> ...`). Required with `sentinels`. */
    name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'a sentinel master name: 1-64 of A-Z a-z 0-9 . _ -').optional(),
    /** Environment variable holding the sentinels' ACL user name. */
    sentinel_username_env: envName.optional(),
    /** Environment variable holding the sentinels' password (their `requirepass`). */
    sentinel_password_env: envName.optional(),
    /**
     * TLS to Redis (a `rediss://` URL turns it on too). With `sentinels`: TLS to the primary and the
     * replicas, and to the sentinels when `sentinels_tls` is true.
     */
    tls: z
      .strictObject({
        /** PEM file of the CA that signed Redis' certificate (else the system's CAs), read at start. */
        ca_file: z.string().min(1).optional(),
        /** Name expected in Redis' certificate when it differs from the host connected to. */
        servername: z.string().min(1).optional(),
        /** Refuse a certificate the CA did not sign. Off only for tests. @default true */
        reject_unauthorized: z.boolean().default(true),
        /** Use TLS to the sentinels too. @default false */
        sentinels_tls: z.boolean().default(false),
      })
      .optional(),
    /**
     * How often a node in fallback probes Redis (one PING through the circuit breaker, with or
     * without traffic), and how long the breaker stays open before its next probe: a node leaves
     * fallback within about this long after Redis answers again. @default 1s
     */
    probe_interval: duration.refine((ms) => ms >= 10, 'probe_interval: at least 10ms').default(1_000),
  })
  .superRefine((redis, ctx) => {
    const given = [redis.url, redis.url_env, redis.sentinels].filter((x) => x !== undefined).length;
    if (given !== 1) ctx.addIssue({ code: 'custom', message: 'set exactly one of url, url_env and sentinels' });
    if (redis.sentinels !== undefined && redis.name === undefined) ctx.addIssue({ code: 'custom', path: ['name'], message: 'name: the primary\'s name in the sentinels\' configuration (sentinel monitor <name> ...), required with sentinels' });
    if (redis.sentinels === undefined) {
      for (const key of ['name', 'sentinel_username_env', 'sentinel_password_env'] as const) {
        if (redis[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: `${key} applies with sentinels only` });
      }
      if (redis.tls?.sentinels_tls === true) ctx.addIssue({ code: 'custom', path: ['tls', 'sentinels_tls'], message: 'sentinels_tls applies with sentinels only' });
    }
    if (redis.url !== undefined && redis.tls !== undefined && !redis.url.startsWith('rediss://')) {
      ctx.addIssue({ code: 'custom', path: ['tls'], message: 'tls options with a redis:// URL: use rediss:// for TLS' });
    }
  });

/**
 * Cluster settings. Without `redis`, membership is the static `members` list (routers health-check
 * them); with `redis.url`, nodes heartbeat into Redis and everyone builds the ring from the live set.
 */
export const ClusterSchema = z.strictObject({
  /** Namespace of this cluster's Redis keys. @default default */
  name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'cluster name: 1-64 of A-Z a-z 0-9 . _ -').default('default'),
  /** Static members (the embedded default, no Redis). */
  members: z.array(MemberSchema).default([]),
  /**
   * Environment variable holding the cluster secret (at least 32 characters, the same in every node
   * and router; `<name>_PREVIOUS` may hold the one being rotated out). Required by every process of
   * a cluster (static members or Redis); see docs/security.md. @default QUOTARING_CLUSTER_SECRET
   */
  secret_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('QUOTARING_CLUSTER_SECRET'),
  /** Redis for membership (and, later, handoff and the global cap). */
  redis: RedisSchema.optional(),
  /** Node heartbeat period. @default 1s */
  heartbeat: duration.default(1_000),
  /** A member silent this long is out of the ring. @default 3s */
  dead_after: duration.default(3_000),
  /** Virtual nodes per member on the ring. @default 160 */
  vnodes: z.number().int().min(1).max(1_000).default(160),
  /** Router health checks of members. @default 1s */
  health_check: duration.default(1_000),
  /**
   * When Redis cannot be reached for a cluster-wide limit (deployment quotas): `local` serves within
   * each node's share (capacity / live nodes); `closed` answers 503 `limiter_unavailable`.
   * @default local
   */
  on_redis_failure: z.enum(['local', 'closed']).default('local'),
  /**
   * Hot tenants found by their owner (Redis membership only): a tenant whose request rate stays above
   * `threshold_rps` for `sustain` is spread over `spread` nodes like a tenant configured with
   * `spread`, until its rate has stayed below half the threshold for `cooldown`. Off without `threshold_rps`.
   */
  hot: z
    .strictObject({
      /** Requests per second (the owner's moving average, 1 s time constant) that make a tenant hot. */
      threshold_rps: z.number().positive().optional(),
      /** Nodes a hot tenant is spread over. @default 3 */
      spread: z.number().int().min(2).max(64).default(3),
      /** How long the rate must stay above the threshold. @default 5s */
      sustain: duration.default(5_000),
      /** How long a hot tenant stays spread after its rate fell below half the threshold. @default 60s */
      cooldown: duration.default(60_000),
    })
    .prefault({}),
  /** Limiter-state handoff between owners (Redis membership only). */
  handoff: z
    .strictObject({
      /** How long a new owner waits for the previous owner's handoff before its first decision for a tenant. @default 250ms */
      wait_ms: duration.default(250),
      /** Period of the owners' checkpoints of recently touched tenants to Redis. @default 1s */
      checkpoint: duration.default(1_000),
      /** After a graceful leave is announced, how long a node keeps answering 421 (so routers catch up) before it stops accepting connections. @default 500ms */
      drain: duration.default(500),
      /** On SIGTERM, how long in-flight requests (streams) may take to finish before the node exits anyway. @default 30s */
      grace: duration.default(30_000),
    })
    .prefault({}),
});

/** Listening settings of a router. */
export const RouterSchema = z.strictObject({
  /** @default 127.0.0.1 */
  host: z.string().default('127.0.0.1'),
  /** @default 8080 */
  port: z.number().int().min(0).max(65535).default(8080),
  ...listenerLimits,
});

/**
 * The admin API of nodes and routers: its own listener, every route behind a bearer token read
 * from the environment variable `token_env`. Not started when that variable is unset or empty.
 */
export const AdminSchema = z.strictObject({
  /** @default 127.0.0.1 */
  host: z.string().default('127.0.0.1'),
  /** Admin port of a node (`--admin-port` overrides; 0: any free port). @default 9100 */
  port: z.number().int().min(0).max(65535).default(9100),
  /** Admin port of a router, which also serves the dashboard and the live stream. @default 9200 */
  router_port: z.number().int().min(0).max(65535).default(9200),
  /** Environment variable holding the bearer token. @default QUOTARING_ADMIN_TOKEN */
  token_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('QUOTARING_ADMIN_TOKEN'),
});

/** Timeouts of the node's and the router's listeners that contradict each other or cut legitimate requests. */
function listenerTimeouts(
  config: { server: ListenerTimeouts; router: ListenerTimeouts; priorities: readonly { max_wait: number }[]; deployments: readonly { headers_timeout: number; body_timeout: number }[] },
  ctx: z.RefinementCtx,
): void {
  const longestWait = Math.max(0, ...config.priorities.map((p) => p.max_wait));
  const longestHeaders = Math.max(0, ...config.deployments.map((d) => d.headers_timeout));
  const longestBody = Math.max(0, ...config.deployments.map((d) => d.body_timeout));
  // A request a router accepts must not be refused by its node (which allows more for what routers add).
  if (config.router.max_headers > config.server.max_headers) {
    ctx.addIssue({ code: 'custom', path: ['router', 'max_headers'], message: `router.max_headers (${config.router.max_headers}) cannot exceed server.max_headers (${config.server.max_headers})` });
  }
  if (config.router.max_header_size > config.server.max_header_size) {
    ctx.addIssue({ code: 'custom', path: ['router', 'max_header_size'], message: `router.max_header_size (${config.router.max_header_size} bytes) cannot exceed server.max_header_size (${config.server.max_header_size} bytes)` });
  }
  for (const section of ['server', 'router'] as const) {
    const s = config[section];
    if (s.request_timeout > 0 && s.headers_timeout > s.request_timeout) {
      ctx.addIssue({ code: 'custom', path: [section, 'headers_timeout'], message: `headers_timeout (${s.headers_timeout} ms) cannot exceed request_timeout (${s.request_timeout} ms)` });
    }
    const silent = Math.max(longestWait + longestHeaders, longestBody);
    if (s.idle_timeout > 0 && s.idle_timeout <= silent) {
      ctx.addIssue({
        code: 'custom',
        path: [section, 'idle_timeout'],
        message: `idle_timeout (${s.idle_timeout} ms) would cut requests that legitimately wait ${silent} ms without a byte (longest priority max_wait + longest deployment headers_timeout, or a body_timeout): raise it or set 0`,
      });
    }
  }
}

/** The timeouts {@link listenerTimeouts} checks, in ms. */
interface ListenerTimeouts {
  readonly headers_timeout: number;
  readonly request_timeout: number;
  readonly idle_timeout: number;
  readonly max_headers: number;
  readonly max_header_size: number;
}

/** The whole config file; cross-references (deployments, models, duplicate names) are checked too. */
export const ConfigSchema = z
  .strictObject({
    /**
     * `sharded` (default): each tenant's owner decides in RAM. `central`: the comparison baseline —
     * every decision is a Lua call against Redis (`cluster.redis.url`), any node decides for any
     * tenant, routers balance round-robin (issue 5).
     */
    mode: z.enum(['sharded', 'central']).default('sharded'),
    server: ServerSchema.prefault({}),
    tokens: TokensSchema.prefault({}),
    cluster: ClusterSchema.prefault({}),
    router: RouterSchema.prefault({}),
    admin: AdminSchema.prefault({}),
    /** Priority tiers, highest first. @default interactive, batch */
    priorities: z.array(PrioritySchema).min(1, 'priorities: list at least one tier (or leave it out for interactive and batch)').default(DEFAULT_PRIORITIES.map((p) => ({ ...p }))),
    /** Admission queues: each tenant queues at most `max_depth` requests (all tiers). @default 100 */
    queue: z.strictObject({ max_depth: z.number().int().min(1).max(100_000).default(100) }).prefault({}),
    /** Named sets of limits tenants reference (`plan:`), here and in the catalogue. @default [] */
    plans: z.array(PlanSchema).default([]),
    /** Where tenants managed at runtime live (see docs/tenants.md). @default store: none */
    catalogue: CatalogueSchema.prefault({}),
    /** Tenants of the file; at least one unless `catalogue.store` keeps tenants managed at runtime. @default [] */
    tenants: z.array(TenantSchema).default([]),
    models: z.array(ModelSchema).min(1),
    deployments: z.array(DeploymentSchema).min(1),
  })
  .superRefine((config, ctx) => {
    const unique = (items: readonly { name?: string; id?: string }[], field: 'tenants' | 'plans' | 'models' | 'deployments') => {
      const seen = new Set<string>();
      items.forEach((item, i) => {
        const name = item.name ?? item.id ?? '';
        if (seen.has(name)) ctx.addIssue({ code: 'custom', path: [field, i], message: `duplicate name "${name}"` });
        seen.add(name);
      });
    };
    unique(config.tenants, 'tenants');
    unique(config.plans, 'plans');
    if (config.tenants.length === 0 && config.catalogue.store === 'none') {
      ctx.addIssue({ code: 'custom', path: ['tenants'], message: 'list at least one tenant, or set catalogue.store (file or postgres) to manage tenants at runtime' });
    }
    const planNames = new Set(config.plans.map((p) => p.name));
    config.tenants.forEach((tenant, i) => {
      if (tenant.plan !== undefined && !planNames.has(tenant.plan)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'plan'], message: `no plan named "${tenant.plan}" (plans: ${[...planNames].join(', ') || 'none'})` });
    });
    unique(config.models, 'models');
    unique(config.deployments, 'deployments');
    if (config.mode === 'central' && config.cluster.redis === undefined) {
      ctx.addIssue({ code: 'custom', path: ['mode'], message: 'mode: central keeps every limit in Redis: set cluster.redis.url' });
    }
    if (config.cluster.hot.threshold_rps !== undefined && config.cluster.redis === undefined) {
      ctx.addIssue({ code: 'custom', path: ['cluster', 'hot', 'threshold_rps'], message: 'hot tenant detection needs cluster.redis.url (the hot set is shared through Redis); use spread: k on the tenant instead' });
    }
    if (config.cluster.redis !== undefined && config.cluster.members.length > 0) {
      ctx.addIssue({ code: 'custom', path: ['cluster'], message: 'set either members (static membership) or redis.url (Redis membership), not both' });
    }
    listenerTimeouts(config, ctx);
    const ids = new Set<string>();
    config.cluster.members.forEach((m, i) => {
      if (ids.has(m.id)) ctx.addIssue({ code: 'custom', path: ['cluster', 'members', i, 'id'], message: `duplicate member id "${m.id}"` });
      ids.add(m.id);
    });
    config.deployments.forEach((d, i) => {
      if (d.responses_api !== undefined && d.provider !== 'openai' && d.provider !== 'azure' && d.provider !== 'vllm') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'responses_api'], message: `responses_api applies to openai, azure and vllm deployments (a ${d.provider} deployment always serves Responses requests translated)` });
      if (d.auth !== undefined && d.provider !== 'azure') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'auth'], message: `auth applies to azure deployments only (${d.provider} keys are sent the ${d.provider} way)` });
    });
    const deployments = new Set(config.deployments.map((d) => d.name));
    config.deployments.forEach((d, i) => {
      if (d.region !== undefined && d.provider !== 'bedrock') ctx.addIssue({ code: 'custom', path: ['deployments', i, 'region'], message: 'region is for provider: bedrock only' });
    });
    config.models.forEach((model, i) => {
      if (model.weights !== undefined && model.weights.length !== model.deployments.length) {
        ctx.addIssue({ code: 'custom', path: ['models', i, 'weights'], message: `give one weight per deployment (${model.deployments.length}), got ${model.weights.length}` });
      } else if (model.weights !== undefined && !model.weights.some((w) => w > 0)) {
        ctx.addIssue({ code: 'custom', path: ['models', i, 'weights'], message: 'at least one weight must be > 0' });
      }
      model.deployments.forEach((name, j) => {
        if (!deployments.has(name)) {
          ctx.addIssue({ code: 'custom', path: ['models', i, 'deployments', j], message: `no deployment named "${name}"` });
        }
      });
    });
    const tiers = new Set<string>();
    config.priorities.forEach((p, i) => {
      if (tiers.has(p.name)) ctx.addIssue({ code: 'custom', path: ['priorities', i, 'name'], message: `duplicate tier "${p.name}"` });
      tiers.add(p.name);
    });
    const tierList = [...tiers].join(', ');
    config.tenants.forEach((tenant, i) => {
      const allowed = new Set(tenant.priorities ?? tiers);
      (tenant.priorities ?? []).forEach((name, j) => {
        if (!tiers.has(name)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priorities', j], message: `no tier named "${name}" (tiers: ${tierList})` });
      });
      if (tenant.priority !== undefined && !tiers.has(tenant.priority)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priority'], message: `no tier named "${tenant.priority}" (tiers: ${tierList})` });
      else if (tenant.priority !== undefined && !allowed.has(tenant.priority)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'priority'], message: `"${tenant.priority}" is not among the tenant's priorities` });
      tenant.keys.forEach((key, j) => {
        if (typeof key === 'string') return;
        (key.priorities ?? []).forEach((name, k) => {
          if (!allowed.has(name)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'priorities', k], message: `"${name}" is not among the tenant's tiers (${[...allowed].join(', ')})` });
        });
        if (key.priority !== undefined && !new Set(key.priorities ?? allowed).has(key.priority)) {
          ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'priority'], message: `"${key.priority}" is not among the key's tiers (${[...(key.priorities ?? allowed)].join(', ')})` });
        }
      });
    });
    const models = new Set(config.models.map((m) => m.name));
    config.tenants.forEach((tenant, i) => {
      if (tenant.spread === undefined) return;
      tenant.limits.forEach((limit, j) => {
        if (limit.concurrent !== undefined && limit.concurrent < tenant.spread!) {
          ctx.addIssue({ code: 'custom', path: ['tenants', i, 'limits', j, 'concurrent'], message: `concurrent ${limit.concurrent} cannot be split over spread ${tenant.spread} nodes (each needs at least 1 slot)` });
        }
      });
    });
    const deploymentByName = new Map(config.deployments.map((d) => [d.name, d]));
    /** True when every request for `model` has a price (the model's, or every one of its deployments'). */
    const priced = (model: (typeof config.models)[number]): boolean => model.prices !== undefined || model.deployments.every((d) => deploymentByName.get(d)?.prices !== undefined);
    config.tenants.forEach((tenant, i) => {
      const scopes: { path: (string | number)[]; limits: readonly (typeof tenant.limits)[number][] }[] = [{ path: ['tenants', i, 'limits'], limits: tenant.limits }];
      const keyIds = new Set<string>();
      tenant.keys.forEach((key, j) => {
        if (typeof key === 'string') return;
        if (key.id !== undefined) {
          if (keyIds.has(key.id)) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'id'], message: `duplicate key id "${key.id}" in tenant ${tenant.id}` });
          keyIds.add(key.id);
        }
        if (key.limits !== undefined && key.limits.length > 0) {
          scopes.push({ path: ['tenants', i, 'keys', j, 'limits'], limits: key.limits });
          if (tenant.spread !== undefined) ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'limits'], message: 'limits per key are not supported on a spread tenant (spread: k)' });
          if (config.mode === 'central') ctx.addIssue({ code: 'custom', path: ['tenants', i, 'keys', j, 'limits'], message: 'limits per key are kept with their tenant on its owner: not supported with mode: central' });
        }
      });
      for (const scope of scopes) {
        scope.limits.forEach((limit, j) => {
          if (limit.model !== undefined && !models.has(limit.model)) {
            ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'model'], message: `no model named "${limit.model}"` });
          }
          if (limit.usd === undefined) return;
          if (config.mode === 'central') ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: 'cost (usd) limits are kept in the owner\'s RAM: not supported with mode: central' });
          if (tenant.spread !== undefined) ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: 'cost (usd) limits are not supported on a spread tenant (spread: k)' });
          const unpriced = config.models.filter((m) => (limit.model === undefined || m.name === limit.model) && !priced(m)).map((m) => m.name);
          if (unpriced.length > 0) {
            ctx.addIssue({ code: 'custom', path: [...scope.path, j, 'usd'], message: `a cost limit needs prices for every model it covers: set prices on model${unpriced.length > 1 ? 's' : ''} ${unpriced.join(', ')} (or on each of ${unpriced.length > 1 ? 'their' : 'its'} deployments)` });
          }
        });
      }
    });
  });

/** The config as the schema validates it, before secrets are resolved. */
export type ParsedConfig = z.output<typeof ConfigSchema>;
/** Where and how to connect to Redis, resolved at load (see `src/config/redis-url.ts`). A secret: never log it unredacted. */
export type RedisConnection =
  | {
      readonly kind: 'url';
      /** `redis://` or `rediss://` with the credentials of `username_env` / `password_env` in it. */
      readonly url: string;
      readonly tls?: RedisTls;
    }
  | {
      readonly kind: 'sentinel';
      readonly sentinels: readonly { readonly host: string; readonly port: number }[];
      /** The primary's name in the sentinels' configuration. */
      readonly name: string;
      readonly username?: string;
      readonly password?: string;
      readonly sentinelUsername?: string;
      readonly sentinelPassword?: string;
      readonly tls?: RedisTls;
    };
/** TLS options of a Redis connection (`cluster.redis.tls`). */
export type RedisTls = NonNullable<NonNullable<ParsedConfig['cluster']['redis']>['tls']>;
/**
 * `cluster.redis` once loaded: `connection` resolved from the file and the environment, and `url`
 * for a URL connection (from the file, or `url_env`, with the credentials in it; undefined with
 * sentinels). A secret: never log it unredacted.
 */
export type RedisConfig = Omit<NonNullable<ParsedConfig['cluster']['redis']>, 'url'> & { readonly url?: string; readonly connection: RedisConnection };
/** The validated config, as the YAML says it with defaults filled in, durations in ms and the Redis URL resolved. */
export type Config = Omit<ParsedConfig, 'cluster'> & { cluster: Omit<ParsedConfig['cluster'], 'redis'> & { redis?: RedisConfig } };
/** One validated plan. */
export type PlanConfig = Config['plans'][number];
/** One validated tenant. */
export type TenantConfig = Config['tenants'][number];
/** One validated limit of a tenant (durations in ms). */
export type LimitConfig = TenantConfig['limits'][number];
/** One validated priority tier (max_wait in ms). */
export type PriorityConfig = Config['priorities'][number];
/** One validated model. */
export type ModelConfig = Config['models'][number];
/** Validated settings of a node's listener and request limits (durations in ms, sizes in bytes). */
export type ServerConfig = Config['server'];
/** Validated settings of a router's listener (durations in ms, sizes in bytes). */
export type RouterConfig = Config['router'];
/** Validated cluster settings (durations in ms). */
export type ClusterConfig = Config['cluster'];
/** One static member. */
export type MemberConfig = ClusterConfig['members'][number];

/** One validated deployment (durations in ms; the key itself is resolved at load). */
export type DeploymentConfig = Config['deployments'][number];
