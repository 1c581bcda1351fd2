/**
 * A config reload mid-period through a real node over HTTP (in-process gateway and admin server on
 * 127.0.0.1, fake clock for the limits, a real simulator): `POST /admin/v1/config/reload` re-reads
 * the file that raises a tenant's month budget from $0.01 to $0.02 and doubles a model's output
 * price. The spend so far is kept; the raised budget gives exactly the new room (requests are
 * admitted until settled spend + the next reservation at the new prices would pass $0.02); a
 * request in flight during the reload was reserved at the old prices and is settled at them; only
 * requests that start after it pay the new ones.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { stringify } from 'yaml';
import { ManualClock } from '../../src/clock.ts';
import { loadConfig } from '../../src/config/load.ts';
import { ReloadableConfig } from '../../src/config/reloadable.ts';
import { buildGateway, registerNodeAdmin } from '../../src/gateway/server.ts';
import { buildAdminServer } from '../../src/ops/admin-server.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { simStats } from '../helpers/processes.ts';

const KEY = 'key-reload-0000';
const ADMIN_TOKEN = 'admin-token-budget-reload-0123';
const ENV = { SIM_KEY: 'sim-key-reload' };
const messages = [{ role: 'user', content: 'what does it cost now?' }];
const PROMPT = countOpenAIChat({ messages }, exactCounter('o200k_base'));
/** Each request: max_tokens 600 reserved, 500 produced. */
const MAX = 600;
const OUT = 500;

/** The config file's content: a month budget of `usd` dollars, the model's output at `output` USD per million tokens (input 1). */
function configText(simUrl: string, usd: string, output: number): string {
  return stringify({
    server: { log_level: 'silent' },
    tenants: [{ id: 'acme', keys: [KEY], limits: [{ usd, period: 'month', time_zone: 'Europe/Paris' }] }],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'], prices: { input: 1, output } }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-output-tokens', 'x-sim-ttft-ms'] }],
  });
}

describe('a config reload mid-period (real HTTP, admin reload)', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let admin: FastifyInstance;
  let url = '';
  let adminUrl = '';
  let file = '';

  before(async () => {
    sim = await startSimulator({ port: 0 });
    file = join(mkdtempSync(join(tmpdir(), 'quotaring-budget-reload-')), 'quotaring.yaml');
    writeFileSync(file, configText(sim.url, '0.01', 4));
    const config = new ReloadableConfig(loadConfig(file, ENV), ENV);
    // The 18th of the month, Paris time: the month budget is mid-period all along.
    app = buildGateway({ config, clock: new ManualClock(Date.parse('2025-10-18T09:00:00Z')), logger: false });
    admin = buildAdminServer(ADMIN_TOKEN, app.log);
    registerNodeAdmin(app, admin, async () => ({ handedOff: 0, ring: '' }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    await admin.listen({ host: '127.0.0.1', port: 0 });
    const port = (s: FastifyInstance): number => {
      const a = s.server.address();
      return typeof a === 'object' && a !== null ? a.port : 0;
    };
    url = `http://127.0.0.1:${port(app)}`;
    adminUrl = `http://127.0.0.1:${port(admin)}`;
  });
  after(async () => {
    await admin.close();
    const closing = app.close();
    app.server.closeAllConnections();
    await closing;
    await sim.close();
  });

  /** The month budget from the admin API: limit and spent in micro-dollars. */
  async function budget(): Promise<{ limit: number; spent: number; usd: { limit: string; spent: string; remaining: string } }> {
    const res = await request(`${adminUrl}/admin/v1/tenants/acme`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const body = (await res.body.json()) as { limits: { name: string; limit: number; used: number; usd: { limit: string; spent: string; remaining: string } }[] };
    assert.equal(res.statusCode, 200, JSON.stringify(body));
    const l = body.limits.find((x) => x.name === 'cost/month');
    assert.ok(l !== undefined, JSON.stringify(body.limits));
    return { limit: l.limit, spent: l.used, usd: l.usd };
  }

  async function chat(extra: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: { usage?: { prompt_tokens: number; completion_tokens: number }; error?: { code: string; message: string } } }> {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-sim-output-tokens': String(OUT), ...extra },
      body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: MAX, messages }),
    });
    return { status: res.statusCode, headers: res.headers, body: (await res.body.json()) as never };
  }

  async function reload(): Promise<void> {
    const res = await request(`${adminUrl}/admin/v1/config/reload`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const body = (await res.body.json()) as { ok: boolean; tenantsChanged: string[]; modelsChanged: boolean };
    assert.equal(res.statusCode, 200, JSON.stringify(body));
    assert.deepEqual([body.ok, body.tenantsChanged, body.modelsChanged], [true, ['acme'], true]);
  }

  test('spend kept, exactly the new room, new prices only for requests that start after the reload', async () => {
    assert.deepEqual(await budget(), { limit: 10_000, spent: 0, usd: { limit: '0.010000', spent: '0.000000', remaining: '0.010000' } });
    // At the old prices: reserve prompt + 600 × 4 µ$, settle prompt + 500 × 4 µ$.
    const oldReservation = PROMPT + MAX * 4;
    const oldCost = PROMPT + OUT * 4;
    // As many as leave room for exactly one more at the old prices.
    const k = Math.floor((10_000 - 2 * oldReservation) / oldCost) + 1;
    let spent = 0;
    for (let i = 0; i < k; i++) {
      const res = await chat();
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.deepEqual([res.body.usage?.prompt_tokens, res.body.usage?.completion_tokens], [PROMPT, OUT]);
      spent += oldCost;
    }
    assert.equal((await budget()).spent, spent);
    assert.ok(spent + oldReservation <= 10_000 && spent + 2 * oldReservation > 10_000);

    // That one, held upstream (its first byte in 8 s) while the config is reloaded.
    const inFlight = chat({ 'x-sim-ttft-ms': '8000' });
    const deadline = Date.now() + 20_000;
    while ((await simStats(sim.url)).inFlight === 0 && Date.now() < deadline) await sleep(20);
    assert.equal((await simStats(sim.url)).inFlight, 1);
    assert.equal((await budget()).spent, spent + oldReservation);
    // Its reservation counts: the $0.01 budget has no room for another.
    const refused = await chat();
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.equal(refused.body.error?.code, 'budget_exceeded');

    writeFileSync(file, configText(sim.url, '0.02', 8));
    await reload();
    assert.equal((await simStats(sim.url)).inFlight, 1, 'the request was still upstream when the reload was applied');
    // The spend is kept through the reload (the reservation in flight included); the budget is $0.02.
    const kept = spent + oldReservation;
    assert.deepEqual(await budget(), { limit: 20_000, spent: kept, usd: { limit: '0.020000', spent: `0.${String(kept).padStart(6, '0')}`, remaining: `0.${String(20_000 - kept).padStart(6, '0')}` } });

    // The request admitted before the reload is settled at the prices it was admitted at.
    const held = await inFlight;
    assert.equal(held.status, 200, JSON.stringify(held.body));
    assert.deepEqual([held.body.usage?.prompt_tokens, held.body.usage?.completion_tokens], [PROMPT, OUT]);
    spent += oldCost;
    assert.equal((await budget()).spent, spent);

    // Later requests: reserve prompt + 600 × 8 µ$, settle prompt + 500 × 8 µ$, admitted while
    // settled spend + the next reservation ≤ $0.02, the first that would pass it refused.
    const newReservation = PROMPT + MAX * 8;
    const newCost = PROMPT + OUT * 8;
    const expected = Math.floor((20_000 - newReservation - spent) / newCost) + 1;
    assert.ok(expected >= 2, `expected ${expected}`);
    for (let i = 0; ; i++) {
      const res = await chat();
      if (spent + newReservation > 20_000) {
        assert.equal(res.status, 429, JSON.stringify(res.body));
        assert.equal(res.headers['x-quotaring-error'], 'budget_exceeded');
        assert.equal(res.body.error?.code, 'budget_exceeded');
        assert.equal(i, expected);
        break;
      }
      assert.equal(res.status, 200, `request ${i}: ${JSON.stringify(res.body)}`);
      assert.equal(res.headers['x-quotaring-budget-limit-usd'], '0.020000');
      assert.equal(res.headers['x-quotaring-budget-remaining-usd'], `0.${String(20_000 - spent - newReservation).padStart(6, '0')}`);
      spent += newCost;
      assert.equal((await budget()).spent, spent);
    }
  });
});
