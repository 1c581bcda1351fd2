/**
 * Log lines of a real node process (`quotaring node`): JSON by default, one `request` line per
 * request at info plus one `admitted` line per decision at debug; readable lines with
 * `--pretty-logs`. Neither ever holds the API key or the prompt.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';

const KEY = 'key-logs-secret-0001';
const PROMPT = 'a prompt that must never reach the logs';

function config(simUrl: string, port: number, level: 'debug' | 'info'): string {
  return writeConfig({
    server: { port, log_level: level },
    tenants: [{ id: 'acme', keys: [KEY], limits: [{ requests: 10, window: '1m' }] }],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'SIM_KEY' }],
  });
}

async function oneRequest(url: string): Promise<void> {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
  await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 4, messages: [{ role: 'user', content: PROMPT }] });
}

/** Waits until `out()` has a line matching `re` (log lines are written asynchronously). */
async function waitFor(out: () => string, re: RegExp): Promise<void> {
  for (let i = 0; i < 100 && !re.test(out()); i++) await new Promise((r) => setTimeout(r, 50));
}

describe('node log lines', () => {
  let sim: Running;
  let simUrl: string;
  before(async () => {
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    sim = await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`);
  });
  after(async () => {
    await sim.stop();
  });

  test('JSON at debug: one admitted line and one request line for one request; no key, no prompt', async () => {
    const port = await freePort();
    const node = await runCli(['node', '--config', config(simUrl, port, 'debug')], `http://127.0.0.1:${port}/readyz`, { SIM_KEY: 'sim-key' });
    try {
      await oneRequest(`http://127.0.0.1:${port}`);
      await waitFor(node.output, /"msg":"request"/);
      const lines = node
        .output()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const requests = lines.filter((l) => l.msg === 'request');
      const admitted = lines.filter((l) => l.msg === 'admitted');
      assert.equal(requests.length, 1);
      assert.equal(admitted.length, 1);
      assert.deepEqual({ level: admitted[0]?.level, tenant: admitted[0]?.tenant, limits: admitted[0]?.limits }, { level: 20, tenant: 'acme', limits: ['requests/1m=9/10'] });
      assert.deepEqual({ level: requests[0]?.level, tenant: requests[0]?.tenant, status: requests[0]?.status, result: requests[0]?.result, deployment: requests[0]?.deployment }, { level: 30, tenant: 'acme', status: 200, result: 'admitted', deployment: 'sim' });
      assert.equal(node.output().includes(KEY), false);
      assert.equal(node.output().includes(PROMPT), false);
    } finally {
      await node.stop();
    }
  });

  test('--pretty-logs: readable lines (no JSON) naming the request, its tenant and status', async () => {
    const port = await freePort();
    const node = await runCli(['node', '--config', config(simUrl, port, 'info'), '--pretty-logs'], `http://127.0.0.1:${port}/readyz`, { SIM_KEY: 'sim-key' });
    try {
      await oneRequest(`http://127.0.0.1:${port}`);
      await waitFor(node.output, /INFO.*request/);
      const out = node.output();
      assert.match(out, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: request$/m);
      assert.match(out, /^ {4}tenant: "acme"$/m);
      assert.match(out, /^ {4}status: 200$/m);
      assert.equal(out.split('\n').some((l) => l.startsWith('{')), false, out);
      assert.equal(out.includes(KEY), false);
      assert.equal(out.includes(PROMPT), false);
    } finally {
      await node.stop();
    }
  });
});
