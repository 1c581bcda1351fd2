/**
 * The translation module (src/providers/translate) between the official SDKs and the bundled
 * simulator of the other provider, over real HTTP on 127.0.0.1:
 * - an OpenAI-facing fastify server translates chat requests to the simulator's `POST /v1/messages`
 *   and its replies back (JSON, or SSE through AnthropicToOpenAIStream); the `openai` SDK calls
 *   `chat.completions.create` plain and streaming with `stream_options.include_usage`;
 * - an Anthropic-facing server translates messages requests to the simulator's
 *   `POST /v1/chat/completions`; `@anthropic-ai/sdk` calls `messages.create` (plain and `stream: true`)
 *   and `messages.stream`.
 * The simulator answers `x-sim-output-tokens` tokens of " the" (5 here, 3 for the tool conversation),
 * and counts the prompt it receives with the project's token module (cl100k_base for claude-test,
 * o200k_base for gpt-4o-mini), so the expected usage is computed from the translated body with the
 * same counter, and cross-checked against the usage the upstream itself reported (read from the
 * upstream bytes with the gateway's own stream observers).
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import OpenAI from 'openai';
import { AnthropicStreamObserver, anthropicUsage } from '../../src/providers/anthropic/messages.ts';
import { OpenAIChatStreamObserver, openAIUsage } from '../../src/providers/openai/chat.ts';
import { SseSplitter, type SseEvent } from '../../src/providers/sse.ts';
import type { TokenUsage } from '../../src/providers/types.ts';
import {
  AnthropicToOpenAIStream,
  OpenAIToAnthropicStream,
  TranslationError,
  anthropicResponseToOpenAI,
  anthropicToOpenAIChat,
  openAIChatToAnthropic,
  openAIResponseToAnthropic,
} from '../../src/providers/translate/index.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countAnthropicMessages, countOpenAIChat, exactCounter, type AnthropicPrompt, type OpenAIChatPrompt } from '../../src/tokens/index.ts';

/** What the translating server saw of one exchange. */
interface Seen {
  /** The body sent upstream (translated). */
  upstreamBody: Record<string, unknown>;
  /** Usage the upstream reported, read from its own bytes (JSON usage or the gateway's stream observer). */
  upstreamUsage: TokenUsage | undefined;
  /** Usage the stream translator kept for settlement (streams only). */
  translatorUsage?: TokenUsage | undefined;
  /** Text the client was sent. */
  clientText: string;
}

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** Pipes an upstream SSE body through `translate`, writing each translated piece to the client. */
async function pipeStream(
  reply: FastifyReply,
  upstream: Response,
  translator: { push(e: SseEvent): string; end(): string },
  observe: (e: SseEvent) => void,
): Promise<string> {
  reply.hijack();
  reply.raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  const splitter = new SseSplitter();
  let sent = '';
  const reader = upstream.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const event of splitter.push(value)) {
      observe(event);
      const out = translator.push(event);
      if (out !== '') reply.raw.write(out);
      sent += out;
    }
  }
  const tail = translator.end();
  sent += tail;
  reply.raw.end(tail);
  return sent;
}

function translationErrorReply(reply: FastifyReply, err: unknown): void {
  if (!(err instanceof TranslationError)) throw err;
  void reply.code(400).send({ error: { message: err.message, type: 'invalid_request_error', param: err.param, code: null } });
}

describe('translation between the official SDKs and the simulator', () => {
  let sim: { url: string; close(): Promise<void> };
  let openAIFace: FastifyInstance;
  let anthropicFace: FastifyInstance;
  let openai: OpenAI;
  let anthropic: Anthropic;
  const seen: Seen[] = [];
  /** Raw response bodies the openai SDK received (read from a clone of each response). */
  const received: Promise<string>[] = [];

  before(async () => {
    sim = await startSimulator({ port: 0 });

    openAIFace = Fastify({ logger: false });
    openAIFace.post('/v1/chat/completions', async (req, reply) => {
      const body = req.body as Record<string, unknown>;
      let upstreamBody: Record<string, unknown>;
      try {
        upstreamBody = openAIChatToAnthropic(body, { model: 'claude-test', defaultMaxTokens: 64 });
      } catch (err) {
        return translationErrorReply(reply, err);
      }
      const upstream = await fetch(`${sim.url}/v1/messages`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-api-key': 'sim-key',
          'anthropic-version': '2023-06-01',
          'x-sim-output-tokens': String(req.headers['x-sim-output-tokens'] ?? '5'),
        },
        body: JSON.stringify(upstreamBody),
      });
      assert.equal(upstream.status, 200);
      const model = body.model as string;
      if (upstreamBody.stream !== true) {
        const json = (await upstream.json()) as Record<string, unknown>;
        const out = anthropicResponseToOpenAI(json, model);
        seen.push({ upstreamBody, upstreamUsage: anthropicUsage(json.usage), clientText: JSON.stringify(out) });
        return reply.send(out);
      }
      const options = body.stream_options as { include_usage?: boolean } | undefined;
      const translator = new AnthropicToOpenAIStream({ model, includeUsage: options?.include_usage === true });
      const observer = new AnthropicStreamObserver();
      const clientText = await pipeStream(reply, upstream, translator, (e) => observer.onEvent(e));
      seen.push({ upstreamBody, upstreamUsage: observer.usage(), translatorUsage: translator.usage(), clientText });
      return reply;
    });

    anthropicFace = Fastify({ logger: false });
    anthropicFace.post('/v1/messages', async (req, reply) => {
      const body = req.body as Record<string, unknown>;
      let upstreamBody: Record<string, unknown>;
      try {
        upstreamBody = anthropicToOpenAIChat(body, { model: 'gpt-4o-mini' });
      } catch (err) {
        return translationErrorReply(reply, err);
      }
      const upstream = await fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sim-key', 'x-sim-output-tokens': String(req.headers['x-sim-output-tokens'] ?? '5') },
        body: JSON.stringify(upstreamBody),
      });
      assert.equal(upstream.status, 200);
      const model = body.model as string;
      if (upstreamBody.stream !== true) {
        const json = (await upstream.json()) as Record<string, unknown>;
        const out = openAIResponseToAnthropic(json, model);
        seen.push({ upstreamBody, upstreamUsage: openAIUsage(json.usage), clientText: JSON.stringify(out) });
        return reply.send(out);
      }
      const translator = new OpenAIToAnthropicStream({ model });
      const observer = new OpenAIChatStreamObserver(true);
      const clientText = await pipeStream(reply, upstream, translator, (e) => observer.onEvent(e));
      seen.push({ upstreamBody, upstreamUsage: observer.usage(), translatorUsage: translator.usage(), clientText });
      return reply;
    });

    const recordingFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      received.push(res.clone().text());
      return res;
    };
    openai = new OpenAI({ baseURL: `${await listen(openAIFace)}/v1`, apiKey: 'client-key', fetch: recordingFetch, maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: await listen(anthropicFace), apiKey: 'client-key', maxRetries: 0 });
  });

  after(async () => {
    await openAIFace.close();
    await anthropicFace.close();
    await sim.close();
  });

  const claudeCount = (body: Record<string, unknown>) => countAnthropicMessages(body as AnthropicPrompt, exactCounter('cl100k_base'));
  const gptCount = (body: Record<string, unknown>) => countOpenAIChat(body as OpenAIChatPrompt, exactCounter('o200k_base'));

  test('openai SDK, non-streaming, a tool conversation: text and usage as the Anthropic simulator reported', async () => {
    const completion = await openai.chat.completions.create(
      {
        model: 'gpt-4o-mini',
        max_tokens: 50,
        messages: [
          { role: 'system', content: 'You answer weather questions.' },
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: '18°C and sunny' },
        ],
        tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      },
      { headers: { 'x-sim-output-tokens': '3' } },
    );
    const s = seen.at(-1)!;
    assert.deepEqual(s.upstreamBody.messages, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '18°C and sunny' }] },
    ]);
    const prompt = claudeCount(s.upstreamBody);
    assert.ok(prompt > 346, `tool system prompt included: ${prompt}`);
    assert.deepEqual(s.upstreamUsage, { input: prompt, output: 3 });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.model, 'gpt-4o-mini');
    assert.equal(completion.choices[0]?.message.content, ' the the the');
    assert.equal(completion.choices[0]?.finish_reason, 'stop');
    assert.deepEqual(completion.usage, { prompt_tokens: prompt, completion_tokens: 3, total_tokens: prompt + 3 });
  });

  test('openai SDK, streaming with include_usage: every chunk parsed, text, last chunk usage, [DONE]', async () => {
    const before = received.length;
    const stream = await openai.chat.completions.create(
      { model: 'gpt-4o-mini', max_tokens: 50, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Hello' }] },
      { headers: { 'x-sim-output-tokens': '5' } },
    );
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    const s = seen.at(-1)!;
    const prompt = claudeCount(s.upstreamBody);
    // role chunk, 5 content chunks, finish chunk, usage chunk.
    assert.equal(chunks.length, 8);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'gpt-4o-mini'));
    assert.equal(chunks[0]?.choices[0]?.delta.role, 'assistant');
    assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), ' the the the the the');
    assert.equal(chunks[6]?.choices[0]?.finish_reason, 'stop');
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, { prompt_tokens: prompt, completion_tokens: 5, total_tokens: prompt + 5 });
    assert.deepEqual(s.upstreamUsage, { input: prompt, output: 5 });
    assert.deepEqual(s.translatorUsage, s.upstreamUsage);
    // What the SDK received is exactly what the server sent, and it ends with [DONE].
    assert.equal(received.length, before + 1);
    assert.equal(await received.at(-1), s.clientText);
    assert.ok(s.clientText.endsWith('data: [DONE]\n\n'));
    assert.equal(s.clientText.split('\n\n').filter((e) => e !== '').length, 9);
  });

  test('openai SDK: an untranslatable request gets a 400 invalid_request_error naming the param', async () => {
    await assert.rejects(
      openai.chat.completions.create({ model: 'gpt-4o-mini', n: 2, messages: [{ role: 'user', content: 'x' }] }),
      (err: unknown) => err instanceof OpenAI.BadRequestError && err.param === 'n' && err.type === 'invalid_request_error',
    );
  });

  test('anthropic SDK, messages.create: text and usage as the OpenAI simulator reported', async () => {
    const msg = await anthropic.messages.create(
      { model: 'claude-test', max_tokens: 50, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello' }] },
      { headers: { 'x-sim-output-tokens': '5' } },
    );
    const s = seen.at(-1)!;
    assert.deepEqual(s.upstreamBody, {
      model: 'gpt-4o-mini',
      max_tokens: 50,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello' },
      ],
    });
    const prompt = gptCount(s.upstreamBody);
    assert.deepEqual(s.upstreamUsage, { input: prompt, output: 5 });
    assert.equal(msg.type, 'message');
    assert.equal(msg.model, 'claude-test');
    assert.deepEqual(msg.content, [{ type: 'text', text: ' the the the the the' }]);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.deepEqual(msg.usage, { input_tokens: prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 });
  });

  test('anthropic SDK, messages.create with stream: true: the event sequence, text and usage', async () => {
    const stream = await anthropic.messages.create(
      { model: 'claude-test', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'Hello' }] },
      { headers: { 'x-sim-output-tokens': '5' } },
    );
    const types: string[] = [];
    let text = '';
    let output = -1;
    let input = -1;
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      if (e.type === 'message_delta') [output, input] = [e.usage.output_tokens, e.usage.input_tokens ?? -1];
    }
    const s = seen.at(-1)!;
    assert.deepEqual(s.upstreamBody.stream_options, { include_usage: true });
    const prompt = gptCount(s.upstreamBody);
    assert.deepEqual(types, ['message_start', 'content_block_start', ...Array(5).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(text, ' the the the the the');
    assert.equal(output, 5);
    assert.equal(input, prompt);
    assert.deepEqual(s.upstreamUsage, { input: prompt, output: 5 });
    assert.deepEqual(s.translatorUsage, s.upstreamUsage);
  });

  test('anthropic SDK, messages.stream: finalMessage text and usage', async () => {
    const final = await anthropic.messages
      .stream({ model: 'claude-test', max_tokens: 4, messages: [{ role: 'user', content: 'Hello there' }] }, { headers: { 'x-sim-output-tokens': '9' } })
      .finalMessage();
    const s = seen.at(-1)!;
    const prompt = gptCount(s.upstreamBody);
    // max_tokens 4 caps the simulator's 9: finish_reason length → stop_reason max_tokens.
    assert.deepEqual(final.content, [{ type: 'text', text: ' the the the the' }]);
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.input_tokens, prompt);
    assert.equal(final.usage.output_tokens, 4);
    assert.deepEqual(s.upstreamUsage, { input: prompt, output: 4 });
  });
});
