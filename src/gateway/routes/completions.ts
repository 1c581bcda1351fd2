/**
 * OpenAI's legacy `POST /v1/completions` (JSON and SSE). Completions have no Anthropic equivalent:
 * only OpenAI-format deployments (openai, azure) serve them or take over on failover.
 */
import type { FastifyInstance } from 'fastify';
import { TranslationError } from '../../providers/translate/index.ts';
import { OpenAICompletionsStreamObserver, parseCompletionsRequest, upstreamCompletionsBody } from '../../providers/openai/completions.ts';
import { openAIUsage } from '../../providers/openai/chat.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { runExchange } from '../exchange.ts';
import type { DeploymentCall } from '../request.ts';
import { countingOf, routeModel, upstreamModelOf } from '../routing.ts';
import type { ApiHandler } from './openai.ts';

/** Registers `POST /v1/completions`. */
export function completionsRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  app.post('/v1/completions', completionsHandler(ctx));
}

/**
 * The completions handler: reserves the prompt(s) (counted like embeddings input) plus `max_tokens`
 * (default 16) × max(n, best_of) × prompts; settles on the reported usage.
 */
export function completionsHandler(ctx: GatewayContext): ApiHandler {
  return async (request, reply) => {
    const tenant = tenantOf(request);
    const completion = parseCompletionsRequest(request.body, ctx.config.config.server.max_messages);
    const route = routeModel(ctx, completion.model, 'openai');
    const promptTokens = await ctx.tokens.count('embeddings', completion.prompt, countingOf(tenant, route.model));
    const call = (model: string): DeploymentCall => ({
      path: '/v1/completions',
      body: JSON.stringify(upstreamCompletionsBody(completion, model)),
      headers: {},
      usageFromJson: openAIUsage,
      observer: () => new OpenAICompletionsStreamObserver(completion.clientWantsUsage),
    });
    return runExchange(ctx, request, reply, {
      dialect: 'openai',
      tenant,
      tier: tierOf(request),
      model: route.model,
      deployment: route.deployment,
      promptTokens,
      reservedOutput: completion.maxOutput,
      ...call(route.upstreamModel),
      ...(!completion.stream && route.upstreamModel === completion.model && request.rawBody !== null ? { body: request.rawBody } : {}),
      stream: completion.stream,
      failover: route.failover.filter((d) => wireFormatOf(d.provider) === 'openai'),
      callFor: (d): DeploymentCall => {
        if (wireFormatOf(d.provider) !== 'openai') throw new TranslationError(`completions have no ${d.provider} equivalent`, 'model');
        return call(upstreamModelOf(route.model, d));
      },
    });
  };
}
