/**
 * Provider feedback with real components: `lua/feedback-lower.lua` on a real redis-server (never
 * raises, clamps, at most `allowance` per 60 s), the simulator's rate-limit headers and its outside
 * client read through the official `openai` client, and the gateway in-process (real clock: the
 * buckets refill by Redis TIME) in front of the simulator with an outside client spending 30% of the
 * key's quota — with feedback the provider answers quotaring no 429 after the first window, without
 * it it does — and in front of a hostile upstream that reports 0 left on every reply, which costs the
 * deployment exactly `max_outside × capacity` units in the window and no more.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { request } from 'undici';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { defineFeedbackScript, loadFeedbackScript } from '../../src/globalcap/feedback-script.ts';
import { capKey, feedbackLogKey } from '../../src/globalcap/keys.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { readProviderRateLimits } from '../../src/providers/rate-limit-read.ts';
import { luaScriptPath } from '../../src/redis/lua-scripts.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { simStats } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const KEY = 'key-feed-00000';
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

let redis: RunningRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

/** Sum of the units a lowering log holds (every second of it). */
async function loggedUnits(logKey: string): Promise<number> {
  const log = await redis.client().hgetall(logKey);
  return Object.values(log).reduce((sum, v) => sum + Number(v), 0);
}

/** Redis TIME in ms. */
async function redisNow(): Promise<number> {
  const [s, us] = await redis.client().time();
  return Number(s) * 1000 + Number(us) / 1000;
}

describe('feedback-lower.lua on a real Redis', () => {
  beforeEach(async () => {
    await redis.flush();
  });

  test('lowers toward the target, never raises, clamps, and lowers at most the allowance in 60 s', async () => {
    const lua = readFileSync(luaScriptPath('feedback-lower.lua'), 'utf8');
    assert.ok(lua.startsWith('--[[\nfeedback-lower.lua:'), 'the script starts with its header');
    for (const part of ['KEYS[1]', 'KEYS[2]', 'ARGV[5]', 'Reply:', 'Clock:']) assert.ok(lua.includes(part), `its header names ${part}`);
    const sha = await loadFeedbackScript(redis.client());
    assert.deepEqual(await redis.client().script('EXISTS', sha), [1]);
    const lower = defineFeedbackScript(redis.client());
    const key = capKey('fb', 'deployment:d:rpm');
    const log = feedbackLogKey('fb', 'deployment:d:rpm');
    const o = { capacity: 600, ratePerSec: 0.001, allowance: 300, ttlMs: 60_000 };
    // A fresh bucket is full: lowering to 500 takes 100.
    assert.deepEqual(await lower(key, log, { ...o, target: 500 }), { lowered: 100, capped: false, level: 500, used: 100 });
    // A target above the level (or above capacity) never raises it.
    assert.deepEqual(await lower(key, log, { ...o, target: 550 }), { lowered: 0, capped: false, level: 500, used: 100 });
    assert.deepEqual(await lower(key, log, { ...o, target: 1e12 }), { lowered: 0, capped: false, level: 500, used: 100 });
    // A negative target is 0; the allowance stops it at 300 in all.
    assert.deepEqual(await lower(key, log, { ...o, target: -1e12 }), { lowered: 200, capped: true, level: 300, used: 300 });
    assert.deepEqual(await lower(key, log, { ...o, target: 0 }), { lowered: 0, capped: true, level: 300, used: 300 });
    assert.equal(await loggedUnits(log), 300);
    const ttl = await redis.client().pttl(log);
    assert.ok(ttl > 60_000 && ttl <= 61_000, `the log expires 61 s after its last write: ${ttl}`);
    // A corrupt bucket is left alone; a corrupt log entry counts as the whole allowance.
    await redis.client().hset(key, 'l', 'junk');
    assert.deepEqual(await lower(key, log, { ...o, target: 0 }), { lowered: 0, capped: false, level: 0, used: 0 });
    await redis.client().hset(key, 'l', '600', 't', String(await redisNow()));
    await redis.client().del(log);
    await redis.client().hset(log, String(Math.floor((await redisNow()) / 1000)), 'junk');
    assert.deepEqual(await lower(key, log, { ...o, target: 0 }), { lowered: 0, capped: true, level: 600, used: 300 });
    // Seconds older than 61 are dropped and no longer count.
    await redis.client().del(log);
    await redis.client().hset(log, String(Math.floor((await redisNow()) / 1000) - 61), '300');
    assert.deepEqual(await lower(key, log, { ...o, target: 590 }), { lowered: 10, capped: false, level: 590, used: 10 });
    // Bad options are refused before any call.
    await assert.rejects(lower(key, log, { ...o, target: Number.NaN }), RangeError);
    await assert.rejects(lower(key, log, { ...o, allowance: -1, target: 0 }), RangeError);
  });
});

describe('the simulator reports its quota, outside usage included, in headers the openai client reads', () => {
  test('x-ratelimit-* through openai withResponse(); an outside client spends its fraction', async () => {
    const clock = new ManualClock(Date.parse('2026-12-01T10:00:00Z'));
    const sim = await startSimulator({ port: 0, clock, quota: { tpm: 60_000, rpm: 1_000 } });
    try {
      const client = new OpenAI({ apiKey: 'sim-key', baseURL: `${sim.url}/v1`, maxRetries: 0 });
      const ask = async () => {
        const { response } = await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] }).withResponse();
        return readProviderRateLimits(Object.fromEntries(response.headers.entries()), clock.now());
      };
      const first = await ask();
      assert.equal(first.tokens?.limit, 60_000);
      assert.equal(first.requests?.remaining, 999);
      const cost = 60_000 - (first.tokens?.remaining ?? 0);
      assert.ok(cost > 5 && cost < 30, `prompt + max_tokens: ${cost}`);
      assert.equal(first.tokens?.resetMs, cost, 'reset: the time to refill what is used, at 1,000 tokens/s');
      // An outside client of the same key at 0.5: 500 requests and 30,000 tokens a minute, one
      // request of 60 tokens every 120 ms, the first at once.
      const set = await request(`${sim.url}/sim/outside`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: 'sim-key', fraction: 0.5 }) });
      assert.equal(set.statusCode, 200);
      await set.body.dump();
      const second = await ask();
      assert.equal(second.requests?.remaining, 997);
      assert.equal(second.tokens?.remaining, 60_000 - 2 * cost - 60);
      // 1.2 s later: 10 more outside requests (600 tokens) reach the quota before ours; the refill
      // (1,200 tokens, 20 requests) fills both buckets first.
      clock.advance(1_200);
      const third = await ask();
      assert.equal(third.tokens?.remaining, 60_000 - 600 - cost);
      assert.equal(third.requests?.remaining, 1_000 - 10 - 1);
      const outside = (await (await request(`${sim.url}/sim/outside`)).body.json()) as { requests: number; tokens: number; rateLimited: number };
      assert.deepEqual([outside.requests, outside.tokens, outside.rateLimited], [11, 660, 0]);
      const bad = await request(`${sim.url}/sim/outside`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: 'sim-key', fraction: 2 }) });
      assert.equal(bad.statusCode, 400);
      await bad.body.dump();
    } finally {
      await sim.close();
    }
  });
});

/** Sends chat requests from `workers` loops until `until` (ms, Date.now()), waiting out each 429's retry-after (at most 250 ms). */
async function load(app: FastifyInstance, workers: number, until: number, onReply?: (status: number) => void): Promise<void> {
  const payload = { model: 'gpt-4o-mini', max_tokens: 100, messages: [{ role: 'user', content: 'hello' }] };
  const loop = async (): Promise<void> => {
    while (Date.now() < until) {
      const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload });
      onReply?.(res.statusCode);
      if (res.statusCode === 429) {
        const wait = Math.min(250, Math.max(5, Number(res.headers['retry-after-ms'] ?? 100)));
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  };
  await Promise.all(Array.from({ length: workers }, loop));
}

function gatewayConfig(cluster: string, baseUrl: string, quota: Record<string, unknown>, headroom: number): ReturnType<typeof buildConfig> {
  return buildConfig(
    {
      server: { log_level: 'silent' },
      cluster: { name: cluster, redis: { url: redis.url } },
      tenants: [{ id: 'a', keys: [KEY], limits: [] }],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: baseUrl, api_key_env: 'SIM_KEY', quota, headroom, max_retry_wait: 0 }],
    },
    'test.yaml',
    { SIM_KEY: 'sim-key' },
  );
}

describe('an outside client spends 30% of the provider quota on the same key', () => {
  test('with feedback the provider answers quotaring no 429 after one window; without it, it does', async (t) => {
    // 60,000 TPM at the provider and in the config (headroom 0.9: the cluster bucket holds 54,000);
    // the outside client takes 18,000 a minute. Both runs at once, each with its own simulator.
    const WINDOW_MS = 60_000;
    const AFTER_MS = 15_000;
    const runs = await Promise.all(
      ([true, false] as const).map(async (feedback) => {
        const sim = await startSimulator({ port: 0, quota: { tpm: 60_000 }, outside: { key: 'sim-key', fraction: 0.3 } });
        const app = buildGateway({ config: gatewayConfig(`outside-${feedback}`, sim.url, { tpm: 60_000, feedback }, 0.9), logger: false });
        await app.ready();
        return { feedback, sim, app };
      }),
    );
    try {
      const start = Date.now();
      const counts = await Promise.all(
        runs.map(async ({ sim, app }) => {
          await load(app, 4, start + WINDOW_MS);
          const inWindow = (await simStats(sim.url)).byKey['sim-key']?.rateLimited ?? 0;
          await load(app, 4, start + WINDOW_MS + AFTER_MS);
          const all = (await simStats(sim.url)).byKey['sim-key']?.rateLimited ?? 0;
          const outside = (await (await request(`${sim.url}/sim/outside`)).body.json()) as { tokens: number; rateLimited: number };
          return { inWindow, after: all - inWindow, outside };
        }),
      );
      const [on, off] = counts as [(typeof counts)[number], (typeof counts)[number]];
      t.diagnostic(`feedback on: ${on.inWindow} provider 429s to quotaring in the first window, ${on.after} after; outside spent ${on.outside.tokens} tokens (${on.outside.rateLimited} refused)`);
      t.diagnostic(`feedback off: ${off.inWindow} in the first window, ${off.after} after; outside spent ${off.outside.tokens} tokens (${off.outside.rateLimited} refused)`);
      const metrics = await runs[0]?.app.inject({ method: 'GET', url: '/metrics' });
      const lowered = /quotaring_provider_feedback_total\{deployment="sim",kind="tokens",result="lowered"\} (\d+)/.exec(metrics?.body ?? '');
      t.diagnostic(`lowered: ${lowered?.[1]}`);
      // The simulator counts the outside client's refusals apart (not in byKey).
      assert.equal(on.after, 0, 'with feedback: no provider 429 to quotaring after the first window');
      assert.ok(off.inWindow + off.after > 0, 'without feedback the provider answers 429s');
      assert.ok(Number(lowered?.[1] ?? 0) > 0, 'the feedback lowered the bucket');
    } finally {
      for (const r of runs) {
        await r.app.close();
        await r.sim.close();
      }
    }
  });
});

describe('a hostile upstream reports 0 left on every reply', () => {
  let upstream: Server;
  let served = 0;
  before(async () => {
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        served++;
        res.writeHead(200, { 'content-type': 'application/json', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-requests': '6m0s' });
        res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 8, completion_tokens: 2, total_tokens: 10 } }));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  });
  after(async () => {
    await new Promise((resolve) => upstream.close(resolve));
  });

  test('it costs the deployment exactly max_outside × capacity units in the window, and no more', async (t) => {
    await redis.flush();
    // 600 rpm at headroom 1: a bucket of 600 refilled 10 a second; max_outside 0.5: 300 at most.
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const app = buildGateway({ config: gatewayConfig('hostile', url, { rpm: 600, feedback: { max_outside: 0.5 } }, 1), logger: false });
    await app.ready();
    const bucket = capKey('hostile', 'deployment:sim:rpm');
    let ok = 0;
    const t0 = await redisNow();
    const startedAt = Date.now();
    let firstAt: number | undefined;
    try {
      await load(app, 2, Date.now() + 4_000, (status) => {
        if (status === 200) ok++;
        firstAt ??= Date.now();
      });
    } finally {
      await app.close(); // gives the node's unspent lease back to Redis
    }
    const t1 = await redisNow();
    const [l, at] = await redis.client().hmget(bucket, 'l', 't');
    const levelEnd = l === null ? 600 : Math.min(600, Number(l) + ((t1 - Number(at)) * 10) / 1000);
    const lowered = await loggedUnits(feedbackLogKey('hostile', 'deployment:sim:rpm'));
    assert.ok(Math.abs(lowered - 300) < 1e-6, `lowered in all: ${lowered}`);
    assert.equal(ok, served);
    // What the bucket gave out: 600 + the refill since it was created (after t0, within the first
    // request), less the 300 lowered and what it holds now. Nothing else was lost or gained.
    const expected = 600 + ((t1 - t0) * 10) / 1000 - 300 - levelEnd;
    // The bucket is created by the first lease, at most by the first reply: the refill before it never was.
    const beforeFirst = (((firstAt ?? startedAt) - startedAt) * 10) / 1000;
    t.diagnostic(`admitted ${ok} in ${Math.round(t1 - t0)} ms; the bucket gave out ${expected.toFixed(2)} (lowered ${lowered}, holds ${levelEnd.toFixed(2)})`);
    assert.ok(ok <= expected + 1e-6, `admitted ${ok}, at most ${expected}`);
    assert.ok(ok >= expected - beforeFirst - 1, `admitted ${ok}, at least ${expected} less the refill before the first lease (${beforeFirst})`);
  });
});
