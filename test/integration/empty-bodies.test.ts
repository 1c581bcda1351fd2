/**
 * What the Python SDKs send and call (issue 31), on a node in-process in front of a real simulator:
 * an empty body with `content-type: application/json` is no body on the routes that take none
 * (DELETE, cancel, GET), on the node and on the simulator, and still 400 `invalid_json` where a body
 * is needed; `POST /v1/moderations` passed through to the OpenAI deployment, charged nothing, or
 * 404 naming the route where no OpenAI deployment exists.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { buildSimulator, startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';

const KEY = 'key-python-0000';
const json = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

describe('empty JSON bodies and moderations', () => {
  let sim: { url: string; close(): Promise<void> };
  let gw: FastifyInstance;

  before(async () => {
    sim = await startSimulator({});
    gw = buildGateway({
      config: buildConfig(
        {
          server: { log_level: 'silent' },
          tenants: [{ id: 'py', keys: [KEY], limits: [{ requests: 100, window: '1m', algorithm: 'sliding_window' }] }],
          models: [
            { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai'] },
            { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic'] },
          ],
          deployments: [
            { name: 'anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'K' },
            { name: 'openai', provider: 'openai', base_url: sim.url, api_key_env: 'K', forward_headers: ['x-sim-background-ms'] },
          ],
        },
        'empty.yaml',
        { K: 'upstream-key' },
      ),
      logger: false,
    });
    await gw.ready();
  });
  after(async () => {
    await gw.close();
    await sim.close();
  });

  test('node: DELETE, cancel and GET input_items with content-type json and no body are served; a chat request with none is 400 invalid_json', async () => {
    const created = await gw.inject({ method: 'POST', url: '/v1/responses', headers: { ...json, 'x-sim-background-ms': '60000' }, payload: { model: 'gpt-4o-mini', input: 'hi', background: true, max_output_tokens: 32 } });
    assert.equal(created.statusCode, 200, created.body);
    const id = (created.json() as { id: string }).id;
    const cancel = await gw.inject({ method: 'POST', url: `/v1/responses/${id}/cancel`, headers: { ...json, 'content-length': '0' }, payload: '' });
    assert.equal(cancel.statusCode, 200, cancel.body);
    assert.equal((cancel.json() as { status: string }).status, 'cancelled');
    const items = await gw.inject({ method: 'GET', url: `/v1/responses/${id}/input_items`, headers: json, payload: '' });
    assert.equal(items.statusCode, 200, items.body);
    assert.deepEqual((items.json() as { data: { content: { text: string }[] }[] }).data.map((i) => i.content[0]?.text), ['hi']);
    const deleted = await gw.inject({ method: 'DELETE', url: `/v1/responses/${id}`, headers: json, payload: '' });
    assert.equal(deleted.statusCode, 200, deleted.body);
    assert.deepEqual(deleted.json(), { id, object: 'response.deleted', deleted: true });
    const chat = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: json, payload: '' });
    assert.equal(chat.statusCode, 400);
    assert.equal(chat.headers['x-quotaring-error'], 'invalid_json');
    assert.match((chat.json() as { error: { message: string } }).error.message, /empty/);
  });

  test('simulator: as OpenAI, an empty JSON body is no body on DELETE and cancel, and a JSON error on a model route', async () => {
    const app = buildSimulator({});
    try {
      const auth = { authorization: 'Bearer k', 'content-type': 'application/json' };
      const del = await app.inject({ method: 'DELETE', url: '/v1/responses/resp_unknown', headers: auth, payload: '' });
      assert.equal(del.statusCode, 404, del.body);
      const cancel = await app.inject({ method: 'POST', url: '/v1/responses/resp_unknown/cancel', headers: auth, payload: '' });
      assert.equal(cancel.statusCode, 404, cancel.body);
      const chat = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: '' });
      assert.equal(chat.statusCode, 400);
      assert.match((chat.json() as { error: { message: string } }).error.message, /could not parse the JSON body/);
      const bad = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: '{"model":' });
      assert.equal(bad.statusCode, 400);
    } finally {
      await app.close();
    }
  });

  test('moderations: passed through to the OpenAI deployment and charged nothing; a bad input is the provider\'s 400', async () => {
    const before = await simStats(sim.url);
    const res = await gw.inject({ method: 'POST', url: '/v1/moderations', headers: json, payload: { input: ['fine', '[flag] not fine'] } });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { model: string; results: { flagged: boolean }[] };
    assert.equal(body.model, 'omni-moderation-latest');
    assert.deepEqual(body.results.map((r) => r.flagged), [false, true]);
    assert.equal(res.headers['x-ratelimit-limit-requests'], undefined, 'not an admission: no tenant headers');
    assert.equal((await simStats(sim.url)).requests, before.requests + 1);
    // The tenant's requests limit did not move (100, one chat request now takes the first).
    const chat = await gw.inject({ method: 'POST', url: '/v1/chat/completions', headers: json, payload: { model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] } });
    assert.equal(chat.headers['x-ratelimit-remaining-requests'], '98', 'the responses create above took one, the chat one; moderations none');
    const bad = await gw.inject({ method: 'POST', url: '/v1/moderations', headers: json, payload: { input: 5 } });
    assert.equal(bad.statusCode, 400);
    const missing = await gw.inject({ method: 'POST', url: '/v1/moderations', headers: json, payload: { model: 'x' } });
    assert.equal(missing.statusCode, 400);
    assert.equal(missing.headers['x-quotaring-error'], 'invalid_request');
  });

  test('moderations with no provider: openai deployment: 404 not_found naming the route', async () => {
    const only = buildGateway({
      config: buildConfig(
        {
          server: { log_level: 'silent' },
          tenants: [{ id: 'py', keys: [KEY], limits: [] }],
          models: [{ name: 'claude-test', encoding: 'cl100k_base', deployments: ['anthropic'] }],
          deployments: [{ name: 'anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'K' }],
        },
        'anthropic-only.yaml',
        { K: 'upstream-key' },
      ),
      logger: false,
    });
    try {
      const res = await only.inject({ method: 'POST', url: '/v1/moderations', headers: json, payload: { input: 'hi' } });
      assert.equal(res.statusCode, 404);
      assert.equal(res.headers['x-quotaring-error'], 'not_found');
      assert.match((res.json() as { error: { message: string } }).error.message, /POST \/v1\/moderations needs a deployment with provider: openai/);
    } finally {
      await only.close();
    }
  });
});
