/**
 * Hostile input on the routes of issue 15 (sibling of `fuzz.test.ts`): `POST /v1/responses` and the
 * stored-response calls, `POST /v1/completions`, `POST /v1/messages/count_tokens`, Azure's paths
 * (`/openai/deployments/{model}/...`, `/openai/v1/...`, the `api-key` header) and requests
 * translated for a Bedrock deployment — through real processes (simulator, 2 nodes with static
 * members, a router). Property-based (fast-check, seeded): each family is input the gateway must
 * refuse itself, and each case must get that exact status and error code in the provider's shape
 * (OpenAI's on OpenAI and Azure paths, Anthropic's on /v1/messages*), with every counter of the
 * tenant unchanged afterwards (the owner's admin view), no slot held, no 5xx, every process alive,
 * and the nodes' event loops never stalled (a /healthz probe every 20 ms during the run).
 *
 * `QUOTARING_FUZZ_SEED` picks the seed (default 15), `QUOTARING_FUZZ_ROUTES_RUNS` the cases per
 * family (default 150).
 */
import assert from 'node:assert/strict';
import { rawStatus } from '../helpers/raw-http.ts';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { request } from 'undici';
import { EXAMPLE_AWS_CREDENTIALS } from '../../src/simulator/options.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const SEED = Number(process.env.QUOTARING_FUZZ_SEED ?? 15);
const RUNS = Number(process.env.QUOTARING_FUZZ_ROUTES_RUNS ?? 150);
const BODY_LIMIT = 4 * 1_048_576;
const MAX_MESSAGES = 1_000;
/** Longest answer of a node's /healthz during the run, ms: a stall of the event loop shows here (a loaded 2-core machine answers in tens of ms). */
const STALL_BOUND_MS = 1_500;
const ADMIN_TOKEN = 'fuzz-routes-admin-token-0123456789';
const SECRET = 'fuzz-routes-cluster-secret-0123456789abcdef01234';
const KEYS = { fuzz: 'key-fuzz-0000', other: 'key-other-0000', slot: 'key-slot-0000' } as const;

type Dialect = 'openai' | 'anthropic';
interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly body: string;
  readonly limited: boolean;
}

/** A body of a family: where it goes and what the gateway must answer. */
interface Hostile {
  readonly method?: 'GET' | 'POST' | 'DELETE';
  readonly path: string;
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
  readonly status: number;
  readonly code: string;
  readonly param?: string | null;
}

const text = (): Record<string, unknown> => ({ role: 'user', content: 'hello there' });
const notBoolean = fc.jsonValue({ maxDepth: 2 }).filter((v) => typeof v !== 'boolean' && v !== null);
const notCount = (max: number): fc.Arbitrary<unknown> =>
  fc.oneof(fc.jsonValue({ maxDepth: 2 }).filter((v) => v !== null && !(typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= max)), fc.constantFrom(0, -1, max + 1, 1e308, 1.5, -0.5, 2 ** 53));
/** A response id with at least one character outside [A-Za-z0-9_-], or longer than 256. */
const badId = fc.oneof(
  fc.constantFrom('..', '.', '../../v1/models', 'a/b', '..\\..', '\u0000', 'x\r\nx-injected: 1', 'resp_é', 'resp 1', '%2e%2e', '?x=1', '#frag', 'ｒｅｓｐ'),
  fc.tuple(fc.string({ maxLength: 20 }), fc.constantFrom('/', '.', '%', '\\', ' ', '\u202e', '😀', ':', '@'), fc.string({ maxLength: 20 })).map(([a, b, c]) => `${a}${b}${c}`),
  fc.integer({ min: 257, max: 1_000 }).map((n) => 'r'.repeat(n)),
);
const storedCall = fc.constantFrom(['GET', ''], ['DELETE', ''], ['POST', '/cancel'], ['GET', '/input_items']) as fc.Arbitrary<['GET' | 'POST' | 'DELETE', string]>;

/** Responses, completions and count_tokens bodies with one field of a type the gateway refuses. */
const wrongTypes: fc.Arbitrary<Hostile> = fc.oneof(
  fc.record({ field: fc.constantFrom('stream', 'background'), value: notBoolean }).map(({ field, value }) => ({ path: '/v1/responses', body: { model: 'gpt-4o-mini', input: 'hi', [field]: value }, status: 400, code: 'invalid_request', param: field })),
  notCount(10_000_000).map((value) => ({ path: '/v1/responses', body: { model: 'gpt-4o-mini', input: 'hi', max_output_tokens: value }, status: 400, code: 'invalid_request', param: 'max_output_tokens' })),
  fc.jsonValue({ maxDepth: 2 }).filter((v) => v !== null && typeof v !== 'string' && !Array.isArray(v)).map((value) => ({ path: '/openai/v1/responses', body: { model: 'gpt-4o-mini', input: value }, status: 400, code: 'invalid_request', param: 'input' })),
  fc.tuple(fc.array(fc.constant(text()), { maxLength: 3 }), fc.oneof(fc.string(), fc.integer(), fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }))).map(([ok, item]) => ({ path: '/v1/responses', body: { model: 'gpt-4o-mini', input: [...ok, item] }, status: 400, code: 'invalid_request', param: `input[${ok.length}]` })),
  fc.record({ field: fc.constantFrom('n', 'best_of'), value: notCount(128), path: fc.constantFrom('/v1/completions', '/openai/v1/completions', '/openai/deployments/gpt-4o-mini/completions') }).map(({ field, value, path }) => ({ path, body: { model: 'gpt-4o-mini', prompt: 'hi', [field]: value }, status: 400, code: 'invalid_request', param: field })),
  fc.record({ field: fc.constantFrom('stream', 'stream_options'), value: notBoolean.filter((v) => typeof v !== 'object' || Array.isArray(v)) }).map(({ field, value }) => ({ path: '/v1/completions', body: { model: 'gpt-4o-mini', prompt: 'hi', stream: true, [field]: value }, status: 400, code: 'invalid_request', param: field })),
  notBoolean.map((value) => ({ path: '/v1/completions', body: { model: 'gpt-4o-mini', prompt: 'hi', stream: true, stream_options: { include_usage: value } }, status: 400, code: 'invalid_request', param: 'include_usage' })),
  fc
    .oneof(fc.constantFrom([], [[]], [[-1]], [1.5], [['a']], ['a', 1], [[1, 'a']], {}, 7, true), fc.array(fc.oneof(fc.integer(), fc.string()), { minLength: 2, maxLength: 4 }).filter((a) => a.some((x) => typeof x === 'number') && a.some((x) => typeof x === 'string')))
    .map((prompt) => ({ path: '/v1/completions', body: { model: 'gpt-4o-mini', prompt }, status: 400, code: 'invalid_request', param: 'prompt' })),
  fc.integer({ min: MAX_MESSAGES + 1, max: 100_000 }).map((n) => ({ path: '/v1/completions', body: { model: 'gpt-4o-mini', prompt: Array.from({ length: n }, () => [1, 2]) }, status: 400, code: 'invalid_request', param: 'prompt' })),
  fc.jsonValue({ maxDepth: 2 }).filter((v) => !Array.isArray(v) || v.length === 0 || v.some((m) => m === null || typeof m !== 'object' || Array.isArray(m))).map((messages) => ({ path: '/v1/messages/count_tokens', body: { model: 'claude-test', messages }, status: 400, code: 'invalid_request' })),
);

/** Anthropic, OpenAI chat, completions and Responses requests for a Bedrock deployment that no translation can carry. */
const untranslatable: fc.Arbitrary<Hostile> = fc.oneof(
  fc
    .record({
      max: fc.integer({ min: 1, max: 64 }),
      what: fc.constantFrom<Record<string, unknown>>(
        { messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://169.254.169.254/latest/meta-data/' } }] }] },
        { messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'Qk0=' } }] }] },
        { messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'file:///etc/passwd' } }] }] },
        { messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: 'f' }] }] },
        { messages: [{ role: 'system', content: 'x' }] },
        { messages: [text()], tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
        { messages: [text()], tool_choice: { type: 'auto' } },
        { messages: [text()], mcp_servers: [{ type: 'url', url: 'http://x' }] },
        { messages: [text()], tools: [{ name: 'f', input_schema: 'object' }] },
      ),
    })
    .map(({ max, what }) => ({ path: '/v1/messages', body: { model: 'claude-bedrock', max_tokens: max, ...what }, headers: { 'anthropic-version': '2023-06-01' }, status: 400, code: 'invalid_request' })),
  fc.constantFrom<Record<string, unknown>>({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/x.png' } }] }] }, { messages: [text()], tools: [{ type: 'function', function: { name: 'f', parameters: 5 } }] }).map((what) => ({ path: '/v1/chat/completions', body: { model: 'claude-bedrock', max_tokens: 8, ...what }, status: 400, code: 'invalid_request' })),
  fc.constantFrom('/v1/completions', '/openai/v1/completions', '/openai/deployments/claude-bedrock/completions').map((path) => ({ path, body: { model: 'claude-bedrock', prompt: 'hi' }, status: 400, code: 'invalid_request' })),
  fc.constant({ path: '/v1/responses', body: { model: 'claude-bedrock', input: 'hi' }, status: 400, code: 'invalid_request' }),
);


describe(`fuzz the new routes: ${RUNS} cases per family (seed ${SEED}), router → 2 nodes → simulator`, () => {
  let sim: Running;
  const nodes: Running[] = [];
  const nodeUrls: string[] = [];
  const adminUrls: string[] = [];
  let router: Running;
  let routerUrl = '';
  const probe = { maxMs: 0, stop: false, done: Promise.resolve() };

  /** Every counter of `tenant` at its owner (requests, tokens, concurrent: used). */
  async function counters(tenant: string): Promise<string> {
    const views = await Promise.all(
      adminUrls.map(async (u) => {
        const res = await request(`${u}/admin/v1/tenants/${tenant}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        return (await res.body.json()) as { here: boolean; limits: { name: string; used: number }[] };
      }),
    );
    const owner = views.find((v) => v.here);
    return owner === undefined ? 'no state yet' : owner.limits.map((l) => `${l.name}=${l.used}`).join(' ');
  }

  async function send(url: string, c: Hostile, key: string = KEYS.fuzz): Promise<Answer> {
    const res = await request(`${url}${c.path}`, {
      method: c.method ?? 'POST',
      headers: { authorization: `Bearer ${key}`, ...(c.body === undefined ? {} : { 'content-type': 'application/json' }), ...c.headers },
      body: c.body === undefined ? null : typeof c.body === 'string' ? c.body : JSON.stringify(c.body),
    });
    const body = await res.body.text();
    const limited = Object.keys(res.headers).some((h) => h === 'x-ratelimit-remaining-requests' || h === 'anthropic-ratelimit-requests-remaining');
    return { status: res.statusCode, code: res.headers['x-quotaring-error'] as string | undefined, body, limited };
  }

  /** Asserts the gateway's own refusal in the route's dialect. */
  function assertRefused(a: Answer, c: Hostile, where: string): void {
    const dialect: Dialect = c.path.startsWith('/v1/messages') ? 'anthropic' : 'openai';
    const what = `${where} ${c.method ?? 'POST'} ${c.path.slice(0, 120)} ${JSON.stringify(c.body)?.slice(0, 200)} → ${a.status} ${a.body.slice(0, 300)}`;
    assert.equal(a.status, c.status, what);
    assert.equal(a.code, c.code, what);
    // A refusal takes no limit: only a 429 shows the tenant's limits (the one spent).
    assert.equal(a.limited, c.status === 429, `no limit taken: ${what}`);
    const body = JSON.parse(a.body) as { type?: string; error: { code?: string; type: string; param?: string | null } };
    if (dialect === 'anthropic') {
      assert.equal(body.type, 'error', what);
      assert.equal(body.error.type, c.status === 413 ? 'request_too_large' : c.status === 429 ? 'rate_limit_error' : c.status === 401 ? 'authentication_error' : 'invalid_request_error', what);
    } else {
      assert.equal(body.error.code, c.code, what);
      if (c.param !== undefined) assert.equal(body.error.param, c.param, what);
    }
  }

  /** Runs every case of `arb` through the router and straight to a node; asserts each refusal and that `tenant`'s counters did not move. */
  async function family(arb: fc.Arbitrary<Hostile>, runs = RUNS): Promise<void> {
    const before = await counters('fuzz');
    const cases = fc.sample(arb, { seed: SEED, numRuns: runs });
    for (const [i, c] of cases.entries()) {
      const url = i % 3 === 2 ? (nodeUrls[i % 2] as string) : routerUrl;
      const a = await send(url, c);
      // A node that does not own the tenant answers 421 before reading the body: the owner is asked then.
      assertRefused(a.status === 421 ? await send(nodeUrls[(i + 1) % 2] as string, c) : a, c, `#${i} (seed ${SEED})`);
    }
    assert.equal(await counters('fuzz'), before, 'the tenant\'s counters did not move');
  }

  before(async () => {
    const simPort = await freePort();
    const simUrl = `http://127.0.0.1:${simPort}`;
    const env = { QUOTARING_SIM_KEY: 'sim-fuzz-key', QUOTARING_ADMIN_TOKEN: ADMIN_TOKEN, QUOTARING_CLUSTER_SECRET: SECRET, AWS_ACCESS_KEY_ID: EXAMPLE_AWS_CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: EXAMPLE_AWS_CREDENTIALS.secretAccessKey };
    sim = await runCli(['simulate', '--port', String(simPort), '--slow-ms', '3000'], `${simUrl}/sim/stats`, env);
    const nodePorts = [await freePort(), await freePort()];
    const limits = [{ requests: 1_000_000, window: '1d', algorithm: 'sliding_window' }, { tokens: 1_000_000_000, window: '1d', algorithm: 'sliding_window' }, { concurrent: 64 }];
    const forward = ['x-sim-fault', 'x-sim-output-tokens'];
    const config = writeConfig({
      server: { log_level: 'warn', body_limit: BODY_LIMIT, max_messages: MAX_MESSAGES },
      cluster: { members: nodePorts.map((p, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${p}` })), health_check: '500ms' },
      tenants: [
        { id: 'fuzz', keys: [KEYS.fuzz], limits },
        { id: 'other', keys: [KEYS.other], limits },
        { id: 'slot', keys: [KEYS.slot], limits: [{ requests: 1_000, window: '1d', algorithm: 'sliding_window' }, { concurrent: 1 }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', default_max_output: 16, deployments: ['sim-openai'] },
        { name: 'claude-test', encoding: 'cl100k_base', default_max_output: 16, deployments: ['sim-anthropic'] },
        { name: 'claude-bedrock', encoding: 'cl100k_base', default_max_output: 16, deployments: ['sim-bedrock'] },
      ],
      deployments: [
        { name: 'sim-openai', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', forward_headers: forward },
        { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', forward_headers: forward },
        { name: 'sim-bedrock', provider: 'bedrock', base_url: simUrl, region: 'us-east-1', upstream_model: 'anthropic.claude-3-5-haiku-20241022-v1:0' },
      ],
    });
    const adminPorts = [await freePort(), await freePort()];
    adminUrls.push(...adminPorts.map((p) => `http://127.0.0.1:${p}`));
    nodeUrls.push(...nodePorts.map((p) => `http://127.0.0.1:${p}`));
    for (const [i, port] of nodePorts.entries()) {
      nodes.push(await runCli(['node', '--config', config, '--id', `node-${i + 1}`, '--port', String(port), '--admin-port', String(adminPorts[i])], `http://127.0.0.1:${port}/readyz`, env));
    }
    const routerPort = await freePort();
    routerUrl = `http://127.0.0.1:${routerPort}`;
    router = await runCli(['router', '--config', config, '--port', String(routerPort)], `${routerUrl}/readyz`, env);
    // The event-loop probe: each node's /healthz, one at a time, every 20 ms, for the whole suite.
    probe.done = (async () => {
      while (!probe.stop) {
        for (const url of nodeUrls) {
          const started = performance.now();
          await (await request(`${url}/healthz`)).body.dump();
          probe.maxMs = Math.max(probe.maxMs, performance.now() - started);
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
  });
  after(async () => {
    probe.stop = true;
    await probe.done;
    await Promise.all([...nodes.map((p) => p.stop()), router?.stop(), sim?.stop()]);
  });

  test('hostile response ids (.., /, control characters, unicode, > 256 characters) on every stored-response call: 400 invalid_request, param response_id', async () => {
    // `.` and `..` as a whole segment are resolved by the client library (undici): sent raw below.
    const arb = fc.record({ id: badId.filter((id) => id !== '.' && id !== '..'), call: storedCall, prefix: fc.constantFrom('/v1', '/openai/v1', '/openai'), query: fc.constantFrom('', '?stream=true', '?api-version=2025-04-01-preview') });
    // An id of more than 100 characters (encoded) is refused by the router's path matching (fastify's maxParamLength), without a param.
    await family(arb.map(({ id, call: [method, suffix], prefix, query }) => ({ method, path: `${prefix}/responses/${encodeURIComponent(id)}${suffix}${query}`, status: 400, code: 'invalid_request', param: encodeURIComponent(id).length > 100 ? null : 'response_id' })));
    // Dot segments sent as they are (a client library would resolve them first): refused by the node, never passed on.
    for (const url of [routerUrl, ...nodeUrls]) {
      for (const path of ['/v1/responses/..', '/v1/responses/%2e%2e/input_items', '/v1/responses/.%2E/cancel', '/openai/responses/%2E%2E?x=1']) {
        const method = path.includes('/cancel') ? 'POST' : 'GET';
        const got = await rawStatus(url, `${method} ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEYS.fuzz}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
        assert.ok(got.status === 400 || got.status === 421, `${url} ${path}: ${got.status}`);
        if (got.status === 400) assert.equal(got.code, 'invalid_request', `${url} ${path}`);
      }
    }
  });

  test('hostile previous_response_id (wrong type, path traversal, 10 KB, unicode): 400 before admission', async () => {
    const value = fc.oneof(badId, fc.constantFrom('', 0, [], {}, true, 'x'.repeat(10_240)));
    await family(value.map((previous) => ({ path: '/v1/responses', body: { model: 'gpt-4o-mini', input: 'hi', previous_response_id: previous }, status: 400, code: 'invalid_request', param: 'previous_response_id' })));
  });

  test('fields of a type the gateway refuses (stream: "yes", n / best_of / max_output_tokens out of range, odd prompts and inputs, stream_options junk, 100k prompts): 400 naming the field', async () => {
    await family(wrongTypes, RUNS * 2);
  });

  test('requests for a Bedrock deployment that no translation can carry (URL images and documents, server tools, roles, completions, Responses): 400 in the client\'s shape, nothing counted (was counted)', async () => {
    await family(untranslatable);
  });

  test('odd tool schemas and content translated for Bedrock: never 5xx; the requests counted are exactly those admitted', async () => {
    const schema = fc.oneof(fc.jsonValue({ maxDepth: 3 }).filter((v) => v !== null && typeof v === 'object' && !Array.isArray(v)), fc.record({ type: fc.constantFrom('object', ['object', 'null'], { a: 1 }), properties: fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }) }));
    const arb = fc.record({ openai: fc.boolean(), schemas: fc.array(schema, { minLength: 1, maxLength: 3 }), part: fc.jsonValue({ maxDepth: 2 }) });
    const before = Number(/requests\/1d=(\d+)/.exec(await counters('fuzz'))?.[1] ?? 0);
    let admitted = 0;
    for (const { openai, schemas, part } of fc.sample(arb, { seed: SEED, numRuns: RUNS })) {
      const body = openai
        ? { model: 'claude-bedrock', max_tokens: 4, messages: [{ role: 'user', content: [part, { type: 'text', text: 'x' }] }], tools: schemas.map((s, i) => ({ type: 'function', function: { name: `t${i}`, parameters: s } })) }
        : { model: 'claude-bedrock', max_tokens: 4, messages: [{ role: 'user', content: [part, { type: 'text', text: 'x' }] }], tools: schemas.map((s, i) => ({ name: `t${i}`, input_schema: s })) };
      const a = await send(routerUrl, { path: openai ? '/v1/chat/completions' : '/v1/messages', body, headers: { 'anthropic-version': '2023-06-01' }, status: 0, code: '' });
      assert.ok(a.status < 500, `${a.status} ${a.body.slice(0, 300)}`);
      if (a.code !== undefined) assert.equal(a.limited, false, `a refusal by the gateway takes no limit: ${a.body.slice(0, 200)}`);
      if (a.limited && a.status !== 429) admitted++;
    }
    assert.equal(Number(/requests\/1d=(\d+)/.exec(await counters('fuzz'))?.[1] ?? 0), before + admitted);
  });

  test('two keys of two tenants (Authorization, x-api-key, api-key): 401 at the router and the nodes, neither tenant charged; one key in several headers is served', async () => {
    const pair = fc.tuple(fc.constantFrom('authorization', 'x-api-key', 'api-key'), fc.constantFrom('authorization', 'x-api-key', 'api-key')).filter(([a, b]) => a !== b);
    const header = (name: string, key: string): Record<string, string> => ({ [name]: name === 'authorization' ? `Bearer ${key}` : key });
    const others = await counters('other');
    await family(
      fc.record({ pair, path: fc.constantFrom('/v1/chat/completions', '/openai/v1/chat/completions', '/openai/deployments/gpt-4o-mini/chat/completions', '/v1/responses', '/v1/messages/count_tokens') }).map(({ pair: [a, b], path }) => ({
        path,
        body: { model: path.includes('count_tokens') ? 'claude-test' : 'gpt-4o-mini', max_tokens: 4, messages: [text()], input: 'hi' },
        headers: { authorization: '', ...header(a, KEYS.fuzz), ...header(b, KEYS.other) },
        status: 401,
        code: 'invalid_api_key',
      })),
      RUNS / 3,
    );
    assert.equal(await counters('other'), others, 'the other tenant\'s counters did not move');
    const same = await send(routerUrl, { path: '/openai/v1/chat/completions', body: { model: 'gpt-4o-mini', max_tokens: 4, messages: [text()] }, headers: { 'api-key': KEYS.fuzz, 'x-api-key': KEYS.fuzz }, status: 200, code: '' });
    assert.equal(same.status, 200, same.body);
  });

  test('Azure deployment paths: hostile segments are 4xx in OpenAI\'s shape and count nothing; the path\'s model wins over the body\'s', async () => {
    const segment = fc.oneof(fc.constantFrom('gpt-4o-mini%2F..%2F..%2Fv1%2Fmodels', 'nope', '%E2%80%AE', 'gpt-4o-mini%00', 'claude-test'), fc.string({ minLength: 1, maxLength: 40 }).filter((s) => s !== 'gpt-4o-mini' && s !== 'claude-bedrock' && s.trim() !== '' && s !== '.' && s !== '..').map(encodeURIComponent));
    const before = await counters('fuzz');
    for (const [i, s] of fc.sample(segment, { seed: SEED, numRuns: RUNS }).entries()) {
      const a = await send(routerUrl, { path: `/openai/deployments/${s}/chat/completions?api-version=2024-10-21`, body: { model: 'gpt-4o-mini', max_tokens: 4, messages: [text()] }, headers: { authorization: '', 'api-key': KEYS.fuzz }, status: 0, code: '' });
      assert.ok(a.status >= 400 && a.status < 500 && a.code !== undefined && !a.limited, `#${i} ${s}: ${a.status} ${a.body.slice(0, 200)}`);
      assert.equal((JSON.parse(a.body) as { error: { code: string } }).error.code, a.code);
    }
    assert.equal(await counters('fuzz'), before);
    const a = await send(routerUrl, { path: '/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21', body: { model: 'claude-test', max_tokens: 4, messages: [text()] }, headers: { authorization: '', 'api-key': KEYS.fuzz }, status: 200, code: '' });
    assert.equal(a.status, 200, a.body);
    assert.equal((JSON.parse(a.body) as { model: string }).model, 'gpt-4o-mini');
  });

  test('count_tokens in free mode: bodies up to the body limit take no request and hold no slot; one byte over is 413; it holds a concurrency slot while in flight (429 when the tenant\'s are taken; was 200)', async () => {
    const before = await counters('fuzz');
    for (const kb of [1, 512, 3_900]) {
      const big = { model: 'claude-test', messages: [{ role: 'user', content: 'word '.repeat((kb * 1024) / 5) }] };
      const a = await send(routerUrl, { path: '/v1/messages/count_tokens', body: big, headers: { 'anthropic-version': '2023-06-01' }, status: 200, code: '' });
      assert.equal(a.status, 200, a.body.slice(0, 200));
    }
    assert.equal(await counters('fuzz'), before, 'free: no request, no token, no slot left held');
    const over = JSON.stringify({ model: 'claude-test', messages: [{ role: 'user', content: 'x'.repeat(BODY_LIMIT) }] });
    assertRefused(await send(routerUrl, { path: '/v1/messages/count_tokens', body: over, status: 413, code: 'body_too_large' }), { path: '/v1/messages/count_tokens', status: 413, code: 'body_too_large' }, 'over the body limit');
    // The tenant `slot` has one concurrency slot: a slow stream holds it, then a count must wait its turn.
    const count = { path: '/v1/messages/count_tokens', body: { model: 'claude-test', messages: [text()] }, headers: { 'anthropic-version': '2023-06-01' }, status: 429, code: 'rate_limit_exceeded' };
    const slow = request(`${routerUrl}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEYS.slot, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-sim-fault': 'slow' }, body: JSON.stringify({ model: 'claude-test', max_tokens: 2, stream: true, messages: [text()] }) });
    // Wait until the owner holds the stream's slot (its first token comes 3 s late).
    for (let i = 0; i < 100 && !/concurrent=1/.test(await counters('slot')); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assertRefused(await send(routerUrl, count, KEYS.slot), count, 'count_tokens while the slot is held');
    const held = await slow;
    assert.equal(held.statusCode, 200);
    await held.body.dump();
    const served = await send(routerUrl, { ...count, status: 200 }, KEYS.slot);
    assert.equal(served.status, 200, served.body.slice(0, 200));
    assert.match(await counters('slot'), /requests\/1d=1 concurrent=0/, 'one messages request counted; the counts took none; no slot held');
  });

  test('afterwards: no 5xx left a process dead, no slot is held, and no node\'s event loop stalled', async (t) => {
    t.diagnostic(`longest /healthz answer of a node during the run: ${probe.maxMs.toFixed(0)} ms`);
    for (const p of [...nodes, router, sim]) assert.equal(p.proc.exitCode, null, p.output().slice(-2_000));
    assert.match(await counters('fuzz'), /concurrent=0/);
    assert.ok(probe.maxMs < STALL_BOUND_MS, `longest /healthz answer ${probe.maxMs.toFixed(0)} ms`);
  });
});
