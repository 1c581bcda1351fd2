/**
 * OpenTelemetry tracing end to end (real processes: the simulator, one node, a router), exported
 * over OTLP/HTTP (JSON) to a receiver this test runs: a client request carrying a `traceparent`
 * goes router → node → simulator, waits in its tenant's queue behind another request (a
 * concurrency limit of 1), is refused once by the simulator (`x-sim-fault: rate-limit-once`: a 429
 * with a 20 ms wait) and retried. The spans form one trace under the client's span: the router's
 * server span → the node's server span (GenAI attributes, exact token counts) → the queue wait,
 * two upstream attempts (429, then 200) and the settlement; the simulator received a `traceparent`
 * of that trace (the second attempt's span). A malformed `traceparent` gives a 200 and a new trace.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Member } from '../../src/coord/types.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const KEY = 'key-traced-00000';
const messages = [{ role: 'user' as const, content: 'Trace this request, please.' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));
const OUT = 7;
const MAX = 64;
const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';

/** One span as the receiver decoded it from OTLP JSON. */
interface ReceivedSpan {
  readonly service: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, string | number | boolean>;
}

/** OTLP JSON ids: hex (the spec's JSON encoding) or base64 (protobuf JSON mapping): hex either way. */
function hexId(id: unknown): string {
  if (typeof id !== 'string' || id === '') return '';
  return /^[0-9a-f]+$/i.test(id) && (id.length === 32 || id.length === 16) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');
}

type OtlpValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number };
type OtlpAttribute = { key: string; value: OtlpValue };

function attributesOf(list: readonly OtlpAttribute[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of list ?? []) {
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
  }
  return out;
}

/** A plain OTLP/HTTP receiver of JSON trace exports on 127.0.0.1: every span it was sent. */
async function startReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; close(): Promise<void> }> {
  const spans: ReceivedSpan[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces' && String(req.headers['content-type']).startsWith('application/json')) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans?: { resource?: { attributes?: OtlpAttribute[] }; scopeSpans?: { spans?: { traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: OtlpAttribute[] }[] }[] }[];
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = String(attributesOf(rs.resource?.attributes)['service.name']);
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) spans.push({ service, traceId: hexId(s.traceId), spanId: hexId(s.spanId), parentSpanId: hexId(s.parentSpanId), name: s.name, kind: s.kind, attributes: attributesOf(s.attributes) });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Waits until `pick` finds what it wants among the received spans (the batch processor exports every 100 ms here). */
async function eventually<T>(pick: () => T | undefined, what: string): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const found = pick();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('OpenTelemetry traces through router → node → simulator (real processes, OTLP/HTTP JSON)', () => {
  const procs: Running[] = [];
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let routerUrl = '';
  let simUrl = '';

  before(async () => {
    receiver = await startReceiver();
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const members: Member[] = [{ id: 'node-1', url: `http://127.0.0.1:${await freePort()}` }];
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      tenants: [{ id: 'traced', keys: [KEY], limits: [{ concurrent: 1 }] }],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens', 'x-sim-fault', 'x-sim-ttft-ms'] }],
    });
    const env = { SIM_KEY: 'sim-key-tracing', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_TRACES_SAMPLER: 'parentbased_always_on' };
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, { SIM_KEY: env.SIM_KEY }));
    routerUrl = (await startStaticNodesAndRouter(config, env, members, procs)).routerUrl;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await receiver.close();
  });

  const chat = (headers: Record<string, string>) =>
    request(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sim-output-tokens': String(OUT), ...headers },
      body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: MAX, messages }),
    });

  test('one trace: client span → router → node → queue wait, a 429 attempt and a 200 attempt, settlement; the simulator saw the trace', async () => {
    // Holds the tenant's one concurrency slot for 400 ms: the traced request waits in the batch queue.
    const blocker = chat({ 'x-sim-ttft-ms': '400' });
    await sleep(100);
    const res = await chat({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'client=1', 'x-quotaring-priority': 'batch', 'x-sim-fault': 'rate-limit-once' });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, text);
    assert.equal((await blocker).statusCode, 200);
    const usage = (JSON.parse(text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [PROMPT, OUT]);

    const inTrace = (): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === CLIENT_TRACE);
    const settle = await eventually(() => inTrace().find((s) => s.name === 'quotaring.settle'), 'the settlement span');
    const router = await eventually(() => inTrace().find((s) => s.service === 'quotaring-router'), "the router's span");
    const node = await eventually(() => inTrace().find((s) => s.service === 'quotaring-node' && s.kind === 2), "the node's server span");
    const spans = inTrace();
    assert.equal(router.parentSpanId, CLIENT_SPAN, "the router's span is the client span's child");
    assert.equal(router.kind, 2);
    assert.equal(router.attributes['quotaring.tenant'], 'traced');
    assert.equal(router.attributes['http.response.status_code'], 200);
    assert.equal(node.parentSpanId, router.spanId, "the node's span is the router's child");
    assert.equal(node.name, 'chat gpt-4o-mini');
    assert.deepEqual(
      {
        op: node.attributes['gen_ai.operation.name'],
        provider: node.attributes['gen_ai.provider.name'],
        model: node.attributes['gen_ai.request.model'],
        response: node.attributes['gen_ai.response.model'],
        input: node.attributes['gen_ai.usage.input_tokens'],
        output: node.attributes['gen_ai.usage.output_tokens'],
        tenant: node.attributes['quotaring.tenant'],
        priority: node.attributes['quotaring.priority'],
        decision: node.attributes['quotaring.decision'],
        deployment: node.attributes['quotaring.deployment'],
        reserved: node.attributes['quotaring.tokens.reserved'],
        settled: node.attributes['quotaring.tokens.settled'],
        status: node.attributes['http.response.status_code'],
      },
      { op: 'chat', provider: 'openai', model: 'gpt-4o-mini', response: 'gpt-4o-mini', input: PROMPT, output: OUT, tenant: 'traced', priority: 'batch', decision: 'admitted', deployment: 'sim', reserved: PROMPT + MAX, settled: PROMPT + OUT, status: 200 },
    );
    const children = spans.filter((s) => s.parentSpanId === node.spanId);
    const wait = children.find((s) => s.name === 'quotaring.queue_wait');
    assert.ok(wait !== undefined, 'a queue wait span');
    assert.ok(Number(wait.attributes['quotaring.queue.wait_ms']) >= 100, `waited ${wait.attributes['quotaring.queue.wait_ms']} ms`);
    const attempts = children.filter((s) => s.kind === 3).sort((a, b) => Number(a.attributes['quotaring.attempt']) - Number(b.attributes['quotaring.attempt']));
    assert.deepEqual(
      attempts.map((a) => [a.attributes['quotaring.attempt'], a.attributes['http.response.status_code'], a.attributes['quotaring.deployment'], a.attributes['gen_ai.provider.name']]),
      [
        [1, 429, 'sim', 'openai'],
        [2, 200, 'sim', 'openai'],
      ],
    );
    assert.equal(settle.parentSpanId, node.spanId);
    assert.deepEqual([settle.attributes['quotaring.tokens.settled'], settle.attributes['gen_ai.usage.input_tokens'], settle.attributes['gen_ai.usage.output_tokens']], [PROMPT + OUT, PROMPT, OUT]);
    // No attribute carries the prompt or a key.
    for (const s of spans) for (const v of Object.values(s.attributes)) assert.ok(typeof v !== 'string' || (!v.includes('Trace this') && !v.includes(KEY) && !v.includes('sim-key')), `${s.name}: ${String(v)}`);

    // The simulator received each attempt's own span as its parent.
    const arrivals = ((await (await request(`${simUrl}/sim/arrivals`)).body.json()) as { arrivals: { traceparent: string | null; status: number | null }[] }).arrivals;
    const traced = arrivals.filter((a) => a.traceparent?.includes(CLIENT_TRACE) === true);
    assert.deepEqual(
      traced.map((a) => [a.status, a.traceparent]),
      attempts.map((a) => [a.attributes['http.response.status_code'], `00-${CLIENT_TRACE}-${a.spanId}-01`]),
    );
  });

  test('a malformed traceparent is ignored: 200, and a new trace starts at the router', async () => {
    const before = receiver.spans.length;
    const res = await chat({ traceparent: '00-not-a-trace-id-01', 'x-sim-output-tokens': '3' });
    assert.equal(res.statusCode, 200, await res.body.text());
    const router = await eventually(() => receiver.spans.slice(before).find((s) => s.service === 'quotaring-router'), "the router's span");
    assert.equal(router.parentSpanId, '', 'a root span');
    assert.match(router.traceId, /^[0-9a-f]{32}$/);
    const node = await eventually(() => receiver.spans.slice(before).find((s) => s.service === 'quotaring-node' && s.kind === 2), "the node's span");
    assert.equal(node.traceId, router.traceId);
    assert.equal(node.parentSpanId, router.spanId);
  });
});
