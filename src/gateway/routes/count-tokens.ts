/**
 * Anthropic's `POST /v1/messages/count_tokens`, passed through to the model's Anthropic deployment
 * (OpenAI-format deployments have no equivalent and are skipped). `server.count_tokens` sets its cost:
 * - `free` (default): no limit is taken; the call is relayed as the provider answers it (its 429 and
 *   `retry-after` included: Anthropic limits count_tokens apart from messages), failing over to the
 *   model's next Anthropic deployment when one cannot be reached or answers 5xx;
 * - `request`: an exchange like any other (one request of the tenant's requests limits, a
 *   concurrency slot, queueing and refusals in Anthropic's shape) charging 0 tokens and no
 *   deployment quota.
 */
import { EventEmitter } from 'node:events';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment } from '../../config/load.ts';
import { GatewayError, errorBody } from '../../errors.ts';
import { countTokensUsage, parseCountTokensRequest } from '../../providers/anthropic/count-tokens.ts';
import { AnthropicStreamObserver } from '../../providers/anthropic/messages.ts';
import { retryAfterHeaders } from '../../providers/rate-limit-headers.ts';
import { providerRetryWaitMs } from '../../providers/retry-wait.ts';
import { TranslationError } from '../../providers/translate/index.ts';
import { wireFormatOf } from '../../providers/wire-format.ts';
import { tenantOf, tierOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { passHeaders, runExchange, scrubberOf, upstreamError } from '../exchange.ts';
import type { DeploymentCall } from '../exchange.ts';
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
    if (server.count_tokens === 'free') {
      const candidates = [route.deployment, ...route.failover].filter((d) => wireFormatOf(d.provider) === 'anthropic');
      return passThrough(ctx, request, reply, candidates, callFor, route.model.deployments[0]);
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
      failover: route.failover.filter((d) => wireFormatOf(d.provider) === 'anthropic'),
      callFor,
    });
  });
}

/**
 * Relays the call to the first of `candidates` that answers (a connect failure or a 5xx moves to the
 * next; the last one's answer, whatever it is, is relayed), with the upstream's headers the client
 * may see and error bodies scrubbed of credentials; a client that leaves cancels the call.
 * @param primary the model's first deployment (others are named in `x-quotaring-deployment`).
 */
async function passThrough(
  ctx: GatewayContext,
  request: FastifyRequest,
  reply: FastifyReply,
  candidates: readonly ResolvedDeployment[],
  callFor: (d: ResolvedDeployment) => DeploymentCall,
  primary: string | undefined,
): Promise<FastifyReply> {
  if (candidates.length === 0) {
    throw new GatewayError('wrong_endpoint', `The model has no Anthropic deployment available to count tokens with.`, 'model');
  }
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
  let failure: GatewayError = new GatewayError('upstream_unavailable');
  try {
    for (let i = 0; i < candidates.length; i++) {
      const deployment = candidates[i] as ResolvedDeployment;
      const last = i === candidates.length - 1;
      const call = callFor(deployment);
      const forwarded: Record<string, string> = { ...call.headers };
      for (const name of deployment.forward_headers) {
        const value = request.headers[name];
        if (typeof value === 'string') forwarded[name] = value;
      }
      let status: number;
      let text: string;
      let upstreamHeaders: Record<string, string | string[] | undefined>;
      try {
        const res = await ctx.upstreams.request(deployment, { path: call.path, body: call.body, headers: forwarded, signal: cancel });
        ctx.activity.upstream(deployment.name, res.statusCode);
        status = res.statusCode;
        upstreamHeaders = res.headers;
        text = await res.body.text();
      } catch (err) {
        if (gone) return reply.hijack();
        ctx.activity.upstream(deployment.name, 0);
        ctx.health.failed(deployment);
        failure = upstreamError(err);
        request.log.warn({ deployment: deployment.name, err: scrubber.text((err as Error).message) }, 'count_tokens: upstream request failed');
        continue;
      }
      if (status >= 500 && !last) {
        ctx.health.failed(deployment);
        continue;
      }
      const headers: Record<string, string> = {};
      passHeaders(scrubber, upstreamHeaders, headers, status >= 400);
      if (status === 429 && upstreamHeaders['retry-after'] === undefined) {
        const wait = providerRetryWaitMs(upstreamHeaders, Date.now());
        if (wait !== undefined) Object.assign(headers, retryAfterHeaders(wait));
      }
      if (deployment.name !== primary) headers['x-quotaring-deployment'] = deployment.name;
      return reply.code(status).headers(headers).send(status < 300 ? text : scrubber.body(text));
    }
    return reply.code(failure.statusCode).headers({ 'x-quotaring-error': failure.code }).send(errorBody('anthropic', failure.code, failure.message));
  } finally {
    raw.off('close', onClose);
  }
}
