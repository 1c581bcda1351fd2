/**
 * Relaying an upstream reply to the client: which upstream headers pass (never the upstream's own
 * limits or hop-by-hop headers; retry hints only with an error), the tenant's rate-limit headers,
 * scrubbing of provider credentials an upstream may echo, provider error messages for a translated
 * reply, and SSE streams passed event by event with backpressure.
 */
import type { EventEmitter } from 'node:events';
import type { FastifyReply } from 'fastify';
import type { ErrorDialect } from '../errors.ts';
import type { LimitState } from '../limiter/types.ts';
import { anthropicRateLimitHeaders, openAIRateLimitHeaders } from '../providers/rate-limit-headers.ts';
import { SseSplitter } from '../providers/sse.ts';
import type { SseEvent } from '../providers/sse.ts';
import { SecretScrubber } from '../security/scrub.ts';
import type { GatewayContext } from './context.ts';
import type { DeploymentCall, Exchange } from './exchange.ts';
import { renewSlot } from './settlement.ts';

/**
 * Upstream response headers never passed to the client: hop-by-hop, length, and the upstream's own
 * limits (Azure's `x-ms-retry-after-ms` too: a relayed 429 carries `retry-after` and `retry-after-ms`,
 * which are replaced when the tenant must wait longer).
 */
const DROPPED_UPSTREAM_HEADER = /^(connection|keep-alive|transfer-encoding|content-length|content-encoding|set-cookie|x-ratelimit-.*|anthropic-ratelimit-.*|openai-organization|openai-project|x-ms-retry-after-ms)$/;
/** Upstream retry hints, passed only with an upstream error (a success carries the tenant's view alone). */
const RETRY_HEADER = /^(retry-after|retry-after-ms|x-should-retry)$/;

/** The tenant's rate-limit headers in the client's dialect (OpenAI's `x-ratelimit-*`, plus Anthropic's for an Anthropic client). */
export function limitHeaders(ctx: GatewayContext, dialect: ErrorDialect, limits: readonly LimitState[]): Record<string, string> {
  const headers = openAIRateLimitHeaders(limits);
  return dialect === 'anthropic' ? { ...headers, ...anthropicRateLimitHeaders(limits, ctx.clock.now()) } : headers;
}

/** One scrubber per deployment set (deployments never change on a reload; a new set gets a new one). */
const scrubbers = new WeakMap<object, SecretScrubber>();

/**
 * The scrubber of everything relayed from upstreams: it knows every deployment's provider key (a
 * failover or a shared proxy may echo another deployment's key than the one it was sent).
 */
export function scrubberOf(ctx: GatewayContext): SecretScrubber {
  const deployments = ctx.config.deployments;
  let scrubber = scrubbers.get(deployments);
  if (scrubber === undefined) {
    scrubber = new SecretScrubber([...deployments.values()].flatMap((d) => [d.apiKey, d.aws?.credentials.secretAccessKey, d.aws?.credentials.sessionToken]));
    scrubbers.set(deployments, scrubber);
  }
  return scrubber;
}

/** Copies the upstream's headers the client may see into `into`, scrubbed of credentials (see `SecretScrubber.headers`). */
export function passHeaders(scrubber: SecretScrubber, upstream: Record<string, string | string[] | undefined>, into: Record<string, string>, isError: boolean): void {
  const passed: Record<string, string> = {};
  for (const [name, value] of Object.entries(upstream)) {
    if (value === undefined || DROPPED_UPSTREAM_HEADER.test(name) || (!isError && RETRY_HEADER.test(name))) continue;
    passed[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  scrubber.headers(passed);
  Object.assign(into, passed);
}

/** The provider's error message from an error body (OpenAI's, Anthropic's, or AWS's `{"message"}`), for a reply in the client's format. */
export function upstreamMessage(text: string, deployment: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown }; message?: unknown };
    if (typeof body.error?.message === 'string') return `Deployment ${deployment}: ${body.error.message}`;
    if (typeof body.message === 'string') return `Deployment ${deployment}: ${body.message}`;
  } catch {
    // not JSON: fall through
  }
  return `Deployment ${deployment} refused the request.`;
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

/** The SSE events of a body, one batch per chunk (the splitter keeps an unterminated tail). */
async function* sseBatches(body: AsyncIterable<Buffer>, splitter: SseSplitter): AsyncGenerator<readonly SseEvent[]> {
  for await (const chunk of body) yield splitter.push(chunk);
}

/**
 * Passes an SSE reply through event by event, with backpressure, renewing the concurrency lease while
 * it flows. @returns tokens to settle: reported usage, or prompt + delivered output when the stream
 * ended early (client abort or upstream drop).
 */
export async function pipeStream(
  ctx: GatewayContext,
  reply: FastifyReply,
  ex: Exchange,
  call: DeploymentCall,
  res: { statusCode: number; body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown } },
  headers: Record<string, string>,
  client: { readonly gone: boolean },
  id: string,
): Promise<number> {
  const raw = reply.raw;
  reply.hijack();
  raw.writeHead(res.statusCode, headers);
  const splitter = new SseSplitter();
  const observer = call.observer();
  const translator = call.translate?.stream();
  const scrubber = scrubberOf(ctx);
  const renewEvery = 5_000;
  let lastRenew = ctx.clock.now();
  const batches = call.framing === undefined ? sseBatches(res.body, splitter) : call.framing.events(res.body);
  try {
    for await (const batch of batches) {
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
        renewSlot(ctx, ex.tenant.id, id);
        lastRenew = now;
      }
      if (out.length > 0 && !raw.write(out)) await drained(raw);
    }
    raw.end(translator === undefined ? scrubber.text(splitter.rest()) : translator.end());
  } catch {
    res.body.destroy();
    // Client gone, or the upstream dropped the stream: mirror the drop so the client sees it.
    if (!raw.destroyed) raw.destroy();
  }
  const usage = observer.usage();
  if (usage !== undefined) return usage.input + usage.output;
  return ex.promptTokens + observer.deliveredOutput;
}
