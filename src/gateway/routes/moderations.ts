/**
 * OpenAI's moderations, `POST /v1/moderations` (https://platform.openai.com/docs/api-reference/moderations),
 * passed through to an OpenAI deployment, charged nothing: OpenAI does not count moderations
 * against a model's requests or tokens (the endpoint is free and limited on its own), so neither
 * the tenant's limits nor a deployment's quota are taken, and `x-ratelimit-*` headers are the
 * provider's. The deployment: the one of the body's `model` when it is a configured model served
 * by a `provider: openai` deployment, else each `provider: openai` deployment in config order; a
 * connect failure or a 5xx moves to the next, the last one's answer is relayed whatever it is. The
 * body is sent as the client sent it; the answer is relayed with its error bodies scrubbed of
 * credentials. No such deployment: 404 `not_found` naming the route.
 */
import { EventEmitter } from 'node:events';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment } from '../../config/load.ts';
import { GatewayError } from '../../errors.ts';
import { bodyObject } from '../../providers/fields.ts';
import { tenantOf } from '../auth.ts';
import type { GatewayContext } from '../context.ts';
import { passHeaders, scrubberOf } from '../passed-headers.ts';
import { upstreamError } from '../upstream-failure.ts';
import type { ApiHandler } from './openai.ts';

/** Registers `POST /v1/moderations`. */
export function moderationsRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  app.post('/v1/moderations', moderationsHandler(ctx));
}

/** The deployments a moderation may go to, in the order they are tried (see the module comment). */
export function moderationDeployments(ctx: GatewayContext, model: unknown): readonly ResolvedDeployment[] {
  const openai = [...ctx.config.deployments.values()].filter((d) => d.provider === 'openai');
  const configured = typeof model === 'string' ? ctx.config.models.get(model) : undefined;
  const named = configured === undefined ? [] : configured.deployments.map((name) => ctx.config.deployments.get(name)).filter((d): d is ResolvedDeployment => d !== undefined && d.provider === 'openai');
  return named.length > 0 ? named : openai;
}

function moderationsHandler(ctx: GatewayContext): ApiHandler {
  return async (request, reply) => {
    tenantOf(request);
    const body = bodyObject(request.body);
    if (body['input'] === undefined) throw new GatewayError('invalid_request', '"input" is required: a string, an array of strings, or an array of multi-modal inputs.', 'input');
    const candidates = moderationDeployments(ctx, body['model']);
    if (candidates.length === 0) throw new GatewayError('not_found', 'POST /v1/moderations needs a deployment with provider: openai; this gateway has none.');
    const payload = request.rawBody ?? JSON.stringify(body);
    // The client left: the call is aborted.
    const cancel = new EventEmitter();
    const onClose = (): void => {
      if (!reply.raw.writableFinished) cancel.emit('abort');
    };
    reply.raw.on('close', onClose);
    try {
      return await relayFirst(ctx, request, reply, candidates, payload, cancel);
    } finally {
      reply.raw.off('close', onClose);
    }
  };
}

/** Sends the moderation to the first of `candidates` that answers below 500 (or the last), and relays its answer. */
async function relayFirst(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, candidates: readonly ResolvedDeployment[], payload: string | Buffer, cancel: EventEmitter): Promise<FastifyReply> {
    const scrubber = scrubberOf(ctx);
    let failure = new GatewayError('upstream_unavailable');
    for (let i = 0; i < candidates.length; i++) {
      const deployment = candidates[i] as ResolvedDeployment;
      const last = i === candidates.length - 1;
      let res;
      try {
        res = await ctx.upstreams.request(deployment, { path: '/v1/moderations', body: payload, headers: {}, signal: cancel });
        ctx.activity.upstream(deployment.name, res.statusCode);
      } catch (err) {
        if (reply.raw.destroyed) return reply.hijack();
        ctx.activity.upstream(deployment.name, 0);
        failure = upstreamError(err);
        request.log.warn({ deployment: deployment.name, err: scrubber.text((err as Error).message) }, 'moderations: upstream request failed');
        continue;
      }
      if (res.statusCode >= 500 && !last) {
        await res.body.dump();
        continue;
      }
      const out: Record<string, string> = {};
      passHeaders(scrubber, res.headers, out, res.statusCode >= 400);
      let text: string;
      try {
        text = await res.body.text();
      } catch (err) {
        failure = upstreamError(err);
        break;
      }
      return reply.code(res.statusCode).headers(out).send(res.statusCode < 300 ? text : scrubber.body(text));
    }
    throw failure;
}
