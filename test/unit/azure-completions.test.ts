/**
 * The pure parts of Azure OpenAI, legacy completions and count_tokens: the Azure upstream path and
 * key header, the config checks of azure deployments and `server.count_tokens`, the completions
 * request (reserved output) and stream observer, and the count_tokens request.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, buildConfig } from '../../src/config/load.ts';
import { GatewayError } from '../../src/errors.ts';
import { parseCountTokensRequest } from '../../src/providers/anthropic/count-tokens.ts';
import { azureAuthHeaders, azureBaseUrlProblem, azurePath } from '../../src/providers/azure/endpoint.ts';
import { OpenAICompletionsStreamObserver, parseCompletionsRequest, upstreamCompletionsBody } from '../../src/providers/openai/completions.ts';
import { providerRetryWaitMs } from '../../src/providers/retry-wait.ts';
import { SseSplitter } from '../../src/providers/sse.ts';
import { wireFormatOf } from '../../src/providers/wire-format.ts';

function config(deployment: Record<string, unknown>, server: Record<string, unknown> = {}) {
  return buildConfig(
    { server, tenants: [{ id: 'a', keys: ['key-a-00000'] }], models: [{ name: 'm', encoding: 'o200k_base', deployments: ['d'] }], deployments: [{ name: 'd', ...deployment }] },
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

describe('azure deployments', () => {
  test('the OpenAI path below Azure\'s prefix; the key in api-key, or a bearer token', () => {
    assert.equal(azurePath('/v1/chat/completions'), '/chat/completions');
    assert.equal(azurePath('/v1/completions'), '/completions');
    assert.deepEqual(azureAuthHeaders('k', undefined), { 'api-key': 'k' });
    assert.deepEqual(azureAuthHeaders('k', 'api-key'), { 'api-key': 'k' });
    assert.deepEqual(azureAuthHeaders('t', 'bearer'), { authorization: 'Bearer t' });
    assert.equal(wireFormatOf('azure'), 'openai');
    assert.equal(wireFormatOf('anthropic'), 'anthropic');
  });

  test('a classic deployment URL needs its api-version; the v1 API does not', () => {
    assert.match(azureBaseUrlProblem('https://r.openai.azure.com/openai/deployments/gpt4o') ?? '', /needs its api-version/);
    assert.equal(azureBaseUrlProblem('https://r.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21'), undefined);
    assert.equal(azureBaseUrlProblem('https://r.openai.azure.com/openai/v1'), undefined);
  });

  test('config: azure accepted with auth; a classic URL without api-version and auth on another provider are refused with their path', () => {
    const ok = config({ provider: 'azure', base_url: 'https://r.openai.azure.com/openai/deployments/x?api-version=2024-10-21', api_key_env: 'K', auth: 'bearer' });
    assert.equal(ok.deployments.get('d')?.auth, 'bearer');
    assert.deepEqual(problems({ provider: 'azure', base_url: 'https://r.openai.azure.com/openai/deployments/x', api_key_env: 'K' }), [
      'q.yaml: deployments[0].base_url: an Azure deployment URL needs its api-version, e.g. https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21 (or use the v1 API: https://RESOURCE.openai.azure.com/openai/v1)',
    ]);
    assert.deepEqual(problems({ provider: 'openai', base_url: 'https://api.openai.com', auth: 'bearer' }), ['q.yaml: deployments[0].auth: auth applies to azure deployments only (openai keys are sent the openai way)']);
  });

  test('server.count_tokens: free by default, request on demand, nothing else', () => {
    const d = { provider: 'anthropic', base_url: 'https://api.anthropic.com' };
    assert.equal(config(d).config.server.count_tokens, 'free');
    assert.equal(config(d, { count_tokens: 'request' }).config.server.count_tokens, 'request');
    assert.throws(() => config(d, { count_tokens: 'tokens' }), ConfigError);
  });

  test('Azure\'s 429 waits: x-ms-retry-after-ms alone is read; retry-after-ms first', () => {
    assert.equal(providerRetryWaitMs({ 'x-ms-retry-after-ms': '1500' }, 0), 1500);
    assert.equal(providerRetryWaitMs({ 'retry-after-ms': '900', 'x-ms-retry-after-ms': '1500', 'retry-after': '2' }, 0), 900);
  });
});

describe('completions', () => {
  test('reserved output: max_tokens (default 16) × max(n, best_of) × prompts', () => {
    assert.equal(parseCompletionsRequest({ model: 'm', prompt: 'x' }).maxOutput, 16);
    assert.equal(parseCompletionsRequest({ model: 'm', prompt: ['a', 'b', 'c'], max_tokens: 10, n: 2 }).maxOutput, 60);
    assert.equal(parseCompletionsRequest({ model: 'm', prompt: [1, 2, 3], max_tokens: 10, n: 2, best_of: 5 }).maxOutput, 50);
    assert.equal(parseCompletionsRequest({ model: 'm', prompt: [[1, 2], [3]], max_tokens: 10 }).maxOutput, 20);
  });

  test('a bad prompt or cap is a 400 naming the field', () => {
    for (const [body, param] of [
      [{ model: 'm' }, 'prompt'],
      [{ model: 'm', prompt: [] }, 'prompt'],
      [{ model: 'm', prompt: [{}] }, 'prompt'],
      [{ model: 'm', prompt: 'x', max_tokens: 0 }, 'max_tokens'],
      [{ prompt: 'x' }, 'model'],
    ] as const) {
      assert.throws(() => parseCompletionsRequest(body), (err: unknown) => err instanceof GatewayError && err.code === 'invalid_request' && err.param === param);
    }
    assert.throws(() => parseCompletionsRequest({ model: 'm', prompt: ['a', 'b', 'c'] }, 2), /at most 2/);
  });

  test('streams ask the provider for usage; the usage chunk is hidden unless the client asked', () => {
    const request = parseCompletionsRequest({ model: 'm', prompt: 'x', stream: true });
    assert.deepEqual(upstreamCompletionsBody(request, 'deploy').stream_options, { include_usage: true });
    assert.equal(upstreamCompletionsBody(request, 'deploy').model, 'deploy');
    const sse =
      'data: {"id":"c","object":"text_completion","choices":[{"text":" a","index":0,"finish_reason":null}],"usage":null}\n\n' +
      'data: {"id":"c","object":"text_completion","choices":[{"text":" b","index":0,"finish_reason":null}],"usage":null}\n\n' +
      'data: {"id":"c","object":"text_completion","choices":[{"text":"","index":0,"finish_reason":"stop"}],"usage":null}\n\n' +
      'data: {"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n' +
      'data: [DONE]\n\n';
    for (const wants of [false, true]) {
      const observer = new OpenAICompletionsStreamObserver(wants);
      const passed = new SseSplitter().push(Buffer.from(sse)).map((e) => observer.onEvent(e));
      assert.deepEqual(passed, [true, true, true, wants, true]);
      assert.deepEqual(observer.usage(), { input: 3, output: 2 });
      assert.equal(observer.deliveredOutput, 2);
    }
  });
});

describe('count_tokens', () => {
  test('model and messages are required, max_tokens is not', () => {
    assert.equal(parseCountTokensRequest({ model: 'c', messages: [{ role: 'user', content: 'x' }] }).model, 'c');
    assert.throws(() => parseCountTokensRequest({ model: 'c' }), (err: unknown) => err instanceof GatewayError && err.param === 'messages');
    assert.throws(() => parseCountTokensRequest({ messages: [{ role: 'user' }] }), (err: unknown) => err instanceof GatewayError && err.param === 'model');
  });
});
