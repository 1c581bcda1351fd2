/**
 * End to end with the official Python SDKs (`openai`, `anthropic`, in the venv npm's pretest makes:
 * scripts/ensure-python-sdks.sh) through router → two static nodes → the simulator, real processes:
 * what a Python user hits first (issue 31) — `responses.cancel`, `responses.delete` (both sent with
 * `content-type: application/json` and an empty body), `responses.input_items.list`,
 * `moderations.create` — and streams read to their end then closed by the SDK (at `data: [DONE]`,
 * at `message_stop`), none of which the router may count as a client abort (499).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { request } from 'undici';
import type { Member } from '../../src/coord/types.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const run = promisify(execFile);
const PYTHON = process.env['QUOTARING_PYTHON_VENV'] === undefined ? fileURLToPath(new URL('../../.test-venv/bin/python', import.meta.url)) : `${process.env['QUOTARING_PYTHON_VENV']}/bin/python`;
const SCRIPT = fileURLToPath(new URL('../python/sdk_calls.py', import.meta.url));
const KEY = 'key-python-0000';
const env = { SIM_KEY: 'python-e2e-upstream-key' };

/** The router's `quotaring_router_requests_total` by status. */
async function routerCounts(routerUrl: string): Promise<Record<string, number>> {
  const text = await (await request(`${routerUrl}/metrics`)).body.text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^quotaring_router_requests_total\{status="(\d+)"\} (\d+)$/gm)) out[m[1] as string] = Number(m[2]);
  return out;
}

describe('the official Python SDKs through router → nodes → the simulator', () => {
  const procs: Running[] = [];
  let routerUrl = '';

  /** Runs one check of test/python/sdk_calls.py; @returns the JSON it printed. */
  async function python(check: string, count?: number): Promise<Record<string, unknown>> {
    const args = [SCRIPT, check, ...(count === undefined ? [] : [String(count)])];
    try {
      const { stdout } = await run(PYTHON, args, { env: { ...process.env, QR_BASE_URL: routerUrl, QR_KEY: KEY }, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 });
      return JSON.parse(stdout.trim().split('\n').at(-1) as string) as Record<string, unknown>;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      assert.fail(`python ${check} failed: ${e.stderr ?? e.message}`);
    }
  }

  before(async () => {
    assert.ok(existsSync(PYTHON), `no Python venv at ${PYTHON}: npm's pretest makes it (sh scripts/ensure-python-sdks.sh)`);
    const simPort = await freePort();
    const simUrl = `http://127.0.0.1:${simPort}`;
    const members: Member[] = [];
    for (let i = 1; i <= 2; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const common = { base_url: simUrl, api_key_env: 'SIM_KEY', forward_headers: ['x-sim-background-ms'] };
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members },
      tenants: [{ id: 'python', keys: [KEY], limits: [{ requests: 100_000, window: '1m' }, { tokens: 10_000_000, window: '1m' }] }],
      models: [
        { name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['openai'] },
        { name: 'claude-test', encoding: 'cl100k_base', estimator: 'exact', deployments: ['anthropic'] },
      ],
      deployments: [
        { name: 'openai', provider: 'openai', ...common },
        { name: 'anthropic', provider: 'anthropic', ...common },
      ],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env));
    routerUrl = (await startStaticNodesAndRouter(config, env, members, procs)).routerUrl;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
  });

  test('responses.cancel and responses.delete (an empty JSON body), responses.input_items.list', { timeout: 120_000 }, async () => {
    const r = await python('responses');
    assert.equal(r['created'], 'queued');
    assert.equal(r['cancelled'], 'cancelled');
    assert.deepEqual(r['items'], [['message', 'user', 'hi']]);
    assert.deepEqual(r['asc'], ['one', 'two']);
    assert.equal(r['deleted'], null);
    assert.equal(r['after_delete'], 404);
  });

  test('moderations.create: passed through to the OpenAI deployment', { timeout: 120_000 }, async () => {
    const r = await python('moderations');
    assert.deepEqual(r['one'], [false]);
    assert.deepEqual(r['two'], [false, true]);
    assert.equal(r['harassment'], true);
    assert.equal(r['model'], 'omni-moderation-latest');
  });

  test('streams read to [DONE] / message_stop, then closed by the SDK: every one counted 200 at the router, none 499', { timeout: 300_000 }, async () => {
    const before = await routerCounts(routerUrl);
    const chat = await python('chat_streams', 240);
    assert.deepEqual(chat, { streams: 240, finished: 240 });
    const messages = await python('anthropic_streams', 60);
    assert.deepEqual(messages, { streams: 60, finished: 60 });
    // The router counts a request once its response closed: give the last a moment.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const after = await routerCounts(routerUrl);
    assert.equal((after['499'] ?? 0) - (before['499'] ?? 0), 0, 'streams the SDK read to the end were counted as client aborts');
    assert.equal((after['200'] ?? 0) - (before['200'] ?? 0), 300);
  });
});
