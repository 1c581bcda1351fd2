/**
 * The `deployments:` section: the upstream deployments models are served by, with their provider,
 * base URL, key, quota, prices, retries, timeouts and connections.
 */
import { z } from 'zod';
import { PriceSchema } from './schema-prices.ts';
import { duration, positiveInt } from './units.ts';

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
  /** Provider quota (enforced cluster-wide by the global cap, docs/limits.md "Deployment quotas"). */
  quota: z
    .strictObject({
      rpm: positiveInt.optional(),
      tpm: positiveInt.optional(),
      /**
       * How the provider counts the quota. `token_bucket` (OpenAI's documented rule: capacity = the
       * per-minute limit, refilled continuously): the cluster's bucket holds `quota × headroom`.
       * `sliding_window` (no more than the quota in any 60 s): the bucket holds `(1 − headroom) ×
       * quota` and refills at `headroom × quota` a minute, so any 60 s admits at most the quota
       * (needs headroom < 1). @default token_bucket
       */
      algorithm: z.enum(['token_bucket', 'sliding_window']).default('token_bucket'),
      /**
       * Provider feedback (docs/limits.md "Provider feedback"): the rate-limit headers of each
       * successful reply (`x-ratelimit-remaining-*`, `anthropic-ratelimit-*-remaining`) lower the
       * cluster's bucket when the provider has less left than quotaring counts (the key used
       * elsewhere). `true`, `false`, or `{ max_outside }`: the most it may lower a bucket in any
       * 60 s, as a fraction of its capacity (0 < max_outside ≤ 1), so a buggy or hostile upstream
       * costs the deployment at most that. Needs `cluster.redis` (without it nothing is lowered).
       * @default true (max_outside 0.5)
       */
      feedback: z.union([z.boolean(), z.strictObject({ max_outside: z.number().gt(0).lte(1).default(0.5) })]).default(true),
    })
    .default({ algorithm: 'token_bucket', feedback: true }),
  /**
   * Share the quota fairly among the tenants that want it now, cluster-wide (weighted max-min, with
   * each tenant's or plan's `share: { weight, floor }`; docs/limits.md "Fair share"): `true`, or
   * `{ reserve }` — the fraction of each quota bucket that only requests within their tenant's share
   * may take (0 ≤ reserve < 1). Needs a `quota`. @default off (first come, first served)
   */
  fair_share: z.union([z.boolean(), z.strictObject({ reserve: z.number().gte(0).lt(1).default(0.1) })]).optional(),
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
