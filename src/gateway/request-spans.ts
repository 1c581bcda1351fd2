/**
 * The node's spans of a limited request (`src/http/tracing.ts` starts the tracer): one server span
 * per request, named `{gen_ai.operation.name} {model}`, with the GenAI semantic conventions and
 * quotaring's own attributes (`quotaring.*`), and its children: the queue wait, each upstream
 * attempt (retries and failovers each their own span, the trace context passed to the provider) and
 * the settlement. Every function takes the span as it may be — undefined when tracing is off — and
 * then does nothing. No attribute carries a prompt, a completion or a key: only ids, names and counts.
 */
import type { FastifyRequest } from 'fastify';
import type { ResolvedDeployment } from '../config/load.ts';
import type { Provider } from '../config/schema-deployments.ts';
import { SpanKind, endWithStatus, injectContext, startChildSpan, startServerSpan } from '../http/tracing.ts';
import type { Span } from '../http/tracing.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import type { TokenUsage } from '../providers/types.ts';
import type { GatewayContext } from './context.ts';
import type { Exchange } from './request.ts';

/** `gen_ai.provider.name` of each provider: the conventions' well-known values, `vllm` as itself. */
const PROVIDER_NAMES: Readonly<Record<Provider, string>> = {
  openai: 'openai',
  anthropic: 'anthropic',
  azure: 'azure.ai.openai',
  bedrock: 'aws.bedrock',
  gemini: 'gcp.gemini',
  vllm: 'vllm',
};

/** `gen_ai.operation.name` of a route: `embeddings`, `text_completion`, `generate_content` (Gemini), else `chat`. */
export function operationOf(route: string): string {
  if (route.endsWith('/embeddings')) return 'embeddings';
  if (route.endsWith('/completions') && !route.endsWith('/chat/completions')) return 'text_completion';
  if (route.includes('generateContent')) return 'generate_content';
  return 'chat';
}

/** Starts the request's server span (continuing the client's `traceparent`); undefined when tracing is off. */
export function startRequestSpan(ctx: GatewayContext, request: FastifyRequest, ex: Exchange): Span | undefined {
  const tracing = ctx.tracing;
  if (tracing === undefined) return undefined;
  const operation = operationOf(request.routeOptions.url ?? request.url);
  return startServerSpan(tracing, `${operation} ${ex.model.name}`, request.headers, {
    'gen_ai.operation.name': operation,
    'gen_ai.provider.name': PROVIDER_NAMES[ex.deployment.provider],
    'gen_ai.request.model': ex.model.name,
    'http.request.method': request.method,
    'http.route': request.routeOptions.url ?? '',
    'quotaring.tenant': ex.tenant.id,
    'quotaring.priority': ex.tier.name,
    'quotaring.tokens.prompt': ex.promptTokens,
    'quotaring.tokens.reserved': ex.promptTokens + ex.reservedOutput,
    'quotaring.stream': ex.stream,
  });
}

/** Records the time a request waited in its tenant's queue as a child span that ended now. @param waitMs ms, > 0 */
export function recordQueueWait(ctx: GatewayContext, span: Span | undefined, waitMs: number): void {
  if (span === undefined || ctx.tracing === undefined || !(waitMs > 0)) return;
  const now = Date.now();
  startChildSpan(ctx.tracing, span, 'quotaring.queue_wait', { 'quotaring.queue.wait_ms': Math.round(waitMs) }, SpanKind.INTERNAL, now - waitMs).end(now);
}

/**
 * Starts the span of one upstream attempt (a client span) and writes its trace context into the
 * attempt's `headers`; undefined when tracing is off.
 * @param attempt 1 for the first call of a request, counting retries and failovers.
 */
export function startAttemptSpan(ctx: GatewayContext, span: Span | undefined, ex: Exchange, deployment: ResolvedDeployment, attempt: number, headers: Record<string, string>): Span | undefined {
  if (span === undefined || ctx.tracing === undefined) return undefined;
  const child = startChildSpan(
    ctx.tracing,
    span,
    `${operationOf(ex.path)} ${deployment.upstream_model ?? ex.model.name}`,
    {
      'gen_ai.operation.name': operationOf(ex.path),
      'gen_ai.provider.name': PROVIDER_NAMES[deployment.provider],
      'gen_ai.request.model': deployment.upstream_model ?? ex.model.name,
      'quotaring.deployment': deployment.name,
      'quotaring.attempt': attempt,
    },
    SpanKind.CLIENT,
  );
  injectContext(child, headers);
  return child;
}

/** Ends an attempt's span when the provider's response head came, with its status (0: no answer); 4xx and 5xx mark it failed. */
export function endAttemptSpan(span: Span | undefined, status: number): void {
  if (span !== undefined) endWithStatus(span, status, true);
}

/**
 * Records the settlement as a child span — the tokens settled and the usage the provider reported —
 * and puts the usage (`gen_ai.usage.*`) and the settled tokens on the request's span too. A
 * settlement deferred until the provider reports (background responses) comes after the request's
 * span ended: its child span still joins the trace.
 */
export function recordSettlement(ctx: GatewayContext, span: Span | undefined, tokens: number, usage: TokenUsage | undefined): void {
  if (span === undefined || ctx.tracing === undefined) return;
  const attributes = { 'quotaring.tokens.settled': tokens, ...usageAttributes(usage) };
  span.setAttributes(attributes);
  startChildSpan(ctx.tracing, span, 'quotaring.settle', attributes).end();
}

/** Ends the request's server span with what the stages learned: the decision, the refusing limit, the deployment, the usage. */
export function endRequestSpan(span: Span | undefined, trail: RequestTrail, status: number): void {
  if (span === undefined) return;
  if (trail.result !== undefined) span.setAttribute('quotaring.decision', trail.result);
  if (trail.limit !== undefined) span.setAttribute('quotaring.limit', trail.limit);
  if (trail.limitKind !== 'none') span.setAttribute('quotaring.limit_kind', trail.limitKind);
  if (trail.deployment !== undefined) span.setAttribute('quotaring.deployment', trail.deployment);
  if (trail.used !== undefined) span.setAttribute('quotaring.tokens.settled', trail.used);
  if (trail.waitMs > 0) span.setAttribute('quotaring.queue.wait_ms', Math.round(trail.waitMs));
  if (trail.clientGone === true) span.setAttribute('quotaring.client_gone', true);
  endWithStatus(span, status);
}

/** Sets `gen_ai.response.model` on the request's span: the `model` the provider named in its reply, when it is a string. */
export function responseModel(span: Span | undefined, model: unknown): void {
  if (typeof model === 'string' && model.length <= 256) span?.setAttribute('gen_ai.response.model', model);
}

function usageAttributes(usage: TokenUsage | undefined): Record<string, number> {
  if (usage === undefined) return {};
  return { 'gen_ai.usage.input_tokens': usage.input, 'gen_ai.usage.output_tokens': usage.output };
}
