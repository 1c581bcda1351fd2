/**
 * End to end, issue 13 item 2 "A stand-in for a live owner frees its slots": two gateway nodes
 * (static members, checkpoints replicated over HTTP every 300 ms), a router (health checks every
 * 200 ms, `dead_after` 1 s) and a simulator streaming slowly (20 tokens/s), as real processes.
 * A `concurrent: 2` tenant opens two long streams on its owner; the owner is SIGSTOPped mid-stream
 * (alive, silent); once the router marks it suspect, it sends the tenant's requests to the other
 * node, which stands in from the owner's replicated checkpoint. The owner's two slots stay counted
 * there (its leases have not expired): every request is refused 429, so the tenant never runs more
 * than 2 streams across both nodes (before the fix the stand-in freed them and admitted 2 more).
 * After SIGCONT the owner's streams finish in full and the tenant is served again. Streams the
 * stand-in admitted go to the owner once it answers again, so the owner refuses while they run:
 * the owner takes them back on waking (its fence, `src/coord/handoff/fence.ts`: a stall over half of
 * `dead_after`), or the stand-in gives them back once idle. An owner
 * SIGKILLed mid-stream is gone (its port refuses connections): the stand-in frees its slots.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';

const env = { QUOTARING_SIM_KEY: 'sim-stand-in-key' };
/** 200 output tokens at 20 tokens/s: a stream of about 10 s. */
const LONG = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 200, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hello' }] });
const SHORT = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 2, stream: true, messages: [{ role: 'user', content: 'hi' }] });

describe('a stand-in for a live (SIGSTOPped) owner keeps its slots counted', () => {
  const procs: Running[] = [];
  const nodes = new Map<string, Running>();
  let members: Member[] = [];
  let routerUrl = '';
  let tenant = '';
  let owner = '';

  before(async () => {
    const simPort = await freePort();
    const ports = [await freePort(), await freePort()];
    members = ports.map((port, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${port}` }));
    const ring = createRing(members);
    tenant = Array.from({ length: 50 }, (_, i) => `s${i}`).find((t) => ring.owner(t)?.id === 'node-1') as string;
    owner = 'node-1';
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: { members, health_check: '200ms', dead_after: '1s', handoff: { checkpoint: '300ms' } },
      tenants: [{ id: tenant, keys: [`key-${tenant}-0000`], limits: [{ concurrent: 2 }, { requests: 1_000, window: '1m' }] }],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY' }],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort), '--tps', '20'], `http://127.0.0.1:${simPort}/sim/stats`, env));
    const started = await startStaticNodesAndRouter(config, env, members, procs);
    for (const [id, proc] of started.nodes) nodes.set(id, proc);
    routerUrl = started.routerUrl;
  });
  after(async () => {
    for (const proc of nodes.values()) proc.proc.kill('SIGCONT');
    await Promise.all(procs.map((p) => p.stop()));
  });

  const send = (body: string): Promise<Dispatcher.ResponseData> =>
    request(`${routerUrl}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer key-${tenant}-0000`, 'content-type': 'application/json' }, body });

  async function suspects(): Promise<number> {
    const text = await (await request(`${routerUrl}/metrics`)).body.text();
    return Number(/^quotaring_router_suspect_members (\d+)$/m.exec(text)?.[1]);
  }

  test('owner SIGSTOPped with 2 streams open: the stand-in admits none until they end; after SIGCONT they finish', async () => {
    // Two long streams, both admitted by the owner.
    const streams = [await send(LONG), await send(LONG)];
    assert.deepEqual(streams.map((s) => s.statusCode), [200, 200]);
    // A third is refused by the owner itself: the limit is 2.
    const third = await send(SHORT);
    assert.equal(third.statusCode, 429);
    await third.body.dump();
    // The checkpoint holding both leases reaches the replica (the other node).
    await sleep(1_000);
    const proc = nodes.get(owner) as Running;
    proc.proc.kill('SIGSTOP');
    const deadline = Date.now() + 15_000;
    while ((await suspects()) < 1) {
      assert.ok(Date.now() < deadline, 'the router never marked the stopped owner suspect');
      await sleep(100);
    }
    // The router now sends the tenant's requests to the stand-in: each is refused, the owner's two
    // streams still hold both slots (its leases are live: 10 min, renewed every 5 s).
    const statuses: number[] = [];
    const admitted: Dispatcher.ResponseData[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await send(LONG);
      statuses.push(res.statusCode);
      if (res.statusCode === 200) admitted.push(res);
      else {
        const text = await res.body.text();
        assert.match(text, /concurren/i, text);
      }
    }
    const stand = members.find((m) => m.id !== owner) as Member;
    process.stderr.write(`# while the owner is stopped: ${JSON.stringify(statuses)}\n`);
    assert.deepEqual(statuses, [429, 429, 429, 429], 'the stand-in admitted streams while the owner\'s 2 streams were still running');
    proc.proc.kill('SIGCONT');
    // The owner's streams go on and finish in full.
    for (const s of streams) {
      const text = await s.body.text();
      assert.match(text, /\[DONE\]/);
      assert.match(text, /"completion_tokens":200/);
    }
    for (const s of admitted) await s.body.dump();
    // Once both ended, the tenant is served again.
    const until = Date.now() + 20_000;
    for (;;) {
      const res = await send(SHORT);
      await res.body.dump();
      if (res.statusCode === 200) break;
      assert.ok(Date.now() < until, `still ${res.statusCode} after the owner's streams ended`);
      await sleep(200);
    }
    // It was the other node that refused them, standing in, and it gave the tenant back.
    const standIn = nodes.get(stand.id) as Running;
    // Given back once idle, or taken back by the owner on waking (its fence: src/coord/handoff/fence.ts).
    while (!/stand-in tenant given back to its owner|owner woke from a stall and took its tenants back/.test(standIn.output())) {
      assert.ok(Date.now() < until, `the stand-in never gave the tenant back:\n${standIn.output().slice(-2_000)}`);
      await sleep(200);
    }
  });

  test('the stand-in admits 2 streams while the owner is stopped; after SIGCONT it gives the tenant back with both still running: the owner refuses a third until they end', async () => {
    const stand = nodes.get(members.find((m) => m.id !== owner)?.id ?? '') as Running;
    const proc = nodes.get(owner) as Running;
    const BACK = /stand-in tenant given back to its owner|owner woke from a stall and took its tenants back/;
    const givenBack = (): number => stand.output().split('\n').filter((l) => BACK.test(l)).length;
    const before = givenBack();
    while ((await suspects()) > 0) await sleep(100);
    // The owner's checkpoint without the last test's slots reaches its replica (every 300 ms).
    await sleep(1_000);
    proc.proc.kill('SIGSTOP');
    const deadline = Date.now() + 15_000;
    while ((await suspects()) < 1) {
      assert.ok(Date.now() < deadline, 'the router never marked the stopped owner suspect');
      await sleep(100);
    }
    // The stand-in admits two long streams (the owner's checkpoint holds no slot) and refuses a third.
    const streams = [await send(LONG), await send(LONG)];
    const refusedEarly = await Promise.all(streams.filter((r) => r.statusCode !== 200).map(async (r) => `${r.statusCode} ${JSON.stringify(r.headers)} ${await r.body.text()}`));
    assert.deepEqual(streams.map((r) => r.statusCode), [200, 200], `${refusedEarly.join('\n')}\n${stand.output().slice(-3_000)}`);
    const third = await send(SHORT);
    assert.equal(third.statusCode, 429);
    await third.body.dump();
    proc.proc.kill('SIGCONT');
    // Routed to the owner again, the stand-in is idle: it gives the tenant back, its 2 streams with it
    // (within standInIdleMs + one checkpoint period, 600 ms here, of the router seeing the owner).
    const until = Date.now() + 8_000;
    while (givenBack() === before || (await suspects()) > 0) {
      assert.ok(Date.now() < until, `no give-back while the streams run:\n${stand.output().slice(-2_000)}`);
      await sleep(50);
    }
    assert.match(stand.output().split('\n').filter((l) => BACK.test(l)).at(-1) ?? '', /"running":2/);
    // The owner holds both streams' slots: a third request is refused while they run (before, it
    // knew of them only once they ended, and admitted 2 more).
    const refused = await send(SHORT);
    const text = await refused.body.text();
    assert.equal(refused.statusCode, 429, text);
    assert.match(text, /concurren/i, text);
    for (const r of streams) {
      const body = await r.body.text();
      assert.match(body, /"completion_tokens":200/);
    }
    // Their settlements reach the owner: the tenant is served again.
    const served = Date.now() + 10_000;
    for (;;) {
      const res = await send(SHORT);
      await res.body.dump();
      if (res.statusCode === 200) break;
      assert.ok(Date.now() < served, `still ${res.statusCode} after the stand-in's streams ended`);
      await sleep(200);
    }
  });

  test('owner SIGKILLed with 2 streams open: its port refuses connections, so the stand-in frees their slots and serves the tenant', async () => {
    const streams = [await send(LONG), await send(LONG)];
    assert.deepEqual(streams.map((s) => s.statusCode), [200, 200]);
    await sleep(1_000);
    (nodes.get(owner) as Running).proc.kill('SIGKILL');
    // The killed owner's streams are cut (the client sees a dropped stream).
    for (const s of streams) await s.body.text().catch(() => '');
    const deadline = Date.now() + 15_000;
    for (;;) {
      const res = await send(SHORT);
      const text = await res.body.text();
      if (res.statusCode === 200) break;
      assert.ok(Date.now() < deadline, `the tenant is still refused after its owner died: ${res.statusCode} ${text.slice(0, 200)}`);
      await sleep(200);
    }
    const stand = nodes.get(members.find((m) => m.id !== owner)?.id ?? '') as Running;
    assert.match(stand.output(), /owner gone \(connection refused/);
  });
});
