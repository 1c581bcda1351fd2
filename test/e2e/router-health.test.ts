/**
 * End to end, routers that fail safe (issue 13): two gateway nodes (static members) and a router as
 * real processes, health checks every 200 ms with the default 500 ms probe timeout. A node whose
 * process is paused (SIGSTOP for 1.2 s, then SIGCONT: a stalled event loop, for real) is late, not
 * dead: it is never marked suspect and no request gets a 5xx, also when both nodes pause at once
 * (the old check marked them after two missed probes and answered 503 `no_healthy_node`). A node
 * SIGKILLed is marked at once (its connections are refused) and its tenants are served by the next
 * member, with no 5xx either.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startStaticNodesAndRouter } from '../helpers/cluster.ts';

const TENANTS = 12;
const PAUSE_MS = 1_200;
const env = { QUOTARING_SIM_KEY: 'sim-health-key' };
const body = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] });

describe('router health checks: a paused node is late, not dead; a killed one is routed around', () => {
  const procs: Running[] = [];
  const nodes = new Map<string, Running>();
  let members: Member[] = [];
  let routerUrl = '';

  before(async () => {
    const simPort = await freePort();
    const ports = [await freePort(), await freePort()];
    members = ports.map((port, i) => ({ id: `node-${i + 1}`, url: `http://127.0.0.1:${port}` }));
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { members, health_check: '200ms', dead_after: '3s' },
      tenants: Array.from({ length: TENANTS }, (_, i) => ({ id: `t${i}`, keys: [`key-t${i}-0000`], limits: [{ requests: 100_000, window: '1m' }] })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY' }],
    });
    procs.push(await runCli(['simulate', '--port', String(simPort)], `http://127.0.0.1:${simPort}/sim/stats`, env));
    const started = await startStaticNodesAndRouter(config, env, members, procs);
    for (const [id, proc] of started.nodes) nodes.set(id, proc);
    routerUrl = started.routerUrl;
  });
  after(async () => {
    for (const proc of nodes.values()) proc.proc.kill('SIGCONT');
    await Promise.all(procs.map((p) => p.stop()));
  });

  const router = (): Running => procs[procs.length - 1] as Running;
  const owner = (tenant: number): string => createRing(members).owner(`t${tenant}`)?.id ?? '';

  async function suspectGauge(): Promise<number> {
    const text = await (await request(`${routerUrl}/metrics`)).body.text();
    return Number(/^quotaring_router_suspect_members (\d+)$/m.exec(text)?.[1]);
  }

  /** Every tenant sends a request every 100 ms while `during` runs; resolves with the count of each status (-1: failed) and the largest suspect gauge seen. */
  async function load(during: () => Promise<void>): Promise<{ statuses: Record<string, number>; suspects: number }> {
    const statuses: Record<string, number> = {};
    const inFlight: Promise<void>[] = [];
    let stop = false;
    let suspects = 0;
    const fire = (tenant: number): void => {
      inFlight.push(
        (async () => {
          let status = -1;
          try {
            const res = await request(`${routerUrl}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer key-t${tenant}-0000`, 'content-type': 'application/json' }, body });
            status = res.statusCode;
            const text = await res.body.text();
            if (status !== 200) process.stderr.write(`# ${status} for t${tenant} (owner ${owner(tenant)}): ${text.slice(0, 200)}\n`);
          } catch (err) {
            process.stderr.write(`# t${tenant} failed: ${(err as Error).message}\n`);
          }
          statuses[status] = (statuses[status] ?? 0) + 1;
        })(),
      );
    };
    const loop = (async () => {
      while (!stop) {
        for (let t = 0; t < TENANTS; t++) fire(t);
        suspects = Math.max(suspects, await suspectGauge());
        await sleep(100);
      }
    })();
    await during();
    stop = true;
    await loop;
    await Promise.all(inFlight);
    return { statuses, suspects };
  }

  const pause = async (ids: readonly string[]): Promise<void> => {
    await sleep(300);
    for (const id of ids) nodes.get(id)?.proc.kill('SIGSTOP');
    await sleep(PAUSE_MS);
    for (const id of ids) nodes.get(id)?.proc.kill('SIGCONT');
    await sleep(500);
  };
  const suspectLines = (): string[] => router().output().split('\n').filter((l) => l.includes('member suspect'));

  test('both nodes own tenants', () => {
    const owners = new Set(Array.from({ length: TENANTS }, (_, t) => owner(t)));
    assert.deepEqual([...owners].sort(), ['node-1', 'node-2']);
  });

  test(`a node paused ${PAUSE_MS} ms is not marked suspect; every request is answered 200`, async () => {
    const { statuses, suspects } = await load(() => pause(['node-1']));
    assert.deepEqual(Object.keys(statuses), ['200'], JSON.stringify(statuses));
    assert.equal(suspects, 0);
    assert.deepEqual(suspectLines(), []);
  });

  test(`both nodes paused ${PAUSE_MS} ms at once: no 503 no_healthy_node, nothing marked`, async () => {
    const { statuses, suspects } = await load(() => pause(['node-1', 'node-2']));
    assert.deepEqual(Object.keys(statuses), ['200'], JSON.stringify(statuses));
    assert.equal(suspects, 0);
    assert.deepEqual(suspectLines(), []);
  });

  test('a node SIGKILLed is marked at once and routed around: its tenants served by the other, no 5xx', async () => {
    let markedAfterMs = -1;
    const { statuses } = await load(async () => {
      await sleep(300);
      const killed = Date.now();
      nodes.get('node-2')?.proc.kill('SIGKILL');
      // Marked by the first refused connection (a forwarded request or the next probe, ≤ 200 ms):
      // the bound is generous for a loaded machine, far below the grace of timeouts (3 s).
      while (Date.now() - killed < 2_500 && (await suspectGauge()) !== 1) await sleep(20);
      markedAfterMs = Date.now() - killed;
      await sleep(700);
    });
    assert.ok(markedAfterMs < 2_500, `node-2 marked ${markedAfterMs} ms after SIGKILL`);
    assert.deepEqual(Object.keys(statuses), ['200'], JSON.stringify(statuses));
    assert.equal(await suspectGauge(), 1);
    process.stderr.write(`# node-2 marked ${markedAfterMs} ms after SIGKILL; statuses ${JSON.stringify(statuses)}\n`);
  });
});
