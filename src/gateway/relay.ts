/**
 * Stage 3 of a request, relay: the upstream's reply passed to the client — the upstream headers it
 * may see (`passed-headers.ts`), the tenant's rate-limit headers from admission, the provider
 * credentials an upstream may echo scrubbed, a JSON reply whole (translated when the deployment
 * speaks the other format) and an SSE reply event by event with backpressure, renewing the
 * concurrency slot while it flows. It records what the reply used
 * for settlement (`Usage`); it never settles.
 */
import type { EventEmitter } from 'node:events';
import type { FastifyReply } from 'fastify';
import { GatewayError } from '../errors.ts';
import { sendError } from '../error-reply.ts';
import { jsonField } from '../providers/json-field.ts';
import { SseSplitter } from '../providers/sse.ts';
import type { SseEvent } from '../providers/sse.ts';
import type { TokenUsage } from '../providers/types.ts';
import { openAIShapedError } from '../providers/upstream-errors.ts';
import type { GatewayContext } from './context.ts';
import { passHeaders, scrubberOf } from './passed-headers.ts';
import { responseModel } from './request-spans.ts';
import type { AdmittedRun, DeploymentCall, Exchange, UpstreamResponse } from './request.ts';
import { upstreamError, upstreamMessage } from './upstream-failure.ts';

/**
 * Relays a deployment's response to the client: a JSON reply (or any error, or a non-SSE reply)
 * whole, an SSE reply event by event (see {@link pipeStream}). Records in `used` the tokens to
 * settle, the usage the provider reported and whether the reply succeeded (for `Exchange.onReply`).
 */
export async function relayReply(run: AdmittedRun, attempt: UpstreamResponse): Promise<FastifyReply> {
  const { ctx, reply, ex, admission, served, client, used } = run;
  const { id, cost, headers } = admission;
  const { deployment, call } = served;
  const res = attempt.res;
  const scrubber = scrubberOf(ctx);
  passHeaders(scrubber, res.headers, headers, res.statusCode >= 400);
  Object.assign(headers, attempt.relayedHeaders);
  // Which deployment served, when it is not the model's first (a headroom choice or a failover).
  if (deployment.name !== ex.model.deployments[0]) headers['x-quotaring-deployment'] = deployment.name;
  const isEventStream = String(res.headers['content-type'] ?? '').startsWith(call.framing?.contentType ?? 'text/event-stream');
  if (res.statusCode >= 300 || !ex.stream || !isEventStream) {
    let text: string;
    try {
      // Gemini's and vLLM's error bodies are rewritten in OpenAI's shape (read already: a 429's).
      text = attempt.text ?? (res.statusCode >= 400 ? openAIShapedError(deployment.provider, res.statusCode, await res.body.text()) : await res.body.text());
    } catch (err) {
      if (client.gone) {
        used.tokens = ex.promptTokens;
        return reply.hijack();
      }
      const error = upstreamError(err);
      return sendError(reply, ex.dialect, error.code, { headers, message: error.message });
    }
    if (res.statusCode < 300) {
      const usage = call.usageFromJson(jsonField(text, 'usage'));
      // No usage reported: keep the reservation (the conservative charge).
      used.tokens = usage === undefined ? cost : usage.input + usage.output;
      used.reported = usage;
      used.unreported = usage === undefined;
      used.succeeded = { text, reported: usage !== undefined };
      if (run.span !== undefined) responseModel(run.span, jsonField(text, 'model'));
    }
    if (call.translate !== undefined) {
      delete headers['content-length'];
      headers['content-type'] = 'application/json';
      if (res.statusCode < 300) {
        let translated: string;
        try {
          translated = call.translate.json(text);
        } catch (err) {
          const error = new GatewayError('upstream_unavailable', `Deployment ${deployment.name} sent a reply that could not be translated (${scrubber.text((err as Error).message)}).`);
          return sendError(reply, ex.dialect, error.code, { headers, message: error.message });
        }
        return reply.code(res.statusCode).headers(headers).send(translated);
      }
      return sendError(reply, ex.dialect, res.statusCode === 429 ? 'rate_limit_exceeded' : 'invalid_request', { status: res.statusCode, headers, marked: false, message: upstreamMessage(scrubber.body(text), deployment.name) });
    }
    // An upstream error body may echo what it was sent (the provider key): scrubbed. Replies are not (model output).
    return reply.code(res.statusCode).headers(headers).send(res.statusCode < 300 ? text : scrubber.body(text));
  }
  if (call.translate !== undefined) headers['content-type'] = 'text/event-stream';
  const streamed = await pipeStream(ctx, reply, ex, call, res, headers, client, id);
  used.tokens = streamed.tokens;
  used.reported = streamed.usage;
  if (res.statusCode < 300) used.succeeded = { text: undefined, reported: false };
  return reply;
}

/**
 * Passes an SSE reply through event by event, with backpressure, renewing the concurrency lease while
 * it flows. @returns tokens to settle: reported usage, or prompt + delivered output when the stream
 * ended early (client abort or upstream drop); and the usage when the stream reported it.
 */
async function pipeStream(
  ctx: GatewayContext,
  reply: FastifyReply,
  ex: Exchange,
  call: DeploymentCall,
  res: { statusCode: number; body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown } },
  headers: Record<string, string>,
  client: { readonly gone: boolean },
  id: string,
): Promise<{ readonly tokens: number; readonly usage: TokenUsage | undefined }> {
  const raw = reply.raw;
  reply.hijack();
  raw.writeHead(res.statusCode, headers);
  const splitter = new SseSplitter();
  const observer = call.observer();
  const translator = call.translate?.stream();
  const scrubber = scrubberOf(ctx);
  const renewEvery = 5_000;
  let lastRenew = ctx.clock.now();
  /** Relays one batch of events (those one upstream chunk completed); @returns whether the client's socket is full. */
  const relayBatch = (batch: readonly SseEvent[]): boolean => {
    let out = '';
    for (const upstreamEvent of batch) {
      // An error event may echo what the upstream was sent (the provider key): scrubbed; other events are passed exactly.
      const event = scrubber.event(upstreamEvent);
      const pass = observer.onEvent(event);
      if (translator !== undefined) out += translator.push(event);
      else if (pass) out += event.raw;
    }
    const now = ctx.clock.now();
    if (now - lastRenew >= renewEvery) {
      const tenant = ex.tenant.id;
      ctx.reservations.of(tenant, ctx.reservations.spreadNow(tenant)).renew(tenant, id);
      lastRenew = now;
    }
    return out.length > 0 && !raw.write(out);
  };
  try {
    // SSE bytes are split here chunk by chunk (no generator between the body and the relay: one
    // promise per chunk fewer); other framings (Bedrock's event stream) yield their own batches.
    if (call.framing === undefined) {
      for await (const chunk of res.body) if (relayBatch(splitter.push(chunk))) await drained(raw);
    } else {
      for await (const batch of call.framing.events(res.body)) if (relayBatch(batch)) await drained(raw);
    }
    raw.end(translator === undefined ? scrubber.text(splitter.rest()) : translator.end());
  } catch {
    res.body.destroy();
    // Client gone, or the upstream dropped the stream: mirror the drop so the client sees it.
    if (!raw.destroyed) raw.destroy();
  }
  const usage = observer.usage();
  if (usage !== undefined) return { tokens: usage.input + usage.output, usage };
  return { tokens: ex.promptTokens + observer.deliveredOutput, usage: undefined };
}

/** Resolves when `stream` drains; rejects when it closes first (the client left). */
function drained(stream: NodeJS.WritableStream & EventEmitter): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', gone);
      resolve();
    };
    const gone = (): void => {
      stream.off('drain', done);
      stream.off('close', gone);
      reject(new Error('client closed the stream'));
    };
    stream.on('drain', done);
    stream.on('close', gone);
  });
}
