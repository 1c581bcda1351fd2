/**
 * End to end, issue 25 "fencing": an owner stalled (SIGSTOP) longer than `dead_after` while it runs
 * 2 long streams of a `concurrent: 4` tenant, with a client asking for more long streams every
 * 100 ms all along, as real processes (3 nodes, a router, the simulator, and Redis where the mode
 * has it). Whoever decides in the owner's place may admit 2 more, and no one may admit beyond: at
 * no moment do more than 4 of the tenant's requests run where the provider sees them (the
 * simulator's `peakInFlight`), whatever the mode:
 * - `redis`: Redis membership, Redis up. The others drop the stalled owner from the ring; its
 *   successor loads its checkpoint and keeps its 2 slots counted (it is not proven gone: its port
 *   still accepts connections, `src/coord/handoff/held-slots.ts`). On waking, the owner's fence reads the
 *   member list before any decision: it sees its drop and decides for none of its tenants until they
 *   are handed back (`src/coord/handoff/fence.ts`).
 * - `redis-down`: Redis membership, Redis killed before the stall. The router routes around the
 *   stalled owner to a stand-in, which starts from the owner's replicated checkpoint and keeps its
 *   2 slots counted; on waking the owner takes its tenants back from the stand-in (the 2 streams it
 *   admitted included) before any decision, and the stand-in sends the router's next requests to it.
 * - `static`: static members, as `redis-down` without any Redis.
 * Before fencing, the requests the router had sent to the owner before it saw it stalled were decided
 * on waking from the owner's own state (2 of 4 slots used): 6 ran at once at the provider.
 * After SIGCONT the owner's streams finish in full, and once every stream ended the tenant is served
 * again within 10 s.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { ringIs } from '../helpers/cluster.ts';
import { freePort, runCli, simStats, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';
import { startLoad } from '../helpers/load-sender.ts';

const env = { QUOTARING_SIM_KEY: 'sim-fencing-key' };
const TPS = 20;
const SHORT = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'hi' }] });
/** A stream of `seconds` at {@link TPS} tokens per second. */
const long = (seconds: number): string => JSON.stringify({ model: 'gpt-4o-mini', max_tokens: seconds * TPS, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hello' }] });

type Mode = 'redis' | 'redis-down' | 'static';

/** One cluster: 3 nodes, a router, the simulator, and Redis unless `static`. */
async function startCluster(mode: Mode, procs: Running[]): Promise<{ members: Member[]; nodes: Map<string, Running>; routerUrl: string; simUrl: string; tenant: string; redis?: RunningRedis }> {
  const redis = mode === 'static' ? undefined : await startRedis();
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  procs.push(await runCli(['simulate', '--port', String(simPort), '--tps', String(TPS)], `${simUrl}/sim/stats`, env));
  const members: Member[] = [];
  for (let i = 1; i <= 3; i++) members.push({ id: `node-${i}`, url: `http://127.0.0.1:${await freePort()}` });
  const ring = createRing(members);
  const tenant = Array.from({ length: 100 }, (_, i) => `f${i}`).find((t) => ring.owner(t)?.id === 'node-1') as string;
  const cluster =
    redis === undefined
      ? { members, health_check: '200ms', dead_after: '1s', handoff: { checkpoint: '300ms' } }
      : { name: `fencing-${process.pid}-${mode}`, redis: { url: redis.url }, heartbeat: '200ms', health_check: '200ms', dead_after: '1s', handoff: { checkpoint: '300ms' } };
  const config = writeConfig({
    server: { log_level: 'info' },
    cluster,
    tenants: [{ id: tenant, keys: [`key-${tenant}-0000`], limits: [{ concurrent: 4 }, { requests: 100_000, window: '1m' }] }],
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY' }],
  });
  const nodes = new Map<string, Running>();
  for (const m of members) {
    const proc = await runCli(['node', '--config', config, '--id', m.id, '--port', new URL(m.url).port, '--url', m.url], `${m.url}/readyz`, env);
    procs.push(proc);
    nodes.set(m.id, proc);
  }
  const routerUrl = `http://127.0.0.1:${await freePort()}`;
  procs.push(await runCli(['router', '--config', config, '--port', new URL(routerUrl).port], `${routerUrl}/readyz`, env));
  await ringIs([routerUrl, ...members.map((m) => m.url)], members);
  return { members, nodes, routerUrl, simUrl, tenant, ...(redis === undefined ? {} : { redis }) };
}

/**
 * Runs the stall: 2 streams of `streamSeconds` on the owner, a checkpoint's time, SIGSTOP for
 * `stallMs` with a client asking for a stream every 100 ms, SIGCONT, 3 s more of asking; then the
 * streams end and the tenant must be served again.
 */
async function stall(mode: Mode, stallMs: number, streamSeconds: number): Promise<void> {
  const procs: Running[] = [];
  let redis: RunningRedis | undefined;
  try {
    const c = await startCluster(mode, procs);
    redis = c.redis;
    const owner = c.nodes.get('node-1') as Running;
    const send = (body: string): Promise<Dispatcher.ResponseData> =>
      request(`${c.routerUrl}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer key-${c.tenant}-0000`, 'content-type': 'application/json' }, body, bodyTimeout: 120_000, headersTimeout: 60_000 });
    if (mode === 'redis-down') {
      await redis?.kill();
      // The nodes notice (their membership freezes at the last view).
      await sleep(1_500);
    }
    const streams = await Promise.all([0, 1].map(() => send(long(streamSeconds))));
    assert.deepEqual(streams.map((s) => s.statusCode), [200, 200]);
    const texts = streams.map((s) => s.body.text());
    for (const t of texts) t.catch(() => undefined);
    // The checkpoint holding the 4 slots reaches the replica (every 300 ms) and Redis.
    await sleep(1_200);
    await request(`${c.simUrl}/sim/reset`, { method: 'POST' }).then((r) => r.body.dump());
    owner.proc.kill('SIGSTOP');
    const statuses = new Map<number, number>();
    // A request every 100 ms, not waiting for the previous one: those the router sent to the owner
    // before it saw it stalled wait for it to wake; the others go where the router routes them.
    // Counted when the answer's status arrives; a request that got none is not counted.
    const load = startLoad({
      streams: [{ id: c.tenant, ratePerS: 10 }],
      url: `${c.routerUrl}/v1/chat/completions`,
      headers: () => ({ authorization: `Bearer key-${c.tenant}-0000`, 'content-type': 'application/json' }),
      body: () => long(streamSeconds),
      headersTimeout: 60_000,
      bodyTimeout: 120_000,
      onResponse: (_s, res) => {
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      },
      onAnswer: (_s, res, text) => {
        if (process.env.FENCING_DEBUG) process.stderr.write(`${Date.now() % 100000} ${res.statusCode} ${text.slice(0, 160)}\n`);
      },
    });
    const logs = (): string => [...c.nodes].map(([id, p]) => `--- ${id}\n${p.output().slice(-2_500)}`).join('\n');
    await sleep(stallMs);
    owner.proc.kill('SIGCONT');
    await sleep(3_000);
    const peakAfterWake = (await simStats(c.simUrl)).peakInFlight;
    await load.stop();
    await load.settled();
    if (process.env.FENCING_DEBUG) process.stderr.write(logs());
    process.stderr.write(`# ${mode}, stall ${stallMs} ms: client statuses ${JSON.stringify([...statuses])}, peak in flight at the provider ${peakAfterWake}\n`);
    assert.ok(peakAfterWake <= 4, `${peakAfterWake} requests of a concurrent: 4 tenant ran at once at the provider\n${logs()}`);
    // The owner's streams finish in full.
    for (const text of await Promise.all(texts)) assert.match(text, new RegExp(`"completion_tokens":${streamSeconds * TPS}`));
    assert.ok((statuses.get(200) ?? 0) >= 1, `no request was admitted in place of the stalled owner: ${JSON.stringify([...statuses])}`);
    // Once they ended the tenant is served again (settlements reach whoever holds their slots).
    const until = Date.now() + 10_000;
    for (;;) {
      const res = await send(SHORT);
      const text = await res.body.text();
      if (res.statusCode === 200) break;
      assert.ok(Date.now() < until, `still ${res.statusCode} ${text.slice(0, 300)} 10 s after the owner's streams ended\n${logs()}`);
      await sleep(200);
    }
    assert.ok((await simStats(c.simUrl)).peakInFlight <= 4);
  } finally {
    for (const p of procs) p.proc.kill('SIGCONT');
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  }
}

// The clusters of one group run side by side (each is mostly waiting: a stall, streams at 20
// tokens/s), so the file takes about one 5 s run plus one 30 s run.
describe('fencing: an owner stalled past dead_after never runs a concurrent limit twice (real processes)', { concurrency: true }, () => {
  for (const mode of ['redis', 'redis-down', 'static'] as const) {
    test(`${mode}: owner SIGSTOPped 5 s with 2 of 4 slots used, more asked all along: at most 4 run at the provider`, { timeout: 90_000 }, () => stall(mode, 5_000, 12));
  }
});

describe('fencing: the same through a 30 s stall (real processes)', { concurrency: true }, () => {
  for (const mode of ['redis', 'static'] as const) {
    test(`${mode}: owner SIGSTOPped 30 s, the same`, { timeout: 150_000 }, () => stall(mode, 30_000, 38));
  }
});
