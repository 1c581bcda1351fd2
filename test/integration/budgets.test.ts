/**
 * Cost limits through the gateway (fastify.inject, fake clock) in front of a real simulator: exact
 * micro-dollar counters after reservation and after settlement (JSON, stream, cached input and
 * reasoning priced per the table, failover to a deployment with other prices), a key's budget
 * refusing exactly when settled spend plus the next reservation passes it, and a month budget kept
 * through a restart (the node's state file).
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway, nodeLocalState, registerNodeAdmin } from '../../src/gateway/server.ts';
import { buildAdminServer } from '../../src/ops/admin-server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { freePort } from '../helpers/processes.ts';

const KEY = 'key-acme-00000';
const CI_KEY = 'key-acme-ci-000';
/** 2025-03-10 (New York is on daylight time since 03-09), 23:30 UTC: the key's 1d window renews in 30 min. */
const T0 = Date.parse('2025-03-10T23:30:00Z');
/** Prices in USD per million tokens, chosen so that every cost is whole micro-dollars: input 1 µ$/token, cached 0.5, output 4, reasoning 8. */
const PRICES = { input: 1, cached_input: 0.5, output: 4, reasoning: 8 };

function config(simUrl: string, deadUrl: string) {
  return buildConfig(
    {
      server: { log_level: 'silent' },
      tenants: [
        {
          id: 'acme',
          keys: [KEY, { key: CI_KEY, id: 'ci', limits: [{ usd: 0.01, window: '1d' }] }],
          limits: [{ usd: 1, period: 'month', time_zone: 'America/New_York' }, { tokens: 1_000_000, window: '1m' }],
        },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: PRICES },
        { name: 'gpt-fo', encoding: 'o200k_base', estimator: 'exact', deployments: ['dead', 'sim-dear'], prices: PRICES },
      ],
      deployments: [
        { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens', 'x-sim-reasoning-tokens'] },
        { name: 'dead', provider: 'openai', base_url: deadUrl, api_key_env: 'SIM_KEY', headers_timeout: '2s' },
        { name: 'sim-dear', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'], prices: { input: 2, output: 8 } },
      ],
    },
    'budgets.yaml',
    { SIM_KEY: 'sim-key' },
  );
}

const headers = (key = KEY, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json', ...extra });
const messages = [{ role: 'user', content: 'how much does this cost?' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));

const ADMIN_TOKEN = 'admin-token-budgets-0123456789';
const admins = new WeakMap<FastifyInstance, FastifyInstance>();

/** The month budget's and the key's budget's remaining micro-dollars, from the node's admin API (`GET /admin/v1/tenants/acme`). */
async function remaining(app: FastifyInstance): Promise<{ month: number; ci: number }> {
  let admin = admins.get(app);
  if (admin === undefined) {
    admin = buildAdminServer(ADMIN_TOKEN, app.log);
    registerNodeAdmin(app, admin, async () => ({ handedOff: 0, ring: '' }));
    await admin.ready();
    admins.set(app, admin);
  }
  const res = await admin.inject({ method: 'GET', url: '/admin/v1/tenants/acme', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  assert.equal(res.statusCode, 200, res.body);
  const limits = (res.json() as { limits: { name: string; remaining: number; usd?: unknown }[] }).limits;
  const month = limits.find((l) => l.name === 'cost/month');
  const ci = limits.find((l) => l.name === 'cost/1d#ci');
  assert.ok(month !== undefined && ci !== undefined && month.usd !== undefined, JSON.stringify(limits));
  return { month: month.remaining, ci: ci.remaining };
}

describe('cost limits through the gateway', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  let clock: ManualClock;
  const stateDir = mkdtempSync(join(tmpdir(), 'quotaring-budgets-'));
  let deadUrl: string;
  before(async () => {
    sim = await startSimulator({ port: 0 });
    deadUrl = `http://127.0.0.1:${await freePort()}`;
    clock = new ManualClock(T0);
    app = buildGateway({ config: config(sim.url, deadUrl), clock, logger: false, stateDir });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('JSON: reserved prompt × input + max_tokens × output, then settled on the reported usage', async () => {
    const before = await remaining(app);
    assert.deepEqual(before, { month: 1_000_000, ci: 10_000 });
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY, { 'x-sim-output-tokens': '7' }), payload: { model: 'gpt-4o-mini', max_tokens: 50, messages } });
    assert.equal(res.statusCode, 200, res.body);
    // The reserved output at the dearer of the output and reasoning prices (it may all be reasoning).
    const reserved = PROMPT * 1 + 50 * 8;
    assert.equal(res.headers['x-quotaring-budget'], 'cost/month');
    assert.equal(res.headers['x-quotaring-budget-limit-usd'], '1.000000');
    assert.equal(res.headers['x-quotaring-budget-remaining-usd'], `0.${String(1_000_000 - reserved).padStart(6, '0')}`);
    assert.equal(res.headers['x-quotaring-budget-reset'], '2025-04-01T04:00:00Z');
    const usage = (res.json() as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    assert.equal(usage.completion_tokens, 7);
    assert.deepEqual(await remaining(app), { month: 1_000_000 - (usage.prompt_tokens * 1 + 7 * 4), ci: 10_000 });
  });

  test('a stream settles on its usage chunk', async () => {
    const before = await remaining(app);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY, { 'x-sim-output-tokens': '5' }), payload: { model: 'gpt-4o-mini', max_tokens: 50, stream: true, stream_options: { include_usage: true }, messages } });
    assert.equal(res.statusCode, 200);
    const chunk = res.body.split('\n').filter((l) => l.startsWith('data: {') && l.includes('"usage":{')).at(-1) ?? '';
    const usage = (JSON.parse(chunk.slice(6)) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    assert.equal(usage.completion_tokens, 5);
    assert.deepEqual(await remaining(app), { month: before.month - (usage.prompt_tokens + 5 * 4), ci: 10_000 });
  });

  test('Responses: reasoning at its price; cached input (a long previous_response_id) at the cached price', async () => {
    let before = await remaining(app);
    const first = await app.inject({ method: 'POST', url: '/v1/responses', headers: headers(KEY, { 'x-sim-output-tokens': '1100', 'x-sim-reasoning-tokens': '10' }), payload: { model: 'gpt-4o-mini', max_output_tokens: 1200, input: 'write a long answer' } });
    assert.equal(first.statusCode, 200, first.body);
    const u1 = (first.json() as { id: string; usage: { input_tokens: number; output_tokens: number; output_tokens_details: { reasoning_tokens: number } } }).usage;
    assert.equal(u1.output_tokens_details.reasoning_tokens, 10);
    assert.equal(u1.output_tokens, 1110);
    assert.deepEqual(await remaining(app), { month: before.month - (u1.input_tokens * 1 + 1100 * 4 + 10 * 8), ci: 10_000 });

    before = await remaining(app);
    const second = await app.inject({ method: 'POST', url: '/v1/responses', headers: headers(KEY, { 'x-sim-output-tokens': '3' }), payload: { model: 'gpt-4o-mini', max_output_tokens: 16, input: 'and now?', previous_response_id: (first.json() as { id: string }).id } });
    assert.equal(second.statusCode, 200, second.body);
    const u2 = (second.json() as { usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number } }).usage;
    assert.ok(u2.input_tokens_details.cached_tokens >= 1024, JSON.stringify(u2));
    const cached = u2.input_tokens_details.cached_tokens;
    assert.deepEqual(await remaining(app), { month: before.month - ((u2.input_tokens - cached) * 1 + cached * 0.5 + 3 * 4), ci: 10_000 });
  });

  test('failover to a deployment with other prices: reserved at the model\'s, settled at the serving deployment\'s', async () => {
    const before = await remaining(app);
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY, { 'x-sim-output-tokens': '4' }), payload: { model: 'gpt-fo', max_tokens: 20, messages } });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers['x-quotaring-deployment'], 'sim-dear');
    assert.equal(res.headers['x-quotaring-budget-remaining-usd'], `0.${String(before.month - (PROMPT + 20 * 8)).padStart(6, '0')}`);
    const usage = (res.json() as { usage: { prompt_tokens: number } }).usage;
    assert.deepEqual(await remaining(app), { month: before.month - (usage.prompt_tokens * 2 + 4 * 8), ci: 10_000 });
  });

  test('a key\'s $0.01 budget refuses exactly when its settled spend plus the next reservation passes it', async () => {
    const month = (await remaining(app)).month;
    // Each request reserves PROMPT + 600 × 8 µ$ and settles at prompt + 500 × 4 µ$.
    const reservation = PROMPT + 600 * 8;
    let spent = 0;
    let admitted = 0;
    for (let i = 0; i < 100; i++) {
      const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(CI_KEY, { 'x-sim-output-tokens': '500' }), payload: { model: 'gpt-4o-mini', max_tokens: 600, messages } });
      if (spent + reservation > 10_000) {
        assert.equal(res.statusCode, 429, res.body);
        assert.equal(res.headers['x-quotaring-error'], 'budget_exceeded');
        const error = (res.json() as { error: { code: string; type: string; message: string } }).error;
        assert.equal(error.code, 'budget_exceeded');
        assert.equal(error.type, 'insufficient_quota');
        assert.equal(error.message, `Budget cost/1d#ci of key ci of tenant acme is spent: $0.${String(spent).padStart(6, '0')} of $0.010000 used (requests in flight included) and it may cost up to $0.${String(reservation).padStart(6, '0')} (prompt ${PROMPT} + max output 600 tokens at gpt-4o-mini prices). It renews at 2025-03-11T00:00:00Z.`);
        // Renews within the hour: retry-after names it.
        assert.equal(res.headers['retry-after'], '1800');
        assert.equal(res.headers['x-quotaring-budget'], 'cost/1d#ci');
        break;
      }
      assert.equal(res.statusCode, 200, `request ${i}: ${res.body}`);
      spent += (res.json() as { usage: { prompt_tokens: number } }).usage.prompt_tokens + 500 * 4;
      admitted++;
      assert.deepEqual(await remaining(app), { month: month - spent, ci: 10_000 - spent });
    }
    assert.equal(admitted, Math.floor((10_000 - reservation) / (PROMPT + 2_000)) + 1);
    assert.equal(admitted, 3);
    // The tenant's other key is not limited by the key's budget.
    const other = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY), payload: { model: 'gpt-4o-mini', max_tokens: 5, messages } });
    assert.equal(other.statusCode, 200);
    // Half an hour later the day's window renews.
    clock.advance(30 * 60_000);
    assert.equal((await remaining(app)).ci, 10_000);
  });

  test('a month budget survives a restart (state file) and renews at the month boundary in its time zone', async () => {
    const kept = await remaining(app);
    assert.ok(kept.month < 1_000_000);
    await nodeLocalState(app)?.save();
    const restarted = buildGateway({ config: config(sim.url, deadUrl), clock, logger: false, stateDir });
    await restarted.ready();
    try {
      await nodeLocalState(restarted)?.restore();
      assert.equal((await remaining(restarted)).month, kept.month);
      clock.set(Date.parse('2025-04-01T03:59:59Z'));
      assert.equal((await remaining(restarted)).month, kept.month);
      clock.set(Date.parse('2025-04-01T04:00:00Z'));
      assert.equal((await remaining(restarted)).month, 1_000_000);
    } finally {
      await restarted.close();
    }
  });
});

describe('a budget that renews beyond the hour', () => {
  test('429 budget_exceeded with x-should-retry: false and no retry-after; the Anthropic shape on /v1/messages', async () => {
    const sim = await startSimulator({ port: 0 });
    const loaded = buildConfig(
      {
        server: { log_level: 'silent' },
        tenants: [{ id: 'tiny', keys: [KEY], limits: [{ usd: '0.0006', period: 'month', time_zone: 'America/New_York' }] }],
        models: [
          { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: PRICES },
          { name: 'claude-test', encoding: 'none', deployments: ['sim-anthropic'], prices: PRICES },
        ],
        deployments: [
          { name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] },
          { name: 'sim-anthropic', provider: 'anthropic', base_url: sim.url, api_key_env: 'SIM_KEY' },
        ],
      },
      'tiny.yaml',
      { SIM_KEY: 'sim-key' },
    );
    const app = buildGateway({ config: loaded, clock: new ManualClock(T0), logger: false });
    try {
      const first = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(KEY, { 'x-sim-output-tokens': '7' }), payload: { model: 'gpt-4o-mini', max_tokens: 50, messages } });
      assert.equal(first.statusCode, 200, first.body);
      // The largest reservation the $0.0006 budget could take alone: refused only because of what was spent.
      const maxTokens = Math.floor((600 - PROMPT) / 8);
      const second = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(), payload: { model: 'gpt-4o-mini', max_tokens: maxTokens, messages } });
      assert.equal(second.statusCode, 429, second.body);
      assert.equal(second.headers['x-quotaring-error'], 'budget_exceeded');
      assert.equal(second.headers['x-should-retry'], 'false');
      assert.equal(second.headers['retry-after'], undefined);
      assert.equal(second.headers['x-quotaring-budget-reset'], '2025-04-01T04:00:00Z');
      assert.match((second.json() as { error: { message: string } }).error.message, /It renews at 2025-04-01T04:00:00Z\.$/);
      // One more output token than the budget holds can never pass: request_too_large.
      const huge = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(), payload: { model: 'gpt-4o-mini', max_tokens: maxTokens + 1, messages } });
      assert.equal(huge.headers['x-quotaring-error'], 'request_too_large');
      const anthropic = await app.inject({ method: 'POST', url: '/v1/messages', headers: headers(), payload: { model: 'claude-test', max_tokens: maxTokens - 3, messages } });
      assert.equal(anthropic.statusCode, 429, anthropic.body);
      assert.equal((anthropic.json() as { type: string; error: { type: string } }).error.type, 'rate_limit_error');
      assert.equal(anthropic.headers['x-quotaring-error'], 'budget_exceeded');
    } finally {
      await app.close();
      await sim.close();
    }
  });
});
