/**
 * End to end, Redis frozen under load: Redis, the simulator, three nodes and a router, a deployment
 * with a (never binding) provider quota leased from Redis, 10 tenants at 20 requests a second. Redis
 * gets SIGSTOP for 20 s, then SIGCONT. Every request must complete without a 5xx; the latency while
 * Redis is frozen (after the first second, once the breaker is open) must stay within 5 ms of the
 * latency before; the nodes must log entering fallback, and leaving it within 5 s of SIGCONT.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from 'undici';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import { startLoad } from '../helpers/load-sender.ts';

const TENANTS = 10;
const RATE_PER_S = 20;
const FREEZE_AT_MS = 6_000;
const FREEZE_MS = 20_000;
const RUN_MS = FREEZE_AT_MS + FREEZE_MS + 8_000;

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

describe('Redis frozen (SIGSTOP) for 20 s under load', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const procs: Running[] = [];
  const nodes: Running[] = [];
  let router = '';

  before(async () => {
    redis = await startRedis();
    const simPort = await freePort();
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: { name: 'freeze', redis: { url: redis.url }, heartbeat: '200ms', dead_after: '1s' },
      tenants: Array.from({ length: TENANTS }, (_, i) => ({ id: `f${i}`, keys: [`key-freeze-${i}-0000`], limits: [{ requests: 600, window: '1m' }, { concurrent: 10 }] })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY', quota: { tpm: 10_000_000, rpm: 100_000 } }],
    });
    const env = { QUOTARING_SIM_KEY: 'sim-freeze-key' };
    procs.push(await runCli(['simulate', '--port', String(simPort)], `http://127.0.0.1:${simPort}/sim/stats`, env));
    for (let i = 1; i <= 3; i++) {
      const port = await freePort();
      const node = await runCli(['node', '--config', config, '--id', `node-${i}`, '--port', String(port)], `http://127.0.0.1:${port}/healthz`, env);
      procs.push(node);
      nodes.push(node);
    }
    const port = await freePort();
    router = `http://127.0.0.1:${port}`;
    procs.push(await runCli(['router', '--config', config, '--port', String(port)], `${router}/readyz`, env));
  });

  after(async () => {
    redis?.signal('SIGCONT');
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('no 5xx, no added latency once the breaker is open, fallback left within 5 s of SIGCONT', { timeout: RUN_MS + 60_000 }, async () => {
    const agent = new Agent({ connections: 32 });
    const t0 = Date.now();
    let thawedAt = 0;
    const freezer = (async () => {
      await sleep(FREEZE_AT_MS);
      redis.signal('SIGSTOP');
      await sleep(FREEZE_MS);
      redis.signal('SIGCONT');
      thawedAt = Date.now();
    })();
    // RATE_PER_S requests a second for RUN_MS, the n-th for tenant n mod TENANTS.
    const load = startLoad({
      streams: [{ id: 'all', ratePerS: RATE_PER_S, untilMs: RUN_MS }],
      stopBy: 'clock',
      t0,
      relative: true,
      url: `${router}/v1/chat/completions`,
      headers: (_t, n) => ({ authorization: `Bearer key-freeze-${n % TENANTS}-0000`, 'content-type': 'application/json' }),
      body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'Hello' }] }),
      dispatcher: agent,
      onAnswer: (s, res, text) => {
        if (res.statusCode !== 200) process.stderr.write(`# ${res.statusCode} at +${s.start} ms: ${text.slice(0, 240)}\n`);
      },
    });
    await load.ended;
    await load.settled();
    const sent = load.sent.map((s) => ({ start: s.start, ms: s.end - s.start, status: s.status }));
    await freezer;
    await agent.close();

    const byStatus: Record<string, number> = {};
    for (const s of sent) byStatus[s.status] = (byStatus[s.status] ?? 0) + 1;
    const before = median(sent.filter((s) => s.start >= 1_000 && s.start < FREEZE_AT_MS).map((s) => s.ms));
    const frozen = median(sent.filter((s) => s.start >= FREEZE_AT_MS + 1_000 && s.start < FREEZE_AT_MS + FREEZE_MS).map((s) => s.ms));
    const logs = nodes.map((n) => n.output()).join('\n');
    const leftAt = logs
      .split('\n')
      .filter((line) => line.includes('leaving fallback'))
      .map((line) => (JSON.parse(line.slice(line.indexOf('{'))) as { time: number }).time);
    process.stderr.write(`# statuses ${JSON.stringify(byStatus)}; median latency ${before} ms before, ${frozen} ms frozen; left fallback ${leftAt.map((t) => t - thawedAt).join(', ')} ms after SIGCONT\n`);
    assert.deepEqual(Object.keys(byStatus), ['200'], JSON.stringify(byStatus));
    assert.ok(frozen - before < 5, `median latency ${before} ms before, ${frozen} ms while Redis was frozen`);
    assert.match(logs, /entering fallback/);
    assert.ok(leftAt.length > 0, 'no node left fallback');
    assert.ok(leftAt.every((t) => t - thawedAt <= 5_000), `left fallback ${leftAt.map((t) => t - thawedAt).join(', ')} ms after SIGCONT`);
  });
});
