/**
 * Tracing's switches and trace context handling (`src/http/tracing.ts`), the node's span names
 * (`src/gateway/request-spans.ts`), and the simulator's `rate-limit-once` fault. No exporter runs:
 * spans are recorded by an in-memory exporter.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { incomingContext, injectContext, startChildSpan, startServerSpan, startTracing, tracingWanted } from '../../src/http/tracing.ts';
import type { Tracing } from '../../src/http/tracing.ts';
import { operationOf } from '../../src/gateway/request-spans.ts';
import { FaultPicker } from '../../src/simulator/faults.ts';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';

function memoryTracing(): { tracing: Tracing; exporter: InMemorySpanExporter } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { tracing: { tracer: provider.getTracer('test'), shutdown: () => provider.shutdown() }, exporter };
}

describe('tracing switches', () => {
  test('off by default; on with an OTLP endpoint; OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER=none keep it off', () => {
    assert.equal(tracingWanted({}), false);
    assert.equal(startTracing('quotaring-node', {}), undefined);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), true);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }), true);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }), false);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }), false);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }), false);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'otlp' }), true);
  });
});

describe('W3C trace context', () => {
  test('a valid traceparent is continued, with its tracestate; the child carries it on', () => {
    const { tracing, exporter } = memoryTracing();
    const span = startServerSpan(tracing, 'chat m', { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'a=1' }, { 'quotaring.tenant': 't' });
    assert.equal(span.spanContext().traceId, TRACE);
    const headers: Record<string, string> = {};
    const child = startChildSpan(tracing, span, 'attempt', {});
    injectContext(child, headers);
    assert.equal(headers['traceparent'], `00-${TRACE}-${child.spanContext().spanId}-01`);
    assert.equal(headers['tracestate'], 'a=1');
    child.end();
    span.end();
    const [first, second] = exporter.getFinishedSpans();
    assert.equal(first?.parentSpanContext?.spanId, span.spanContext().spanId);
    assert.equal(second?.parentSpanContext?.spanId, PARENT);
  });

  for (const bad of ['00-not-a-trace-01', `00-${'0'.repeat(32)}-${PARENT}-01`, `00-${TRACE}-${'0'.repeat(16)}-01`, `ff-${TRACE}-${PARENT}-01`, '', 'x'.repeat(1000)]) {
    test(`a malformed traceparent (${bad.slice(0, 24) || 'empty'}) is ignored: a new trace`, () => {
      assert.equal(trace.getSpanContext(incomingContext({ traceparent: bad })), undefined);
      const { tracing } = memoryTracing();
      const span = startServerSpan(tracing, 'chat m', { traceparent: bad }, {});
      assert.match(span.spanContext().traceId, /^[0-9a-f]{32}$/);
      assert.notEqual(span.spanContext().traceId, '0'.repeat(32));
      span.end();
    });
  }
});

describe('span names', () => {
  test('gen_ai.operation.name by route', () => {
    assert.equal(operationOf('/v1/chat/completions'), 'chat');
    assert.equal(operationOf('/v1/messages'), 'chat');
    assert.equal(operationOf('/v1/responses'), 'chat');
    assert.equal(operationOf('/v1/completions'), 'text_completion');
    assert.equal(operationOf('/v1/embeddings'), 'embeddings');
    assert.equal(operationOf('/v1beta/models/:model:generateContent'), 'generate_content');
  });
});

describe('simulator fault rate-limit-once', () => {
  test('every other request carrying it gets the 429, the first included; others are drawn as before', () => {
    const picker = new FaultPicker(1, { errorRate: 0, dropRate: 0, slowRate: 0 });
    assert.deepEqual(
      ['rate-limit-once', 'rate-limit-once', undefined, 'rate-limit-once', 'rate-limit-once'].map((f) => picker.pick(false, f)),
      ['rate-limited', 'none', 'none', 'rate-limited', 'none'],
    );
  });
});
