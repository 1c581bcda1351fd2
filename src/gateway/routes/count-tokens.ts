/**
 * Anthropic's `POST /v1/messages/count_tokens`, passed through to the model's Anthropic deployment
 * (OpenAI-format deployments have no equivalent and are skipped) as an exchange like any other: a
 * concurrency slot, queueing and refusals in Anthropic's shape, 0 tokens and no deployment quota,
 * failover to the model's next Anthropic deployment when one cannot be reached or answers 5xx.
 * `server.count_tokens` sets what else it costs:
 * - `free` (default): no request of the tenant's requests limits (Anthropic does not bill counting
 *   and limits it apart from messages). It still holds a concurrency slot while in flight, so one
 *   tenant's counting takes at most its `concurrent` limit of the deployment's connections (it
 *   used to take none: a tenant could flood the shared upstream pool and the provider's
 *   count_tokens rate for every tenant, charged nothing);
 * - `request`: one request of the tenant's requests limits too.
 */
import type { FastifyInstance } from 'fastify';
import type { ResolvedDeployment } from '../../config/load.ts';
import { GatewayError } from '../../errors.ts';
import { countTokensUsage, parseCountTokensRequest } from '../../providers/anthropic/count-tokens.ts';
import { AnthropicStreamObserver } from '../../providers/anthropic/messages.ts';
import { TranslationError } from '../../providers/translate/index.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { runExchange } from '../exchange.ts';
import type { DeploymentCall } from '../request.ts';
import { routeModel, upstreamModelOf } from '../routing.ts';

/** Anthropic API version sent upstream when the client sends none. */
const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';

/** The path of the API, upstream as here. */
const PATH = '/v1/messages/count_tokens';

/** Registers `POST /v1/messages/count_tokens`. */
export function countTokensRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  app.post(PATH, async (request, reply) => {
    const tenant = tenantOf(request);
    const server = ctx.config.config.server;
    const count = parseCountTokensRequest(request.body, { messages: server.max_messages, tools: server.max_tools });
    const route = routeModel(ctx, count.model, 'anthropic');
    const headers: Record<string, string> = {};
    const version = request.headers['anthropic-version'];
    headers['anthropic-version'] = typeof version === 'string' ? version : DEFAULT_ANTHROPIC_VERSION;
    const beta = request.headers['anthropic-beta'];
    if (typeof beta === 'string') headers['anthropic-beta'] = beta;
    const callFor = (d: ResolvedDeployment): DeploymentCall => {
      if (wireFormatOf(d.provider) !== 'anthropic') throw new TranslationError(`count_tokens has no ${d.provider} equivalent`, 'model');
      const model = upstreamModelOf(route.model, d);
      const body = model === count.model && request.rawBody !== null ? request.rawBody : JSON.stringify({ ...count.body, model });
      return { path: PATH, body, headers, usageFromJson: countTokensUsage, observer: () => new AnthropicStreamObserver() };
    };
    if (![route.deployment, ...route.failover].some((d) => wireFormatOf(d.provider) === 'anthropic')) {
      throw new GatewayError('wrong_endpoint', `The model has no Anthropic deployment available to count tokens with.`, 'model');
    }
    const first = wireFormatOf(route.deployment.provider) === 'anthropic' ? callFor(route.deployment) : { path: PATH, body: '', headers, usageFromJson: countTokensUsage, observer: () => new AnthropicStreamObserver() };
    return runExchange(ctx, request, reply, {
      dialect: 'anthropic',
      tenant,
      tier: tierOf(request),
      model: route.model,
      deployment: route.deployment,
      promptTokens: 0,
      reservedOutput: 0,
      ...first,
      stream: false,
      deploymentQuota: false,
      requests: server.count_tokens === 'free' ? 0 : 1,
      failover: route.failover.filter((d) => wireFormatOf(d.provider) === 'anthropic'),
      callFor,
    });
  });
}
