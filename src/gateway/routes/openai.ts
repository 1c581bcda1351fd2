/**
 * OpenAI-compatible routes: chat completions (JSON and SSE), embeddings and the model list. The
 * handlers are exported for the other paths that serve the same APIs (Azure's, `./azure.ts`).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AnthropicStreamObserver, anthropicUsage } from '../../providers/anthropic/messages.ts';
import { OpenAIChatStreamObserver, openAIUsage, parseChatRequest, upstreamChatBody } from '../../providers/openai/chat.ts';
import { AnthropicToOpenAIStream, TranslationError, anthropicResponseToOpenAI, openAIChatToAnthropic } from '../../providers/translate/index.ts';
import { GatewayError } from '../../errors.ts';
import { parseEmbeddingsRequest } from '../../providers/openai/embeddings.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { runExchange } from '../exchange.ts';
import { countingOf, routeModel, upstreamModelOf } from '../routing.ts';
import type { DeploymentCall } from '../request.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import { bedrockCallForOpenAI } from '../bedrock-call.ts';

/** Anthropic API version sent to an Anthropic deployment that serves an OpenAI request. */
const ANTHROPIC_VERSION = '2023-06-01';

/** A route handler of an OpenAI API, whatever path it is served on. */
export type ApiHandler = (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply>;

/** Registers `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models`, `GET /v1/models/:id`. */
export function openAIRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  app.post('/v1/chat/completions', chatCompletionsHandler(ctx));
  app.post('/v1/embeddings', embeddingsHandler(ctx));

  app.get('/v1/models', async (request) => {
    const created = 1_700_000_000;
    const models = [...ctx.config.models.values()];
    if (request.headers['anthropic-version'] !== undefined) {
      const data = models.map((m) => ({ type: 'model', id: m.name, display_name: m.name, created_at: new Date(created * 1_000).toISOString() }));
      return { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    }
    return { object: 'list', data: models.map((m) => ({ id: m.name, object: 'model', created, owned_by: 'quotaring' })) };
  });

  app.get<{ Params: { id: string } }>('/v1/models/:id', async (request) => {
    const model = ctx.config.models.get(request.params.id);
    if (model === undefined) throw new GatewayError('model_not_found', `The model "${request.params.id}" does not exist on this gateway.`, 'model');
    return { id: model.name, object: 'model', created: 1_700_000_000, owned_by: 'quotaring' };
  });
}

/** The chat completions handler: JSON and SSE; failover to Anthropic deployments, translated. */
export function chatCompletionsHandler(ctx: GatewayContext): ApiHandler {
  return async (request, reply) => {
    const tenant = tenantOf(request);
    const chat = parseChatRequest(request.body, { messages: ctx.config.config.server.max_messages, tools: ctx.config.config.server.max_tools });
    const route = routeModel(ctx, chat.model, 'openai');
    const promptTokens = await ctx.tokens.count('openai_chat', chat.body, countingOf(tenant, route.model));
    return runExchange(ctx, request, reply, {
      dialect: 'openai',
      tenant,
      tier: tierOf(request),
      model: route.model,
      deployment: route.deployment,
      promptTokens,
      reservedOutput: (chat.maxOutput ?? route.model.default_max_output) * chat.choices,
      path: '/v1/chat/completions',
      body: !chat.stream && route.upstreamModel === chat.model && request.rawBody !== null ? request.rawBody : JSON.stringify(upstreamChatBody(chat, route.upstreamModel)),
      stream: chat.stream,
      headers: {},
      usageFromJson: openAIUsage,
      observer: () => new OpenAIChatStreamObserver(chat.clientWantsUsage),
      failover: route.failover,
      callFor: (d): DeploymentCall => {
        const model = upstreamModelOf(route.model, d);
        if (wireFormatOf(d.provider) === 'bedrock') return bedrockCallForOpenAI(chat.body, { modelId: model, model: chat.model, stream: chat.stream, defaultMaxTokens: route.model.default_max_output, includeUsage: chat.clientWantsUsage });
        if (wireFormatOf(d.provider) === 'openai') {
          return { path: '/v1/chat/completions', body: JSON.stringify(upstreamChatBody(chat, model)), headers: {}, usageFromJson: openAIUsage, observer: () => new OpenAIChatStreamObserver(chat.clientWantsUsage) };
        }
        // An Anthropic deployment: the request in Messages format, its replies back in chat format.
        return {
          path: '/v1/messages',
          body: JSON.stringify(openAIChatToAnthropic(chat.body, { model, defaultMaxTokens: route.model.default_max_output })),
          headers: { 'anthropic-version': ANTHROPIC_VERSION },
          usageFromJson: anthropicUsage,
          observer: () => new AnthropicStreamObserver(),
          translate: {
            json: (text) => JSON.stringify(anthropicResponseToOpenAI(JSON.parse(text), chat.model)),
            stream: () => new AnthropicToOpenAIStream({ model: chat.model, includeUsage: chat.clientWantsUsage }),
          },
        };
      },
    });
  };
}

/** The embeddings handler (failover to OpenAI-format deployments only). */
export function embeddingsHandler(ctx: GatewayContext): ApiHandler {
  return async (request, reply) => {
    const tenant = tenantOf(request);
    const embed = parseEmbeddingsRequest(request.body);
    const route = routeModel(ctx, embed.model, 'openai');
    const promptTokens = await ctx.tokens.count('embeddings', embed.input, countingOf(tenant, route.model));
    return runExchange(ctx, request, reply, {
      dialect: 'openai',
      tenant,
      tier: tierOf(request),
      model: route.model,
      deployment: route.deployment,
      promptTokens,
      reservedOutput: 0,
      path: '/v1/embeddings',
      body: route.upstreamModel === embed.model && request.rawBody !== null ? request.rawBody : JSON.stringify({ ...embed.body, model: route.upstreamModel }),
      stream: false,
      headers: {},
      usageFromJson: openAIUsage,
      observer: () => new OpenAIChatStreamObserver(false),
      // Embeddings have no equivalent at Anthropic: only OpenAI-format deployments take over.
      failover: route.failover.filter((d) => wireFormatOf(d.provider) === 'openai'),
      callFor: (d): DeploymentCall => {
        if (wireFormatOf(d.provider) !== 'openai') throw new TranslationError(`embeddings have no ${d.provider} equivalent`, 'model');
        return { path: '/v1/embeddings', body: JSON.stringify({ ...embed.body, model: upstreamModelOf(route.model, d) }), headers: {}, usageFromJson: openAIUsage, observer: () => new OpenAIChatStreamObserver(false) };
      },
    });
  };
}
