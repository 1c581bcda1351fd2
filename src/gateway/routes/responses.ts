/**
 * OpenAI's Responses API: `POST /v1/responses` (JSON and SSE) as a limited exchange, and the calls on
 * a stored response — `GET /v1/responses/{id}` (JSON, or SSE with `?stream=true`), `DELETE`,
 * `POST /v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items` — passed through to the
 * deployment that holds it, charged nothing. The same routes are served below `/openai/v1` (Azure's
 * v1 API, any OpenAI client) and `/openai` (the openai SDK's `AzureOpenAI` client, whose Responses
 * calls go to `{endpoint}/openai/responses?api-version=…`).
 *
 * Admission reserves the prompt (the request's messages, tools and images counted by the chat rules
 * through its chat form, see `responsesPromptForCounting`) plus, for each piece of context stored at
 * the provider, the model's `stored_context_tokens` — except a `previous_response_id` this node
 * relayed, whose input + output it knows — plus `max_output_tokens` (or the model's
 * `default_max_output`). Settlement uses the reported `usage` (JSON body, or the stream's
 * `response.completed`/`incomplete`/`failed` event). A background response (`background: true`)
 * answers before it is done: its slot is released at once and its reservation stays until a GET
 * (or cancel) relays it finished with its usage, which settles it exactly, once.
 *
 * Deployments: openai and azure ones serve it natively (`responses_api: native`, not a classic Azure
 * deployment URL); others — `responses_api: chat`, classic Azure URLs, Anthropic — through the chat
 * translation, which cannot carry stored state (`previous_response_id`, `background`, ...): such a
 * request only goes to native deployments, and one naming a response this node relayed goes to the
 * deployment that holds it, with no failover.
 */
import { EventEmitter } from 'node:events';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment } from '../../config/load.ts';
import { GatewayError } from '../../errors.ts';
import { sendError } from '../../error-reply.ts';
import { AnthropicStreamObserver, anthropicUsage } from '../../providers/anthropic/messages.ts';
import { OpenAIChatStreamObserver, openAIUsage } from '../../providers/openai/chat.ts';
import { ResponsesStreamObserver, TERMINAL_STATUSES, checkResponseId, parseResponsesRequest, responseFactsOfText, responsesUsage } from '../../providers/openai/responses.ts';
import { SseSplitter } from '../../providers/sse.ts';
import { anthropicResponseToOpenAI } from '../../providers/translate/anthropic-to-openai.ts';
import { AnthropicToResponsesStream, ChatToResponsesStream, chatResponseToResponses } from '../../providers/translate/chat-to-responses.ts';
import { TranslationError, openAIChatToAnthropic } from '../../providers/translate/openai-to-anthropic.ts';
import { responsesPromptForCounting, responsesToChat } from '../../providers/translate/responses-to-chat.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { runExchange } from '../exchange.ts';
import { passHeaders, scrubberOf } from '../passed-headers.ts';
import { upstreamError } from '../upstream-failure.ts';
import type { DeploymentCall } from '../request.ts';
import { responseIdsOf } from '../response-ids.ts';
import { countingOf, routeModel, upstreamModelOf } from '../routing.ts';
import { adapterOf } from '../../providers/adapters.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import type { ApiHandler } from './openai.ts';

/** Anthropic API version sent to an Anthropic deployment that serves a Responses request. */
const ANTHROPIC_VERSION = '2023-06-01';

/** Path prefixes the Responses API is served below: OpenAI's, Azure's v1 API, the `AzureOpenAI` client's. */
const PREFIXES = ['/v1', '/openai/v1', '/openai'] as const;

/** Whether a deployment serves `/v1/responses` itself (else the request is translated to chat completions): its adapter's rule. */
export function servesResponses(d: ResolvedDeployment): boolean {
  return adapterOf(d.provider).servesResponses(d);
}

/** Registers `POST /v1/responses` and the stored-response calls, below each of {@link PREFIXES}. */
export function responsesRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  const create = createResponseHandler(ctx);
  const retrieve = storedResponseHandler(ctx, 'GET', '');
  const remove = storedResponseHandler(ctx, 'DELETE', '');
  const cancel = storedResponseHandler(ctx, 'POST', '/cancel');
  const inputItems = storedResponseHandler(ctx, 'GET', '/input_items');
  for (const prefix of PREFIXES) {
    app.post(`${prefix}/responses`, create);
    app.get(`${prefix}/responses/:id`, retrieve);
    app.delete(`${prefix}/responses/:id`, remove);
    app.post(`${prefix}/responses/:id/cancel`, { config: { noBody: true } }, cancel);
    app.get(`${prefix}/responses/:id/input_items`, inputItems);
  }
}

/** 404 `response_not_found` for a response id another tenant created. */
function notYours(id: string, param: string): GatewayError {
  return new GatewayError('response_not_found', `No response with id '${id}' was created with this API key.`, param);
}

/** The `POST /v1/responses` handler (see the module comment). */
export function createResponseHandler(ctx: GatewayContext): ApiHandler {
  return async (request, reply) => {
    const tenant = tenantOf(request);
    const server = ctx.config.config.server;
    const req = parseResponsesRequest(request.body, { messages: server.max_messages, tools: server.max_tools });
    const ids = responseIdsOf(ctx);
    const previous = req.previousResponseId === undefined ? undefined : ids.get(req.previousResponseId);
    if (previous !== undefined && previous.tenant !== tenant.id) throw notYours(req.previousResponseId ?? '', 'previous_response_id');
    const route = routeModel(ctx, req.model, 'openai');
    const model = route.model;
    // A response the provider keeps, or a stored state to name: only a native deployment can serve it.
    const stateful = req.previousResponseId !== undefined || req.background || (req.body.conversation ?? null) !== null || (req.body.prompt ?? null) !== null;
    let deployments = [route.deployment, ...route.failover];
    const pinned = previous === undefined ? undefined : deployments.find((d) => d.name === previous.deployment);
    if (pinned !== undefined) deployments = [pinned];
    else if (stateful) deployments = deployments.filter(servesResponses);
    // The primary: the first that can carry this request (a translation may refuse it).
    let primary: { deployment: ResolvedDeployment; call: DeploymentCall } | undefined;
    let refusal: TranslationError | undefined;
    /** The deployment that served (its reply's usage was read): background responses are remembered there. */
    let served: { deployment: string; native: boolean; observer: ResponsesStreamObserver | undefined } | undefined;
    const callFor = (d: ResolvedDeployment): DeploymentCall => {
      const upstreamModel = upstreamModelOf(model, d);
      if (servesResponses(d)) {
        const body = upstreamModel === req.model && request.rawBody !== null ? request.rawBody : JSON.stringify({ ...req.body, model: upstreamModel });
        return {
          path: '/v1/responses',
          body,
          headers: {},
          usageFromJson: (usage) => {
            served = { deployment: d.name, native: true, observer: undefined };
            return responsesUsage(usage);
          },
          observer: () => {
            const observer = new ResponsesStreamObserver();
            served = { deployment: d.name, native: true, observer };
            return observer;
          },
        };
      }
      const chat = responsesToChat(req.body, { model: upstreamModel });
      const mark = (): void => {
        served = { deployment: d.name, native: false, observer: undefined };
      };
      if (wireFormatOf(d.provider) === 'openai') {
        return {
          path: '/v1/chat/completions',
          body: JSON.stringify(chat),
          headers: {},
          usageFromJson: (usage) => (mark(), openAIUsage(usage)),
          observer: () => (mark(), new OpenAIChatStreamObserver(true)),
          translate: {
            json: (text) => JSON.stringify(chatResponseToResponses(JSON.parse(text), req.model, req.body)),
            stream: () => new ChatToResponsesStream({ model: req.model, request: req.body }),
          },
        };
      }
      if (wireFormatOf(d.provider) === 'anthropic') {
        return {
          path: '/v1/messages',
          body: JSON.stringify(openAIChatToAnthropic(chat, { model: upstreamModel, defaultMaxTokens: model.default_max_output })),
          headers: { 'anthropic-version': ANTHROPIC_VERSION },
          usageFromJson: (usage) => (mark(), anthropicUsage(usage)),
          observer: () => (mark(), new AnthropicStreamObserver()),
          translate: {
            json: (text) => JSON.stringify(chatResponseToResponses(anthropicResponseToOpenAI(JSON.parse(text), req.model), req.model, req.body)),
            stream: () => new AnthropicToResponsesStream({ model: req.model, request: req.body }),
          },
        };
      }
      throw new TranslationError(`the Responses API has no ${d.provider} equivalent`, 'model');
    };
    for (const d of deployments) {
      try {
        primary = { deployment: d, call: callFor(d) };
        break;
      } catch (err) {
        if (!(err instanceof TranslationError)) throw err;
        refusal ??= err;
      }
    }
    if (primary === undefined) {
      const why = refusal === undefined ? `no deployment of model ${model.name} has the Responses API` : refusal.message;
      throw new GatewayError('invalid_request', `This request cannot be served: ${why}.`, refusal?.param ?? null);
    }
    // The prompt: what the request carries, counted by the chat rules, plus what it names but does not carry.
    const countable = responsesPromptForCounting(req.body);
    const carried = await ctx.tokens.count('openai_chat', countable.chat, countingOf(tenant, model));
    let refs = countable.storedRefs;
    let known = 0;
    if (previous?.contextTokens !== undefined) {
      refs--;
      known = previous.contextTokens;
    }
    const promptTokens = carried + known + refs * model.stored_context_tokens;
    const tenantId = tenant.id;
    return runExchange(ctx, request, reply, {
      dialect: 'openai',
      tenant,
      tier: tierOf(request),
      model,
      deployment: primary.deployment,
      ...primary.call,
      promptTokens,
      reservedOutput: req.maxOutput ?? model.default_max_output,
      stream: req.stream,
      failover: pinned !== undefined ? [] : deployments.filter((d) => d !== primary?.deployment),
      callFor,
      onReply: (text, settle) => {
        if (served === undefined || !served.native) return false;
        const facts = text !== undefined ? responseFactsOfText(text) : { id: served.observer?.responseId, status: served.observer?.status, usage: served.observer?.usage() };
        if (facts.id === undefined) return false;
        const done = facts.usage !== undefined && facts.status !== undefined && TERMINAL_STATUSES.has(facts.status);
        // Not finished (background): the settlement waits for a call that relays it finished.
        const owed = !done && req.background && settle !== undefined ? settle : undefined;
        ids.remember(facts.id, { tenant: tenantId, deployment: served.deployment, contextTokens: done && facts.usage !== undefined ? facts.usage.input + facts.usage.output : undefined, settle: owed });
        return owed !== undefined;
      },
    });
  };
}

/**
 * A call on a stored response, passed through (charged nothing): to the deployment this node saw
 * create it, else to each native deployment in config order until one does not answer 404. A reply
 * that shows a background response finished settles what it owed.
 */
function storedResponseHandler(ctx: GatewayContext, method: 'GET' | 'POST' | 'DELETE', suffix: string): ApiHandler {
  return async (request, reply) => {
    const tenant = tenantOf(request);
    const id = checkResponseId((request.params as { id: string }).id, 'response_id');
    const ids = responseIdsOf(ctx);
    const known = ids.get(id);
    if (known !== undefined && known.tenant !== tenant.id) throw notYours(id, 'response_id');
    const all = [...ctx.config.deployments.values()];
    const holder = known === undefined ? undefined : ctx.config.deployments.get(known.deployment);
    const candidates = holder !== undefined ? [holder] : all.filter(servesResponses);
    if (candidates.length === 0) throw new GatewayError('response_not_found', `No deployment of this gateway has the Responses API to hold response '${id}'.`, 'response_id');
    const at = request.url.indexOf('?');
    const path = `/v1/responses/${encodeURIComponent(id)}${suffix}${at < 0 ? '' : request.url.slice(at)}`;
    return passThrough(ctx, request, reply, candidates, path, method, (status, text) => {
      if (status >= 300) return;
      const facts = responseFactsOfText(text);
      if (facts.id !== id) return;
      if (known === undefined) return;
      ids.observed(id, facts.status !== undefined && TERMINAL_STATUSES.has(facts.status), facts.usage);
    }, (deployment) => {
      if (known === undefined) ids.remember(id, { tenant: tenant.id, deployment, contextTokens: undefined, settle: undefined });
    });
  };
}

/**
 * Relays one call to the first of `candidates` that knows the response (a connect failure or a 404
 * moves to the next; the last one's answer is relayed whatever it is), error bodies scrubbed of
 * credentials; an SSE reply (`?stream=true`) is passed event by event, its terminal event read.
 * @param seen called with a JSON reply's status and text, or a stream's terminal `response` as JSON.
 * @param found called with the deployment that answered 2xx.
 */
async function passThrough(
  ctx: GatewayContext,
  request: FastifyRequest,
  reply: FastifyReply,
  candidates: readonly ResolvedDeployment[],
  path: string,
  method: 'GET' | 'POST' | 'DELETE',
  seen: (status: number, text: string) => void,
  found: (deployment: string) => void,
): Promise<FastifyReply> {
  const cancel = new EventEmitter();
  const raw = reply.raw;
  let gone = false;
  const onClose = (): void => {
    if (!raw.writableFinished) {
      gone = true;
      cancel.emit('abort');
    }
  };
  raw.on('close', onClose);
  const scrubber = scrubberOf(ctx);
  let failure = new GatewayError('upstream_unavailable');
  try {
    for (let i = 0; i < candidates.length; i++) {
      const deployment = candidates[i] as ResolvedDeployment;
      const last = i === candidates.length - 1;
      const headers: Record<string, string> = {};
      for (const name of deployment.forward_headers) {
        const value = request.headers[name];
        if (typeof value === 'string') headers[name] = value;
      }
      let res;
      try {
        res = await ctx.upstreams.request(deployment, { path, body: method === 'POST' ? '{}' : '', method, headers, signal: cancel });
        ctx.activity.upstream(deployment.name, res.statusCode);
      } catch (err) {
        if (gone) return reply.hijack();
        ctx.activity.upstream(deployment.name, 0);
        failure = upstreamError(err);
        request.log.warn({ deployment: deployment.name, err: scrubber.text((err as Error).message) }, 'responses: upstream request failed');
        continue;
      }
      if ((res.statusCode === 404 || res.statusCode >= 500) && !last) {
        await res.body.dump();
        continue;
      }
      const out: Record<string, string> = {};
      passHeaders(scrubber, res.headers, out, res.statusCode >= 400);
      if (res.statusCode < 300) found(deployment.name);
      const isEventStream = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
      if (res.statusCode < 300 && isEventStream) {
        reply.hijack();
        raw.writeHead(res.statusCode, out);
        const splitter = new SseSplitter();
        const observer = new ResponsesStreamObserver();
        let terminal: unknown;
        try {
          for await (const chunk of res.body) {
            let text = '';
            for (const event of splitter.push(chunk as Buffer)) {
              observer.onEvent(event);
              if (observer.usage() !== undefined && terminal === undefined) terminal = (JSON.parse(event.data) as { response?: unknown }).response;
              text += scrubber.event(event).raw;
            }
            if (text !== '') raw.write(text);
          }
          raw.end(splitter.rest());
        } catch {
          res.body.destroy();
          if (!raw.destroyed) raw.destroy();
        }
        if (terminal !== undefined) seen(200, JSON.stringify(terminal));
        return reply;
      }
      let text: string;
      try {
        text = await res.body.text();
      } catch (err) {
        if (gone) return reply.hijack();
        failure = upstreamError(err);
        break;
      }
      seen(res.statusCode, text);
      return reply.code(res.statusCode).headers(out).send(res.statusCode < 300 ? text : scrubber.body(text));
    }
    return sendError(reply, 'openai', failure.code, { message: failure.message });
  } finally {
    raw.off('close', onClose);
  }
}
