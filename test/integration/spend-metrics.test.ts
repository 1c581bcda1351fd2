/**
 * Spend in Prometheus (issue 17): a node (buildGateway, fake clock) in front of a real simulator.
 * `quotaring_tenant_spend_usd_total` adds each settled request's exact cost (JSON, stream, failover
 * to a deployment with other prices), with a `key` label only for a key with its own budget;
 * `quotaring_tenant_limit` and `quotaring_tenant_remaining` give each budget's size and what is left,
 * and limit − remaining equals the counted spend; a tenant without `metrics: true` exports none of
 * them; every series the dashboard's Spend panels query is exported.
 *
 * Prices are whole micro-dollars per token (input 1 µ$, output 4 µ$, reasoning 8 µ$; the failover
 * deployment input 2, output 8), so each cost is exact: (prompt × in + output × out) µ$.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ManualClock } from '../../src/clock.ts';
import { buildConfig } from '../../src/config/load.ts';
import { buildGateway } from '../../src/gateway/server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { freePort } from '../helpers/processes.ts';

const KEY = 'key-acme-00000';
const CI_KEY = 'key-acme-ci-000';
const QUIET_KEY = 'key-quiet-0000';
const PRICES = { input: 1, output: 4, reasoning: 8 };
const DASHBOARD = new URL('../../deploy/grafana/dashboards/quotaring.json', import.meta.url);

function config(simUrl: string, deadUrl: string) {
  return buildConfig(
    {
      server: { log_level: 'silent' },
      tenants: [
        {
          id: 'acme',
          metrics: true,
          keys: [KEY, { key: CI_KEY, id: 'ci', limits: [{ usd: 0.01, window: '1d' }] }],
          limits: [{ usd: 1, period: 'month', time_zone: 'UTC' }, { requests: 100, window: '1m' }],
        },
        { id: 'quiet', keys: [QUIET_KEY], limits: [{ usd: 1, period: 'month' }] },
      ],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: PRICES },
        { name: 'gpt-fo', encoding: 'o200k_base', estimator: 'exact', deployments: ['dead', 'sim-dear'], prices: PRICES },
      ],
      deployments: [
        { name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'] },
        { name: 'dead', provider: 'openai', base_url: deadUrl, api_key_env: 'SIM_KEY', headers_timeout: '2s' },
        { name: 'sim-dear', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens'], prices: { input: 2, output: 8 } },
      ],
    },
    'spend-metrics.yaml',
    { SIM_KEY: 'sim-key' },
  );
}

const headers = (key: string, output: number) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim-output-tokens': String(output) });
const messages = [{ role: 'user', content: 'what does this cost?' }];

/** The value of the one series `name{labels}` (exactly those labels) in Prometheus text, or undefined. */
function series(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const m of text.matchAll(/^([a-z_]+)\{([^}]*)\} (\S+)$/gm)) {
    if (m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (JSON.stringify(Object.entries(got).sort()) === JSON.stringify(Object.entries(labels).sort())) return Number(m[3]);
  }
  return undefined;
}

describe('spend in Prometheus', () => {
  let sim: { url: string; close(): Promise<void> };
  let app: FastifyInstance;
  /** Micro-dollars settled so far per series: the tenant's (no key label), the ci key's. */
  const spent = { tenant: 0, ci: 0, dear: 0 };
  const scrape = async (): Promise<string> => (await app.inject({ method: 'GET', url: '/metrics' })).body;
  const chat = async (key: string, model: string, output: number, extra: Record<string, unknown> = {}) => {
    const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: headers(key, output), payload: { model, max_tokens: 50, messages, ...extra } });
    assert.equal(res.statusCode, 200, res.body);
    return res;
  };
  const promptOf = (body: string): number => (JSON.parse(body) as { usage: { prompt_tokens: number } }).usage.prompt_tokens;

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const deadUrl = `http://127.0.0.1:${await freePort()}`;
    app = buildGateway({ config: config(sim.url, deadUrl), clock: new ManualClock(Date.parse('2025-03-10T12:00:00Z')), logger: false });
    await app.ready();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('a JSON reply: the counter holds its exact cost in USD (prompt × $1/M + 7 × $4/M), labelled by tenant and model', async () => {
    assert.equal(series(await scrape(), 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-4o-mini' }), undefined);
    const res = await chat(KEY, 'gpt-4o-mini', 7);
    spent.tenant += promptOf(res.body) * 1 + 7 * 4;
    assert.equal(series(await scrape(), 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-4o-mini' }), spent.tenant / 1e6);
  });

  test('a stream adds the cost of its usage chunk', async () => {
    const res = await chat(KEY, 'gpt-4o-mini', 5, { stream: true, stream_options: { include_usage: true } });
    const chunk = res.body.split('\n').filter((l) => l.startsWith('data: {') && l.includes('"usage":{')).at(-1) ?? '';
    const usage = (JSON.parse(chunk.slice(6)) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    assert.equal(usage.completion_tokens, 5);
    spent.tenant += usage.prompt_tokens + 5 * 4;
    assert.equal(series(await scrape(), 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-4o-mini' }), spent.tenant / 1e6);
  });

  test('failover: counted at the prices of the deployment that served', async () => {
    const res = await chat(KEY, 'gpt-fo', 4);
    assert.equal(res.headers['x-quotaring-deployment'], 'sim-dear');
    spent.dear += promptOf(res.body) * 2 + 4 * 8;
    assert.equal(series(await scrape(), 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-fo' }), spent.dear / 1e6);
  });

  test('a key with its own budget has its own series (label key); the tenant\'s stays apart', async () => {
    const res = await chat(CI_KEY, 'gpt-4o-mini', 3);
    spent.ci += promptOf(res.body) + 3 * 4;
    const text = await scrape();
    assert.equal(series(text, 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-4o-mini', key: 'ci' }), spent.ci / 1e6);
    assert.equal(series(text, 'quotaring_tenant_spend_usd_total', { tenant: 'acme', model: 'gpt-4o-mini' }), spent.tenant / 1e6);
  });

  test('each budget\'s size and what is left (µ$): limit − remaining is the spend the counter shows', async () => {
    const text = await scrape();
    assert.equal(series(text, 'quotaring_tenant_limit', { tenant: 'acme', limit: 'cost/month' }), 1_000_000);
    assert.equal(series(text, 'quotaring_tenant_limit', { tenant: 'acme', limit: 'cost/1d#ci' }), 10_000);
    assert.equal(series(text, 'quotaring_tenant_limit', { tenant: 'acme', limit: 'requests/1m' }), 100);
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'acme', limit: 'cost/month' }), 1_000_000 - spent.tenant - spent.ci - spent.dear);
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'acme', limit: 'cost/1d#ci' }), 10_000 - spent.ci);
    assert.equal(series(text, 'quotaring_tenant_remaining', { tenant: 'acme', limit: 'requests/1m' }), 100 - 4);
  });

  test('a tenant without metrics: true exports no series at all', async () => {
    await chat(QUIET_KEY, 'gpt-4o-mini', 3);
    const text = await scrape();
    assert.doesNotMatch(text, /tenant="quiet"/);
    assert.match(text, /^quotaring_tenant_spend_usd_total\{tenant="acme"/m);
  });

  test('every series the dashboard\'s Spend row queries is exported for an opted-in tenant', async () => {
    const text = await scrape();
    const panels = (JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: { type: string; title: string; targets?: { expr: string }[] }[] }).panels;
    const row = panels.findIndex((p) => p.type === 'row' && p.title.startsWith('Spend'));
    assert.ok(row >= 0, 'no Spend row in the dashboard');
    const next = panels.findIndex((p, i) => i > row && p.type === 'row');
    const spendPanels = panels.slice(row + 1, next < 0 ? undefined : next);
    const names = new Set(spendPanels.flatMap((p) => (p.targets ?? []).flatMap((t) => [...t.expr.matchAll(/quotaring_[a-z0-9_]+/g)].map((m) => m[0]))));
    assert.deepEqual([...names].sort(), ['quotaring_tenant_limit', 'quotaring_tenant_remaining', 'quotaring_tenant_spend_usd_total']);
    for (const name of names) assert.match(text, new RegExp(`^${name}\\{tenant="acme"`, 'm'), name);
    // Their budget filter matches the budgets' series.
    for (const t of spendPanels.flatMap((p) => p.targets ?? [])) {
      for (const m of t.expr.matchAll(/limit=~"([^"]+)"/g)) assert.match('cost/month', new RegExp(`^(?:${m[1]})$`), t.expr);
    }
  });
});
