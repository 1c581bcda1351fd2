/**
 * Fuzz suite (issue 14): seeded random malformed requests, through the router and straight to the
 * nodes, against real processes (simulator, 2 nodes with static members, a router). Every answer
 * must be below 500; afterwards every process is alive and healthy, the fuzzed tenant's requests
 * counter moved by exactly the number of requests admitted (refused input changes nothing), no
 * concurrency slot is held, and every process's RSS stays bounded.
 *
 * `QUOTARING_FUZZ_SEED` picks the seed (default 14; printed on failure), `QUOTARING_FUZZ_RUNS` the
 * number of cases (default 20,000: one to two minutes on a 2-core machine).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { rawStatus } from '../helpers/raw-http.ts';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { request } from 'undici';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const SEED = Number(process.env.QUOTARING_FUZZ_SEED ?? 14);
const RUNS = Number(process.env.QUOTARING_FUZZ_RUNS ?? 20_000);
/** Cases drawn at a time. */
const BATCH = 500;
/** Requests in flight at once. */
const CONCURRENCY = 6;
/** The nodes' and router's body limit (bytes). */
const BODY_LIMIT = 1_048_576;
/** Largest resident set any process may reach during the run (MiB): a node at rest is ~120 MiB. */
const MAX_RSS_MIB = 700;

const FUZZ_KEY = 'key-fuzz-0000';
const ADMIN_TOKEN = 'fuzz-admin-token-0123456789';
const SECRET = 'fuzz-cluster-secret-0123456789abcdef0123456789';

/** One fuzz case: what is sent where. */
interface Case {
  /** Through the router, or straight to node 0 or 1. */
  readonly target: 'router' | 0 | 1;
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: Buffer | undefined;
  /** Drop the connection as soon as the answer's headers arrive (a client that goes away mid-stream). */
  readonly abort: boolean;
}

/** A valid chat body, the seed of most mutations. */
const validChat = (): Record<string, unknown> => ({ model: 'gpt-4o-mini', max_tokens: 8, messages: [{ role: 'user', content: 'hello there' }] });
const validMessages = (): Record<string, unknown> => ({ model: 'claude-test', max_tokens: 8, messages: [{ role: 'user', content: 'hello there' }] });

/** JSON nested `depth` deep (arrays or objects), as text: never built as an object (JSON.stringify would overflow). */
function nested(depth: number, kind: 'array' | 'object'): string {
  return kind === 'array' ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
}

/** One long unbroken piece of `n` characters of a kind. */
function longWord(kind: 'ascii' | 'cjk' | 'emoji' | 'digits' | 'mixed', n: number): string {
  switch (kind) {
    case 'ascii':
      return 'a'.repeat(n);
    case 'cjk':
      return '漢'.repeat(n);
    case 'emoji':
      return '😀'.repeat(Math.ceil(n / 2));
    case 'digits':
      return '7'.repeat(n);
    case 'mixed':
      return 'aé漢😀'.repeat(Math.ceil(n / 5));
  }
}

const anyJson = fc.jsonValue({ maxDepth: 4 });
const weirdSchema = fc.oneof(
  fc.record({ type: fc.oneof(fc.constant({ nested: 'object' }), fc.constant(['object', 'null']), fc.integer(), fc.constant(null)) }),
  fc.record({ type: fc.constant('object'), properties: fc.dictionary(fc.string({ maxLength: 8 }), anyJson, { maxKeys: 4 }) }),
  fc.record({ type: fc.constant('string'), enum: fc.array(anyJson, { maxLength: 5 }) }),
  anyJson,
);

/** Body mutations of a valid OpenAI or Anthropic body. */
const bodyArb: fc.Arbitrary<{ text: string | Buffer; anthropic: boolean }> = fc.oneof(
  // A valid streaming request (the client may go away once it starts).
  fc.record({ anthropic: fc.boolean(), maxTokens: fc.integer({ min: 1, max: 64 }) }).map(({ anthropic, maxTokens }) => ({ text: JSON.stringify({ ...(anthropic ? validMessages() : validChat()), stream: true, max_tokens: maxTokens }), anthropic })),
  // A field replaced by any JSON value, or removed.
  fc.record({
    anthropic: fc.boolean(),
    field: fc.constantFrom('model', 'max_tokens', 'messages', 'stream', 'n', 'tools', 'stream_options', 'system', 'temperature', 'tool_choice', 'response_format', 'metadata'),
    value: fc.option(anyJson, { nil: undefined }),
  }).map(({ anthropic, field, value }) => {
    const body = anthropic ? validMessages() : validChat();
    if (value === undefined) delete body[field];
    else body[field] = value;
    return { text: JSON.stringify(body), anthropic };
  }),
  // A message replaced by any JSON value, or its content by a list of odd parts.
  fc.record({ anthropic: fc.boolean(), message: anyJson, part: anyJson }).map(({ anthropic, message, part }) => {
    const body = anthropic ? validMessages() : validChat();
    body.messages = [message, { role: 'user', content: [part, { type: 'text', text: 'x' }] }];
    return { text: JSON.stringify(body), anthropic };
  }),
  // Tools whose schemas are odd (object types, object enum items, any JSON).
  fc.record({ anthropic: fc.boolean(), schemas: fc.array(weirdSchema, { minLength: 1, maxLength: 4 }) }).map(({ anthropic, schemas }) => {
    const body = anthropic ? validMessages() : validChat();
    body.tools = schemas.map((s, i) => (anthropic ? { name: `t${i}`, description: 'd', input_schema: s } : { type: 'function', function: { name: `t${i}`, description: 'd', parameters: s } }));
    return { text: JSON.stringify(body), anthropic };
  }),
  // Deeply nested JSON in a message's content.
  fc.record({ anthropic: fc.boolean(), depth: fc.integer({ min: 50, max: 60_000 }), kind: fc.constantFrom('array' as const, 'object' as const) }).map(({ anthropic, depth, kind }) => {
    const head = anthropic ? '{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":' : '{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":';
    return { text: `${head}${nested(depth, kind)}}]}`, anthropic };
  }),
  // A long unbroken word, up to about the body limit.
  fc.record({ anthropic: fc.boolean(), kind: fc.constantFrom('ascii' as const, 'cjk' as const, 'emoji' as const, 'digits' as const, 'mixed' as const), n: fc.integer({ min: 1_000, max: 240_000 }) }).map(({ anthropic, kind, n }) => {
    const body = anthropic ? validMessages() : validChat();
    body.messages = [{ role: 'user', content: longWord(kind, n) }];
    return { text: JSON.stringify(body), anthropic };
  }),
  // Many messages or many tools.
  fc.record({ anthropic: fc.boolean(), messages: fc.integer({ min: 0, max: 30_000 }), tools: fc.integer({ min: 0, max: 3_000 }) }).map(({ anthropic, messages, tools }) => {
    const body = anthropic ? validMessages() : validChat();
    body.messages = Array.from({ length: messages }, () => ({ role: 'user', content: 'x' }));
    if (tools > 0) body.tools = Array.from({ length: tools }, (_, i) => (anthropic ? { name: `t${i}`, input_schema: { type: 'object' } } : { type: 'function', function: { name: `t${i}`, parameters: { type: 'object' } } }));
    return { text: JSON.stringify(body), anthropic };
  }),
  // Not JSON: truncated JSON, random bytes, invalid UTF-8.
  fc.record({ anthropic: fc.boolean(), cut: fc.integer({ min: 0, max: 60 }) }).map(({ anthropic, cut }) => ({ text: JSON.stringify(anthropic ? validMessages() : validChat()).slice(0, cut), anthropic })),
  fc.record({ anthropic: fc.boolean(), bytes: fc.uint8Array({ maxLength: 400 }) }).map(({ anthropic, bytes }) => ({ text: Buffer.from(bytes), anthropic })),
  fc.boolean().map((anthropic) => ({ text: Buffer.concat([Buffer.from('{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')]), anthropic })),
);

const contentTypeArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  { weight: 1, arbitrary: fc.constantFrom('', 'json', 'application/json, text/plain', 'text/plain', 'application/json; charset=latin1', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded', 'application/json;;;', '*/*') },
);

/** Extra headers: internal ones a client must not be able to use, odd priorities, oversized or numerous headers. */
const headersArb: fc.Arbitrary<Record<string, string>> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({}) },
  {
    weight: 3,
    arbitrary: fc
      .record({
        name: fc.constantFrom('x-quotaring-fallback-for', 'x-quotaring-redirected-for', 'x-quotaring-from', 'x-quotaring-hops', 'x-quotaring-ring', 'x-quotaring-tenant', 'x-quotaring-priority', 'x-quotaring-signature', 'x-quotaring-timestamp'),
        value: fc.constantFrom('node-1', 'node-2', 'batch', 'interactive', 'nope', '0', '-1', '99999999999', 'fuzz'),
      })
      .map(({ name, value }) => ({ [name]: value })),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 40_000 }).map((n) => ({ 'x-padding': 'p'.repeat(n) })) },
  { weight: 1, arbitrary: fc.integer({ min: 50, max: 300 }).map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-h${i}`, 'v']))) },
);

const pathArb = fc.oneof(
  { weight: 8, arbitrary: fc.constant('') }, // the dialect's own path
  { weight: 1, arbitrary: fc.constantFrom('/v1/embeddings', '/v1/models', '/v1/models/%ff', '/v1/chat/completions?x=%zz', '/v1/../admin/v1/ring', '/v1/messages/../chat/completions', '/v1/%00', '/v1/' + 'a'.repeat(5_000)) },
  { weight: 1, arbitrary: fc.constantFrom('/_quotaring/v1/settlements', '/_quotaring/v1/tenants/fuzz', '/_quotaring/v1/levels', '/_quotaring/v1/handoff') },
);

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    target: fc.constantFrom<Case['target']>('router', 'router', 0, 1),
    method: fc.oneof({ weight: 9, arbitrary: fc.constant('POST' as const) }, { weight: 1, arbitrary: fc.constantFrom('GET' as const, 'PUT' as const, 'DELETE' as const) }),
    path: pathArb,
    body: bodyArb,
    contentType: contentTypeArb,
    headers: headersArb,
    keyHeader: fc.constantFrom('authorization', 'x-api-key'),
    abort: fc.boolean(),
  })
  .map(({ target, method, path, body, contentType, headers, keyHeader, abort }) => {
    const internal = path.startsWith('/_quotaring');
    const settlement = Buffer.from(JSON.stringify({ op: 'finish', tenant: 'fuzz', id: 'x', tokens: 0 }));
    return {
      target: internal && target === 'router' ? 0 : target,
      method,
      path: path === '' ? (body.anthropic ? '/v1/messages' : '/v1/chat/completions') : path,
      headers: {
        ...headers,
        ...(keyHeader === 'authorization' ? { authorization: `Bearer ${FUZZ_KEY}` } : { 'x-api-key': FUZZ_KEY }),
        ...(body.anthropic ? { 'anthropic-version': '2023-06-01' } : {}),
        'content-type': contentType,
      },
      body: method === 'GET' ? undefined : internal ? settlement : Buffer.isBuffer(body.text) ? body.text : Buffer.from(body.text),
      abort,
    };
  });

/** Raw HTTP that no client library would send: bad request lines, bad header bytes, oversized heads. */
const RAW_REQUESTS: readonly string[] = [
  'GARBAGE\r\n\r\n',
  'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
  'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
  'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n',
  `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`,
  'POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\nx-api-key: key-fuzz-0000\r\n\r\nzz\r\n',
  'GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n',
  'GET http://evil/v1/models HTTP/1.1\r\nHost: x\r\n\r\n',
];


/** Resident set size of a process, MiB (Linux). */
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? 0 : Number(m[1]) / 1024;
}

/** Reads the fuzzed tenant's limits from a node's admin API (the owner answers with its own state). */
async function fuzzUsage(adminUrl: string): Promise<{ here: boolean; limits: { name: string; used: number; kind: string }[] }> {
  const res = await request(`${adminUrl}/admin/v1/tenants/fuzz`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  assert.equal(res.statusCode, 200);
  return (await res.body.json()) as { here: boolean; limits: { name: string; used: number; kind: string }[] };
}

describe(`fuzz: ${RUNS} malformed requests (seed ${SEED}) through the router and straight to the nodes`, () => {
  let sim: Running;
  const nodes: Running[] = [];
  const nodeUrls: string[] = [];
  let router: Running | undefined;
  let routerUrl = '';
  const all = (): Running[] => [...nodes, ...(router === undefined ? [] : [router])];
  const adminUrls: string[] = [];
  before(async () => {
    const simPort = await freePort();
    const simUrl = `http://127.0.0.1:${simPort}`;
    const env = { QUOTARING_SIM_KEY: 'sim-fuzz-key', QUOTARING_ADMIN_TOKEN: ADMIN_TOKEN, QUOTARING_CLUSTER_SECRET: SECRET };
    sim = await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env);
    const nodePorts = [await freePort(), await freePort()];
    const config = writeConfig({
      server: { log_level: 'warn', body_limit: BODY_LIMIT },
      cluster: { members: nodePorts.map((p, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${p}` })), health_check: '500ms' },
      tenants: [
        { id: 'fuzz', keys: [FUZZ_KEY], limits: [{ requests: 1_000_000, window: '1d', algorithm: 'sliding_window' }, { tokens: 1_000_000_000, window: '1d' }, { concurrent: 64 }] },
        { id: 'probe', keys: ['key-probe-0000'], limits: [{ requests: 1_000_000, window: '1d' }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', default_max_output: 16, deployments: ['sim-openai'] },
        { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', default_max_output: 16, deployments: ['sim-anthropic'] },
      ],
      deployments: [
        { name: 'sim-openai', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY' },
        { name: 'sim-anthropic', provider: 'anthropic', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY' },
      ],
    });
    const adminPorts = [await freePort(), await freePort()];
    adminUrls.push(...adminPorts.map((p) => `http://127.0.0.1:${p}`));
    for (const [i, port] of nodePorts.entries()) {
      nodes.push(await runCli(['node', '--config', config, '--id', `node-${i + 1}`, '--port', String(port), '--admin-port', String(adminPorts[i])], `http://127.0.0.1:${port}/readyz`, env));
    }
    const routerPort = await freePort();
    routerUrl = `http://127.0.0.1:${routerPort}`;
    router = await runCli(['router', '--config', config, '--port', String(routerPort)], `${routerUrl}/readyz`, env);
    nodeUrls.push(...nodePorts.map((p) => `http://127.0.0.1:${p}`));
  });
  after(async () => {
    await Promise.all([...all().map((p) => p.stop()), sim?.stop()]);
  });

  test('no answer is 5xx; processes stay alive and bounded; the counters move only for admitted requests', async () => {
    // Cases are drawn in batches (batch b from seed SEED + b), so a long run never holds every body at once.
    let batch: Case[] = [];
    let batchStart = 0;
    const caseAt = (i: number): Case => {
      if (i >= batchStart + batch.length) {
        batchStart = i - (i % BATCH);
        batch = fc.sample(caseArb, { seed: SEED + batchStart / BATCH, numRuns: BATCH });
      }
      return batch[i - batchStart] as Case;
    };
    const urls = { router: routerUrl, 0: nodeUrls[0] as string, 1: nodeUrls[1] as string };
    const pids = all().map((p) => p.proc.pid as number);
    let admitted = 0;
    let maxRss = 0;
    const fives: string[] = [];
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < RUNS) {
        const i = next++;
        const c = caseAt(i);
        let status: number;
        try {
          const res = await request(`${urls[c.target]}${c.path}`, { method: c.method, headers: c.headers, body: c.body ?? null, headersTimeout: 60_000, bodyTimeout: 60_000 });
          status = res.statusCode;
          // Admitted: a limiter decision that was not a refusal (its rate-limit headers, OpenAI's or Anthropic's).
          if (status !== 429 && Object.keys(res.headers).some((h) => /^(x-ratelimit-remaining-requests|anthropic-ratelimit-requests-remaining)$/.test(h))) admitted++;
          if (c.abort) res.body.on('error', () => undefined).destroy();
          else await res.body.dump();
        } catch (err) {
          // A server may answer 4xx before reading a body it refuses (over the body limit, or a large
          // streamed body with a bad content type) or a head it refuses (too many or too large
          // headers), then close the connection: a client still writing sees the reset, not the
          // answer. Any other failure to get an answer counts as a failure.
          status = -1;
          const headerBytes = Object.entries(c.headers).reduce((n, [k, v]) => n + k.length + v.length + 4, 0);
          const refusedEarly = (c.body?.length ?? 0) > 64 * 1024 || headerBytes > 16 * 1024 || Object.keys(c.headers).length > 100;
          const reset = /ECONNRESET|EPIPE|other side closed/.test((err as Error).message);
          if (!(refusedEarly && reset)) fives.push(`#${i} ${c.method} ${String(c.target)} ${c.path} ${(c.body?.length ?? 0)} bytes, ${headerBytes} header bytes: ${(err as Error).message}`);
        }
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status >= 500) fives.push(`#${i} ${c.method} ${String(c.target)} ${c.path} [${c.headers['content-type']}] ${(c.body?.length ?? 0)} bytes: ${status}`);
        if (i % 50 === 0) for (const pid of pids) maxRss = Math.max(maxRss, rssMiB(pid));
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    for (const payload of RAW_REQUESTS) {
      for (const url of Object.values(urls)) {
        const { status } = await rawStatus(url, payload);
        if (status >= 500) fives.push(`raw ${JSON.stringify(payload.slice(0, 60))} to ${url}: ${status}`);
      }
    }
    for (const pid of pids) maxRss = Math.max(maxRss, rssMiB(pid));

    const summary = `seed ${SEED}; statuses ${JSON.stringify(Object.fromEntries(statuses))}`;
    assert.deepEqual(fives, [], summary);
    for (const p of all()) assert.equal(p.proc.exitCode, null, `${p.proc.spawnargs.join(' ')} is alive\n${p.output().slice(-2_000)}`);
    assert.ok(maxRss < MAX_RSS_MIB, `largest RSS ${maxRss.toFixed(0)} MiB < ${MAX_RSS_MIB}`);

    // Every tenant keeps being served through the router.
    const probe = await request(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer key-probe-0000', 'content-type': 'application/json' },
      body: JSON.stringify(validChat()),
    });
    assert.equal(probe.statusCode, 200, await probe.body.text());

    // The owner of the fuzzed tenant counted exactly the admitted requests, and holds no slot.
    const views = await Promise.all(adminUrls.map(fuzzUsage));
    const owner = views.find((v) => v.here);
    assert.ok(owner !== undefined, 'one node owns the fuzzed tenant');
    const used = Object.fromEntries(owner.limits.map((l) => [l.kind, l.used]));
    assert.equal(used.requests, admitted, `requests counted = requests admitted (${summary})`);
    // Slots of aborted streams are released when the node sees the close: give it a moment.
    for (let i = 0; i < 50 && used.concurrent !== 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const again = (await Promise.all(adminUrls.map(fuzzUsage))).find((v) => v.here);
      used.concurrent = again?.limits.find((l) => l.kind === 'concurrent')?.used ?? -1;
    }
    assert.equal(used.concurrent, 0, 'no concurrency slot held');
  });
});
