/**
 * The Anthropic ⇄ Bedrock Converse translation and the Bedrock adapter's pure parts, no I/O:
 * - requests as exact objects (system, content blocks, images, tool use and results, thinking,
 *   cache_control → cachePoint, inference config, tools and tool_choice, top_k and thinking in
 *   additionalModelRequestFields) and each TranslationError with its `param`;
 * - an OpenAI chat request through its Anthropic form;
 * - Converse replies → Anthropic message → OpenAI chat.completion (stop reasons, usage with cache tokens);
 * - ConverseStream events (decoded, as the gateway sees them) → the exact Anthropic SSE text and
 *   OpenAI chunks, tool-use streams, exceptions mid-stream, a stream cut after messageStop;
 * - usage from Converse JSON and from the metadata event; the Converse path; credentials from env.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';
import { SseSplitter, type SseEvent } from '../../src/providers/sse.ts';
import { BedrockStreamObserver, bedrockUsage, conversePath } from '../../src/providers/bedrock/converse.ts';
import { bedrockSigningFromEnv, regionOfEndpoint } from '../../src/providers/bedrock/credentials.ts';
import { anthropicToBedrock, bedrockResponseToAnthropic } from '../../src/providers/translate/anthropic-to-bedrock.ts';
import { BedrockToAnthropicStream, BedrockToOpenAIStream } from '../../src/providers/translate/bedrock-streams.ts';
import { TranslationError, anthropicResponseToOpenAI, openAIChatToAnthropic } from '../../src/providers/translate/index.ts';

const PNG = 'iVBORw0KGgo=';

/** A decoded Bedrock event as `bedrockEvents` yields it. */
function ev(type: string, payload: Record<string, unknown>): SseEvent {
  return { raw: '', event: type, data: JSON.stringify(payload) };
}

function sse(text: string): SseEvent[] {
  const s = new SseSplitter();
  const out = s.push(new TextEncoder().encode(text));
  assert.equal(s.rest(), '');
  return out;
}

describe('Anthropic → Converse requests', () => {
  test('every translatable field, exactly', () => {
    const body = {
      model: 'claude',
      max_tokens: 300,
      system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      stop_sequences: ['END'],
      thinking: { type: 'enabled', budget_tokens: 1024 },
      metadata: { user_id: 'u1' },
      stream: true,
      tools: [{ name: 'get_weather', description: 'Weather now', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
      tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [
        { role: 'user', content: 'Hello' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'text', text: 'Let me look.' },
            { type: 'tool_use', id: 'tu_1', name: 'get_weather', input: { city: 'Oslo' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'tu_1', content: [{ type: 'text', text: '4°C' }], is_error: false },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
            { type: 'text', text: 'And this?' },
          ],
        },
      ],
    };
    assert.deepEqual(anthropicToBedrock(body), {
      messages: [
        { role: 'user', content: [{ text: 'Hello' }] },
        {
          role: 'assistant',
          content: [
            { reasoningContent: { reasoningText: { text: 'hmm', signature: 'sig' } } },
            { text: 'Let me look.' },
            { toolUse: { toolUseId: 'tu_1', name: 'get_weather', input: { city: 'Oslo' } } },
          ],
        },
        {
          role: 'user',
          content: [
            { toolResult: { toolUseId: 'tu_1', content: [{ text: '4°C' }], status: 'success' } },
            { image: { format: 'png', source: { bytes: PNG } } },
            { text: 'And this?' },
          ],
        },
      ],
      system: [{ text: 'Be brief.' }, { cachePoint: { type: 'default' } }],
      inferenceConfig: { maxTokens: 300, temperature: 0.5, topP: 0.9, stopSequences: ['END'] },
      toolConfig: {
        tools: [{ toolSpec: { name: 'get_weather', description: 'Weather now', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } } } } } }],
        toolChoice: { tool: { name: 'get_weather' } },
      },
      additionalModelRequestFields: { top_k: 40, thinking: { type: 'enabled', budget_tokens: 1024 } },
    });
  });

  test('a string system and tool_choice auto/any; an error tool result', () => {
    const out = anthropicToBedrock({
      max_tokens: 5,
      system: 'sys',
      tools: [{ name: 't', input_schema: { type: 'object' } }],
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'x', content: 'boom', is_error: true }] }],
    });
    assert.deepEqual(out.system, [{ text: 'sys' }]);
    assert.deepEqual(out.toolConfig, { tools: [{ toolSpec: { name: 't', inputSchema: { json: { type: 'object' } } } }], toolChoice: { any: {} } });
    assert.deepEqual(out.messages, [{ role: 'user', content: [{ toolResult: { toolUseId: 'x', content: [{ text: 'boom' }], status: 'error' } }] }]);
    assert.deepEqual(anthropicToBedrock({ max_tokens: 5, tools: [{ name: 't', input_schema: {} }], tool_choice: { type: 'auto' }, messages: [] }).toolConfig, { tools: [{ toolSpec: { name: 't', inputSchema: { json: {} } } }], toolChoice: { auto: {} } });
  });

  test('what Converse cannot say is refused, naming the field', () => {
    const refused = (body: Record<string, unknown>, param: string): void => {
      assert.throws(
        () => anthropicToBedrock({ max_tokens: 5, ...body }),
        (err: unknown) => err instanceof TranslationError && err.param === param,
      );
    };
    refused({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] }] }, 'messages.0.content.0.source');
    refused({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'x' } }] }] }, 'messages.0.content.0.source.media_type');
    refused({ messages: [], tools: [{ name: 't', input_schema: {} }], tool_choice: { type: 'none' } }, 'tool_choice.type');
    refused({ messages: [], tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 'tools.0.type');
    refused({ messages: [{ role: 'system', content: 'x' }] }, 'messages.0.role');
    refused({ messages: [{ role: 'user', content: [{ type: 'server_tool_use', id: 'a' }] }] }, 'messages.0.content.0.type');
    refused({ messages: [], mcp_servers: [{}] }, 'mcp_servers');
    assert.throws(() => anthropicToBedrock({ messages: [] }), (err: unknown) => err instanceof TranslationError && err.param === 'max_tokens');
  });

  test('an OpenAI chat request reaches Converse through its Anthropic form', () => {
    const chat = { model: 'gpt', messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Hi' }], max_tokens: 7, stop: 'X' };
    assert.deepEqual(anthropicToBedrock(openAIChatToAnthropic(chat, { model: 'm', defaultMaxTokens: 99 })), {
      messages: [{ role: 'user', content: [{ text: 'Hi' }] }],
      system: [{ text: 'S' }],
      inferenceConfig: { maxTokens: 7, stopSequences: ['X'] },
    });
  });
});

describe('Converse replies', () => {
  const reply = {
    output: { message: { role: 'assistant', content: [{ reasoningContent: { reasoningText: { text: 'r', signature: 's' } } }, { text: 'Hello' }, { toolUse: { toolUseId: 'tu', name: 'f', input: { a: 1 } } }] } },
    stopReason: 'tool_use',
    usage: { inputTokens: 10, outputTokens: 5, totalTokens: 45, cacheReadInputTokens: 20, cacheWriteInputTokens: 10 },
    metrics: { latencyMs: 12 },
  };

  test('→ Anthropic message, exactly', () => {
    assert.deepEqual(bedrockResponseToAnthropic(reply, 'claude', 'msg_1'), {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude',
      content: [
        { type: 'thinking', thinking: 'r', signature: 's' },
        { type: 'text', text: 'Hello' },
        { type: 'tool_use', id: 'tu', name: 'f', input: { a: 1 } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 10, cache_creation_input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 5 },
    });
  });

  test('→ OpenAI chat.completion: prompt tokens include the cache tokens', () => {
    const openai = anthropicResponseToOpenAI(bedrockResponseToAnthropic(reply, 'gpt', 'msg_1'), 'gpt', 1);
    assert.deepEqual(openai.usage, { prompt_tokens: 40, completion_tokens: 5, total_tokens: 45 });
    assert.deepEqual((openai.choices as { finish_reason: string }[])[0]?.finish_reason, 'tool_calls');
  });

  test('stop reasons', () => {
    const stop = (stopReason: string): unknown => bedrockResponseToAnthropic({ ...reply, stopReason }, 'm').stop_reason;
    assert.deepEqual(['end_turn', 'max_tokens', 'stop_sequence', 'guardrail_intervened', 'content_filtered', 'other'].map(stop), ['end_turn', 'max_tokens', 'stop_sequence', 'refusal', 'refusal', 'end_turn']);
  });

  test('usage for settlement: input + cache reads + cache writes, output', () => {
    assert.deepEqual(bedrockUsage(reply.usage), { input: 40, output: 5, cacheRead: 20, cacheWrite: 10 });
    assert.deepEqual(bedrockUsage({ inputTokens: 3, outputTokens: 0, totalTokens: 3 }), { input: 3, output: 0 });
    assert.equal(bedrockUsage(undefined), undefined);
    assert.equal(bedrockUsage({ outputTokens: 1 }), undefined);
  });
});

/** A text stream as ConverseStream sends it (3 tokens of " the"), then its metadata. */
const TEXT_STREAM: SseEvent[] = [
  ev('messageStart', { role: 'assistant', p: 'abc' }),
  ev('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' the' }, p: 'abc' }),
  ev('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' the' } }),
  ev('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' the' } }),
  ev('contentBlockStop', { contentBlockIndex: 0 }),
  ev('messageStop', { stopReason: 'end_turn' }),
  ev('metadata', { usage: { inputTokens: 8, outputTokens: 3, totalTokens: 11 }, metrics: { latencyMs: 5 } }),
];

describe('ConverseStream → Anthropic SSE', () => {
  test('a text stream, exactly', () => {
    const t = new BedrockToAnthropicStream({ model: 'claude', id: 'msg_1' });
    const text = TEXT_STREAM.map((e) => t.push(e)).join('') + t.end();
    const expected =
      'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}\n\n' +
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the"}}\n\n'.repeat(3) +
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}\n\n' +
      'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    assert.equal(text, expected);
  });

  test('a tool-use stream: start, input_json_delta, stop', () => {
    const t = new BedrockToAnthropicStream({ model: 'm', id: 'x' });
    const out = [
      ev('messageStart', { role: 'assistant' }),
      ev('contentBlockStart', { contentBlockIndex: 0, start: { toolUse: { toolUseId: 'tu_9', name: 'f' } } }),
      ev('contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: '{"a":' } } }),
      ev('contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input: '1}' } } }),
      ev('contentBlockStop', { contentBlockIndex: 0 }),
      ev('messageStop', { stopReason: 'tool_use' }),
      ev('metadata', { usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 } }),
    ].flatMap((e) => t.events(e));
    assert.deepEqual(
      out.map((e) => [e.event, JSON.parse(e.data)]),
      [
        ['message_start', { type: 'message_start', message: { id: 'x', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 } } }],
        ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'tu_9', name: 'f', input: {} } }],
        ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"a":' } }],
        ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '1}' } }],
        ['content_block_stop', { type: 'content_block_stop', index: 0 }],
        ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { input_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 2 } }],
        ['message_stop', { type: 'message_stop' }],
      ],
    );
  });

  test('a ThrottlingException mid-stream → an Anthropic rate_limit_error event, nothing after', () => {
    const t = new BedrockToAnthropicStream({ model: 'm', id: 'x' });
    t.push(TEXT_STREAM[0] as SseEvent);
    const err = t.push({ raw: '', event: 'error', data: JSON.stringify({ exception: 'throttlingException', message: 'Too many requests' }) });
    assert.equal(err, 'event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"Too many requests"}}\n\n');
    assert.equal(t.push(TEXT_STREAM[1] as SseEvent), '');
    assert.equal(t.end(), '');
  });

  test('a stream that ends after messageStop without metadata is closed; one cut before it stays cut', () => {
    const closed = new BedrockToAnthropicStream({ model: 'm', id: 'x' });
    TEXT_STREAM.slice(0, 6).forEach((e) => closed.push(e));
    assert.deepEqual(
      sse(closed.end()).map((e) => e.event),
      ['message_delta', 'message_stop'],
    );
    const cut = new BedrockToAnthropicStream({ model: 'm', id: 'x' });
    TEXT_STREAM.slice(0, 3).forEach((e) => cut.push(e));
    assert.equal(cut.end(), '');
  });
});

describe('ConverseStream → OpenAI chunks', () => {
  test('content, finish, the usage chunk when asked, [DONE]', () => {
    const t = new BedrockToOpenAIStream({ model: 'gpt', includeUsage: true });
    const chunks = sse(TEXT_STREAM.map((e) => t.push(e)).join('') + t.end());
    assert.equal(chunks.at(-1)?.data, '[DONE]');
    const parsed = chunks.slice(0, -1).map((c) => JSON.parse(c.data) as { choices: { delta: { content?: string }; finish_reason: string | null }[]; usage: unknown });
    assert.deepEqual(
      parsed.map((c) => c.choices[0]?.delta.content ?? null),
      ['', ' the', ' the', ' the', null, null],
    );
    assert.equal(parsed[4]?.choices[0]?.finish_reason, 'stop');
    assert.deepEqual(parsed[5]?.usage, { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 });
  });

  test('without include_usage: no usage chunk', () => {
    const t = new BedrockToOpenAIStream({ model: 'gpt', includeUsage: false });
    const chunks = sse(TEXT_STREAM.map((e) => t.push(e)).join('') + t.end());
    assert.equal(chunks.length, 6);
    assert.ok(chunks.every((c) => !c.data.includes('usage')));
  });
});

describe('Bedrock adapter', () => {
  test('the stream observer settles on the metadata usage and counts deltas', () => {
    const o = new BedrockStreamObserver();
    TEXT_STREAM.slice(0, 6).forEach((e) => assert.equal(o.onEvent(e), true));
    assert.equal(o.usage(), undefined);
    assert.equal(o.deliveredOutput, 3);
    o.onEvent(TEXT_STREAM[6] as SseEvent);
    assert.deepEqual(o.usage(), { input: 8, output: 3 });
  });

  test('Converse paths encode the model id label as the AWS SDKs do', () => {
    assert.equal(conversePath('anthropic.claude-3-5-haiku-20241022-v1:0', false), '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse');
    assert.equal(conversePath('arn:aws:bedrock:us-east-1:1:inference-profile/us.x(1)', true), '/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x%281%29/converse-stream');
  });

  test('signing region and credentials from the environment', () => {
    assert.equal(regionOfEndpoint('https://bedrock-runtime.eu-west-3.amazonaws.com'), 'eu-west-3');
    assert.equal(regionOfEndpoint('http://127.0.0.1:9090'), undefined);
    const env = { AWS_ACCESS_KEY_ID: 'AKID', AWS_SECRET_ACCESS_KEY: 'SECRET', AWS_REGION: 'us-west-2' };
    assert.deepEqual(bedrockSigningFromEnv({ base_url: 'https://bedrock-runtime.eu-west-3.amazonaws.com' }, env), { region: 'eu-west-3', credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' } });
    assert.deepEqual(bedrockSigningFromEnv({ base_url: 'http://127.0.0.1:1', region: 'ap-south-1' }, { ...env, AWS_SESSION_TOKEN: 'T' }), {
      region: 'ap-south-1',
      credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET', sessionToken: 'T' },
    });
    assert.deepEqual(bedrockSigningFromEnv({ base_url: 'http://127.0.0.1:1' }, env), { region: 'us-west-2', credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' } });
    const missing = bedrockSigningFromEnv({ base_url: 'http://127.0.0.1:1' }, {});
    assert.ok('problems' in missing);
    assert.equal(missing.problems.length, 3);
    const partial = bedrockSigningFromEnv({ base_url: 'http://127.0.0.1:1', region: 'us-east-1' }, { AWS_ACCESS_KEY_ID: 'AKID-VALUE' });
    assert.ok('problems' in partial);
    assert.deepEqual(partial.problems, ['environment variable AWS_SECRET_ACCESS_KEY is not set']);
  });
});

describe('Bedrock deployments in the config', () => {
  const raw = (deployment: Record<string, unknown>): unknown => ({
    tenants: [{ id: 't', keys: ['key-config-0001'], limits: [{ requests: 10, window: '1m' }] }],
    models: [{ name: 'claude', encoding: 'cl100k_base', deployments: ['b'] }],
    deployments: [{ name: 'b', provider: 'bedrock', base_url: 'https://bedrock-runtime.eu-central-1.amazonaws.com', ...deployment }],
  });
  const aws = { AWS_ACCESS_KEY_ID: 'AKID', AWS_SECRET_ACCESS_KEY: 'SECRET' };

  test('SigV4 credentials and region are resolved at load', () => {
    const d = buildConfig(raw({}), 'b.yaml', aws).deployments.get('b');
    assert.deepEqual(d?.aws, { region: 'eu-central-1', credentials: { accessKeyId: 'AKID', secretAccessKey: 'SECRET' } });
    assert.equal(d?.apiKey, undefined);
  });

  test('a Bedrock API key instead: no signing', () => {
    const d = buildConfig(raw({ api_key_env: 'BEDROCK_KEY' }), 'b.yaml', { BEDROCK_KEY: 'bedrock-api-key' }).deployments.get('b');
    assert.equal(d?.aws, undefined);
    assert.equal(d?.apiKey, 'bedrock-api-key');
  });

  test('missing credentials and a region on another provider are named', () => {
    assert.throws(() => buildConfig(raw({}), 'b.yaml', {}), (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.includes('deployments[0]: environment variable AWS_ACCESS_KEY_ID is not set')));
    const openai = { ...(raw({}) as Record<string, unknown>), deployments: [{ name: 'b', provider: 'openai', base_url: 'https://api.openai.com', region: 'us-east-1' }] };
    assert.throws(() => buildConfig(openai, 'b.yaml', aws), (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.includes('region is for provider: bedrock only')));
  });
});
