/**
 * Trace replay: trace parsing (plain and gz), exact-count prompts, Zipf tenant assignment, the report,
 * and a replay of 50 trace rows against a small fastify server on port 0.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { getEncoding } from 'js-tiktoken';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { runReplay } from '../../src/replay/replay.ts';
import { buildReport, formatReport } from '../../src/replay/report.ts';
import type { ReplayRecord, ReplayRunInfo } from '../../src/replay/report.ts';
import { uniformOf, ZipfAssigner } from '../../src/replay/tenants.ts';
import { parseTrace, parseTraceFile, readTrace, TraceError } from '../../src/replay/trace.ts';
import type { TraceRow } from '../../src/replay/trace.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';

const slice = fileURLToPath(new URL('../fixtures/trace-slice.csv', import.meta.url));
const sliceGz = `${slice}.gz`;
const HEADER = 'TIMESTAMP,ContextTokens,GeneratedTokens';

describe('trace parsing', () => {
  test('the slice: 200 rows, exact first and last rows, exact sums', async () => {
    const rows = await readTrace(slice);
    assert.equal(rows.length, 200);
    assert.deepEqual(rows[0], { index: 0, line: 2, atMs: 0, promptTokens: 374, completionTokens: 44 });
    assert.deepEqual(rows[1], { index: 1, line: 3, atMs: 4314.579, promptTokens: 396, completionTokens: 109 });
    // 18:16:47.9441270 − 18:15:46.6805900 = 61.2635370 s
    assert.deepEqual(rows[199], { index: 199, line: 201, atMs: 61263.537, promptTokens: 1143, completionTokens: 409 });
    assert.equal(rows.reduce((a, r) => a + r.promptTokens, 0), 180_695);
    assert.equal(rows.reduce((a, r) => a + r.completionTokens, 0), 47_050);
  });

  test('gz and plain give the same rows (async and sync readers)', async () => {
    const plain = await readTrace(slice);
    assert.deepEqual(await readTrace(sliceGz), plain);
    assert.deepEqual(parseTraceFile(sliceGz), plain);
    assert.deepEqual(parseTraceFile(slice), plain);
  });

  test('limit and time window select rows, keeping offsets from the first row', async () => {
    assert.deepEqual((await readTrace(sliceGz, { limit: 3 })).map((r) => r.index), [0, 1, 2]);
    const window = await readTrace(slice, { fromMs: 5_000, toMs: 10_000 });
    // Row 4 is 5.892655 s in, row 13 is 10.106379 s in.
    assert.deepEqual(window.map((r) => r.index), [4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert.deepEqual(window[0], { index: 4, line: 6, atMs: 5892.655, promptTokens: 91, completionTokens: 16 });
    assert.deepEqual((await readTrace(slice, { fromMs: 5_000, toMs: 10_000, limit: 2 })).map((r) => r.index), [4, 5]);
    assert.equal((await readTrace(slice, { fromMs: 61_263.537 })).length, 1);
    assert.equal((await readTrace(slice, { limit: 0 })).length, 0);
    assert.throws(() => parseTrace(HEADER, { fromMs: 10, toMs: 5 }), RangeError);
    assert.throws(() => parseTrace(HEADER, { limit: 1.5 }), RangeError);
  });

  test('the shipped full traces parse to their published row counts', () => {
    const dir = new URL('../../cluster/traces/', import.meta.url);
    const conv = parseTraceFile(fileURLToPath(new URL('azure-llm-2023-conv.csv.gz', dir)));
    const code = parseTraceFile(fileURLToPath(new URL('azure-llm-2023-code.csv.gz', dir)));
    assert.equal(conv.length, 19_366);
    assert.equal(code.length, 8_819);
    assert.deepEqual(code.at(-1), { index: 8_818, line: 8_820, atMs: (code.at(-1) as TraceRow).atMs, promptTokens: 549, completionTokens: 173 });
  });

  const bad: [string, string, number, RegExp][] = [
    ['a non-integer count', `${HEADER}\r\n2023-11-16 18:15:46.68,374,44\r\n2023-11-16 18:15:47.00,abc,44\r\n`, 3, /ContextTokens "abc" is not a non-negative integer/],
    ['a negative count', `${HEADER}\n2023-11-16 18:15:46.68,374,-1\n`, 2, /GeneratedTokens "-1"/],
    ['a bad timestamp', `${HEADER}\n2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:46.69,1,1\n2023-13-16 18:15:47,1,1\n`, 4, /TIMESTAMP "2023-13-16 18:15:47"/],
    ['a row earlier than the one before', `${HEADER}\n2023-11-16 18:15:46.68,1,1\n2023-11-16 18:15:46.67,1,1\n`, 3, /earlier than the row before/],
    ['too few fields', `${HEADER}\n2023-11-16 18:15:46.68,1\n`, 2, /expected 3 fields, got 2/],
    ['an empty line inside', `${HEADER}\n2023-11-16 18:15:46.68,1,1\n\n2023-11-16 18:15:46.69,1,1\n`, 3, /empty line/],
    ['a missing column', 'TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,1\n', 1, /lacks column\(s\) GeneratedTokens/],
  ];
  for (const [what, text, line, message] of bad) {
    test(`${what}: TraceError naming line ${line}`, () => {
      assert.throws(() => parseTrace(text, {}, 'x.csv'), (err: unknown) => {
        assert.ok(err instanceof TraceError);
        assert.equal(err.line, line);
        assert.equal(err.source, 'x.csv');
        assert.ok(err.message.startsWith(`x.csv:${line}: `), err.message);
        assert.match(err.message, message);
        return true;
      });
    });
  }

  test('columns in another order and a final line without newline', () => {
    const rows = parseTrace('GeneratedTokens,TIMESTAMP,ContextTokens\n7,2023-11-16 18:15:46.6805900,5\n9,2023-11-16 18:15:47.0000001,6');
    assert.deepEqual(rows, [
      { index: 0, line: 2, atMs: 0, promptTokens: 5, completionTokens: 7 },
      { index: 1, line: 3, atMs: 319.4101, promptTokens: 6, completionTokens: 9 },
    ]);
  });

  test('a file that is not a trace names the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'replay-'));
    try {
      const file = join(dir, 'broken.csv.gz');
      const gz = readFileSync(sliceGz);
      const { writeFileSync } = await import('node:fs');
      writeFileSync(file, gz.subarray(0, 100));
      await assert.rejects(readTrace(file), (err: unknown) => err instanceof TraceError && err.message.startsWith(`${file}: not a valid gzip file`));
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
});

describe('exact-count prompts', () => {
  for (const encoding of ['cl100k_base', 'o200k_base'] as const) {
    test(`${encoding}: " the" x k is k tokens`, () => {
      const enc = getEncoding(encoding);
      for (const k of [1, 2, 3, 10, 1_000, 14_050]) assert.equal(enc.encode(' the'.repeat(k)).length, k);
    });

    test(`${encoding}: countOpenAIChat of body(N) is N`, () => {
      const builder = new PromptBuilder({ model: 'gpt-4o-mini', encoding });
      // 3 per message + "user" (1 token) + 3 reply priming.
      assert.equal(builder.overhead, 7);
      const counter = exactCounter(encoding);
      for (const n of [7, 8, 9, 10, 100, 374, 1_024, 4_085, 14_050]) {
        const body = builder.body(n);
        assert.equal(countOpenAIChat(body, counter), n, `N=${n}`);
        assert.equal(body.model, 'gpt-4o-mini');
      }
      assert.throws(() => builder.body(6), RangeError);
      assert.throws(() => builder.body(8.5), RangeError);
    });
  }

  test('bodies are cached by N; verify mode counts and agrees', () => {
    const builder = new PromptBuilder({ model: 'gpt-4o-mini', verify: true });
    assert.equal(builder.encoding, 'o200k_base');
    assert.equal(builder.body(500), builder.body(500));
    assert.notEqual(builder.body(500), builder.body(501));
  });

  test('an explicit encoding overrides the model\'s', () => {
    const builder = new PromptBuilder({ model: 'gpt-4o-mini', encoding: 'cl100k_base' });
    assert.equal(builder.encoding, 'cl100k_base');
    assert.equal(countOpenAIChat(builder.body(1_000), exactCounter('cl100k_base')), 1_000);
  });
});

describe('Zipf tenant assignment', () => {
  const keys = ['k1', 'k2', 'k3', 'k4', 'k5'];

  test('prints its rule', () => {
    assert.equal(new ZipfAssigner(keys, { s: 1.1, seed: 42 }).rule, 'zipf(s=1.1, seed=42) over 5 tenants');
    assert.equal(new ZipfAssigner(['only']).rule, 'zipf(s=1.1, seed=42) over 1 tenant');
  });

  test('deterministic per (seed, row index), independent of which rows are drawn', () => {
    const a = new ZipfAssigner(keys, { seed: 7 });
    const b = new ZipfAssigner(keys, { seed: 7 });
    const forward = Array.from({ length: 1_000 }, (_, i) => a.tenantOf(i));
    const backward = Array.from({ length: 1_000 }, (_, i) => b.tenantOf(999 - i)).reverse();
    assert.deepEqual(forward, backward);
    const other = Array.from({ length: 1_000 }, (_, i) => new ZipfAssigner(keys, { seed: 8 }).tenantOf(i));
    assert.ok(other.filter((k, i) => k !== forward[i]).length > 300, 'another seed draws differently');
    // Pinned: a change of the hash or the draw reassigns every replay's tenants.
    assert.deepEqual(Array.from({ length: 12 }, (_, i) => new ZipfAssigner(keys, { s: 1.1, seed: 42 }).rankOf(i)), PINNED_RANKS);
  });

  test('probabilities follow r^-s / H and the draw matches them within 0.5 points over 100k rows', () => {
    const z = new ZipfAssigner(keys, { s: 1.1, seed: 42 });
    const h = [1, 2, 3, 4, 5].reduce((a, r) => a + r ** -1.1, 0);
    z.probabilities.forEach((p, r) => assert.ok(Math.abs(p - (r + 1) ** -1.1 / h) < 1e-15));
    assert.ok(Math.abs((z.probabilities[0] as number) - 0.464452) < 1e-6);
    const counts = [0, 0, 0, 0, 0];
    for (let i = 0; i < 100_000; i++) counts[z.rankOf(i)]! += 1;
    counts.forEach((c, r) => assert.ok(Math.abs(c / 100_000 - (z.probabilities[r] as number)) < 0.005, `rank ${r + 1}: ${c}`));
    for (let r = 1; r < 5; r++) assert.ok((counts[r] as number) < (counts[r - 1] as number), 'decreasing with rank');
  });

  test('s = 0 is uniform; bad input is refused', () => {
    assert.deepEqual(new ZipfAssigner(['a', 'b', 'c', 'd'], { s: 0 }).probabilities, [0.25, 0.25, 0.25, 0.25]);
    assert.throws(() => new ZipfAssigner([]), RangeError);
    assert.throws(() => new ZipfAssigner(['a', 'a']), RangeError);
    assert.throws(() => new ZipfAssigner(['a'], { s: -1 }), RangeError);
    assert.throws(() => new ZipfAssigner(['a'], { seed: 1.5 }), RangeError);
    for (let i = 0; i < 1_000; i++) {
      const u = uniformOf(42, i * 7_919);
      assert.ok(u >= 0 && u < 1);
    }
  });
});

const PINNED_RANKS = [1, 1, 0, 0, 4, 2, 0, 0, 1, 0, 0, 2];

function record(over: Partial<ReplayRecord>): ReplayRecord {
  return {
    i: 0, row: 0, tenant: 'a', atMs: 0, sentMs: 0, status: 200, latencyMs: 10, promptTokens: 100, completionTokens: 20, reservedTokens: 120,
    usage: { promptTokens: 100, completionTokens: 20, totalTokens: 120 },
    headers: { limitTokens: 1_000, remainingTokens: 500, limitRequests: 10, remainingRequests: 5 },
    retryAfterMs: null, errorCode: null, gatewayError: false,
    ...over,
  };
}

const INFO: ReplayRunInfo = { rule: 'test', speed: 1, rows: 10, durationMs: 120_000, upstream429: 2, promptRaised: 0, aborted: false, warnings: [] };

describe('report', () => {
  test('outcomes, per tenant per minute, over-admission', () => {
    const limited = { status: 429, usage: null, errorCode: 'rate_limit_exceeded', retryAfterMs: 1_500, gatewayError: true };
    const records = [
      record({ i: 0, sentMs: 0 }),
      record({ i: 1, sentMs: 10_000, usage: { promptTokens: 900, completionTokens: 100, totalTokens: 1_000 } }),
      record({ i: 2, sentMs: 20_000, ...limited }),
      record({ i: 3, sentMs: 30_000, status: 429, usage: null, errorCode: 'request_too_large', gatewayError: true, headers: { limitTokens: 1_000, remainingTokens: 0, limitRequests: 10, remainingRequests: 0 } }),
      record({ i: 4, sentMs: 61_000, latencyMs: 30 }),
      record({ i: 5, sentMs: 70_000, status: 429, usage: null, errorCode: 'rate_limit_exceeded', gatewayError: true, headers: { limitTokens: null, remainingTokens: null, limitRequests: null, remainingRequests: null } }),
      record({ i: 6, sentMs: 5_000, tenant: 'b', status: 429, usage: null, errorCode: null }),
      record({ i: 10, sentMs: 9_000, tenant: 'b', status: 429, usage: null, errorCode: 'rate_limit_exceeded', headers: { limitTokens: null, remainingTokens: null, limitRequests: null, remainingRequests: null } }),
      record({ i: 7, sentMs: 6_000, tenant: 'b', status: 0, usage: null, errorCode: 'network:ECONNRESET', headers: { limitTokens: null, remainingTokens: null, limitRequests: null, remainingRequests: null } }),
      record({ i: 8, sentMs: 7_000, tenant: 'b', headers: { limitTokens: 100, remainingTokens: 0, limitRequests: 1, remainingRequests: 0 } }),
      record({ i: 9, sentMs: 8_000, tenant: 'b', atMs: 2_000, latencyMs: 50, headers: { limitTokens: 100, remainingTokens: 0, limitRequests: 1, remainingRequests: 0 } }),
    ];
    const report = buildReport(records, INFO);
    assert.equal(report.sent, 11);
    assert.equal(report.admitted, 5);
    assert.equal(report.limited, 3);
    assert.deepEqual(report.limitedByCode, { rate_limit_exceeded: 2, request_too_large: 1 });
    assert.equal(report.otherErrors, 3);
    assert.deepEqual(report.otherByKind, { '429:none': 1, '0:network:ECONNRESET': 1, '429:rate_limit_exceeded': 1 });
    assert.equal(report.upstream429, 2);
    assert.equal(report.maxLagMs, 70_000);
    assert.deepEqual(report.latencyMs, { p50: 10, p99: 50, max: 50 });
    assert.deepEqual(report.tenants, [
      { tenant: 'a', sent: 6, admitted: 3, limited: 3, otherErrors: 0, admittedTokens: 1_240 },
      { tenant: 'b', sent: 5, admitted: 2, limited: 0, otherErrors: 3, admittedTokens: 240 },
    ]);
    assert.deepEqual(report.minutes, [
      { tenant: 'a', minute: 0, admittedTokens: 1_120, tokensLimit: 1_000, tokensRatio: 1.12, admittedRequests: 2, requestsLimit: 10, requestsRatio: 0.2 },
      { tenant: 'a', minute: 1, admittedTokens: 120, tokensLimit: 1_000, tokensRatio: 0.12, admittedRequests: 1, requestsLimit: 10, requestsRatio: 0.1 },
      { tenant: 'b', minute: 0, admittedTokens: 240, tokensLimit: 100, tokensRatio: 2.4, admittedRequests: 2, requestsLimit: 1, requestsRatio: 2 },
    ]);
    // Sliding 60 s windows: b admitted 240 tokens within 1 s against 100.
    assert.ok(Math.abs(report.overAdmission - 1.4) < 1e-12);
    assert.deepEqual(report.overAdmissionAt, { tenant: 'b', kind: 'tokens', windowStartMs: 7_000 });
    assert.ok(Math.abs(report.overBucketAllowance - 0.2) < 1e-12);
    const text = formatReport(report);
    assert.match(text, /admitted 5, limited 3 \(rate_limit_exceeded 2, request_too_large 1\), other errors 3/);
    assert.match(text, /upstream 429s \(simulator\): 2/);
    assert.match(text, /over-admission, worst sliding 60 s window against the limit: 140\.0% \(tokens of b, window from 7\.0 s\)/);
    assert.match(text, /over-admission against a token bucket's allowance \(2 × the limit per window\): 20\.0%/);
  });

  test('a request counts when the gateway decided it: queued across a minute edge, an exact limiter is 0% over', () => {
    // A sliding window of 1,000 tokens a minute, exactly held by the gateway: 1,000 tokens admitted
    // at 10 s; the next 1,000 sent at 20 s, queued until 70 s (when the first left the window).
    const h = { limitTokens: 1_000, remainingTokens: 0, limitRequests: 10, remainingRequests: 5 };
    const used = { promptTokens: 900, completionTokens: 100, totalTokens: 1_000 };
    const records = [
      record({ i: 0, sentMs: 10_000, decidedMs: 10_000, queuedMs: null, usage: used, headers: h }),
      record({ i: 1, sentMs: 20_000, decidedMs: 70_000, queuedMs: 50_000, usage: used, headers: h }),
    ];
    const report = buildReport(records, INFO);
    assert.deepEqual(report.minutes.map((m) => [m.minute, m.admittedTokens, m.tokensRatio]), [[0, 1_000, 1], [1, 1_000, 1]]);
    assert.equal(report.overAdmission, 0);
    assert.equal(report.overBucketAllowance, 0);
    // Records of older versions carry no decidedMs: sentMs + queuedMs.
    const { decidedMs: _dropped, ...older } = records[1] as ReplayRecord;
    assert.equal(buildReport([records[0] as ReplayRecord, older], INFO).overAdmission, 0);
  });

  test('never over the limit: over-admission 0; no limits seen: ratios null', () => {
    const report = buildReport([record({ headers: { limitTokens: null, remainingTokens: null, limitRequests: 10, remainingRequests: 9 } })], { ...INFO, upstream429: null });
    assert.equal(report.overAdmission, 0);
    assert.equal(report.overAdmissionAt, null);
    assert.equal(report.minutes[0]?.tokensRatio, null);
    assert.equal(report.minutes[0]?.requestsRatio, 0.1);
    assert.match(formatReport(report), /not measured/);
  });
});

describe('replay against a fastify server on port 0', () => {
  const KEYS = ['key-a', 'key-b', 'key-c'];
  const LIMITS: Record<string, { tokens: number; requests: number }> = { 'key-a': { tokens: 10_000, requests: 100 }, 'key-b': { tokens: 5_000, requests: 100 }, 'key-c': { tokens: 1_000, requests: 100 } };
  let app: FastifyInstance;
  let url: string;
  let delayMs = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  let rateLimited = 0;
  let onRequest: () => void = () => undefined;
  const seen: { key: string; maxTokens: unknown; simOutput: number; model: unknown; prompt: number }[] = [];

  before(async () => {
    app = Fastify({ logger: false, bodyLimit: 10 * 1024 * 1024 });
    app.get('/sim/stats', async () => ({ requests: seen.length, rateLimited }));
    app.post('/v1/chat/completions', async (req, reply) => {
      inFlight++;
      onRequest();
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        const key = (req.headers.authorization ?? '').replace(/^Bearer /, '');
        const body = req.body as { model: unknown; max_tokens: unknown; messages: { content: string }[] };
        const repeats = (body.messages[0]?.content.match(/ the/g) ?? []).length;
        const simOutput = Number(req.headers['x-sim-output-tokens']);
        seen.push({ key, maxTokens: body.max_tokens, simOutput, model: body.model, prompt: repeats + 7 });
        // A pretend upstream 429 absorbed by the gateway for every long completion.
        if (simOutput > 200) rateLimited++;
        const limit = LIMITS[key];
        if (limit === undefined) return reply.code(401).send({ error: { code: 'invalid_api_key', type: 'invalid_request_error' } });
        const headers = { 'x-ratelimit-limit-tokens': String(limit.tokens), 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-limit-requests': String(limit.requests), 'x-ratelimit-remaining-requests': '1' };
        if (key === 'key-c') {
          return reply.code(429).headers({ ...headers, 'retry-after': '2', 'retry-after-ms': '1500', 'x-quotaring-error': 'rate_limit_exceeded' }).send({ error: { code: 'rate_limit_exceeded', type: 'tokens' } });
        }
        if (key === 'key-b' && repeats + 7 >= 2_000) {
          // An upstream 429 passed through (no x-quotaring-error): not "limited", an other error.
          return reply.code(429).headers({ 'retry-after': '1' }).send({ error: { code: 'rate_limit_exceeded', type: 'requests' } });
        }
        return reply.headers(headers).send({
          id: 'x', object: 'chat.completion', model: body.model, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: repeats + 7, completion_tokens: simOutput, total_tokens: repeats + 7 + simOutput },
        });
      } finally {
        inFlight--;
      }
    });
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  after(async () => app.close());

  test('50 rows at speed 200: exact counts, request shape, JSONL', async () => {
    const rows = await readTrace(slice, { limit: 50 });
    const dir = mkdtempSync(join(tmpdir(), 'replay-'));
    seen.length = 0;
    rateLimited = 0;
    try {
      const out = join(dir, 'out.jsonl');
      const report = await runReplay({ rows, target: url, keys: KEYS, speed: 200, concurrency: 8, simulator: url, out, progress: false });
      const zipf = new ZipfAssigner(KEYS);
      const tenantOf = rows.map((r) => zipf.tenantOf(r.index));
      // The draw for these 50 rows (pinned): 26 / 19 / 5.
      assert.deepEqual(KEYS.map((k) => tenantOf.filter((t) => t === k).length), [26, 19, 5]);
      assert.equal(report.rule, 'zipf(s=1.1, seed=42) over 3 tenants');
      assert.equal(report.rows, 50);
      assert.equal(report.sent, 50);
      // key-b's 3 rows of 2,000+ prompt tokens get a passed-through upstream 429.
      assert.equal(report.admitted, 42);
      assert.equal(report.limited, 5);
      assert.deepEqual(report.limitedByCode, { rate_limit_exceeded: 5 });
      assert.equal(report.otherErrors, 3);
      assert.deepEqual(report.otherByKind, { '429:rate_limit_exceeded': 3 });
      // Rows 32, 34, 46 and 49 ask for more than 200 output tokens.
      assert.equal(report.upstream429, 4);
      assert.equal(report.promptRaised, 0);
      assert.equal(report.aborted, false);

      // What was sent: key, model, max_tokens = GeneratedTokens = x-sim-output-tokens, exact prompt sizes.
      const bySize = [...seen].sort((x, y) => x.prompt - y.prompt || x.simOutput - y.simOutput || x.key.localeCompare(y.key));
      const expected = rows.map((r, k) => ({ key: tenantOf[k] as string, maxTokens: r.completionTokens, simOutput: r.completionTokens, model: 'gpt-4o-mini', prompt: r.promptTokens }))
        .sort((x, y) => x.prompt - y.prompt || x.simOutput - y.simOutput || x.key.localeCompare(y.key));
      assert.deepEqual(bySize, expected);

      // Admitted tokens of key-a: all its rows, prompt + completion.
      const tokensA = rows.filter((_, k) => tenantOf[k] === 'key-a').reduce((a, r) => a + r.promptTokens + r.completionTokens, 0);
      assert.equal(tokensA, TOKENS_A);
      assert.equal(report.tenants.find((t) => t.tenant === 'key-a')?.admittedTokens, TOKENS_A);
      assert.deepEqual(report.minutes.find((m) => m.tenant === 'key-a'), {
        tenant: 'key-a', minute: 0, admittedTokens: TOKENS_A, tokensLimit: 10_000, tokensRatio: TOKENS_A / 10_000, admittedRequests: 26, requestsLimit: 100, requestsRatio: 0.26,
      });
      const c = report.minutes.find((m) => m.tenant === 'key-c');
      assert.equal(c?.admittedTokens, 0);
      assert.equal(c?.tokensLimit, 1_000);
      // key-b admitted 5,648 tokens against 5,000 (12.96 % over); key-a 18,823 against 10,000.
      assert.equal(report.tenants.find((t) => t.tenant === 'key-b')?.admittedTokens, 5_648);
      assert.equal(report.overAdmission, TOKENS_A / 10_000 - 1);
      assert.deepEqual({ ...report.overAdmissionAt, windowStartMs: 0 }, { tenant: 'key-a', kind: 'tokens', windowStartMs: 0 });

      const lines = readFileSync(out, 'utf8').trimEnd().split('\n').map((l) => JSON.parse(l) as ReplayRecord);
      assert.equal(lines.length, 50);
      assert.deepEqual(lines.map((l) => l.i).sort((x, y) => x - y), Array.from({ length: 50 }, (_, k) => k));
      const first = lines.find((l) => l.i === 0) as ReplayRecord;
      assert.equal(first.tenant, tenantOf[0]);
      assert.equal(first.atMs, 0);
      assert.equal(first.promptTokens, 374);
      assert.equal(first.reservedTokens, 374 + 44);
      const limitedLine = lines.find((l) => l.tenant === 'key-c') as ReplayRecord;
      assert.equal(limitedLine.status, 429);
      assert.equal(limitedLine.retryAfterMs, 1_500);
      assert.equal(limitedLine.errorCode, 'rate_limit_exceeded');
      assert.equal(limitedLine.usage, null);
      assert.deepEqual(limitedLine.headers, { limitTokens: 1_000, remainingTokens: 0, limitRequests: 100, remainingRequests: 1 });
      // The schedule: row 49 is 26.46 s into the trace, so at speed 200 it is due at 132.3 ms.
      const last = lines.find((l) => l.i === 49) as ReplayRecord;
      assert.equal(last.atMs, 26_461.144);
      assert.ok(last.sentMs >= 132, `sent at ${last.sentMs} ms`);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });

  test('fixed max_tokens, concurrency bound, no retry of 429', async () => {
    const rows = await readTrace(slice, { limit: 30 });
    seen.length = 0;
    delayMs = 20;
    maxInFlight = 0;
    try {
      const report = await runReplay({ rows, target: `${url}/v1/`, keys: ['key-c', 'key-a'], zipf: 0, seed: 1, speed: Infinity, concurrency: 4, maxTokens: 16 });
      assert.equal(maxInFlight, 4);
      assert.equal(seen.length, 30, 'one request per row: 429s are not retried');
      assert.ok(seen.every((s) => s.maxTokens === 16));
      assert.equal(report.admitted + report.limited, 30);
      assert.equal(report.limited, seen.filter((s) => s.key === 'key-c').length);
      assert.equal(report.upstream429, null);
    } finally {
      delayMs = 0;
    }
  });

  test('labels stand for keys in the report; the keys still authenticate', async () => {
    const rows = await readTrace(slice, { limit: 10 });
    seen.length = 0;
    const report = await runReplay({ rows, target: url, keys: ['key-a', 'key-b'], labels: new Map([['key-a', 'alpha'], ['key-b', 'beta']]), speed: Infinity, concurrency: 4 });
    assert.deepEqual(new Set(seen.map((s) => s.key)), new Set(['key-a', 'key-b']));
    assert.ok(report.tenants.every((t) => t.tenant === 'alpha' || t.tenant === 'beta'), report.tenants.map((t) => t.tenant).join());
    assert.equal(report.tenants.reduce((n, t) => n + t.sent, 0), 10);
  });

  test('an AbortSignal stops the replay cleanly and the report says so', async () => {
    const rows = await readTrace(slice, { limit: 50 });
    seen.length = 0;
    const controller = new AbortController();
    // Abort 50 ms after the server answered row 0; row 1 is due 4.3 s into the trace (real time).
    onRequest = () => setTimeout(() => controller.abort(), 50);
    const startedAt = Date.now();
    try {
      const report = await runReplay({ rows, target: url, keys: KEYS, speed: 1, signal: controller.signal });
      assert.equal(report.aborted, true);
      assert.equal(report.sent, 1);
      assert.equal(report.admitted + report.limited, 1);
      assert.equal(seen.length, 1);
      assert.ok(Date.now() - startedAt < 4_000, 'did not wait for row 1');
    } finally {
      onRequest = () => undefined;
    }
  });

  test('an abort cancels requests in flight and records them as aborted', async () => {
    const rows = await readTrace(slice, { limit: 3 });
    const controller = new AbortController();
    delayMs = 1_000;
    onRequest = () => setTimeout(() => controller.abort(), 20);
    try {
      const report = await runReplay({ rows, target: url, keys: KEYS, speed: Infinity, signal: controller.signal });
      assert.equal(report.aborted, true);
      assert.equal(report.sent, 3);
      assert.deepEqual(report.otherByKind, { '0:aborted': 3 });
    } finally {
      delayMs = 0;
      onRequest = () => undefined;
    }
  });

  test('bad options are refused before anything is sent', async () => {
    const rows = await readTrace(slice, { limit: 1 });
    await assert.rejects(runReplay({ rows, target: url, keys: KEYS, speed: 0 }), RangeError);
    await assert.rejects(runReplay({ rows, target: url, keys: KEYS, concurrency: 0 }), RangeError);
    await assert.rejects(runReplay({ rows, target: 'not a url', keys: KEYS }), RangeError);
    await assert.rejects(runReplay({ rows, target: url, keys: [] }), RangeError);
  });
});

/** Prompt + completion tokens of the key-a rows among the first 50 (pinned with the draw). */
const TOKENS_A = 18_823;
