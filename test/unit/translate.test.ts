/**
 * The OpenAI Chat ↔ Anthropic Messages translation module (src/providers/translate), no I/O:
 * - requests both ways, field by field, as exact objects: system/developer hoisting (joined with a
 *   blank line), merged same-role turns, tools and tool_choice, tool calls and tool results, images
 *   (base64 data URL ↔ base64 source, http URL ↔ url source), stop, max_tokens (and its default),
 *   and every TranslationError with its `param`;
 * - JSON replies both ways (finish/stop reasons, usage: OpenAI's prompt_tokens includes cached
 *   tokens, Anthropic's input_tokens excludes cache reads, so 100 prompt with 30 cached ↔ 70 + 30);
 * - streams: the exact event text the simulator sends (built from src/simulator's own plans, 3 output
 *   tokens of " the" for a "Hello" prompt: 7 input tokens on /v1/messages, 8 on /v1/chat/completions,
 *   both counted by the simulator's token module) translated to the exact text of the other format;
 *   tool-call streams following the providers' documented sequences; error events; cut streams;
 * - round trips: Anthropic request → OpenAI → Anthropic is the identity on the translatable subset
 *   (fast-check), and so are replies and a tool-call stream.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { SseSplitter, type SseEvent } from '../../src/providers/sse.ts';
import {
  AnthropicToOpenAIStream,
  OpenAIToAnthropicStream,
  TranslationError,
  anthropicResponseToOpenAI,
  anthropicToOpenAIChat,
  openAIChatToAnthropic,
  openAIResponseToAnthropic,
} from '../../src/providers/translate/index.ts';
import { prepareAnthropicMessages } from '../../src/simulator/anthropic-messages.ts';
import { prepareOpenAIChat } from '../../src/simulator/openai-chat.ts';
import type { PreparedRequest } from '../../src/simulator/prepared-request.ts';
import { PromptTokens } from '../../src/simulator/prompt-tokens.ts';

const O2A = { model: 'claude-test', defaultMaxTokens: 4096 };
const A2O = { model: 'gpt-4o-mini' };
const PNG = 'iVBORw0KGgo=';

function events(text: string): SseEvent[] {
  const s = new SseSplitter();
  const out = s.push(new TextEncoder().encode(text));
  assert.equal(s.rest(), '');
  return out;
}

function run(t: { push(e: SseEvent): string; end(): string }, text: string): string {
  let out = '';
  for (const e of events(text)) out += t.push(e);
  return out + t.end();
}

function throwsTranslation(fn: () => unknown, param: string | null, message?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof TranslationError, String(err));
    assert.equal(err.param, param);
    if (message !== undefined) assert.match(err.message, message);
    return true;
  });
}

describe('OpenAI chat request → Anthropic messages', () => {
  test('system and developer messages become one system string; roles, strings and the default max_tokens', () => {
    const out = openAIChatToAnthropic(
      {
        model: 'gpt-4o-mini',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }, { type: 'text', text: 'No lists.' }] },
          { role: 'user', content: 'Hello' },
          { role: 'assistant', content: 'Bonjour' },
          { role: 'user', content: 'Again' },
        ],
      },
      O2A,
    );
    assert.deepEqual(out, {
      model: 'claude-test',
      max_tokens: 4096,
      system: 'Be brief.\n\nAnswer in French.\n\nNo lists.',
      messages: [
        { role: 'user', content: 'Hello' },
        { role: 'assistant', content: 'Bonjour' },
        { role: 'user', content: 'Again' },
      ],
    });
  });

  test('consecutive same-role messages are merged into blocks; an empty assistant turn disappears', () => {
    const out = openAIChatToAnthropic(
      {
        model: 'm',
        messages: [
          { role: 'user', content: 'one' },
          { role: 'user', content: [{ type: 'text', text: 'two' }] },
          { role: 'assistant', content: null },
          { role: 'user', content: 'three' },
          { role: 'assistant', content: 'a' },
          { role: 'assistant', content: [{ type: 'text', text: 'b' }, { type: 'refusal', refusal: 'c' }] },
          { role: 'user', content: 'four' },
        ],
      },
      O2A,
    );
    assert.deepEqual(out.messages, [
      { role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }, { type: 'text', text: 'three' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }, { type: 'text', text: 'c' }] },
      { role: 'user', content: 'four' },
    ]);
  });

  test('tools, tool_choice, tool calls and tool results (merged into one user message, results first)', () => {
    const out = openAIChatToAnthropic(
      {
        model: 'gpt-4o',
        max_tokens: 300,
        tools: [
          {
            type: 'function',
            function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true },
          },
          { type: 'function', function: { name: 'now' } },
        ],
        tool_choice: 'required',
        messages: [
          { role: 'user', content: 'Weather in Paris and Rome, and the time?' },
          {
            role: 'assistant',
            content: '',
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
              { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
          { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '24°C' }] },
          { role: 'user', content: 'Thanks' },
        ],
      },
      O2A,
    );
    assert.deepEqual(out, {
      model: 'claude-test',
      max_tokens: 300,
      tools: [
        { name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true },
        { name: 'now', input_schema: { type: 'object', properties: {} } },
      ],
      tool_choice: { type: 'any' },
      messages: [
        { role: 'user', content: 'Weather in Paris and Rome, and the time?' },
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'call_2', name: 'get_weather', input: { city: 'Rome' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_1', content: '18°C' },
            { type: 'tool_result', tool_use_id: 'call_2', content: [{ type: 'text', text: '24°C' }] },
            { type: 'text', text: 'Thanks' },
          ],
        },
      ],
    });
  });

  test('every tool_choice form, and parallel_tool_calls: false', () => {
    const choice = (tool_choice: unknown, extra: Record<string, unknown> = {}) =>
      openAIChatToAnthropic({ messages: [{ role: 'user', content: 'x' }], tool_choice, ...extra }, O2A).tool_choice;
    assert.deepEqual(choice('none'), { type: 'none' });
    assert.deepEqual(choice('auto'), { type: 'auto' });
    assert.deepEqual(choice('required'), { type: 'any' });
    assert.deepEqual(choice({ type: 'function', function: { name: 'f' } }), { type: 'tool', name: 'f' });
    assert.deepEqual(choice({ type: 'function', function: { name: 'f' } }, { parallel_tool_calls: false }), { type: 'tool', name: 'f', disable_parallel_tool_use: true });
    assert.deepEqual(choice(undefined, { parallel_tool_calls: false }), { type: 'auto', disable_parallel_tool_use: true });
    assert.deepEqual(choice('none', { parallel_tool_calls: false }), { type: 'none' });
    assert.equal(choice(undefined, { parallel_tool_calls: true }), undefined);
  });

  test('images: a base64 data URL and an https URL', () => {
    const out = openAIChatToAnthropic(
      {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Compare' },
              { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}`, detail: 'high' } },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
            ],
          },
        ],
      },
      O2A,
    );
    assert.deepEqual(out.messages, [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Compare' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
        ],
      },
    ]);
  });

  test('stop, max tokens precedence, sampling, stream, user', () => {
    const base = { messages: [{ role: 'user', content: 'x' }] };
    assert.deepEqual(openAIChatToAnthropic({ ...base, stop: 'END', max_tokens: 50, temperature: 0.2, top_p: 0.9, stream: true, user: 'u-1', n: 1, logprobs: false }, O2A), {
      model: 'claude-test',
      max_tokens: 50,
      messages: [{ role: 'user', content: 'x' }],
      stop_sequences: ['END'],
      temperature: 0.2,
      top_p: 0.9,
      stream: true,
      metadata: { user_id: 'u-1' },
    });
    assert.deepEqual(openAIChatToAnthropic({ ...base, stop: ['a', 'b'] }, O2A).stop_sequences, ['a', 'b']);
    assert.equal(openAIChatToAnthropic({ ...base, stop: null }, O2A).stop_sequences, undefined);
    assert.equal(openAIChatToAnthropic({ ...base, max_completion_tokens: 7, max_tokens: 99 }, O2A).max_tokens, 7);
    assert.equal(openAIChatToAnthropic({ ...base, max_tokens: 99 }, O2A).max_tokens, 99);
    assert.equal(openAIChatToAnthropic({ ...base, max_tokens: null }, { model: 'c', defaultMaxTokens: 1234 }).max_tokens, 1234);
    assert.equal(openAIChatToAnthropic({ ...base, temperature: 1 }, O2A).temperature, 1);
    // Dropped: no Anthropic equivalent, output shape unchanged.
    const dropped = openAIChatToAnthropic({ ...base, seed: 1, frequency_penalty: 0.5, presence_penalty: 0.5, stream_options: { include_usage: true }, response_format: { type: 'text' } }, O2A);
    assert.deepEqual(dropped, { model: 'claude-test', max_tokens: 4096, messages: [{ role: 'user', content: 'x' }] });
  });

  test('TranslationErrors name the field', () => {
    const m = [{ role: 'user', content: 'x' }];
    throwsTranslation(() => openAIChatToAnthropic('nope', O2A), null);
    throwsTranslation(() => openAIChatToAnthropic({}, O2A), 'messages');
    throwsTranslation(() => openAIChatToAnthropic({ messages: [{ role: 'system', content: 's' }] }, O2A), 'messages', /At least one/);
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, temperature: 1.5 }, O2A), 'temperature', /0 to 1/);
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, temperature: -0.1 }, O2A), 'temperature');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, n: 2 }, O2A), 'n');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, logprobs: true }, O2A), 'logprobs');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, top_logprobs: 3 }, O2A), 'top_logprobs');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, audio: { voice: 'alloy', format: 'mp3' } }, O2A), 'audio');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, modalities: ['text', 'audio'] }, O2A), 'modalities');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, response_format: { type: 'json_object' } }, O2A), 'response_format');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, functions: [{ name: 'f' }] }, O2A), 'functions');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, max_tokens: 0 }, O2A), 'max_tokens');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, tools: [{ type: 'custom', custom: { name: 'x' } }] }, O2A), 'tools[0].type');
    throwsTranslation(() => openAIChatToAnthropic({ messages: m, tool_choice: { type: 'allowed_tools', allowed_tools: {} } }, O2A), 'tool_choice');
    throwsTranslation(() => openAIChatToAnthropic({ messages: [{ role: 'function', name: 'f', content: 'x' }] }, O2A), 'messages[0].role');
    throwsTranslation(
      () => openAIChatToAnthropic({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AA==', format: 'wav' } }] }] }, O2A),
      'messages[0].content[0].type',
    );
    throwsTranslation(() => openAIChatToAnthropic({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/bmp;base64,AA==' } }] }] }, O2A), 'messages[0].content[0].image_url.url', /image\/bmp/);
    throwsTranslation(() => openAIChatToAnthropic({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x/y.png' } }] }] }, O2A), 'messages[0].content[0].image_url.url');
    const call = (args: string) => ({ messages: [...m, { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: args } }] }] });
    throwsTranslation(() => openAIChatToAnthropic(call('{"city":'), O2A), 'messages[1].tool_calls[0].function.arguments', /not valid JSON/);
    throwsTranslation(() => openAIChatToAnthropic(call('[1,2]'), O2A), 'messages[1].tool_calls[0].function.arguments', /JSON object/);
  });
});

describe('Anthropic messages request → OpenAI chat', () => {
  test('system, roles, tool use and results, images, stop, max tokens, stream usage', () => {
    const out = anthropicToOpenAIChat(
      {
        model: 'claude-sonnet-5',
        max_tokens: 200,
        system: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: 'Use metric units.', cache_control: { type: 'ephemeral' } }],
        stop_sequences: ['END'],
        temperature: 0.5,
        top_p: 0.8,
        top_k: 40,
        stream: true,
        metadata: { user_id: 'u-9' },
        tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
        tool_choice: { type: 'auto', disable_parallel_tool_use: true },
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Weather here?' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/sky.jpg' } },
            ],
          },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'hmm', signature: 'sig' },
              { type: 'text', text: 'Let me check.' },
              { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '18°C' }], is_error: false },
              { type: 'text', text: 'And tomorrow?' },
            ],
          },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2' }] },
        ],
      },
      A2O,
    );
    assert.deepEqual(out, {
      model: 'gpt-4o-mini',
      max_tokens: 200,
      messages: [
        { role: 'system', content: 'Be brief.\n\nUse metric units.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Weather here?' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
            { type: 'image_url', image_url: { url: 'https://example.com/sky.jpg' } },
          ],
        },
        { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'toolu_1', content: [{ type: 'text', text: '18°C' }] },
        { role: 'user', content: [{ type: 'text', text: 'And tomorrow?' }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'toolu_2', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'toolu_2', content: '' },
      ],
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      stop: ['END'],
      temperature: 0.5,
      top_p: 0.8,
      stream: true,
      stream_options: { include_usage: true },
      user: 'u-9',
    });
  });

  test('tool_choice forms; a non-stream request has no stream_options', () => {
    const choice = (tool_choice: unknown) => anthropicToOpenAIChat({ max_tokens: 5, messages: [{ role: 'user', content: 'x' }], tool_choice }, A2O).tool_choice;
    assert.equal(choice({ type: 'any' }), 'required');
    assert.equal(choice({ type: 'none' }), 'none');
    assert.deepEqual(choice({ type: 'tool', name: 'f' }), { type: 'function', function: { name: 'f' } });
    assert.deepEqual(anthropicToOpenAIChat({ max_tokens: 5, stream: false, system: 'S', messages: [{ role: 'user', content: 'x' }] }, A2O), {
      model: 'gpt-4o-mini',
      max_tokens: 5,
      stream: false,
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'x' },
      ],
    });
  });

  test('TranslationErrors name the field', () => {
    const m = [{ role: 'user', content: 'x' }];
    throwsTranslation(() => anthropicToOpenAIChat({ messages: m }, A2O), 'max_tokens');
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: m, stop_sequences: ['1', '2', '3', '4', '5'] }, A2O), 'stop_sequences', /at most 4/);
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: m, temperature: 1.2 }, A2O), 'temperature');
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: m, thinking: { type: 'enabled', budget_tokens: 1024 } }, A2O), 'thinking');
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: m, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, A2O), 'tools.0.type');
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: [...m, { role: 'assistant', content: 'Sure,' }] }, A2O), 'messages.1', /prefill/);
    throwsTranslation(
      () => anthropicToOpenAIChat({ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] }, A2O),
      'messages.0.content.0.type',
    );
    throwsTranslation(
      () =>
        anthropicToOpenAIChat(
          { max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] }] }] },
          A2O,
        ),
      'messages.0.content.0.content.0.type',
    );
    throwsTranslation(() => anthropicToOpenAIChat({ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f' } }] }] }, A2O), 'messages.0.content.0.source.type');
  });
});

describe('JSON replies', () => {
  test('Anthropic message → chat.completion: text joined, tool calls, stop reasons, usage with cache tokens', () => {
    const out = anthropicResponseToOpenAI(
      {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'claude-sonnet-5',
        content: [
          { type: 'text', text: 'Checking ' },
          { type: 'text', text: 'now.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        ],
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage: { input_tokens: 70, cache_creation_input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 15 },
      },
      'gpt-4o-mini',
      1_700_000_000,
    );
    assert.deepEqual(out, {
      id: 'msg_1',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'gpt-4o-mini',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: 'Checking now.',
            refusal: null,
            tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
          },
          logprobs: null,
          finish_reason: 'tool_calls',
        },
      ],
      usage: { prompt_tokens: 100, completion_tokens: 15, total_tokens: 115 },
    });
    const finish = (stop_reason: string) => (anthropicResponseToOpenAI({ content: [], stop_reason, usage: {} }, 'm').choices as { finish_reason: string }[])[0]?.finish_reason;
    assert.deepEqual(['end_turn', 'stop_sequence', 'max_tokens', 'tool_use', 'refusal', 'pause_turn'].map(finish), ['stop', 'stop', 'length', 'tool_calls', 'content_filter', 'stop']);
    const empty = anthropicResponseToOpenAI({ content: [], stop_reason: 'end_turn', usage: {} }, 'm') as { choices: { message: { content: unknown } }[] };
    assert.equal(empty.choices[0]?.message.content, null);
    throwsTranslation(() => anthropicResponseToOpenAI({ type: 'message' }, 'm'), 'content');
  });

  test('chat.completion → Anthropic message: content, tool calls, finish reasons, usage with cached tokens', () => {
    const out = openAIResponseToAnthropic(
      {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: 'gpt-4o',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'Checking.', refusal: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }] },
            logprobs: null,
            finish_reason: 'tool_calls',
          },
        ],
        usage: { prompt_tokens: 100, completion_tokens: 15, total_tokens: 115, prompt_tokens_details: { cached_tokens: 30 } },
      },
      'claude-test',
    );
    assert.deepEqual(out, {
      id: 'chatcmpl-1',
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Rome' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 70, cache_creation_input_tokens: 0, cache_read_input_tokens: 30, output_tokens: 15 },
    });
    const stop = (finish_reason: string) => openAIResponseToAnthropic({ choices: [{ message: { content: 'x' }, finish_reason }] }, 'm').stop_reason;
    assert.deepEqual(['stop', 'length', 'tool_calls', 'content_filter'].map(stop), ['end_turn', 'max_tokens', 'tool_use', 'refusal']);
    assert.deepEqual(openAIResponseToAnthropic({ choices: [{ message: { content: null, refusal: 'I cannot.' }, finish_reason: 'stop' }] }, 'm').content, [{ type: 'text', text: 'I cannot.' }]);
    throwsTranslation(() => openAIResponseToAnthropic({ choices: [] }, 'm'), 'choices[0]');
    throwsTranslation(
      () => openAIResponseToAnthropic({ choices: [{ message: { content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{' } }] } }] }, 'm'),
      'choices[0].message.tool_calls[0].function.arguments',
    );
  });
});

/** The simulator's own stream text for `body` (3 output tokens), from its reply plans. */
function simulatorStream(kind: 'anthropic' | 'openai', body: Record<string, unknown>, id: string): string {
  const prepare = kind === 'anthropic' ? prepareAnthropicMessages : prepareOpenAIChat;
  const prepared = prepare(body, body.model as string, { 'x-sim-output-tokens': '3' }, { prompts: new PromptTokens(), defaultOutputTokens: 16 }) as PreparedRequest;
  const plan = prepared.plan({ id, created: 1_700_000_000 });
  return plan.head + plan.unit.repeat(plan.units) + plan.tail;
}

const chunk = (delta: string, finish = 'null', usage = ',"usage":null') =>
  `data: {"id":"msg_sim1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]${usage}}\n\n`;

describe('Anthropic stream → OpenAI chunks', () => {
  const simText = simulatorStream('anthropic', { model: 'claude-test', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'Hello' }] }, 'msg_sim1');

  test('the simulator stream, with include_usage: role chunk, 3 content chunks, finish, usage, [DONE]', () => {
    assert.ok(simText.startsWith('event: message_start\n') && simText.includes('event: ping\ndata: {"type": "ping"}\n\n'));
    const t = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: true, created: 1_700_000_000 });
    assert.equal(
      run(t, simText),
      chunk('{"role":"assistant","content":""}') +
        chunk('{"content":" the"}').repeat(3) +
        chunk('{}', '"stop"') +
        'data: {"id":"msg_sim1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\n' +
        'data: [DONE]\n\n',
    );
    assert.deepEqual(t.usage(), { input: 7, output: 3 });
  });

  test('without include_usage: no usage fields and no usage chunk; usage() still known', () => {
    const t = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: false, created: 1_700_000_000 });
    assert.equal(run(t, simText), chunk('{"role":"assistant","content":""}', 'null', '') + chunk('{"content":" the"}', 'null', '').repeat(3) + chunk('{}', '"stop"', '') + 'data: [DONE]\n\n');
    assert.deepEqual(t.usage(), { input: 7, output: 3 });
  });

  test('a tool-use stream (the documented sequence: text block, then a tool_use block with input_json_delta)', () => {
    const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
    const text =
      ev('message_start', { type: 'message_start', message: { id: 'msg_t', type: 'message', role: 'assistant', model: 'c', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 472, cache_read_input_tokens: 28, output_tokens: 2 } } }) +
      ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }) +
      ev('ping', { type: 'ping' }) +
      ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Checking.' } }) +
      ev('content_block_stop', { type: 'content_block_stop', index: 0 }) +
      ev('content_block_start', { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: {} } }) +
      ev('content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } }) +
      ev('content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"city": "Pa' } }) +
      ev('content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: 'ris"}' } }) +
      ev('content_block_stop', { type: 'content_block_stop', index: 1 }) +
      ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 89 } }) +
      ev('message_stop', { type: 'message_stop' });
    const t = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: true, created: 1_700_000_000, id: 'msg_sim1' });
    assert.equal(
      run(t, text),
      chunk('{"role":"assistant","content":""}') +
        chunk('{"content":"Checking."}') +
        chunk('{"tool_calls":[{"index":0,"id":"toolu_01","type":"function","function":{"name":"get_weather","arguments":""}}]}') +
        chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": \\"Pa"}}]}') +
        chunk('{"tool_calls":[{"index":0,"function":{"arguments":"ris\\"}"}}]}') +
        chunk('{}', '"tool_calls"') +
        'data: {"id":"msg_sim1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":89,"total_tokens":589}}\n\n' +
        'data: [DONE]\n\n',
    );
    assert.deepEqual(t.usage(), { input: 500, output: 89 });
  });

  test('an error event becomes an OpenAI error chunk and the stream ends; a cut stream gets no [DONE]', () => {
    const head = simText.slice(0, simText.indexOf('event: content_block_stop'));
    const t = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: true, created: 1_700_000_000 });
    const out = run(t, `${head}event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n`);
    assert.ok(out.endsWith(`${chunk('{"content":" the"}')}data: {"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded_error"}}\n\n`), out);
    assert.equal(t.usage(), undefined);
    const cut = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: true, created: 1_700_000_000 });
    const cutOut = run(cut, head);
    assert.equal(cutOut, chunk('{"role":"assistant","content":""}') + chunk('{"content":" the"}').repeat(3));
    assert.equal(cut.usage(), undefined);
  });
});

const ev = (type: string, data: string) => `event: ${type}\ndata: ${data}\n\n`;
const textDelta = (i: number, text: string) => ev('content_block_delta', `{"type":"content_block_delta","index":${i},"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`);
/** fast-check builds null-prototype objects; compare plain JSON. */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

describe('OpenAI chunks → Anthropic stream', () => {
  const simText = simulatorStream(
    'openai',
    { model: 'gpt-4o-mini', max_tokens: 10, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Hello' }] },
    'chatcmpl-sim1',
  );
  const start = (input: number, id = 'chatcmpl-sim1') =>
    ev(
      'message_start',
      `{"type":"message_start","message":{"id":"${id}","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":${input},"output_tokens":0}}}`,
    );
  test('the simulator stream: message_start (input 0), one text block, message_delta with the reported usage, message_stop', () => {
    assert.ok(simText.endsWith('"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}\n\ndata: [DONE]\n\n'));
    const t = new OpenAIToAnthropicStream({ model: 'claude-test' });
    assert.equal(
      run(t, simText),
      start(0) +
        ev('content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}') +
        textDelta(0, ' the').repeat(3) +
        ev('content_block_stop', '{"type":"content_block_stop","index":0}') +
        ev('message_delta', '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}') +
        ev('message_stop', '{"type":"message_stop"}'),
    );
    assert.deepEqual(t.usage(), { input: 8, output: 3 });
    const known = new OpenAIToAnthropicStream({ model: 'claude-test', inputTokens: 8, id: 'msg_x' });
    assert.ok(run(known, simText).startsWith(start(8, 'msg_x')));
  });

  test('a tool-call stream (text, then two calls: id and name first, then argument fragments)', () => {
    const c = (delta: string, finish = 'null') => `data: {"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}],"usage":null}\n\n`;
    const text =
      c('{"role":"assistant","content":null}') +
      c('{"content":"Checking."}') +
      c('{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}') +
      c('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]}') +
      c('{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]}') +
      c('{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}') +
      c('{}', '"tool_calls"') +
      'data: {"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":64}}}\n\n' +
      'data: [DONE]\n\n';
    const t = new OpenAIToAnthropicStream({ model: 'claude-test' });
    assert.equal(
      run(t, text),
      start(0, 'chatcmpl-t') +
        ev('content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}') +
        textDelta(0, 'Checking.') +
        ev('content_block_stop', '{"type":"content_block_stop","index":0}') +
        ev('content_block_start', '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_a","name":"get_weather","input":{}}}') +
        ev('content_block_delta', '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\":"}}') +
        ev('content_block_delta', '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\"Paris\\"}"}}') +
        ev('content_block_stop', '{"type":"content_block_stop","index":1}') +
        ev('content_block_start', '{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_b","name":"get_time","input":{}}}') +
        ev('content_block_delta', '{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}') +
        ev('content_block_stop', '{"type":"content_block_stop","index":2}') +
        ev('message_delta', '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":56,"cache_creation_input_tokens":0,"cache_read_input_tokens":64,"output_tokens":40}}') +
        ev('message_stop', '{"type":"message_stop"}'),
    );
    assert.deepEqual(t.usage(), { input: 120, output: 40 });
  });

  test('an error chunk becomes an error event and the stream ends; a stream without [DONE] closes on end() only after a finish_reason', () => {
    const lines = simText.split('\n\n');
    const t = new OpenAIToAnthropicStream({ model: 'claude-test' });
    const out = run(t, `${lines.slice(0, 2).join('\n\n')}\n\ndata: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}\n\ndata: [DONE]\n\n`);
    assert.ok(out.endsWith(`${textDelta(0, ' the')}${ev('error', '{"type":"error","error":{"type":"api_error","message":"boom"}}')}`), out);
    assert.equal(t.usage(), undefined);
    // Cut after the finish chunk (no usage chunk, no [DONE]): end() closes with what is known.
    const noDone = new OpenAIToAnthropicStream({ model: 'claude-test' });
    const closed = run(noDone, `${lines.slice(0, 5).join('\n\n')}\n\n`);
    assert.ok(closed.endsWith(ev('message_delta', '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":0}}') + ev('message_stop', '{"type":"message_stop"}')), closed);
    // Cut mid-content: no closing events.
    const cut = new OpenAIToAnthropicStream({ model: 'claude-test' });
    assert.ok(!run(cut, `${lines.slice(0, 3).join('\n\n')}\n\n`).includes('message_stop'));
  });
});

describe('round trips', () => {
  const text = fc.string({ minLength: 1, maxLength: 12 });
  const id = fc.stringMatching(/^[a-z0-9_]{1,10}$/);
  const toolUse = fc.record({ type: fc.constant('tool_use'), id, name: id, input: fc.dictionary(id, fc.oneof(fc.integer(), text)) });
  const userContent = fc.oneof(
    text,
    fc
      .tuple(
        fc.array(fc.record({ type: fc.constant('tool_result'), tool_use_id: id, content: fc.oneof(fc.constant(''), text) }), { maxLength: 2 }),
        fc.array(
          fc.oneof(
            fc.record({ type: fc.constant('text'), text }),
            fc.record({ type: fc.constant('image'), source: fc.record({ type: fc.constant('base64'), media_type: fc.constantFrom('image/png', 'image/jpeg'), data: fc.base64String({ minLength: 4, maxLength: 12 }) }) }),
            fc.record({ type: fc.constant('image'), source: fc.record({ type: fc.constant('url'), url: fc.webUrl() }) }),
          ),
          { maxLength: 3 },
        ),
      )
      .filter(([r, o]) => r.length + o.length > 0)
      .map(([r, o]) => [...r, ...o]),
  );
  const assistantContent = fc.oneof(
    text,
    fc.tuple(fc.option(text, { nil: undefined }), fc.array(toolUse, { minLength: 1, maxLength: 2 })).map(([t, uses]) => [...(t === undefined ? [] : [{ type: 'text', text: t }]), ...uses]),
  );
  const messages = fc
    .array(fc.tuple(userContent, assistantContent), { maxLength: 3 })
    .chain((turns) => userContent.map((last) => [...turns.flatMap(([u, a]) => [{ role: 'user', content: u }, { role: 'assistant', content: a }]), { role: 'user', content: last }]));
  const request = fc.record(
    {
      model: fc.constant('claude-test'),
      max_tokens: fc.integer({ min: 1, max: 100_000 }),
      messages,
      system: text,
      stop_sequences: fc.array(text, { minLength: 1, maxLength: 4 }),
      temperature: fc.double({ min: 0, max: 1, noNaN: true }),
      top_p: fc.double({ min: 0, max: 1, noNaN: true }),
      stream: fc.boolean(),
      metadata: fc.record({ user_id: id }),
      tools: fc.array(fc.record({ name: id, description: text, input_schema: fc.constant({ type: 'object', properties: { q: { type: 'string' } } }) }), { minLength: 1, maxLength: 2 }),
      tool_choice: fc.oneof(
        fc.constant({ type: 'none' }),
        fc.record({ type: fc.constantFrom('auto', 'any') }, { requiredKeys: ['type'] }),
        fc.record({ type: fc.constant('tool'), name: id }),
        fc.record({ type: fc.constantFrom('auto', 'any'), disable_parallel_tool_use: fc.constant(true) }),
      ),
    },
    { requiredKeys: ['model', 'max_tokens', 'messages'] },
  );

  test('property: Anthropic request → OpenAI → Anthropic is the identity on the translatable subset', () => {
    fc.assert(
      fc.property(request, (body) => {
        const back = openAIChatToAnthropic(anthropicToOpenAIChat(body, A2O), { model: 'claude-test', defaultMaxTokens: 1 });
        assert.deepEqual(back, plain(body));
      }),
      { numRuns: 300 },
    );
  });

  test('property: Anthropic message reply → chat.completion → message keeps content, stop reason and usage', () => {
    const reply = fc.record({
      id,
      type: fc.constant('message'),
      role: fc.constant('assistant'),
      model: fc.constant('claude-test'),
      content: fc.tuple(fc.option(text, { nil: undefined }), fc.array(toolUse, { maxLength: 2 })).map(([t, uses]) => [...(t === undefined ? [] : [{ type: 'text', text: t }]), ...uses]),
      stop_reason: fc.constantFrom('end_turn', 'max_tokens', 'tool_use', 'refusal'),
      stop_sequence: fc.constant(null),
      usage: fc.record({ input_tokens: fc.nat(), cache_creation_input_tokens: fc.constant(0), cache_read_input_tokens: fc.constant(0), output_tokens: fc.nat() }),
    });
    fc.assert(
      fc.property(reply, (msg) => {
        assert.deepEqual(openAIResponseToAnthropic(anthropicResponseToOpenAI(msg, 'gpt-4o-mini'), 'claude-test'), plain(msg));
      }),
      { numRuns: 300 },
    );
  });

  test('a tool-call stream through both translators rebuilds the same message', () => {
    const upstream =
      ev('message_start', '{"type":"message_start","message":{"id":"msg_r","type":"message","role":"assistant","model":"c","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1}}}') +
      ev('content_block_start', '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}') +
      textDelta(0, 'Hi ') +
      textDelta(0, 'there') +
      ev('content_block_stop', '{"type":"content_block_stop","index":0}') +
      ev('content_block_start', '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_r","name":"f","input":{}}}') +
      ev('content_block_delta', '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\":"}}') +
      ev('content_block_delta', '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}') +
      ev('content_block_stop', '{"type":"content_block_stop","index":1}') +
      ev('message_delta', '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12}}') +
      ev('message_stop', '{"type":"message_stop"}');
    const toOpenAI = new AnthropicToOpenAIStream({ model: 'gpt-4o-mini', includeUsage: true });
    const back = new OpenAIToAnthropicStream({ model: 'claude-test' });
    const final = run(back, run(toOpenAI, upstream));
    // Rebuild the message from the final events the way a client accumulates them.
    const content: { type: string; text?: string; json?: string; id?: string; name?: string }[] = [];
    let stop: unknown;
    let usage: unknown;
    for (const e of events(final)) {
      const d = JSON.parse(e.data) as {
        index: number;
        content_block: { type: string; text?: string; id?: string; name?: string };
        delta: { type?: string; text?: string; partial_json?: string; stop_reason?: string };
        usage: unknown;
      };
      if (e.event === 'content_block_start') content[d.index] = { ...d.content_block, json: '' };
      else if (e.event === 'content_block_delta' && d.delta.type === 'text_delta') content[d.index]!.text += d.delta.text!;
      else if (e.event === 'content_block_delta') content[d.index]!.json += d.delta.partial_json!;
      else if (e.event === 'message_delta') [stop, usage] = [d.delta.stop_reason, d.usage];
    }
    assert.deepEqual(
      content.map((b) => (b.type === 'text' ? { type: 'text', text: b.text } : { type: b.type, id: b.id, name: b.name, input: JSON.parse(b.json!) })),
      [
        { type: 'text', text: 'Hi there' },
        { type: 'tool_use', id: 'toolu_r', name: 'f', input: { a: 1 } },
      ],
    );
    assert.equal(stop, 'tool_use');
    assert.deepEqual(usage, { input_tokens: 40, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 12 });
  });
});
