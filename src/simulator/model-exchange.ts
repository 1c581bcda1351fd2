/**
 * The life of one request on a model route: validate, count the prompt, draw the fault, admit
 * against the key's quota (or answer 429), inject a 5xx, then deliver the reply and settle the
 * quota and the counters on how it ended.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { LimitState } from '../limiter/index.ts';
import type { PreparedRequest, Prepare, ReplyIdentity } from './prepared-request.ts';
import { anthropicError, badRequest, bedrockError, echoedKeyError, echoedKeyEvent, openAIError, serverFault, type ProviderError, type Wire } from './provider-errors.ts';
import { RATE_LIMITED_WAIT_MS, isEchoFault } from './faults.ts';
import { geminiError, geminiOverloaded, geminiRateLimitError } from './gemini.ts';
import { VLLM_NO_KEY, vllmError } from './vllm.ts';
import { EVENT_STREAM_CONTENT_TYPE } from '../providers/bedrock/converse.ts';
import {
  anthropicRateLimitHeaders,
  formatGoDuration,
  openAIRateLimitHeaders,
  retryAfterHeaders,
  type HeaderMap,
} from '../providers/rate-limit-headers.ts';
import { deliverJson, deliverStream, type ReplyOutcome } from './reply-writer.ts';
import { headerValue, isFieldError, readModel, readMsHeader } from './request-fields.ts';
import type { SimulatorState } from './simulator-state.ts';
import {
  apiVersionError,
  azureKeyOf,
  azureOperation,
  azureRateLimitError,
  azureRateLimitHeaders,
  azureRetryHeaders,
  contentFilterError,
  wantsContentFilter,
  withPromptFilterResults,
  type AzureApi,
} from './azure.ts';

/** A model route: its wire format, its request preparation and the prefix of its reply ids. */
export interface ModelRoute {
  readonly wire: Wire;
  readonly prepare: Prepare;
  /** e.g. `chatcmpl-sim`, `msg_sim`, `emb-sim`. */
  readonly idPrefix: string;
  /** An Azure OpenAI route (see `./azure.ts`): its key, errors, headers and content filter are Azure's. */
  readonly azure?: AzureApi;
  /** The model of a request whose model is not in its body (Bedrock: the `{modelId}` path label). @default body.model */
  readonly modelOf?: (req: FastifyRequest) => string;
  /** Replies without Azure's `prompt_filter_results` (the Responses API has none). @default false */
  readonly noPromptFilterResults?: boolean;
  /** An OpenAI-compatible server with its own key rule, errors and headers: `./gemini.ts`, `./vllm.ts`. */
  readonly flavor?: 'gemini' | 'vllm';
}

/** The key of a request on `route` ('' when missing). */
export function routeKeyOf(route: ModelRoute, headers: IncomingHttpHeaders): string {
  if (route.azure !== undefined) return azureKeyOf(headers);
  const key = apiKeyOf(route.wire, headers);
  return key === '' && route.flavor === 'vllm' ? VLLM_NO_KEY : key;
}

/** 400 for a malformed request, in the route's shape. */
function routeBadRequest(route: ModelRoute, message: string, param: string | null): ProviderError {
  if (route.flavor === 'gemini') return geminiError(400, 'INVALID_ARGUMENT', message);
  if (route.flavor === 'vllm') return vllmError(400, 'BadRequestError', message);
  return badRequest(route.wire, message, param);
}

/** `Credential=<access key id>/…` of a SigV4 Authorization header. */
const SIGV4_CREDENTIAL = /^AWS4-HMAC-SHA256 Credential=([^/,\s]+)\//;

/**
 * The API key of a request: OpenAI `Authorization: Bearer K`; Anthropic `x-api-key: K`, or
 * `Authorization: Bearer K` (what @anthropic-ai/sdk 1.x sends for `apiKey`).
 * @returns '' when missing.
 */
export function apiKeyOf(wire: Wire, headers: IncomingHttpHeaders): string {
  if (wire === 'bedrock') {
    // SigV4: the access key id (the signature is verified before the route runs); else a Bedrock API key.
    const id = SIGV4_CREDENTIAL.exec(headers.authorization ?? '')?.[1];
    if (id !== undefined) return id;
  }
  if (wire === 'anthropic') {
    const key = headerValue(headers['x-api-key']);
    if (key !== undefined && key !== '') return key;
  }
  const auth = headers.authorization;
  if (auth === undefined || auth.length < 8 || auth.slice(0, 7).toLowerCase() !== 'bearer ') return '';
  return auth.slice(7).trim();
}

/** Sends a provider error with `headers`. */
export function sendError(reply: FastifyReply, err: ProviderError, headers: HeaderMap = {}): void {
  if (err.headers !== undefined) Object.assign(headers, err.headers);
  headers['content-type'] = 'application/json; charset=utf-8';
  reply.code(err.status).headers(headers).send(err.body);
}

function limitOf(limits: readonly LimitState[], kind: 'requests' | 'tokens'): LimitState | undefined {
  return limits.find((l) => l.kind === kind);
}

/** The 429 body of a quota refusal, in OpenAI's or Anthropic's words. */
function rateLimitError(wire: Wire, model: string, reason: 'limited' | 'too_large', kind: 'requests' | 'tokens', retryAfterMs: number, requested: number, limits: readonly LimitState[]): ProviderError {
  // Bedrock says neither the limit nor the wait (and sends no retry-after).
  if (wire === 'bedrock') return bedrockError(429, 'ThrottlingException', kind === 'tokens' ? 'Too many tokens, please wait before trying again.' : 'Too many requests, please wait before trying again.');
  const l = limitOf(limits, kind);
  const limit = l?.limit ?? 0;
  const used = l === undefined ? 0 : l.limit - l.remaining;
  const per = kind === 'requests' ? 'requests per min (RPM)' : 'tokens per min (TPM)';
  if (wire === 'anthropic') {
    const message =
      reason === 'too_large'
        ? `This request would exceed your organization's rate limit of ${limit} ${kind} per minute even with a full quota (requested ${requested}). Reduce the prompt length or the maximum tokens requested.`
        : `This request would exceed your organization's rate limit of ${limit} ${kind} per minute. Please try again in ${formatGoDuration(retryAfterMs)}.`;
    return anthropicError(429, 'rate_limit_error', message);
  }
  const message =
    reason === 'too_large'
      ? `Request too large for ${model} on ${per}: Limit ${limit}, Requested ${requested}. The input or output tokens must be reduced in order to run successfully.`
      : `Rate limit reached for ${per} on ${model}: Limit ${limit}, Used ${used}, Requested ${kind === 'requests' ? 1 : requested}. Please try again in ${formatGoDuration(retryAfterMs)}.`;
  return openAIError(429, message, kind, 'rate_limit_exceeded');
}

/**
 * Serves one request on a model route. The caller (an onRequest hook) has already checked that a
 * key is present and counted the request. Never throws for a bad request: answers it.
 */
export function serveModelRequest(state: SimulatorState, route: ModelRoute, req: FastifyRequest, reply: FastifyReply): void {
  const { wire } = route;
  const { stats, quota, opts } = state;
  const headers = req.headers;
  const key = routeKeyOf(route, headers);
  const azure = route.azure;
  const apiVersion = (req.query as Record<string, string | undefined> | undefined)?.['api-version'];
  if (azure !== undefined) {
    const versionError = apiVersionError(azure, apiVersion);
    if (versionError !== undefined) {
      stats.errors++;
      return sendError(reply, versionError);
    }
  }

  // A classic Azure deployment URL names the model in its path; the body's `model` is not needed.
  const model =
    azure === 'deployment' ? (req.params as { deployment: string }).deployment : route.modelOf === undefined ? readModel(req.body) : route.modelOf(req);
  if (isFieldError(model)) {
    stats.errors++;
    return sendError(reply, routeBadRequest(route, model.message, model.param));
  }
  let prepared = route.prepare(req.body as Record<string, unknown>, model, headers, { prompts: state.prompts, defaultOutputTokens: opts.defaultOutputTokens, responses: state.responses, key, paceTokensPerSecond: opts.tokensPerSecond });
  if (isFieldError(prepared)) {
    stats.errors++;
    return sendError(reply, routeBadRequest(route, prepared.message, prepared.param));
  }
  if (azure !== undefined && route.noPromptFilterResults !== true) prepared = withPromptFilterResults(prepared);
  const ttft = readMsHeader('x-sim-ttft-ms', headers['x-sim-ttft-ms']);
  if (isFieldError(ttft)) {
    stats.errors++;
    return sendError(reply, routeBadRequest(route, ttft.message, null));
  }
  const fault = state.faults.pick(prepared.stream, headerValue(headers['x-sim-fault']));

  const out: HeaderMap = {};
  out[wire === 'openai' ? 'x-request-id' : wire === 'bedrock' ? 'x-amzn-requestid' : 'request-id'] = state.nextId('req_sim');
  if (azure !== undefined) {
    out['apim-request-id'] = out['x-request-id'] ?? '';
    if (wantsContentFilter(headers)) {
      // The prompt is refused before the quota: nothing is charged.
      stats.errors++;
      return sendError(reply, contentFilterError(), out);
    }
  }
  if (isEchoFault(fault)) {
    // Refused before the quota, as a provider refuses a bad key: nothing is charged.
    stats.errors++;
    const received = { authorization: headerValue(headers.authorization) ?? '', 'x-api-key': headerValue(headers['x-api-key']) ?? '' };
    out['x-sim-echo-authorization'] = received.authorization;
    out['x-sim-echo-x-api-key'] = received['x-api-key'];
    if (fault === 'echo-key-stream' && prepared.stream && wire !== 'bedrock') {
      out['content-type'] = 'text/event-stream; charset=utf-8';
      reply.code(200).headers(out).send(prepared.plan({ id: state.nextId(route.idPrefix), created: Math.floor(opts.clock.now() / 1000) }).head + echoedKeyEvent(wire, received));
      return;
    }
    const status = fault === 'echo-key-429' ? 429 : fault === 'echo-key-500' ? 500 : 401;
    if (status === 429) out['x-should-retry'] = 'false';
    return sendError(reply, echoedKeyError(wire, status, received), out);
  }
  // The outside client's requests due by now reach the quota first.
  state.outside?.catchUp();
  const decision = quota.admit(key, prepared.reserveTokens);
  // Bedrock reports no rate-limit headers, and no retry-after with its ThrottlingException.
  if (azure !== undefined) Object.assign(out, azureRateLimitHeaders(decision.limits));
  else if (wire !== 'bedrock' && route.flavor === undefined) Object.assign(out, wire === 'openai' ? openAIRateLimitHeaders(decision.limits) : anthropicRateLimitHeaders(decision.limits, opts.clock.now()));
  if (!decision.ok) {
    stats.rateLimited++;
    stats.key(key).rateLimited++;
    if (azure !== undefined) {
      if (decision.reason === 'limited') Object.assign(out, azureRetryHeaders(decision.retryAfterMs));
      return sendError(reply, azureRateLimitError(azureOperation(req.url.split('?')[0] ?? ''), apiVersion ?? 'v1', decision.kind, decision.retryAfterMs), out);
    }
    if (route.flavor === 'gemini') {
      // The wait only in the body (RetryInfo); none for a request the quota can never take.
      const limit = limitOf(decision.limits, decision.kind)?.limit ?? 0;
      return sendError(reply, geminiRateLimitError(model, decision.kind, limit, decision.reason === 'limited' ? decision.retryAfterMs : undefined), out);
    }
    if (route.flavor === 'vllm') return sendError(reply, vllmError(429, 'RateLimitError', `Rate limit exceeded for ${model}: too many ${decision.kind}.`), out);
    if (decision.reason === 'limited' && wire !== 'bedrock') Object.assign(out, retryAfterHeaders(decision.retryAfterMs, wire === 'openai'));
    return sendError(reply, rateLimitError(wire, model, decision.reason, decision.kind, decision.retryAfterMs, prepared.reserveTokens, decision.limits), out);
  }
  if (fault === 'rate-limited') {
    // Refused as the quota refuses, taking nothing from it.
    quota.finish(key, decision.id, 0);
    stats.rateLimited++;
    stats.key(key).rateLimited++;
    if (wire !== 'bedrock') Object.assign(out, retryAfterHeaders(RATE_LIMITED_WAIT_MS, wire === 'openai'));
    return sendError(reply, rateLimitError(wire, model, 'limited', 'requests', RATE_LIMITED_WAIT_MS, prepared.reserveTokens, decision.limits), out);
  }
  if (fault === 'error') {
    quota.finish(key, decision.id, 0);
    stats.errors++;
    return sendError(reply, route.flavor === 'gemini' ? geminiOverloaded() : route.flavor === 'vllm' ? vllmError(500, 'InternalServerError', 'The engine encountered an error.') : serverFault(wire), out);
  }

  stats.inFlight++;
  const delayMs = (ttft ?? opts.ttftMs) + (fault === 'slow' ? opts.slowMs : 0);
  const ids: ReplyIdentity = { id: state.nextId(route.idPrefix), created: Math.floor(opts.clock.now() / 1000) };
  const onEnd = settleOnEnd(state, key, decision.id, prepared, ids);
  if (prepared.stream) {
    if (wire === 'bedrock') out['content-type'] = EVENT_STREAM_CONTENT_TYPE;
    const plan = prepared.plan(ids);
    const timing = { delayMs, tokensPerSecond: opts.tokensPerSecond, dropAfter: fault === 'drop' ? Math.floor(plan.units / 2) : null };
    const perUnit = prepared.tokensPerUnit ?? 1;
    deliverStream(reply, out, plan, timing, (outcome, sent) => onEnd(outcome, sent * perUnit));
  } else {
    deliverJson(reply, out, prepared.json(ids), delayMs, prepared.outputTokens, onEnd);
  }
}

/** The end of a reply: count it and settle the quota to the prompt + the completion tokens sent. */
function settleOnEnd(state: SimulatorState, key: string, id: string, prepared: PreparedRequest, ids: ReplyIdentity): (outcome: ReplyOutcome, sent: number) => void {
  const ks = state.stats.key(key);
  return (outcome, streamed) => {
    prepared.ended?.(outcome, streamed, ids);
    // Reasoning tokens are generated before the first visible one, and never streamed.
    const sent = prepared.stream ? streamed + (prepared.hiddenOutputTokens ?? 0) : streamed;
    const stats = state.stats;
    stats.inFlight--;
    if (outcome === 'completed') stats.completed++;
    else if (outcome === 'dropped') stats.dropped++;
    else stats.aborted++;
    stats.promptTokens += prepared.promptTokens;
    stats.completionTokens += sent;
    ks.promptTokens += prepared.promptTokens;
    ks.completionTokens += sent;
    state.quota.finish(key, id, prepared.promptTokens + sent);
  };
}
