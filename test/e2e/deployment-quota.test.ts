/**
 * End to end, a deployment's provider quota shared by a cluster: Redis, the simulator enforcing
 * 60,000 tokens per minute itself (a token bucket, as OpenAI documents), three nodes and a router;
 * 20 tenants ask twice the quota. The nodes lease the cluster-wide cap of 60,000 × 0.9 from Redis:
 * the simulator must send no 429, and once the initial burst is spent the admitted tokens must reach
 * at least 85% of the quota per minute.
 *
 * The run lasts 110 s (the issue asks for 3 minutes): 50 s to spend the burst (54,000 tokens, at an
 * excess demand of 1,100 tokens/s), then 60 s of steady state measured.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Agent } from 'undici';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import { startLoad, totalTokens } from '../helpers/load-sender.ts';

const TENANTS = 20;
const QUOTA_TPM = 60_000;
/** Every request uses exactly 1,000 tokens: an 800-token prompt (exact counting) and 200 out. */
const PROMPT = 800;
const OUTPUT = 200;
/** Twice the quota: 120,000 tokens a minute = 2 requests a second. */
const RATE_PER_S = 2;
const RUN_MS = 110_000;
const STEADY_FROM_MS = 50_000;

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
const body = JSON.stringify({ ...prompts.body(PROMPT), max_tokens: OUTPUT });

describe('a deployment quota shared by 3 nodes through Redis', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const procs: Running[] = [];
  let simUrl = '';
  let router = '';

  before(async () => {
    redis = await startRedis();
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { name: 'quota', redis: { url: redis.url }, heartbeat: '200ms', dead_after: '1s' },
      tenants: Array.from({ length: TENANTS }, (_, i) => ({ id: `q${i}`, keys: [`key-quota-${i}-0000`], limits: [] })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', quota: { tpm: QUOTA_TPM }, headroom: 0.9 }],
    });
    const env = { QUOTARING_SIM_KEY: 'sim-quota-key' };
    procs.push(await runCli(['simulate', '--port', String(simPort), '--tpm', String(QUOTA_TPM)], `${simUrl}/sim/stats`, env));
    for (let i = 1; i <= 3; i++) {
      const port = await freePort();
      procs.push(await runCli(['node', '--config', config, '--id', `node-${i}`, '--port', String(port)], `http://127.0.0.1:${port}/healthz`, env));
    }
    const port = await freePort();
    router = `http://127.0.0.1:${port}`;
    procs.push(await runCli(['router', '--config', config, '--port', String(port)], `${router}/readyz`, env));
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('no 429 from the provider, and at least 85% of the quota admitted once the burst is spent', { timeout: RUN_MS + 60_000 }, async () => {
    const agent = new Agent({ connections: 32 });
    // RATE_PER_S requests a second for RUN_MS, the n-th for tenant n mod TENANTS.
    const load = startLoad({
      streams: [{ id: 'all', ratePerS: RATE_PER_S, untilMs: RUN_MS }],
      stopBy: 'clock',
      relative: true,
      url: `${router}/v1/chat/completions`,
      headers: (_t, n) => ({ authorization: `Bearer key-quota-${n % TENANTS}-0000`, 'content-type': 'application/json' }),
      body,
      dispatcher: agent,
      onAnswer: (s, res, text) => {
        if (res.statusCode === 200) {
          s.tokens = totalTokens(text);
        } else if (res.statusCode !== 429) {
          s.error = text.slice(0, 200);
        }
      },
    });
    await load.ended;
    await load.settled();
    const { sent } = load;
    await agent.close();

    const stats = await simStats(simUrl);
    const byStatus: Record<string, number> = {};
    for (const s of sent) byStatus[s.status] = (byStatus[s.status] ?? 0) + 1;
    const steady = sent.filter((s) => s.status === 200 && s.start >= STEADY_FROM_MS).reduce((sum, s) => sum + s.tokens, 0);
    const steadyMinutes = (RUN_MS - STEADY_FROM_MS) / 60_000;
    const share = steady / (QUOTA_TPM * steadyMinutes);
    process.stderr.write(`# statuses ${JSON.stringify(byStatus)}; simulator 429s ${stats.rateLimited}; steady state ${steady} tokens in ${steadyMinutes} min = ${(share * 100).toFixed(1)}% of the quota\n`);
    assert.deepEqual(
      sent.filter((s) => s.status !== 200 && s.status !== 429),
      [],
    );
    assert.equal(stats.rateLimited, 0);
    assert.ok(share >= 0.85, `steady state admitted ${(share * 100).toFixed(1)}% of the quota`);
    // Never above the cap over the whole run: 54,000 to start with plus 900 tokens a second.
    const total = sent.filter((s) => s.status === 200).reduce((sum, s) => sum + s.tokens, 0);
    const cap = QUOTA_TPM * 0.9 + ((QUOTA_TPM * 0.9) / 60) * (RUN_MS / 1_000);
    assert.ok(total <= cap, `admitted ${total} tokens in ${RUN_MS / 1_000} s, above the cap ${cap}`);
  });
});
