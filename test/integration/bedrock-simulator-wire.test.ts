/**
 * The simulator's Bedrock routes on the wire (raw HTTP on 127.0.0.1, requests signed with the
 * gateway's SigV4 signer; the official AWS client's view is in bedrock-simulator.test.ts):
 * - Converse: `application/json`, `x-amzn-requestid`, usage as counted by the simulator;
 * - ConverseStream: `application/vnd.amazon.eventstream`, messages that the codec decodes
 *   (CRCs checked) into messageStart, contentBlockDelta × n, contentBlockStop, messageStop,
 *   metadata, each payload with the `p` padding field;
 * - over the quota: 429, `x-amzn-errortype: ThrottlingException:…`, `{"message"}`, no retry-after
 *   and no rate-limit headers;
 * - refused signatures: none (MissingAuthenticationTokenException), another body
 *   (InvalidSignatureException), an unknown key (UnrecognizedClientException), all 403;
 * - a Bedrock API key (bearer token) is accepted; a body without messages is a ValidationException.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import type { SseEvent } from '../../src/providers/sse.ts';
import { bedrockEvents } from '../../src/providers/bedrock/event-stream.ts';
import { signBedrockRequest } from '../../src/providers/bedrock/sigv4.ts';
import { converseForCounting } from '../../src/simulator/bedrock-converse.ts';
import { EXAMPLE_AWS_CREDENTIALS } from '../../src/simulator/options.ts';
import { PromptTokens } from '../../src/simulator/prompt-tokens.ts';
import { startSimulator } from '../../src/simulator/server.ts';

const MODEL_ID = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const SIGNING = { region: 'us-east-1', credentials: EXAMPLE_AWS_CREDENTIALS };

describe('the simulator speaks Bedrock Converse on the wire', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let limited: Awaited<ReturnType<typeof startSimulator>>;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    limited = await startSimulator({ port: 0, quota: { rpm: 1 } });
  });
  after(async () => {
    await sim.close();
    await limited.close();
  });

  const messages = [{ role: 'user', content: [{ text: 'Say hello.' }] }];
  const input = new PromptTokens().anthropicMessages(MODEL_ID, converseForCounting({ messages }));

  /** POSTs a signed Converse request; `operation` converse or converse-stream. */
  async function signed(base: string, operation: string, body: unknown, signing = SIGNING): Promise<Awaited<ReturnType<typeof request>>> {
    const path = `/model/${encodeURIComponent(MODEL_ID)}/${operation}`;
    const text = JSON.stringify(body);
    const headers = await signBedrockRequest(signing, { origin: base, path, headers: { 'content-type': 'application/json', 'x-sim-output-tokens': '3' }, body: text });
    return request(`${base}${path}`, { method: 'POST', headers, body: text });
  }

  test('Converse: a JSON reply with the usage the simulator counted', async () => {
    const res = await signed(sim.url, 'converse', { messages, inferenceConfig: { maxTokens: 10 } });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^application\/json/);
    assert.ok(String(res.headers['x-amzn-requestid']).length > 0);
    assert.deepEqual(await res.body.json(), {
      output: { message: { role: 'assistant', content: [{ text: ' the the the' }] } },
      stopReason: 'end_turn',
      usage: { inputTokens: input, outputTokens: 3, totalTokens: input + 3 },
      metrics: { latencyMs: 1 },
    });
  });

  test('ConverseStream: event-stream messages, decoded by the codec', async () => {
    const res = await signed(sim.url, 'converse-stream', { messages, inferenceConfig: { maxTokens: 3 } });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'application/vnd.amazon.eventstream');
    const events: SseEvent[] = [];
    for await (const batch of bedrockEvents(res.body)) events.push(...batch);
    assert.deepEqual(
      events.map((e) => e.event),
      ['messageStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata'],
    );
    const payloads = events.map((e) => JSON.parse(e.data) as Record<string, unknown>);
    assert.ok(payloads.every((p) => typeof p.p === 'string'), 'every payload is padded');
    assert.deepEqual(payloads[1], { contentBlockIndex: 0, delta: { text: ' the' }, p: payloads[1]?.p });
    assert.equal(payloads[5]?.stopReason, 'max_tokens');
    assert.deepEqual(payloads[6]?.usage, { inputTokens: input, outputTokens: 3, totalTokens: input + 3 });
  });

  test('over the quota: ThrottlingException, no retry hint', async () => {
    assert.equal((await signed(limited.url, 'converse', { messages })).statusCode, 200);
    const res = await signed(limited.url, 'converse', { messages });
    assert.equal(res.statusCode, 429);
    assert.equal(res.headers['x-amzn-errortype'], 'ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/');
    assert.equal(res.headers['retry-after'], undefined);
    assert.equal(Object.keys(res.headers).filter((h) => h.includes('ratelimit')).length, 0);
    assert.deepEqual(await res.body.json(), { message: 'Too many requests, please wait before trying again.' });
  });

  test('refused signatures and accepted API keys', async () => {
    const path = `/model/${encodeURIComponent(MODEL_ID)}/converse`;
    const errortype = async (res: Awaited<ReturnType<typeof request>>): Promise<string> => {
      await res.body.dump();
      return `${res.statusCode} ${String(res.headers['x-amzn-errortype']).split(':')[0]}`;
    };
    assert.equal(await errortype(await request(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages }) })), '403 MissingAuthenticationTokenException');
    const body = JSON.stringify({ messages });
    const headers = await signBedrockRequest(SIGNING, { origin: sim.url, path, headers: { 'content-type': 'application/json' }, body });
    assert.equal(await errortype(await request(`${sim.url}${path}`, { method: 'POST', headers, body: JSON.stringify({ messages: [] }) })), '403 InvalidSignatureException');
    assert.equal(await errortype(await signed(sim.url, 'converse', { messages }, { region: 'us-east-1', credentials: { accessKeyId: 'AKIAUNKNOWNUNKNOWN00', secretAccessKey: 'x' } })), '403 UnrecognizedClientException');
    assert.equal(await errortype(await signed(sim.url, 'converse', { messages }, { region: 'us-east-1', credentials: { ...EXAMPLE_AWS_CREDENTIALS, secretAccessKey: 'wrong' } })), '403 InvalidSignatureException');
    assert.equal(await errortype(await signed(sim.url, 'converse', { inferenceConfig: { maxTokens: 1 } })), '400 ValidationException');
    const keyed = await request(`${sim.url}${path}`, { method: 'POST', headers: { authorization: 'Bearer bedrock-api-key-1', 'content-type': 'application/json' }, body });
    assert.equal(keyed.statusCode, 200);
    await keyed.body.dump();
  });
});
