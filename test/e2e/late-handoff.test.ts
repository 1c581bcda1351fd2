/**
 * End to end, a handoff that arrives after the new owner stopped waiting for it (issue 13), with
 * real processes and a real Redis: node-1 owns a `requests: 10/1m` tenant and admits 5 requests,
 * none of them checkpointed yet (checkpoints every 20 s); it is SIGSTOPped (alive: `dead_after` is
 * 8 s) and node-2 joins, taking the tenant over. node-2's claim waits `wait_ms` (250 ms) for
 * node-1's handoff, then decides from the last checkpoint, which lacks the 5: it admits 3. After
 * SIGCONT node-1 hands the tenant over; node-2 merges that late handoff into the state it decided
 * from, so it counts 5 + 3 and admits exactly 2 more. Ignoring the late handoff (the old rule)
 * admits 7 more: 15 in the window against a limit of 10.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { ringIs } from '../helpers/cluster.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const env = { QUOTARING_SIM_KEY: 'sim-late-handoff-key' };
const CHAT = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });

describe('a late handoff is merged (real processes, Redis membership)', () => {
  const procs: Running[] = [];
  let redis: RunningRedis | undefined;
  after(async () => {
    for (const p of procs) p.proc.kill('SIGCONT');
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('node-2 decides without node-1\'s handoff (node-1 stopped), then merges it when it comes: 5 + 3 + exactly 2 more admitted of 10', async () => {
    redis = await startRedis();
    const simPort = await freePort();
    procs.push(await runCli(['simulate', '--port', String(simPort)], `http://127.0.0.1:${simPort}/sim/stats`, env));
    const n1: Member = { id: 'node-1', url: `http://127.0.0.1:${await freePort()}` };
    const n2: Member = { id: 'node-2', url: `http://127.0.0.1:${await freePort()}` };
    const tenant = Array.from({ length: 200 }, (_, i) => `l${i}`).find((t) => createRing([n1, n2]).owner(t)?.id === n2.id) as string;
    const key = `key-${tenant}-0000`;
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: { name: `late-${process.pid}`, redis: { url: redis.url }, heartbeat: '200ms', dead_after: '8s', handoff: { checkpoint: '20s' } },
      tenants: [{ id: tenant, keys: [key], limits: [{ requests: 10, window: '1m', algorithm: 'sliding_window' }] }],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY' }],
    });
    const start = async (m: Member, ready: string): Promise<Running> => {
      const proc = await runCli(['node', '--config', config, '--id', m.id, '--port', new URL(m.url).port, '--url', m.url], `${m.url}${ready}`, env);
      procs.push(proc);
      return proc;
    };
    const send = async (m: Member): Promise<number> => {
      const res = await request(`${m.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: CHAT });
      await res.body.dump();
      return res.statusCode;
    };

    const p1 = await start(n1, '/readyz');
    const statuses1: number[] = [];
    for (let i = 0; i < 5; i++) statuses1.push(await send(n1));
    assert.deepEqual(statuses1, [200, 200, 200, 200, 200]);
    p1.proc.kill('SIGSTOP');
    const stoppedAt = Date.now();
    // node-2 joins while node-1 is silent; its readiness waits for handoffs, so only /healthz is asked.
    const p2 = await start(n2, '/healthz');
    await ringIs([n2.url], [n1, n2], 5_000);
    // The claim waits 250 ms for node-1's handoff, then decides from the last checkpoint (none).
    const statuses2: number[] = [];
    for (let i = 0; i < 3; i++) statuses2.push(await send(n2));
    assert.deepEqual(statuses2, [200, 200, 200]);
    assert.match(p2.output(), /handoff not announced in time/);
    assert.ok(Date.now() - stoppedAt < 8_000, 'node-1 was stopped longer than dead_after: the test did not test a live previous owner');
    p1.proc.kill('SIGCONT');
    const merged = Date.now() + 10_000;
    while (!p2.output().includes('late handoff merged')) {
      assert.ok(Date.now() < merged, `node-1's handoff never merged on node-2:\n${p2.output().slice(-2_000)}`);
      await sleep(50);
    }
    let admitted = 0;
    for (let i = 0; i < 10; i++) if ((await send(n2)) === 200) admitted++;
    assert.equal(admitted, 2, 'node-2 counts node-1\'s 5 and its own 3 against the limit of 10');
  });
});
