/**
 * OpenTelemetry tracing of the router and the node: off unless the standard `OTEL_*` environment
 * names an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`);
 * `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keep it off. When on, spans go over
 * OTLP/HTTP (JSON) through a batch processor; the sampler is the SDK's, from `OTEL_TRACES_SAMPLER`
 * and `OTEL_TRACES_SAMPLER_ARG` (default `parentbased_always_on`); the service name is
 * `OTEL_SERVICE_NAME` or the process's role. No global provider or context manager is registered:
 * spans are handed along the request explicitly, so with tracing off the request path only checks
 * that `Tracing` is undefined.
 *
 * W3C trace context (`traceparent`, `tracestate`) is read from a request's headers and written into
 * the next hop's; a malformed `traceparent` is ignored (the span starts a new trace).
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Attributes, Context, Span, TextMapGetter, TextMapSetter, Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { packageVersion } from '../version.ts';

export type { Span } from '@opentelemetry/api';

/** A running tracer and how to flush it; undefined (see {@link startTracing}) when tracing is off. */
export interface Tracing {
  readonly tracer: Tracer;
  /** Exports the spans still buffered and stops the exporter. */
  shutdown(): Promise<void>;
}

type Env = Readonly<Record<string, string | undefined>>;

/** Whether the environment turns tracing on: an OTLP endpoint set, the SDK not disabled, the exporter not `none`. */
export function tracingWanted(env: Env = process.env): boolean {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  const exporter = env['OTEL_TRACES_EXPORTER']?.trim().toLowerCase();
  if (exporter !== undefined && exporter !== '' && exporter !== 'otlp') return false;
  return (env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] ?? env['OTEL_EXPORTER_OTLP_ENDPOINT'] ?? '').trim() !== '';
}

/**
 * Starts tracing when {@link tracingWanted}, else returns undefined (nothing is loaded or started).
 * The exporter reads its endpoint, headers, timeout and compression from `OTEL_EXPORTER_OTLP_*`.
 * @param role the default service name (`quotaring-node`, `quotaring-router`) when `OTEL_SERVICE_NAME` is unset.
 */
export function startTracing(role: string, env: Env = process.env): Tracing | undefined {
  if (!tracingWanted(env)) return undefined;
  const serviceName = env['OTEL_SERVICE_NAME']?.trim() || role;
  const version = packageVersion();
  // OTEL_RESOURCE_ATTRIBUTES is read by the env detector; the service name and version win over it.
  const resource = defaultResource()
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName, [ATTR_SERVICE_VERSION]: version }));
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  return { tracer: provider.getTracer('quotaring', version), shutdown: () => provider.shutdown() };
}

const propagator = new W3CTraceContextPropagator();

type Headers = Readonly<Record<string, string | string[] | undefined>>;

const getter: TextMapGetter<Headers> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

const setter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

/** The trace context an incoming request carries (`traceparent`, `tracestate`); the root context when it has none or a malformed one. */
export function incomingContext(headers: Headers): Context {
  return propagator.extract(ROOT_CONTEXT, headers, getter);
}

/**
 * Starts a server span for a request, continuing the trace of its `traceparent` when it carries a
 * valid one. The caller ends it.
 */
export function startServerSpan(tracing: Tracing, name: string, headers: Headers, attributes: Attributes): Span {
  return tracing.tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, incomingContext(headers));
}

/** Starts a child span of `parent` (kind internal unless `kind` says); the caller ends it. @param startTime ms since the epoch, for a span recorded after the fact (a queue wait). */
export function startChildSpan(tracing: Tracing, parent: Span, name: string, attributes: Attributes, kind: SpanKind = SpanKind.INTERNAL, startTime?: number): Span {
  return tracing.tracer.startSpan(name, { kind, attributes, ...(startTime === undefined ? {} : { startTime }) }, trace.setSpan(ROOT_CONTEXT, parent));
}

/** Writes `span`'s trace context into `headers` (`traceparent`, and `tracestate` when there is one). */
export function injectContext(span: Span, headers: Record<string, string>): void {
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), headers, setter);
}

/** Marks a span failed when `status` is a server error (5xx) or 0 (no answer), per the HTTP conventions for server spans. */
export function endWithStatus(span: Span, status: number, clientSide = false): void {
  span.setAttribute('http.response.status_code', status);
  if (status === 0 || status >= 500 || (clientSide && status >= 400)) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}

export { SpanKind };
