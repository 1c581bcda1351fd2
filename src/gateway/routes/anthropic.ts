/**
 * Anthropic-compatible route: `POST /v1/messages` (JSON and SSE).
 */
import type { FastifyInstance } from 'fastify';
import { AnthropicStreamObserver, anthropicUsage, parseMessagesRequest } from '../../providers/anthropic/messages.ts';
import { OpenAIChatStreamObserver, openAIUsage } from '../../providers/openai/chat.ts';
import { OpenAIToAnthropicStream, anthropicToOpenAIChat, openAIResponseToAnthropic } from '../../providers/translate/index.ts';
import type { DeploymentCall } from '../request.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import { bedrockCallForAnthropic } from '../bedrock-call.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { runExchange } from '../exchange.ts';
import { countingOf, routeModel, upstreamModelOf } from '../routing.ts';

/** Anthropic API version sent upstream when the client sends none. */
const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';

/** Registers `POST /v1/messages`. */
export function anthropicRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  app.post('/v1/messages', async (request, reply) => {
    const tenant = tenantOf(request);
    const msg = parseMessagesRequest(request.body, { messages: ctx.config.config.server.max_messages, tools: ctx.config.config.server.max_tools });
    const route = routeModel(ctx, msg.model, 'anthropic');
    const promptTokens = await ctx.tokens.count('anthropic_messages', msg.body, countingOf(tenant, route.model));
    const headers: Record<string, string> = {};
    const version = request.headers['anthropic-version'];
    headers['anthropic-version'] = typeof version === 'string' ? version : DEFAULT_ANTHROPIC_VERSION;
    const beta = request.headers['anthropic-beta'];
    if (typeof beta === 'string') headers['anthropic-beta'] = beta;
    return runExchange(ctx, request, reply, {
      dialect: 'anthropic',
      tenant,
      tier: tierOf(request),
      model: route.model,
      deployment: route.deployment,
      promptTokens,
      reservedOutput: msg.maxOutput,
      path: '/v1/messages',
      body: route.upstreamModel === msg.model && request.rawBody !== null ? request.rawBody : JSON.stringify({ ...msg.body, model: route.upstreamModel }),
      stream: msg.stream,
      headers,
      usageFromJson: anthropicUsage,
      observer: () => new AnthropicStreamObserver(),
      failover: route.failover,
      callFor: (d): DeploymentCall => {
        const model = upstreamModelOf(route.model, d);
        if (wireFormatOf(d.provider) === 'bedrock') return bedrockCallForAnthropic(msg.body, { modelId: model, model: msg.model, stream: msg.stream });
        if (wireFormatOf(d.provider) === 'anthropic') {
          return { path: '/v1/messages', body: JSON.stringify({ ...msg.body, model }), headers, usageFromJson: anthropicUsage, observer: () => new AnthropicStreamObserver() };
        }
        // An OpenAI-format deployment: the request in chat format, its replies back in Messages format.
        return {
          path: '/v1/chat/completions',
          body: JSON.stringify(anthropicToOpenAIChat(msg.body, { model })),
          headers: {},
          usageFromJson: openAIUsage,
          observer: () => new OpenAIChatStreamObserver(true),
          translate: {
            json: (text) => JSON.stringify(openAIResponseToAnthropic(JSON.parse(text), msg.model)),
            stream: () => new OpenAIToAnthropicStream({ model: msg.model }),
          },
        };
      },
    });
  });
}
