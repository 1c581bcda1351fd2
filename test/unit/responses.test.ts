/**
 * The Responses API's pure parts: request checks, usage, the stream observer, the translation to
 * chat completions (and what it refuses), the chat → Responses reply and stream translation, the
 * counting form with its stored references, and the node's response registry (a background
 * settlement made once).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { GatewayError } from '../../src/errors.ts';
import { ResponseIds } from '../../src/gateway/response-ids.ts';
import { servesResponses } from '../../src/gateway/routes/responses.ts';
import type { ResolvedDeployment } from '../../src/config/load.ts';
import { ResponsesStreamObserver, parseResponsesRequest, responsesUsage } from '../../src/providers/openai/responses.ts';
import { SseSplitter } from '../../src/providers/sse.ts';
import type { SseEvent } from '../../src/providers/sse.ts';
import { ChatToResponsesStream, chatResponseToResponses } from '../../src/providers/translate/chat-to-responses.ts';
import { TranslationError } from '../../src/providers/translate/openai-to-anthropic.ts';
import { responsesPromptForCounting, responsesToChat } from '../../src/providers/translate/responses-to-chat.ts';

function events(text: string): SseEvent[] {
  return new SseSplitter().push(new TextEncoder().encode(text));
}

function parsed(text: string): { type: string; sequence_number: number; [k: string]: unknown }[] {
  return events(text).map((e) => JSON.parse(e.data) as { type: string; sequence_number: number });
}

describe('Responses requests', () => {
  test('parse: model, stream, background, max_output_tokens, previous_response_id; bad shapes are 400 naming the field', () => {
    const r = parseResponsesRequest({ model: 'm', input: 'hi', stream: true, background: true, max_output_tokens: 50, previous_response_id: 'resp_1' });
    assert.deepEqual([r.model, r.stream, r.background, r.maxOutput, r.previousResponseId], ['m', true, true, 50, 'resp_1']);
    const bad = (body: unknown, param: string): void => {
      assert.throws(() => parseResponsesRequest(body, { messages: 2, tools: 1 }), (err: unknown) => err instanceof GatewayError && err.statusCode === 400 && err.param === param);
    };
    bad({ input: 'x' }, 'model');
    bad({ model: 'm', input: 3 }, 'input');
    bad({ model: 'm', input: [1] }, 'input[0]');
    bad({ model: 'm', input: [{}, {}, {}] }, 'input');
    bad({ model: 'm', tools: [{}, {}] }, 'tools');
    bad({ model: 'm', max_output_tokens: 0 }, 'max_output_tokens');
    bad({ model: 'm', previous_response_id: '' }, 'previous_response_id');
  });

  test('usage: input + output (reasoning is inside output); absent or malformed → undefined', () => {
    assert.deepEqual(responsesUsage({ input_tokens: 10, output_tokens: 7, output_tokens_details: { reasoning_tokens: 5 } }), { input: 10, output: 7, reasoning: 5 });
    assert.deepEqual(responsesUsage({ input_tokens: 10, input_tokens_details: { cached_tokens: 4 }, output_tokens: 7 }), { input: 10, output: 7, cacheRead: 4 });
    assert.equal(responsesUsage(null), undefined);
    assert.equal(responsesUsage({ prompt_tokens: 3 }), undefined);
  });

  test('stream observer: the id from response.created, usage only from the terminal event, one delivered token per non-empty delta; every event passed', () => {
    const o = new ResponsesStreamObserver();
    const text =
      'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_9","status":"in_progress","usage":null}}\n\n' +
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1,"delta":" a"}\n\n' +
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":2,"delta":""}\n\n' +
      'data: {"type":"response.function_call_arguments.delta","sequence_number":3,"delta":"{"}\n\n';
    for (const e of events(text)) assert.equal(o.onEvent(e), true);
    assert.equal(o.responseId, 'resp_9');
    assert.equal(o.usage(), undefined);
    assert.equal(o.deliveredOutput, 2);
    o.onEvent(events('event: response.incomplete\ndata: {"type":"response.incomplete","sequence_number":4,"response":{"id":"resp_9","status":"incomplete","usage":{"input_tokens":4,"output_tokens":16}}}\n\n')[0] as SseEvent);
    assert.deepEqual(o.usage(), { input: 4, output: 16 });
    assert.equal(o.status, 'incomplete');
  });
});

describe('Responses → chat completions', () => {
  test('instructions, messages with parts, function calls and outputs, function tools, format, caps and stream', () => {
    const chat = responsesToChat(
      {
        model: 'public',
        instructions: 'Be brief.',
        input: [
          { role: 'developer', content: 'dev' },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'look' }, { type: 'input_image', image_url: 'https://x/y.png', detail: 'low' }, { type: 'input_file', file_id: 'file-1' }] },
          { type: 'reasoning', id: 'rs_1', summary: [] },
          { role: 'assistant', content: [{ type: 'output_text', text: 'calling' }] },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
          { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{}' },
          { type: 'function_call_output', call_id: 'c1', output: 'one' },
        ],
        tools: [{ type: 'function', name: 'f', description: 'does f', parameters: { type: 'object', properties: {} }, strict: true }],
        tool_choice: { type: 'function', name: 'f' },
        text: { format: { type: 'json_schema', name: 's', schema: { type: 'object' }, strict: true }, verbosity: 'low' },
        reasoning: { effort: 'low', summary: 'auto' },
        max_output_tokens: 100,
        temperature: 0.5,
        store: true,
        stream: true,
      },
      { model: 'upstream' },
    );
    assert.deepEqual(chat, {
      model: 'upstream',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'developer', content: 'dev' },
        { role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'low' } }, { type: 'file', file: { file_id: 'file-1' } }] },
        {
          role: 'assistant',
          content: 'calling',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
            { id: 'c2', type: 'function', function: { name: 'g', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'one' },
      ],
      tools: [{ type: 'function', function: { name: 'f', description: 'does f', parameters: { type: 'object', properties: {} }, strict: true } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      max_completion_tokens: 100,
      temperature: 0.5,
      response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object' }, strict: true } },
      verbosity: 'low',
      reasoning_effort: 'low',
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test('refused: stored state, built-in tools, item references, images by file id', () => {
    const refused = (body: Record<string, unknown>, param: string): void => {
      assert.throws(() => responsesToChat({ model: 'm', ...body }, { model: 'm' }), (err: unknown) => err instanceof TranslationError && err.param === param);
    };
    refused({ previous_response_id: 'resp_1' }, 'previous_response_id');
    refused({ conversation: 'conv_1' }, 'conversation');
    refused({ background: true }, 'background');
    refused({ tools: [{ type: 'web_search' }] }, 'tools[0].type');
    refused({ input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0]');
    refused({ input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-1' }] }] }, 'input[0].content[0].file_id');
  });

  test('counting form: never throws; counts each piece of context stored at the provider', () => {
    const c = responsesPromptForCounting({
      model: 'm',
      previous_response_id: 'resp_1',
      input: [{ type: 'item_reference', id: 'x' }, { role: 'user', content: [{ type: 'input_image', file_id: 'f' }, { type: 'input_file', file_id: 'g' }] }],
      tools: [{ type: 'web_search' }],
    });
    assert.equal(c.storedRefs, 4);
    assert.equal((c.chat.messages as unknown[]).length, 1);
    assert.equal((c.chat.tools as unknown[]).length, 1, 'a built-in tool is approximated by its JSON');
    const odd = responsesPromptForCounting({ model: 'm', input: [{ role: 'user', content: 7 }] });
    assert.equal(odd.storedRefs, 0);
    assert.equal((odd.chat.messages as { content: string }[])[0]?.content.includes('7'), true);
  });
});

describe('chat completions → Responses', () => {
  test('JSON: message and function calls as output items; length → incomplete; usage with details', () => {
    const r = chatResponseToResponses(
      {
        id: 'chatcmpl-1',
        choices: [{ index: 0, message: { role: 'assistant', content: 'hi', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, finish_reason: 'length' }],
        usage: { prompt_tokens: 5, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 2 }, completion_tokens_details: { reasoning_tokens: 4 } },
      },
      'public',
      { instructions: 'x', max_output_tokens: 9 },
      1_700_000_000,
    );
    assert.equal(r.object, 'response');
    assert.equal(r.model, 'public');
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.instructions, 'x');
    assert.match(String(r.id), /^resp_[0-9a-f]{48}$/);
    const output = r.output as { type: string; content?: { text: string }[]; call_id?: string }[];
    assert.deepEqual(output.map((o) => o.type), ['message', 'function_call']);
    assert.equal(output[0]?.content?.[0]?.text, 'hi');
    assert.equal(output[1]?.call_id, 'c1');
    assert.deepEqual(r.usage, { input_tokens: 5, input_tokens_details: { cached_tokens: 2 }, output_tokens: 9, output_tokens_details: { reasoning_tokens: 4 }, total_tokens: 14 });
  });

  test('stream: text then a tool call, each item opened and closed; completed with the usage chunk; sequence numbers from 0', () => {
    const t = new ChatToResponsesStream({ model: 'public', request: {} });
    const chunk = (c: unknown): string => `data: ${JSON.stringify(c)}\n\n`;
    let out = '';
    for (const e of events(
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] }) +
        chunk({ choices: [{ index: 0, delta: { content: 'A' } }] }) +
        chunk({ choices: [{ index: 0, delta: { content: 'B' } }] }) +
        chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'f', arguments: '' } }] } }] }) +
        chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{}' } }] } }] }) +
        chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) +
        chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } }) +
        'data: [DONE]\n\n',
    ))
      out += t.push(e);
    const all = parsed(out);
    assert.deepEqual(all.map((e) => e.sequence_number), all.map((_e, i) => i));
    assert.deepEqual(all.map((e) => e.type), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = all.at(-1) as unknown as { response: { status: string; output: { type: string }[]; usage: { input_tokens: number; output_tokens: number } } };
    assert.equal(done.response.status, 'completed');
    assert.deepEqual(done.response.output.map((o) => o.type), ['message', 'function_call']);
    assert.deepEqual([done.response.usage.input_tokens, done.response.usage.output_tokens], [3, 4]);
    assert.equal(t.end(), '', 'ended once');
  });

  test('stream cut before [DONE]: no terminal event; an error chunk becomes an error event', () => {
    const cut = new ChatToResponsesStream({ model: 'm', request: {} });
    for (const e of events(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'A' } }] })}\n\n`)) cut.push(e);
    assert.equal(cut.end(), '');
    const failing = new ChatToResponsesStream({ model: 'm', request: {} });
    const out = failing.push(events('data: {"error":{"message":"boom","type":"server_error"}}\n\n')[0] as SseEvent);
    assert.deepEqual(parsed(out).map((e) => [e.type, e.message]), [['error', 'boom']]);
  });
});

describe('the node\'s response registry and native deployments', () => {
  test('a background settlement is made once, by the first terminal observation with usage', () => {
    const ids = new ResponseIds();
    const settled: number[] = [];
    ids.remember('resp_1', { tenant: 't', deployment: 'd', contextTokens: undefined, settle: (n) => settled.push(n) });
    assert.equal(ids.observed('resp_1', false, undefined), false, 'in progress: nothing');
    assert.equal(ids.observed('resp_1', true, { input: 4, output: 6 }), true);
    assert.equal(ids.observed('resp_1', true, { input: 4, output: 6 }), false, 'never twice');
    assert.deepEqual(settled, [10]);
    assert.equal(ids.get('resp_1')?.contextTokens, 10);
    assert.equal(ids.observed('resp_unknown', true, { input: 1, output: 1 }), false);
  });

  test('openai and Azure v1 deployments serve Responses natively; chat-only, classic Azure URLs and Anthropic do not', () => {
    const d = (provider: string, base_url: string, responses_api?: string) => ({ name: 'x', provider, base_url, ...(responses_api === undefined ? {} : { responses_api }) }) as unknown as ResolvedDeployment;
    assert.equal(servesResponses(d('openai', 'https://api.openai.com')), true);
    assert.equal(servesResponses(d('openai', 'http://vllm:8000', 'chat')), false);
    assert.equal(servesResponses(d('azure', 'https://r.openai.azure.com/openai/v1')), true);
    assert.equal(servesResponses(d('azure', 'https://r.openai.azure.com/openai/deployments/gpt?api-version=2024-10-21')), false);
    assert.equal(servesResponses(d('anthropic', 'https://api.anthropic.com')), false);
  });
});
