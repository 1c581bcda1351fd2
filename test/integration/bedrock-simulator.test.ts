/**
 * The simulator's Bedrock routes are faithful: the official AWS client
 * (`@aws-sdk/client-bedrock-runtime`, HTTP/1.1 handler, endpoint pointed at the simulator, the
 * AWS documentation's example credentials) calls them over real HTTP on 127.0.0.1.
 * - `ConverseCommand`: the SDK parses the reply; text, stopReason and usage are the simulator's
 *   (input counted by the simulator's token module from the body the SDK sent).
 * - `ConverseStreamCommand`: the SDK decodes the event stream (CRCs checked by its codec) into
 *   messageStart, one contentBlockDelta per token, contentBlockStop, messageStop, metadata with usage.
 * - Over its quota the SDK gets a `ThrottlingException` (HTTP 429, no retry-after), as from Bedrock.
 * - A wrong secret is an `InvalidSignatureException` (403), an unknown access key an
 *   `UnrecognizedClientException`.
 * The raw wire (headers, frames, other refusals) is checked in bedrock-simulator-wire.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';
import type { ConverseStreamOutput } from '@aws-sdk/client-bedrock-runtime';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { converseForCounting } from '../../src/simulator/bedrock-converse.ts';
import { EXAMPLE_AWS_CREDENTIALS } from '../../src/simulator/options.ts';
import { PromptTokens } from '../../src/simulator/prompt-tokens.ts';
import { startSimulator } from '../../src/simulator/server.ts';

const MODEL_ID = 'anthropic.claude-3-5-haiku-20241022-v1:0';

function client(url: string, credentials = EXAMPLE_AWS_CREDENTIALS): BedrockRuntimeClient {
  return new BedrockRuntimeClient({ region: 'us-east-1', endpoint: url, credentials, requestHandler: new NodeHttpHandler(), maxAttempts: 1 });
}

describe('the simulator speaks Bedrock Converse to the official AWS client', () => {
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

  const messages = [{ role: 'user' as const, content: [{ text: 'Say hello in one word.' }] }];
  const system = [{ text: 'Be brief.' }];
  const expectedInput = new PromptTokens().anthropicMessages(MODEL_ID, converseForCounting({ messages, system }));

  test('ConverseCommand: text, stop reason and usage as Bedrock reports them', async () => {
    const res = await client(sim.url).send(new ConverseCommand({ modelId: MODEL_ID, messages, system, inferenceConfig: { maxTokens: 6 } }));
    assert.equal(res.$metadata.httpStatusCode, 200);
    assert.equal(res.output?.message?.role, 'assistant');
    assert.deepEqual(res.output?.message?.content, [{ text: ' the'.repeat(6) }]);
    assert.equal(res.stopReason, 'max_tokens');
    assert.deepEqual(res.usage, { inputTokens: expectedInput, outputTokens: 6, totalTokens: expectedInput + 6 });
    assert.ok(res.$metadata.requestId !== undefined && res.$metadata.requestId.length > 0);
  });

  test('ConverseStreamCommand: the SDK decodes every event, usage in metadata', async () => {
    const res = await client(sim.url).send(new ConverseStreamCommand({ modelId: MODEL_ID, messages, system, inferenceConfig: { maxTokens: 50 } }));
    assert.equal(res.$metadata.httpStatusCode, 200);
    const kinds: string[] = [];
    let text = '';
    let usage: unknown;
    let stop: string | undefined;
    for await (const event of res.stream as AsyncIterable<ConverseStreamOutput>) {
      const kind = Object.keys(event).find((k) => (event as unknown as Record<string, unknown>)[k] !== undefined) ?? '?';
      kinds.push(kind);
      if (event.contentBlockDelta !== undefined) text += event.contentBlockDelta.delta?.text ?? '';
      if (event.messageStop !== undefined) stop = event.messageStop.stopReason;
      if (event.metadata !== undefined) usage = event.metadata.usage;
    }
    // The simulator fills maxTokens (50) unless x-sim-output-tokens says otherwise: one delta a token.
    assert.deepEqual(kinds, ['messageStart', ...Array<string>(50).fill('contentBlockDelta'), 'contentBlockStop', 'messageStop', 'metadata']);
    assert.equal(text, ' the'.repeat(50));
    assert.equal(stop, 'max_tokens');
    assert.deepEqual(usage, { inputTokens: expectedInput, outputTokens: 50, totalTokens: expectedInput + 50 });
  });

  test('over the quota: ThrottlingException, HTTP 429, no retry-after', async () => {
    const c = client(limited.url);
    await c.send(new ConverseCommand({ modelId: MODEL_ID, messages, inferenceConfig: { maxTokens: 2 } }));
    const err = await c.send(new ConverseCommand({ modelId: MODEL_ID, messages, inferenceConfig: { maxTokens: 2 } })).then(
      () => assert.fail('the second request within the minute is throttled'),
      (e: unknown) => e as { name: string; message: string; $metadata: { httpStatusCode?: number }; $response?: { headers: Record<string, string> } },
    );
    assert.equal(err.name, 'ThrottlingException');
    assert.equal(err.$metadata.httpStatusCode, 429);
    assert.equal(err.message, 'Too many requests, please wait before trying again.');
  });

  test('signatures are checked: a wrong secret, an unknown key', async () => {
    const wrongSecret = await client(sim.url, { ...EXAMPLE_AWS_CREDENTIALS, secretAccessKey: 'not-the-secret' })
      .send(new ConverseCommand({ modelId: MODEL_ID, messages }))
      .then(() => assert.fail('refused'), (e: unknown) => e as { name: string; $metadata: { httpStatusCode?: number } });
    assert.equal(wrongSecret.name, 'InvalidSignatureException');
    assert.equal(wrongSecret.$metadata.httpStatusCode, 403);
    const unknownKey = await client(sim.url, { accessKeyId: 'AKIAUNKNOWNUNKNOWN00', secretAccessKey: 'x' })
      .send(new ConverseCommand({ modelId: MODEL_ID, messages }))
      .then(() => assert.fail('refused'), (e: unknown) => e as { name: string });
    assert.equal(unknownKey.name, 'UnrecognizedClientException');
  });
});
