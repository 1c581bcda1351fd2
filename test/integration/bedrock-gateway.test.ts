/**
 * `provider: bedrock` through a real gateway (in-process, on 127.0.0.1, a frozen clock so token
 * counters are exact) with the official SDKs as clients and the bundled simulator's Bedrock
 * routes (SigV4 checked) as the upstream:
 * - the `openai` SDK (JSON and streaming with include_usage) and `@anthropic-ai/sdk` (JSON,
 *   `stream: true`, `messages.stream`) on a model served by a Bedrock deployment: valid replies in
 *   the client's format; the reservation (x-ratelimit-remaining-tokens) is the gateway's exact
 *   prompt count + max_tokens; the tenant is settled on exactly the usage the simulator reported
 *   (its `/sim/stats` prompt and completion tokens);
 * - a ThrottlingException (no retry-after) is retried after `retry_backoff` and the request
 *   succeeds once the simulator's quota refills; with `max_retry_wait: 0` it is relayed as a 429
 *   in the client's shape with retry-after from the backoff, and nothing is charged;
 * - a client that leaves mid-stream: the slot is released and the tenant is charged the prompt
 *   + the tokens delivered, not the reservation;
 * - failover: a Bedrock deployment answering 503 (ServiceUnavailableException) fails over to an
 *   OpenAI one, and an OpenAI deployment answering 500 fails over to Bedrock (translated);
 * - through a router in front of two nodes (static members): both SDKs, JSON and streams, each
 *   tenant settled exactly on its owner node.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { request } from 'undici';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { buildRouter } from '../../src/router/server.ts';
import { EXAMPLE_AWS_CREDENTIALS } from '../../src/simulator/options.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countAnthropicMessages, countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { freePort, simStats } from '../helpers/processes.ts';
import { TEST_SECRET, signedRequest } from '../helpers/cluster-secret.ts';

const MODEL_ID = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const LIMIT = 1_000_000;
const KEYS = { acme: 'key-bedrock-acme-01', slow: 'key-bedrock-slow-01', limited: 'key-bedrock-lim-01' } as const;

describe('provider: bedrock through the gateway, with the official SDKs', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let throttled: Awaited<ReturnType<typeof startSimulator>>;
  let slow: Awaited<ReturnType<typeof startSimulator>>;
  let throttledClock: ManualClock;
  let app: FastifyInstance;
  let url: string;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    throttledClock = new ManualClock(Date.now());
    throttled = await startSimulator({ port: 0, quota: { rpm: 1 }, clock: throttledClock });
    slow = await startSimulator({ port: 0, tokensPerSecond: 20 });
    const bedrock = (name: string, base: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
      name,
      provider: 'bedrock',
      base_url: base,
      region: 'us-east-1',
      upstream_model: MODEL_ID,
      forward_headers: ['x-sim-output-tokens'],
      ...extra,
    });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [
          { id: 'acme', keys: [KEYS.acme], limits: [{ tokens: LIMIT, window: '1m' }] },
          { id: 'slow', keys: [KEYS.slow], limits: [{ tokens: LIMIT, window: '1m' }, { concurrent: 1 }] },
          { id: 'limited', keys: [KEYS.limited], limits: [{ tokens: LIMIT, window: '1m' }] },
        ],
        models: [
          { name: 'claude-bedrock', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-sim'] },
          { name: 'throttled', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-throttled'] },
          { name: 'throttled-relay', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-relay'] },
          { name: 'slow-bedrock', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-slow'] },
          { name: 'bedrock-then-openai', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-flaky', 'openai-sim'] },
          { name: 'openai-then-bedrock', encoding: 'cl100k_base', estimator: 'exact', deployments: ['openai-flaky', 'bedrock-sim'] },
        ],
        deployments: [
          bedrock('bedrock-sim', sim.url),
          bedrock('bedrock-throttled', throttled.url, { retry_backoff: '200ms' }),
          bedrock('bedrock-relay', throttled.url, { max_retry_wait: 0 }),
          bedrock('bedrock-slow', slow.url),
          bedrock('bedrock-flaky', sim.url, { forward_headers: ['x-sim-output-tokens', 'x-sim-fault'] }),
          { name: 'openai-sim', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', forward_headers: ['x-sim-output-tokens'] },
          { name: 'openai-flaky', provider: 'openai', base_url: sim.url, api_key_env: 'K', upstream_model: 'gpt-4o-mini', forward_headers: ['x-sim-output-tokens', 'x-sim-fault'] },
        ],
      },
      'test.yaml',
      { K: 'provider-key-0', AWS_ACCESS_KEY_ID: EXAMPLE_AWS_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: EXAMPLE_AWS_CREDENTIALS.secretAccessKey },
    );
    app = buildGateway({ config, clusterSecret: TEST_SECRET, logger: false, clock: new ManualClock(Date.now()) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await app.close();
    await Promise.all([sim.close(), throttled.close(), slow.close()]);
  });

  const limits = async (tenant: string): Promise<{ kind: string; remaining: number; limit: number }[]> => {
    const res = await signedRequest(`${url}/_quotaring/v1/tenants/${tenant}`);
    return ((await res.body.json()) as { limits: { kind: string; remaining: number; limit: number }[] }).limits;
  };
  const remainingTokens = async (tenant: string): Promise<number> => (await limits(tenant)).find((l) => l.kind === 'tokens')?.remaining ?? -1;
  const openai = (key: string = KEYS.acme): OpenAI => new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const anthropic = (key: string = KEYS.acme): Anthropic => new Anthropic({ apiKey: key, baseURL: url, maxRetries: 0 });
  const cl100k = exactCounter('cl100k_base');

  test('openai SDK, JSON: a chat.completion; reserved prompt + max_tokens, settled on the simulator usage', async () => {
    const before = await remainingTokens('acme');
    const simBefore = await simStats(sim.url);
    const messages = [{ role: 'system' as const, content: 'Be brief.' }, { role: 'user' as const, content: 'Say hello' }];
    const { data, response } = await openai().chat.completions.create({ model: 'claude-bedrock', max_tokens: 40, messages }, { headers: { 'x-sim-output-tokens': '5' } }).withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.model, 'claude-bedrock');
    assert.equal(data.choices[0]?.message.content, ' the'.repeat(5));
    assert.equal(data.choices[0]?.finish_reason, 'stop');
    const estimate = countOpenAIChat({ messages }, cl100k);
    assert.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(before - estimate - 40), 'reserved the exact prompt count + max_tokens');
    const simAfter = await simStats(sim.url);
    assert.equal(simAfter.requests - simBefore.requests, 1);
    assert.equal(data.usage?.prompt_tokens, simAfter.promptTokens - simBefore.promptTokens, 'prompt tokens as Bedrock reported them');
    assert.equal(data.usage?.completion_tokens, 5);
    assert.equal(await remainingTokens('acme'), before - (data.usage?.total_tokens ?? NaN), 'settled on exactly the reported usage');
  });

  test('openai SDK, stream with include_usage: chunks, the usage chunk, [DONE]; settled exactly', async () => {
    const before = await remainingTokens('acme');
    const simBefore = await simStats(sim.url);
    const raw = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEYS.acme}`, 'content-type': 'application/json', 'x-sim-output-tokens': '7' },
      body: JSON.stringify({ model: 'claude-bedrock', stream: true, stream_options: { include_usage: true }, max_tokens: 50, messages: [{ role: 'user', content: 'Say hello' }] }),
    });
    assert.equal(raw.statusCode, 200);
    assert.match(String(raw.headers['content-type']), /^text\/event-stream/);
    const text = await raw.body.text();
    assert.ok(text.endsWith('data: [DONE]\n\n'));
    const chunks = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => JSON.parse(e.slice(6)) as { choices: { delta: { content?: string } }[]; usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null });
    assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), ' the'.repeat(7));
    const usage = chunks.at(-1)?.usage;
    assert.ok(usage !== undefined && usage !== null);
    const simAfter = await simStats(sim.url);
    assert.equal(usage.prompt_tokens, simAfter.promptTokens - simBefore.promptTokens);
    assert.equal(usage.completion_tokens, 7);
    assert.equal(await remainingTokens('acme'), before - usage.total_tokens);

    const stream = await openai().chat.completions.create({ model: 'claude-bedrock', stream: true, stream_options: { include_usage: true }, max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '3' } });
    let content = '';
    let sdkUsage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) sdkUsage = chunk.usage;
    }
    assert.equal(content, ' the'.repeat(3));
    assert.equal(sdkUsage?.completion_tokens, 3);
  });

  test('@anthropic-ai/sdk, JSON and streams: Messages replies, settled on the reported usage', async () => {
    const before = await remainingTokens('acme');
    const simBefore = await simStats(sim.url);
    const messages = [{ role: 'user' as const, content: 'Say hello' }];
    const { data: msg, response } = await anthropic().messages.create({ model: 'claude-bedrock', max_tokens: 30, system: 'Be brief.', messages }, { headers: { 'x-sim-output-tokens': '4' } }).withResponse();
    assert.equal(response.status, 200);
    assert.equal(msg.type, 'message');
    assert.equal(msg.model, 'claude-bedrock');
    assert.deepEqual(msg.content, [{ type: 'text', text: ' the'.repeat(4) }]);
    assert.equal(msg.stop_reason, 'end_turn');
    const estimate = countAnthropicMessages({ system: 'Be brief.', messages }, cl100k);
    assert.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(before - estimate - 30));
    const simMid = await simStats(sim.url);
    assert.equal(msg.usage.input_tokens, simMid.promptTokens - simBefore.promptTokens);
    assert.equal(msg.usage.output_tokens, 4);
    assert.equal(await remainingTokens('acme'), before - msg.usage.input_tokens - 4);

    const mid = await remainingTokens('acme');
    const stream = anthropic().messages.stream({ model: 'claude-bedrock', max_tokens: 30, messages }, { headers: { 'x-sim-output-tokens': '6' } });
    let text = '';
    stream.on('text', (t) => {
      text += t;
    });
    const final = await stream.finalMessage();
    assert.equal(text, ' the'.repeat(6));
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, 6);
    const simAfter = await simStats(sim.url);
    assert.equal(final.usage.input_tokens, simAfter.promptTokens - simMid.promptTokens);
    assert.equal(await remainingTokens('acme'), mid - final.usage.input_tokens - 6);

    const raw = await anthropic().messages.create({ model: 'claude-bedrock', max_tokens: 30, messages, stream: true }, { headers: { 'x-sim-output-tokens': '2' } });
    const types: string[] = [];
    for await (const event of raw) types.push(event.type);
    assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  });

  test('a ThrottlingException is retried after retry_backoff and succeeds once the quota refills; charged once', async () => {
    // The simulator's quota (1 rpm) is spent by the first request.
    const first = await openai(KEYS.limited).chat.completions.create({ model: 'throttled', max_tokens: 5, messages: [{ role: 'user', content: 'one' }] });
    assert.equal(first.choices[0]?.message.role, 'assistant');
    const before = await remainingTokens('limited');
    const statsBefore = await simStats(throttled.url);
    const pending = openai(KEYS.limited).chat.completions.create({ model: 'throttled', max_tokens: 5, messages: [{ role: 'user', content: 'two' }] }, { headers: { 'x-sim-output-tokens': '2' } });
    // Once the simulator has throttled it, a minute passes there: the gateway's next retry gets through.
    for (let i = 0; i < 200 && (await simStats(throttled.url)).rateLimited === statsBefore.rateLimited; i++) await sleep(20);
    assert.ok((await simStats(throttled.url)).rateLimited > statsBefore.rateLimited, 'the simulator answered ThrottlingException');
    throttledClock.advance(60_000);
    const second = await pending;
    assert.equal(second.choices[0]?.message.content, ' the'.repeat(2));
    assert.equal(await remainingTokens('limited'), before - (second.usage?.total_tokens ?? NaN), 'charged once, on the reported usage');
  });

  test('with max_retry_wait 0 the ThrottlingException is relayed: 429 in the client shape, retry-after from the backoff, nothing charged', async () => {
    // The quota was spent by the retry above (and a minute has not passed on the simulator's clock).
    const before = await remainingTokens('limited');
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEYS.limited}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'throttled-relay', max_tokens: 5, messages: [{ role: 'user', content: 'three' }] }),
    });
    assert.equal(res.statusCode, 429);
    assert.equal(res.headers['retry-after'], '1');
    assert.equal(res.headers['retry-after-ms'], '1000');
    const body = (await res.body.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'rate_limit_exceeded');
    assert.match(body.error.message, /Too many requests, please wait before trying again/);
    assert.equal(await remainingTokens('limited'), before, 'nothing charged');

    const err = await anthropic(KEYS.limited)
      .messages.create({ model: 'throttled-relay', max_tokens: 5, messages: [{ role: 'user', content: 'four' }] })
      .then(() => assert.fail('throttled'), (e: unknown) => e);
    assert.ok(err instanceof Anthropic.RateLimitError);
    assert.equal((err.error as { error: { type: string } }).error.type, 'rate_limit_error');
  });

  test('a client that leaves mid-stream: slot released, charged prompt + delivered, not the reservation', async () => {
    const before = await remainingTokens('slow');
    const body = { model: 'slow-bedrock', stream: true, max_tokens: 200, messages: [{ role: 'user', content: 'Count slowly' }] };
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEYS.slow}`, 'content-type': 'application/json', 'x-sim-output-tokens': '200' },
      body: JSON.stringify(body),
    });
    assert.equal(res.statusCode, 200);
    const estimate = countOpenAIChat(body, cl100k);
    assert.equal(res.headers['x-ratelimit-remaining-tokens'], String(before - estimate - 200));
    // Read the first content chunk, then leave.
    let seen = '';
    for await (const chunk of res.body) {
      seen += String(chunk);
      if (seen.includes('" the"')) break;
    }
    res.body.destroy();
    // The slot comes back once the gateway noticed; the simulator saw its stream aborted.
    let concurrent = 0;
    for (let i = 0; i < 250 && concurrent !== 1; i++) {
      await sleep(20);
      concurrent = (await limits('slow')).find((l) => l.kind === 'concurrent')?.remaining ?? -1;
    }
    assert.equal(concurrent, 1, 'the concurrency slot was released');
    const used = before - (await remainingTokens('slow'));
    assert.ok(used >= estimate + 1 && used < estimate + 200, `charged ${used}: prompt ${estimate} + the tokens delivered, not the 200 reserved`);
    for (let i = 0; i < 100 && (await simStats(slow.url)).aborted === 0; i++) await sleep(20);
    assert.equal((await simStats(slow.url)).aborted, 1);
  });

  test('failover: Bedrock 503 → the OpenAI deployment; OpenAI 500 → Bedrock, translated and settled on its usage', async () => {
    const { data, response } = await openai()
      .chat.completions.create({ model: 'bedrock-then-openai', max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-fault': 'error', 'x-sim-output-tokens': '3' } })
      .withResponse();
    assert.equal(response.headers.get('x-quotaring-deployment'), 'openai-sim');
    assert.equal(data.choices[0]?.message.content, ' the'.repeat(3));

    const before = await remainingTokens('acme');
    const simBefore = await simStats(sim.url);
    const { data: chat, response: r2 } = await openai()
      .chat.completions.create({ model: 'openai-then-bedrock', max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-fault': 'error', 'x-sim-output-tokens': '2' } })
      .withResponse();
    assert.equal(r2.headers.get('x-quotaring-deployment'), 'bedrock-sim');
    assert.equal(chat.choices[0]?.message.content, ' the the');
    const simAfter = await simStats(sim.url);
    assert.equal(simAfter.requests - simBefore.requests, 2, 'the OpenAI deployment, then Bedrock');
    assert.equal(chat.usage?.prompt_tokens, simAfter.promptTokens - simBefore.promptTokens, 'the usage Bedrock reported (the failed attempt reported none)');
    assert.equal(await remainingTokens('acme'), before - (chat.usage?.total_tokens ?? NaN), 'charged the usage of the deployment that served');

    // An Anthropic client of the same model starts on Bedrock (the one deployment that speaks its format).
    const msg = await anthropic().messages.create({ model: 'openai-then-bedrock', max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '2' } });
    assert.deepEqual(msg.content, [{ type: 'text', text: ' the the' }]);
  });
});

describe('provider: bedrock through a router and two nodes (static members)', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  const nodes: FastifyInstance[] = [];
  let router: FastifyInstance;
  let routerUrl: string;
  let members: { id: string; url: string }[];
  const tenants = ['r0', 'r1', 'r2', 'r3', 'r4', 'r5'];

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const ports = [await freePort(), await freePort()];
    members = ports.map((p, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${p}` }));
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        cluster: { members },
        tenants: tenants.map((id) => ({ id, keys: [`key-bedrock-${id}-0001`], limits: [{ tokens: LIMIT, window: '1m' }] })),
        models: [{ name: 'claude-bedrock', encoding: 'cl100k_base', estimator: 'exact', deployments: ['bedrock-sim'] }],
        deployments: [{ name: 'bedrock-sim', provider: 'bedrock', base_url: sim.url, region: 'us-east-1', upstream_model: MODEL_ID, forward_headers: ['x-sim-output-tokens'] }],
      },
      'router.yaml',
      { AWS_ACCESS_KEY_ID: EXAMPLE_AWS_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: EXAMPLE_AWS_CREDENTIALS.secretAccessKey },
    );
    for (const [i, m] of members.entries()) {
      const app = buildGateway({ config, clusterSecret: TEST_SECRET, logger: false, clock: new ManualClock(Date.now()), cluster: { self: m, membership: new StaticMembership(members) } });
      await app.listen({ host: '127.0.0.1', port: ports[i] as number });
      await nodeHandoff(app)?.start();
      nodeHandoff(app)?.joined();
      nodes.push(app);
    }
    router = buildRouter({ config, clusterSecret: TEST_SECRET, membership: new StaticMembership(members), logger: false, healthCheckMs: 60_000 });
    routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await router.close();
    for (const n of nodes) await n.close();
    await sim.close();
  });

  test('openai and anthropic SDKs via the router, JSON and streams, settled on the owner node', async () => {
    const ring = new StaticMembership(members).ring();
    // A tenant of each node.
    const picks = members.map((m) => tenants.find((t) => ring.owner(t)?.id === m.id)).filter((t): t is string => t !== undefined);
    assert.equal(picks.length, 2, 'each node owns one of the tenants');
    for (const tenant of picks) {
      const key = `key-bedrock-${tenant}-0001`;
      const owner = members.find((m) => m.id === ring.owner(tenant)?.id)?.url as string;
      const remaining = async (): Promise<number> => {
        const res = await signedRequest(`${owner}/_quotaring/v1/tenants/${tenant}`);
        return ((await res.body.json()) as { limits: { remaining: number }[] }).limits[0]?.remaining ?? -1;
      };
      const oa = new OpenAI({ apiKey: key, baseURL: `${routerUrl}/v1`, maxRetries: 0 });
      const chat = await oa.chat.completions.create({ model: 'claude-bedrock', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '3' } });
      assert.equal(chat.choices[0]?.message.content, ' the the the');
      assert.equal(await remaining(), LIMIT - (chat.usage?.total_tokens ?? NaN));

      const stream = await oa.chat.completions.create({ model: 'claude-bedrock', stream: true, stream_options: { include_usage: true }, max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '2' } });
      let text = '';
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const c of stream) {
        text += c.choices[0]?.delta.content ?? '';
        if (c.usage) usage = c.usage;
      }
      assert.equal(text, ' the the');
      assert.equal(await remaining(), LIMIT - (chat.usage?.total_tokens ?? NaN) - (usage?.total_tokens ?? NaN));

      const before = await remaining();
      const an = new Anthropic({ apiKey: key, baseURL: routerUrl, maxRetries: 0 });
      const final = await an.messages.stream({ model: 'claude-bedrock', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] }, { headers: { 'x-sim-output-tokens': '4' } }).finalMessage();
      assert.deepEqual(final.content, [{ type: 'text', text: ' the the the the' }]);
      assert.equal(await remaining(), before - final.usage.input_tokens - final.usage.output_tokens);
    }
  });
});
