/**
 * The pure parts of Gemini and vLLM deployments: config checks, Gemini's error body (bare or in an
 * array) and its RetryInfo wait, vLLM's flat error body, both rewritten in OpenAI's shape, usage
 * whose `total_tokens` counts thinking tokens, and which deployments serve the Responses API.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';
import { servesResponses } from '../../src/gateway/routes/responses.ts';
import { geminiBaseUrlProblem } from '../../src/providers/gemini/endpoint.ts';
import { geminiRetryDelayMs, parseGeminiError } from '../../src/providers/gemini/errors.ts';
import { openAIUsage } from '../../src/providers/openai/chat.ts';
import { bodyRetryWaitMs, openAIShapedError } from '../../src/providers/upstream-errors.ts';
import { parseFlatVllmError } from '../../src/providers/vllm/errors.ts';
import { wireFormatOf } from '../../src/providers/wire-format.ts';

function config(deployment: Record<string, unknown>) {
  return buildConfig(
    { tenants: [{ id: 'a', keys: ['key-a-00000'] }], models: [{ name: 'm', encoding: 'o200k_base', deployments: ['d'] }], deployments: [{ name: 'd', ...deployment }] },
    'q.yaml',
    { K: 'k' },
  );
}

function problems(deployment: Record<string, unknown>): readonly string[] {
  try {
    config(deployment);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    return err.problems;
  }
  assert.fail('expected a ConfigError');
}

/** A 429 as Gemini's OpenAI compatibility writes it. */
const GEMINI_429 = JSON.stringify([
  {
    error: {
      code: 429,
      message: 'You exceeded your current quota. Please retry in 38.601658672s.',
      status: 'RESOURCE_EXHAUSTED',
      details: [
        { '@type': 'type.googleapis.com/google.rpc.Help', links: [] },
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '38.601s' },
      ],
    },
  },
]);

describe('gemini and vllm deployments', () => {
  test('config: both speak OpenAI\'s wire format; a Gemini base_url on Google\'s host is the OpenAI-compatibility prefix', () => {
    assert.equal(wireFormatOf('gemini'), 'openai');
    assert.equal(wireFormatOf('vllm'), 'openai');
    assert.equal(config({ provider: 'gemini', base_url: 'https://generativelanguage.googleapis.com/v1beta/openai/', api_key_env: 'K' }).deployments.get('d')?.apiKey, 'k');
    assert.equal(config({ provider: 'vllm', base_url: 'http://vllm:8000' }).deployments.get('d')?.apiKey, undefined);
    assert.deepEqual(problems({ provider: 'gemini', base_url: 'https://generativelanguage.googleapis.com/v1beta', api_key_env: 'K' }), [
      'q.yaml: deployments[0].base_url: a Gemini base_url is the OpenAI-compatibility prefix, https://generativelanguage.googleapis.com/v1beta/openai (quotaring appends chat/completions, embeddings)',
    ]);
    assert.equal(geminiBaseUrlProblem('http://127.0.0.1:9090/v1beta/openai'), undefined);
    assert.equal(geminiBaseUrlProblem('https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/endpoints/openapi'), undefined, 'another host is taken as given');
  });

  test('responses_api: vllm translates to chat unless told native; gemini always translates and refuses the setting', () => {
    assert.equal(servesResponses(config({ provider: 'vllm', base_url: 'http://vllm:8000' }).deployments.get('d')!), false);
    assert.equal(servesResponses(config({ provider: 'vllm', base_url: 'http://vllm:8000', responses_api: 'native' }).deployments.get('d')!), true);
    assert.equal(servesResponses(config({ provider: 'gemini', base_url: 'https://generativelanguage.googleapis.com/v1beta/openai' }).deployments.get('d')!), false);
    assert.deepEqual(problems({ provider: 'gemini', base_url: 'https://generativelanguage.googleapis.com/v1beta/openai', responses_api: 'native' }), [
      'q.yaml: deployments[0].responses_api: responses_api applies to openai, azure and vllm deployments (a gemini deployment always serves Responses requests translated)',
    ]);
  });

  test('Gemini\'s error, bare or in an array; its RetryInfo wait (protobuf Duration, rounded up to the ms)', () => {
    assert.equal(parseGeminiError(GEMINI_429)?.status, 'RESOURCE_EXHAUSTED');
    assert.equal(parseGeminiError(JSON.stringify({ error: { code: 400, message: 'bad', status: 'INVALID_ARGUMENT' } }))?.message, 'bad');
    assert.equal(parseGeminiError('<html>502</html>'), undefined);
    assert.equal(parseGeminiError('[]'), undefined);
    assert.equal(geminiRetryDelayMs(GEMINI_429), 38_601);
    assert.equal(geminiRetryDelayMs(JSON.stringify({ error: { message: 'm', details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '47s' }] } })), 47_000);
    assert.equal(geminiRetryDelayMs(JSON.stringify({ error: { message: 'm', details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '0.0000001s' }] } })), 1);
    assert.equal(geminiRetryDelayMs(JSON.stringify({ error: { message: 'm', details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: 'soon' }] } })), undefined);
    assert.equal(geminiRetryDelayMs(JSON.stringify([{ error: { message: 'daily quota', status: 'RESOURCE_EXHAUSTED' } }])), undefined);
    assert.equal(bodyRetryWaitMs('gemini', GEMINI_429), 38_601);
    assert.equal(bodyRetryWaitMs('openai', GEMINI_429), undefined, 'only a Gemini deployment\'s body is read for a wait');
  });

  test('errors in OpenAI\'s shape: Gemini\'s 429 (its status and details kept), a Gemini 400, vLLM\'s flat body; others unchanged', () => {
    assert.deepEqual(JSON.parse(openAIShapedError('gemini', 429, GEMINI_429)), {
      error: {
        message: 'You exceeded your current quota. Please retry in 38.601658672s.',
        type: 'requests',
        param: null,
        code: 'rate_limit_exceeded',
        status: 'RESOURCE_EXHAUSTED',
        details: [
          { '@type': 'type.googleapis.com/google.rpc.Help', links: [] },
          { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '38.601s' },
        ],
      },
    });
    assert.deepEqual(JSON.parse(openAIShapedError('gemini', 400, JSON.stringify([{ error: { code: 400, message: 'API key not valid.', status: 'INVALID_ARGUMENT' } }]))), {
      error: { message: 'API key not valid.', type: 'invalid_request_error', param: null, code: 'invalid_argument', status: 'INVALID_ARGUMENT' },
    });
    assert.deepEqual(JSON.parse(openAIShapedError('vllm', 400, JSON.stringify({ object: 'error', message: "This model's maximum context length is 4096 tokens.", type: 'BadRequestError', param: null, code: 400 }))), {
      error: { message: "This model's maximum context length is 4096 tokens.", type: 'invalid_request_error', param: null, code: null },
    });
    assert.deepEqual(JSON.parse(openAIShapedError('vllm', 500, JSON.stringify({ object: 'error', message: 'boom', type: 'InternalServerError', param: null, code: 500 }))).error.type, 'server_error');
    const nested = JSON.stringify({ error: { message: 'm', type: 'BadRequestError', param: null, code: 400 } });
    assert.equal(openAIShapedError('vllm', 400, nested), nested, 'newer vLLM nests its error already');
    assert.equal(parseFlatVllmError(nested), undefined);
    assert.equal(openAIShapedError('vllm', 502, 'Bad Gateway'), 'Bad Gateway');
    assert.equal(openAIShapedError('openai', 429, GEMINI_429), GEMINI_429, 'other providers\' bodies are relayed as written');
  });

  test('usage: output is total_tokens − prompt_tokens when more than completion_tokens (Gemini\'s thinking tokens)', () => {
    assert.deepEqual(openAIUsage({ completion_tokens: 424, prompt_tokens: 20, total_tokens: 1016 }), { input: 20, output: 996, reasoning: 572 }, 'the thinking tokens left out of completion_tokens are reasoning (priced and weighted as such)');
    assert.deepEqual(openAIUsage({ completion_tokens: 5, prompt_tokens: 20, total_tokens: 25 }), { input: 20, output: 5 });
    assert.deepEqual(openAIUsage({ completion_tokens: 5, prompt_tokens: 20, total_tokens: 3 }), { input: 20, output: 5 }, 'a smaller total never lowers the charge');
    assert.deepEqual(openAIUsage({ completion_tokens: 5, prompt_tokens: 20 }), { input: 20, output: 5 });
  });
});
