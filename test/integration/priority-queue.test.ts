/**
 * Priority tiers and the admission queue through a real gateway (in-process, listening on
 * 127.0.0.1, real clock) in front of the bundled simulator, driven over HTTP with undici.
 *
 * 1. Issue 6's timeline, one time unit = 1 s: tenant {concurrent 1}, tiers high then low, both
 *    with a queue deadline (max_wait) of 5 s. R1 (low) runs t0–t12 (the simulator holds it 12 s);
 *    R2 (low) queued at t1; R3 (high) queued at t2, its client gone at t3; R4 (low) queued at t4;
 *    R5 (low) and R6 (high) queued at t10. Expected: R2 429 at t6 and R4 at t9 (their deadlines);
 *    R3 leaves the queue at t3 and never reaches the simulator; the queue is empty just before t10;
 *    at t12 R6 (high) is admitted, not R5, which gets 429 at t15; the simulator never has two.
 *    Times are asserted within 400 ms (timers, and a loaded CI machine).
 * 2. Tiers of a key: the header picks a tier the key may use; one it may not, or one that does
 *    not exist, is 400 `invalid_request` naming `x-quotaring-priority`, and nothing is counted.
 * 3. Batch asking 3× the tenant's tokens per window while interactive asks 20% of it: every
 *    interactive request is admitted at once (no queue wait), batch gets the rest and never the
 *    last 20% (its floor), and the token bucket's bound holds over the run: admitted ≤ capacity +
 *    rate × elapsed.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { simStats } from '../helpers/processes.ts';
import { TEST_SECRET, signedRequest } from '../helpers/cluster-secret.ts';

const QUEUE_KEY = 'key-queue-0000';
const HIGH_ONLY = 'key-high-0000';
const MIX_KEY = 'key-mix-00000';
const messages = [{ role: 'user', content: 'hello' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));

describe('priority tiers and the admission queue', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url: string;

  before(async () => {
    sim = await startSimulator({ port: 0, faults: { slowMs: 12_000 } });
    const config = buildConfig(
      {
        server: { log_level: 'silent' },
        priorities: [
          { name: 'high', max_wait: '5s' },
          { name: 'low', max_wait: '5s' },
          { name: 'interactive' },
          { name: 'batch', floor: 0.2, max_wait: '30s' },
        ],
        tenants: [
          { id: 'queue', keys: [QUEUE_KEY, { key: HIGH_ONLY, priorities: ['high'] }], priorities: ['high', 'low'], priority: 'low', limits: [{ concurrent: 1 }] },
          // 30,000 tokens per 10 s bucket: 3,000 tokens/s.
          { id: 'mix', keys: [MIX_KEY], priorities: ['interactive', 'batch'], priority: 'interactive', limits: [{ tokens: 30_000, window: '10s' }] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-fault', 'x-sim-output-tokens'] }],
      },
      'test.yaml',
      { SIM_KEY: 'sim-key-000' },
    );
    app = buildGateway({ config, clusterSecret: TEST_SECRET, logger: false });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`;
  });
  after(async () => {
    // The aborted requests leave undici a fresh connection that never sends a request; Node would
    // hold the close for its headers timeout (about 70 s here).
    const closing = app.close();
    app.server.closeAllConnections();
    await closing;
    await sim.close();
  });

  /** What a request got: status (0 when its client aborted), when it ended (ms after t0), headers, JSON body. */
  interface Sent {
    status: number;
    at: number;
    headers: Record<string, string | string[] | undefined>;
    body: { error?: { message: string } } & Record<string, unknown>;
  }

  /** A chat request of `key` at tier `priority` (the key's default when undefined). */
  function send(key: string, priority: string | undefined, t0: number, opts: { slow?: boolean; maxTokens?: number; signal?: AbortSignal } = {}): Promise<Sent> {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    if (priority !== undefined) headers['x-quotaring-priority'] = priority;
    if (opts.slow === true) headers['x-sim-fault'] = 'slow';
    const maxTokens = opts.maxTokens ?? 5;
    headers['x-sim-output-tokens'] = String(maxTokens);
    return request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: maxTokens, messages }),
      ...(opts.signal === undefined ? {} : { signal: opts.signal }),
    }).then(
      async (res): Promise<Sent> => ({ status: res.statusCode, at: Date.now() - t0, headers: res.headers, body: (await res.body.json()) as Sent['body'] }),
      (): Sent => ({ status: 0, at: Date.now() - t0, headers: {}, body: {} }),
    );
  }
  const until = (t0: number, ms: number): Promise<void> => sleep(Math.max(0, t0 + ms - Date.now()));
  const queued = async (tenant: string): Promise<number> => {
    const res = await signedRequest(`${url}/_quotaring/v1/tenants/${tenant}`);
    return ((await res.body.json()) as { queued: number }).queued;
  };
  const near = (actual: number, expected: number, what: string): void => assert.ok(Math.abs(actual - expected) <= 400, `${what} at ${actual} ms, expected ${expected} ± 400`);

  test('the issue timeline: deadlines, a client that leaves, a higher tier admitted first', async () => {
    const before0 = await simStats(sim.url);
    const t0 = Date.now();
    const r1 = send(QUEUE_KEY, 'low', t0, { slow: true });
    await until(t0, 1_000);
    const r2 = send(QUEUE_KEY, 'low', t0);
    await until(t0, 2_000);
    const r3abort = new AbortController();
    const r3 = send(QUEUE_KEY, 'high', t0, { signal: r3abort.signal });
    await until(t0, 3_000);
    assert.equal(await queued('queue'), 2, 'R2 and R3 wait');
    r3abort.abort();
    await until(t0, 3_300);
    assert.equal(await queued('queue'), 1, 'R3 left the queue when its client went');
    await until(t0, 4_000);
    const r4 = send(QUEUE_KEY, 'low', t0);
    const [s2, s3] = await Promise.all([r2, r3]);
    assert.equal(s2.status, 429);
    near(s2.at, 6_000, 'R2 429');
    assert.equal(s2.headers['x-quotaring-error'], 'rate_limit_exceeded');
    assert.match(String(s2.body.error?.message), /Waited 5\.\ds in the queue \(max_wait of priority low\)/);
    // The slot is still held (R1 runs to t12): a concurrency refusal's hint, 1 s.
    assert.equal(s2.headers['retry-after-ms'], '1000');
    assert.equal(s2.headers['retry-after'], '1');
    assert.equal(s3.status, 0, 'R3 was aborted by its client');
    const s4 = await r4;
    assert.equal(s4.status, 429);
    near(s4.at, 9_000, 'R4 429');
    await until(t0, 9_800);
    assert.equal(await queued('queue'), 0, 'the queue is empty just before t10');
    assert.equal((await simStats(sim.url)).requests - before0.requests, 1, 'only R1 reached the simulator');
    await until(t0, 10_000);
    const r5 = send(QUEUE_KEY, 'low', t0);
    await sleep(50);
    const r6abort = new AbortController();
    const r6 = send(QUEUE_KEY, 'high', t0, { slow: true, signal: r6abort.signal });
    await until(t0, 11_700);
    assert.equal((await simStats(sim.url)).requests - before0.requests, 1, 'R1 still alone upstream');
    const s1 = await r1;
    assert.equal(s1.status, 200);
    near(s1.at, 12_000, 'R1 done');
    await until(t0, 12_500);
    assert.equal((await simStats(sim.url)).requests - before0.requests, 2, 'R6 went upstream after R1, not R5');
    assert.equal(await queued('queue'), 1, 'R5 waits');
    const s5 = await r5;
    assert.equal(s5.status, 429);
    near(s5.at, 15_000, 'R5 429');
    r6abort.abort();
    assert.equal((await r6).status, 0);
    assert.equal((await simStats(sim.url)).requests - before0.requests, 2);
  });

  test('a key uses its own tiers: another tier, or one that does not exist, is 400 and counts nothing', async () => {
    const t0 = Date.now();
    const bad = await send(HIGH_ONLY, 'low', t0);
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.error, { message: 'x-quotaring-priority: this key may not use priority "low"; this key may use high.', type: 'invalid_request_error', param: 'x-quotaring-priority', code: 'invalid_request' });
    const unknown = await send(QUEUE_KEY, 'urgent', t0);
    assert.equal(unknown.status, 400);
    assert.equal(unknown.body.error?.message, 'x-quotaring-priority: there is no priority "urgent"; this key may use high, low.');
    const ok = await send(HIGH_ONLY, undefined, t0);
    assert.equal(ok.status, 200, 'its default is its only tier');
    const peek = await signedRequest(`${url}/_quotaring/v1/tenants/queue`);
    assert.deepEqual(((await peek.body.json()) as { limits: { remaining: number }[] }).limits.map((l) => l.remaining), [1]);
  });

  test('batch at 3x the tokens per window, interactive at 20%: interactive never waits, batch keeps off the last 20%, the bucket bound holds', async () => {
    const t0 = Date.now();
    const runMs = 8_000;
    const interactive: Promise<Sent>[] = [];
    const batch: Promise<Sent>[] = [];
    // Interactive: 300-token requests at 2/s = 600 tokens/s (20% of 3,000). Batch: 900-token requests at 10/s = 9,000 tokens/s (3x).
    const iTokens = 300 - PROMPT;
    const bTokens = 900 - PROMPT;
    for (let ms = 0; ms < runMs; ms += 100) {
      await until(t0, ms);
      batch.push(send(MIX_KEY, 'batch', t0, { maxTokens: bTokens }));
      if (ms % 500 === 0) interactive.push(send(MIX_KEY, undefined, t0, { maxTokens: iTokens }));
    }
    const is = await Promise.all(interactive);
    assert.equal(is.length, 16);
    assert.deepEqual(is.map((r) => r.status), is.map(() => 200), 'every interactive request admitted');
    assert.deepEqual(is.map((r) => r.headers['x-quotaring-queued-ms']), is.map(() => undefined), 'none waited');
    // Batch requests still queued at the end wait up to 30 s: take what finished by then, and answer the rest by closing their clients.
    const bs = await Promise.all(batch.map((p) => Promise.race([p, sleep(2_500).then((): Sent => ({ status: -1, at: -1, headers: {}, body: {} }))])));
    const admitted = bs.filter((r) => r.status === 200);
    const elapsedS = (Math.max(...[...is, ...admitted].map((r) => r.at))) / 1_000;
    const tokens = is.length * 300 + admitted.length * 900;
    assert.ok(admitted.length >= 10, `batch got ${admitted.length} requests through`);
    assert.ok(tokens <= 30_000 + 3_000 * elapsedS, `admitted ${tokens} tokens in ${elapsedS.toFixed(2)} s: over the bucket bound ${30_000 + 3_000 * elapsedS}`);
    // Batch never took the last 20%: whenever a batch request was admitted, 6,000 tokens were left after it.
    for (const r of admitted) assert.ok(Number(r.headers['x-ratelimit-remaining-tokens']) >= 6_000, `batch admitted leaving ${String(r.headers['x-ratelimit-remaining-tokens'])}`);
  });
});
