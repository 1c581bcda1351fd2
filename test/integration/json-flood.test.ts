/**
 * One tenant's JSON flood (issue 13, hostile review): 8 concurrent 3.4 MB bodies of 280,000 keys
 * each, within the body limit and the tenant's limits, used to block the node's event loop in
 * JSON.parse (~100 ms a body) long enough for routers to miss its health checks. With
 * `server.json_max_members` (200,000) each is refused 400 `invalid_request` by the linear scan
 * before parsing; `monitorEventLoopDelay` samples the node's loop meanwhile (the node runs in this
 * process). The same flood against a node without the bound is measured for comparison only.
 */
import assert from 'node:assert/strict';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';

const KEY = 'key-flood-000000';
const FLOOD = 8;
const KEYS = 280_000;
/**
 * Bound on the longest event-loop stall of the guarded node during the flood, ms. The scan of one
 * body takes ~3 ms; measured on a loaded 2-core machine (load 6): 11-25 ms guarded (once 96 ms, a
 * GC or a descheduled process), 500-850 ms unguarded (parses run back to back in one poll phase).
 */
const STALL_BOUND_MS = 250;

/** A chat request with `KEYS` extra keys in `metadata`: ~3.4 MB. */
function hostileBody(): Buffer {
  const keys = Array.from({ length: KEYS }, (_, i) => `"k${i}":0`).join(',');
  return Buffer.from(`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"metadata":{${keys}}}`);
}

/** Sends `FLOOD` copies of `body` at once; resolves with their statuses and error codes, and the longest event-loop stall meanwhile (ms). */
async function flood(url: string, body: Buffer): Promise<{ answers: string[]; stallMs: number }> {
  const probe = monitorEventLoopDelay({ resolution: 5 });
  probe.enable();
  const answers = await Promise.all(
    Array.from({ length: FLOOD }, async () => {
      const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body });
      const text = await res.body.text();
      return `${res.statusCode} ${String(res.headers['x-quotaring-error'] ?? '')}`.trim() + (res.statusCode === 400 ? ` ${(JSON.parse(text) as { error: { code: string } }).error.code}` : '');
    }),
  );
  probe.disable();
  return { answers, stallMs: probe.max / 1e6 };
}

describe('JSON flood: one request\'s parse is bounded (server.json_max_members)', () => {
  let sim: { url: string; close(): Promise<void> };
  const nodes: FastifyInstance[] = [];
  const urls: string[] = [];
  const body = hostileBody();

  before(async () => {
    sim = await startSimulator({ port: 0 });
    for (const server of [{}, { json_max_members: Number.MAX_SAFE_INTEGER }]) {
      const config = buildConfig(
        {
          server: { log_level: 'silent', ...server },
          tenants: [{ id: 'flood', keys: [KEY], limits: [{ requests: 1_000, window: '1m' }] }],
          models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
          deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY' }],
        },
        'flood.yaml',
        { SIM_KEY: 'sim-key' },
      );
      const app = buildGateway({ config, clusterSecret: TEST_SECRET });
      urls.push(await app.listen({ host: '127.0.0.1', port: 0 }));
      nodes.push(app);
    }
  });
  after(async () => {
    for (const n of nodes) await n.close();
    await sim?.close();
  });

  test(`${FLOOD} concurrent bodies of ${KEYS} keys: each 400 invalid_request before parsing; the loop never stalls ${STALL_BOUND_MS} ms`, async (t) => {
    assert.ok(body.length > 3_000_000 && body.length < 4 * 1_048_576, `${body.length} bytes: within the default body limit`);
    await flood(urls[0]!, body); // warm-up (JIT, connections)
    const guarded = await flood(urls[0]!, body);
    const unguarded = await flood(urls[1]!, body);
    t.diagnostic(`longest event-loop stall: ${guarded.stallMs.toFixed(1)} ms with json_max_members 200000, ${unguarded.stallMs.toFixed(1)} ms without (answers: ${unguarded.answers[0]})`);
    assert.deepEqual(guarded.answers, Array.from({ length: FLOOD }, () => '400 invalid_request invalid_request'));
    assert.ok(guarded.stallMs < STALL_BOUND_MS, `the node's event loop stalled ${guarded.stallMs.toFixed(1)} ms`);
  });
});
