/**
 * End to end, the writer rule of stored states (issue 13), with real processes and a real Redis:
 * owner node-1 is SIGKILLed holding a long stream of a `concurrent: 1` tenant; node-2, its
 * successor, gets no request for the tenant and so never claims it; then node-3 joins and becomes
 * the tenant's owner. node-3 loads node-1's last checkpoint from Redis while the previous owner
 * under its ring (node-2) is alive. The checkpoint names its writer (node-1, gone from the ring,
 * no handoff), so node-3 frees the dead stream's slot and serves the tenant at once. Before stored
 * states named their writer, node-3 kept the slot until its lease expired (10 min): every request
 * was refused 429.
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

const env = { QUOTARING_SIM_KEY: 'sim-crash-join-key' };
/** 200 output tokens at 20 tokens/s: a stream of about 10 s. */
const LONG = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'hello' }] });
const SHORT = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });

describe('crash, then a join before the successor claimed the tenant (real processes, Redis membership)', () => {
  const procs: Running[] = [];
  let redis: RunningRedis | undefined;
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('the joiner loads the dead owner\'s checkpoint and frees its stream\'s slot: the tenant is served at once', async () => {
    redis = await startRedis();
    const simPort = await freePort();
    procs.push(await runCli(['simulate', '--port', String(simPort), '--tps', '20'], `http://127.0.0.1:${simPort}/sim/stats`, env));
    const members: Member[] = [];
    for (let i = 1; i <= 3; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
    const [n1, n2, n3] = members as [Member, Member, Member];
    const tenant = Array.from({ length: 2_000 }, (_, i) => `c${i}`).find((t) => createRing([n1, n2]).owner(t)?.id === n1.id && createRing([n2, n3]).owner(t)?.id === n3.id) as string;
    const key = `key-${tenant}-0000`;
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: { name: `crash-join-${process.pid}`, redis: { url: redis.url }, heartbeat: '200ms', dead_after: '1s', handoff: { checkpoint: '300ms' } },
      tenants: [{ id: tenant, keys: [key], limits: [{ concurrent: 1 }] }],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY' }],
    });
    const start = async (m: Member): Promise<Running> => {
      const proc = await runCli(['node', '--config', config, '--id', m.id, '--port', new URL(m.url).port, '--url', m.url], `${m.url}/readyz`, env);
      procs.push(proc);
      return proc;
    };
    const send = (m: Member, body: string) => request(`${m.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });

    const p1 = await start(n1);
    const p2 = await start(n2);
    await ringIs([n1.url, n2.url], [n1, n2]);
    // node-1 owns the tenant: one long stream takes its only slot.
    const stream = await send(n1, LONG);
    assert.equal(stream.statusCode, 200);
    const second = await send(n1, SHORT);
    assert.equal(second.statusCode, 429);
    await second.body.dump();
    // Its checkpoint (every 300 ms) with the slot held reaches Redis; then node-1 dies.
    await sleep(1_000);
    p1.proc.kill('SIGKILL');
    await stream.body.text().catch(() => '');
    // node-2 drops node-1 and owns the tenant, but no request for it comes: it never claims it.
    await ringIs([n2.url], [n2]);
    await start(n3);
    await ringIs([n2.url, n3.url], [n2, n3]);
    const res = await send(n3, SHORT);
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, `the dead owner's slot is still held on the joiner: ${text}\n${p2.output().slice(-1_500)}`);
  });
});
