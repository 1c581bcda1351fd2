/**
 * End to end, membership changes under load: Redis, the simulator, three nodes and two routers as
 * real processes; 50 tenants send traffic above their limits while a fourth node joins, a node leaves
 * gracefully (SIGTERM), another is SIGKILLed and then restarted with its old id on its old port (a
 * rejoin). Half the tenants stream, so requests are in flight
 * across every change and their settlements reach the new owners.
 *
 * Windows are 10 s here (not the 60 s) so the test fits in a minute; the bounds are the
 * issue's: admitted tokens in any window ≤ limit + 2% around the join and the graceful leave, plus one
 * checkpoint interval (1 s) of the tenant's own traffic around the SIGKILL. The bound is checked on
 * two sides. From the client's: a lower bound of what the owner admitted, a request counting in a
 * window only when it was sent and answered inside it. From the provider's: every request the
 * simulator answered 200 (its arrival log, `GET /sim/arrivals`; each body names its tenant and
 * request in `user`), counting in a window when it was sent and *arrived at the provider* inside
 * it: that also counts a request that reached the provider twice or whose client never saw the
 * answer. The worst window by arrival time alone is printed with the longest send-to-arrival delay.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import { signedRequest } from '../helpers/cluster-secret.ts';
import { startLoad, usageTokens } from '../helpers/load-sender.ts';
import type { SentRequest } from '../helpers/load-sender.ts';

const TENANTS = 50;
const WINDOW_MS = 10_000;
const TOKEN_LIMIT = 2_000;
const CONCURRENT = 3;
/** Longer than the test: a slot of a request that died with node-3 must be freed by the new owner, not by expiry. */
const LEASE_TTL_MS = 120_000;
/** Prompt 80 + output 20: every request uses exactly 100 tokens (exact counting, simulator usage). */
const PROMPT_TOKENS = 80;
const OUTPUT_TOKENS = 20;
/** Each tenant sends this many requests a second: 300 tokens/s against a limit of 200/s. */
const RATE_PER_TENANT = 3;
const SIM_KEY = 'sim-chaos-key';

/** One request of tenant c<tenant>, times in clock ms. */
type Sent = SentRequest<number>;

/** One request as the simulator received it (`GET /sim/arrivals`). */
interface Arrival {
  readonly at: number;
  readonly user: string | null;
  readonly status: number | null;
  readonly key: string;
}

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
/**
 * Each request's body names its tenant and its index in `sent` in `user` (`c<tenant>.<index>`), which
 * quotaring passes upstream unchanged: the simulator's arrival log says which request each arrival
 * was. Odd tenants stream (20 tokens at 100 tokens/s: 200 ms in flight), so settlements cross
 * membership changes.
 */
const prompt = prompts.body(PROMPT_TOKENS);
const bodyOf = (tenant: number, index: number): string =>
  JSON.stringify({ ...prompt, max_tokens: OUTPUT_TOKENS, user: `c${tenant}.${index}`, ...(tenant % 2 === 1 ? { stream: true, stream_options: { include_usage: true } } : {}) });

function chaosConfig(simPort: number, redisUrl: string): string {
  return writeConfig({
    server: { log_level: 'info' },
    cluster: { name: 'chaos', redis: { url: redisUrl }, heartbeat: '200ms', dead_after: '1s', health_check: '200ms', handoff: { drain: '600ms' } },
    tenants: Array.from({ length: TENANTS }, (_, i) => ({
      id: `c${i}`,
      keys: [`key-chaos-${i}-0000`],
      limits: [
        { tokens: TOKEN_LIMIT, window: '10s', algorithm: 'sliding_window' },
        { concurrent: CONCURRENT, lease_ttl: `${LEASE_TTL_MS}ms` },
      ],
    })),
    models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
    deployments: [{ name: 'sim', provider: 'openai', base_url: `http://127.0.0.1:${simPort}`, api_key_env: 'QUOTARING_SIM_KEY' }],
  });
}

/** Largest tokens of one tenant's admitted requests sent and answered inside one window, over windows starting at each request. */
function worstWindow(sent: readonly Sent[], allowance: (from: number, to: number) => number): { excess: number; at: number; tokens: number; allowed: number } {
  const ok = sent.filter((s) => s.status === 200).sort((a, b) => a.start - b.start);
  let worst = { excess: -Infinity, at: 0, tokens: 0, allowed: 0 };
  for (let i = 0; i < ok.length; i++) {
    const from = (ok[i] as Sent).start;
    const to = from + WINDOW_MS;
    let tokens = 0;
    for (let j = i; j < ok.length && (ok[j] as Sent).start < to; j++) if ((ok[j] as Sent).end < to) tokens += (ok[j] as Sent).tokens;
    const allowed = allowance(from, to);
    if (tokens - allowed > worst.excess) worst = { excess: tokens - allowed, at: from, tokens, allowed };
  }
  return worst;
}

describe('cluster under membership changes: join, graceful leave, SIGKILL with 50 tenants', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const procs: Running[] = [];
  const nodes = new Map<string, { proc: Running; url: string }>();
  const routers: string[] = [];
  const routerProcs: Running[] = [];
  let config = '';
  let simUrl = '';
  const env = { QUOTARING_SIM_KEY: SIM_KEY };

  async function startNode(id: string, at?: number): Promise<void> {
    const port = at ?? (await freePort());
    const url = `http://127.0.0.1:${port}`;
    const proc = await runCli(['node', '--config', config, '--id', id, '--port', String(port)], `${url}/healthz`, env);
    procs.push(proc);
    nodes.set(id, { proc, url });
  }

  before(async () => {
    redis = await startRedis();
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    config = chaosConfig(simPort, redis.url);
    procs.push(await runCli(['simulate', '--port', String(simPort), '--ttft-ms', '200', '--tps', '100'], `http://127.0.0.1:${simPort}/sim/stats`, env));
    for (const id of ['node-1', 'node-2', 'node-3']) await startNode(id);
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const router = await runCli(['router', '--config', config, '--port', String(port)], `http://127.0.0.1:${port}/readyz`, env);
      procs.push(router);
      routerProcs.push(router);
      routers.push(`http://127.0.0.1:${port}`);
    }
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('over-admission stays within bounds, no 5xx, no slot left held', async () => {
    const agent = new Agent({ connections: 64 });
    const t0 = Date.now();
    // Every tenant fires RATE_PER_TENANT a second, phases spread over the second; request n of
    // tenant c goes to router (n + c) mod 2.
    const load = startLoad({
      streams: Array.from({ length: TENANTS }, (_, tenant) => ({ id: tenant, ratePerS: RATE_PER_TENANT })),
      stagger: true,
      t0,
      url: (t, n) => `${routers[(n + t.id) % routers.length]}/v1/chat/completions`,
      headers: (t) => ({ authorization: `Bearer key-chaos-${t.id}-0000`, 'content-type': 'application/json' }),
      body: (t, index) => bodyOf(t.id, index),
      dispatcher: agent,
      onAnswer: (s, res, text) => {
        if (res.statusCode === 200) {
          const tokens = usageTokens(text);
          assert.ok(tokens !== undefined, text.slice(-300));
          s.tokens = tokens;
        } else if (res.statusCode !== 429) {
          s.tokens = -1;
          process.stderr.write(`# ${res.statusCode} for c${s.tenant} at +${Date.now() - t0} ms: ${text.slice(0, 300)}\n`);
        }
      },
      onError: (s, err) => process.stderr.write(`# request of c${s.tenant} failed: ${err.message}\n`),
    });
    const sent: Sent[] = load.sent;
    // A step that fails stops the load, or the loops would keep the test process alive.
    let joinAt = 0;
    let leaveAt = 0;
    let killAt = 0;
    let rejoinAt = 0;
    try {
      // Past the first window (every tenant spends its limit in its first ~7 s, then is refused until
      // its first requests leave the window), so the join finds requests in flight.
      await sleep(11_000);
      joinAt = Date.now();
      await startNode('node-4');
      await sleep(7_000);
      const afterJoin = (await Promise.all([...nodes.values()].map(async (n) => (await signedRequest(`${n.url}/_quotaring/v1/handoff`)).body.json()))) as {
        node: string;
        stats: { handedOff: number; forwarded: number; lost: number; prefetched: number };
      }[];
      process.stderr.write(`# after the join ${JSON.stringify(afterJoin)}\n`);
      // The join moved tenants with requests in flight: their settlements went to node-4.
      const sum = (key: 'handedOff' | 'forwarded' | 'lost' | 'prefetched'): number => afterJoin.reduce((n, s) => n + s.stats[key], 0);
      // Whether requests of the moved tenants were in flight at the ring change depends on where the
      // sliding windows' phase is when node-4 joins (its start takes 2-6 s, 5+ with both cores busy):
      // forwarded settlements are reported, not required; none may be lost.
      assert.ok(sum('handedOff') > 0 && sum('prefetched') > 0, JSON.stringify(afterJoin));
      assert.equal(sum('lost'), 0, [...nodes.values()].flatMap((n) => n.proc.output().split('\n').filter((line) => line.includes('settlement lost'))).join('\n'));
      leaveAt = Date.now();
      const leaving = nodes.get('node-2') as { proc: Running };
      assert.equal(await leaving.proc.stop(), 0, `node-2 exit code\n${leaving.proc.output().slice(-2_000)}`);
      await sleep(7_000);
      killAt = Date.now();
      const killed = nodes.get('node-3') as { proc: Running; url: string };
      killed.proc.proc.kill('SIGKILL');
      // Restarted with its old id on its old port once the others dropped it: it rejoins and its
      // tenants come back to it by handoff from their interim owners.
      await sleep(4_000);
      rejoinAt = Date.now();
      await startNode('node-3', Number(new URL(killed.url).port));
      await sleep(6_000);
    } finally {
      await load.stop();
    }
    await load.settled();
    await agent.close();

    // No 5xx, no failed request.
    const byStatus = new Map<number, number>();
    for (const s of sent) byStatus.set(s.status, (byStatus.get(s.status) ?? 0) + 1);
    const summary = JSON.stringify(Object.fromEntries(byStatus));
    const median = (xs: number[]): number => xs.sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? 0;
    const latency = (odd: number): number => median(sent.filter((s) => s.status === 200 && s.tenant % 2 === odd).map((s) => s.end - s.start));
    process.stderr.write(`# statuses ${summary}; join at +${joinAt - t0} ms, leave at +${leaveAt - t0}, kill at +${killAt - t0}, rejoin at +${rejoinAt - t0}; median latency JSON ${latency(0)} ms, SSE ${latency(1)} ms\n`);
    // A stream whose node was SIGKILLed after its first bytes is cut (a router never retries once a
    // response started): only those may fail, and never with a status.
    const cut = sent.filter((s) => s.status === -1);
    assert.ok(
      cut.every((s) => s.tenant % 2 === 1 && s.start <= killAt && killAt <= s.end),
      `failed outside the SIGKILL: ${JSON.stringify(cut.map((s) => ({ tenant: s.tenant, start: s.start - t0, end: s.end - t0 })))}`,
    );
    // Any other status, with when it was sent (ms after the start) and the tenant's owner changes above, tells which transition it met.
    const others = sent.filter((s) => s.status !== 200 && s.status !== 429 && s.status !== -1).map((s) => ({ status: s.status, tenant: s.tenant, start: s.start - t0, end: s.end - t0 }));
    assert.deepEqual([...byStatus.keys()].filter((status) => status !== 200 && status !== 429 && status !== -1), [], `${summary}; ${JSON.stringify(others.slice(0, 10))}`);
    assert.ok((byStatus.get(200) ?? 0) > TENANTS * 10, summary);
    assert.ok((byStatus.get(429) ?? 0) > 0, summary);

    // Over-admission: ≤ 2% over the limit, plus the tenant's own last second before the SIGKILL.
    let worst = { tenant: -1, excess: -Infinity, at: 0, tokens: 0, allowed: 0 };
    let clientOver = 0;
    for (let tenant = 0; tenant < TENANTS; tenant++) {
      const own = sent.filter((s) => s.tenant === tenant);
      const lastSecond = own.filter((s) => s.status === 200 && s.start >= killAt - 1_000 && s.start <= killAt).reduce((sum, s) => sum + s.tokens, 0);
      const w = worstWindow(own, (from, to) => TOKEN_LIMIT * 1.02 + (from <= killAt && killAt < to ? lastSecond : 0));
      if (w.excess > 0) clientOver++;
      if (w.excess > worst.excess) worst = { tenant, ...w };
    }
    // The same bound where the provider sees the requests: each arrival it answered 200 (a request
    // that reached it twice counts twice), admitted at a time between its client's send and its
    // arrival there. A window holds it when both lie inside: the limiter never admitted more than
    // the bound in any window, whatever the delays. Counted by arrival time alone, a window can hold
    // beyond the limit the admissions of the delay before it (admission to arrival: a late first
    // request, then quick ones): printed with the longest delay, not asserted.
    const log = (await (await request(`${simUrl}/sim/arrivals`)).body.json()) as { arrivals: Arrival[]; evicted: number };
    const served = sent.filter((s) => s.status === 200);
    const answered = log.arrivals.filter((a) => a.status === 200);
    const byArrivalStatus = new Map<number | null, number>();
    for (const a of log.arrivals) byArrivalStatus.set(a.status, (byArrivalStatus.get(a.status) ?? 0) + 1);
    const arrivalStatuses = JSON.stringify(Object.fromEntries(byArrivalStatus));
    const indexOf = (a: Arrival): number => Number(/^c\d+\.(\d+)$/.exec(a.user ?? '')?.[1] ?? -1);
    let providerWorst = { tenant: -1, excess: -Infinity, at: 0, tokens: 0, allowed: 0 };
    let arrivalWorst = { tenant: -1, excess: -Infinity, at: 0, tokens: 0, allowed: 0 };
    let providerOver = 0;
    let longestDelayMs = 0;
    for (let tenant = 0; tenant < TENANTS; tenant++) {
      const arrivals = answered.filter((a) => a.user?.startsWith(`c${tenant}.`) === true);
      const own: Sent[] = arrivals.map((a) => {
        const s = sent[indexOf(a)] as Sent;
        longestDelayMs = Math.max(longestDelayMs, a.at - s.start);
        return { tenant, start: s.start, end: a.at, status: 200, tokens: PROMPT_TOKENS + OUTPUT_TOKENS };
      });
      const lastSecond = own.filter((s) => s.start >= killAt - 1_000 && s.start <= killAt).reduce((sum, s) => sum + s.tokens, 0);
      const allowance = (from: number, to: number): number => TOKEN_LIMIT * 1.02 + (from <= killAt && killAt < to ? lastSecond : 0);
      const w = worstWindow(own, allowance);
      if (w.excess > 0) providerOver++;
      if (w.excess > providerWorst.excess) providerWorst = { tenant, ...w };
      const byArrival = worstWindow(
        arrivals.map((a) => ({ tenant, start: a.at, end: a.at, status: 200, tokens: PROMPT_TOKENS + OUTPUT_TOKENS })),
        allowance,
      );
      if (byArrival.excess > arrivalWorst.excess) arrivalWorst = { tenant, ...byArrival };
    }
    process.stderr.write(`# worst window, client side: c${worst.tenant} at +${worst.at - t0} ms: ${worst.tokens} tokens, allowed ${worst.allowed}; ${clientOver} tenants over\n`);
    process.stderr.write(
      `# worst window, provider side: c${providerWorst.tenant} at +${providerWorst.at - t0} ms: ${providerWorst.tokens} tokens, allowed ${providerWorst.allowed}; ${providerOver} tenants over` +
        ` (${log.arrivals.length} arrivals by status ${arrivalStatuses}; clients saw ${served.length} 200s)\n`,
    );
    process.stderr.write(
      `# worst window by arrival time alone: c${arrivalWorst.tenant} at +${arrivalWorst.at - t0} ms: ${arrivalWorst.tokens} tokens, allowed ${arrivalWorst.allowed}; longest send to arrival ${longestDelayMs} ms\n`,
    );
    // Routing around a live node splits its tenants over two: say when and why it happened.
    for (const [r, router] of routerProcs.entries()) {
      for (const line of router.output().split('\n').filter((l) => l.startsWith('{') && /suspect|healthy again|unreachable/.test(l))) {
        const entry = JSON.parse(line) as { time: number; msg: string; member?: string; reason?: string; retry?: string };
        process.stderr.write(`# router ${r} +${entry.time - t0} ms: ${entry.msg} ${entry.member ?? ''} ${entry.reason ?? entry.retry ?? ''}\n`);
      }
    }
    assert.equal(log.evicted, 0, 'the arrival log is whole');
    // Every request reached the provider with its tenant as `user`, and used exactly 100 tokens.
    const unnamed = log.arrivals.filter((a) => a.key !== SIM_KEY || a.user === null || !/^c\d+\.\d+$/.test(a.user) || sent[indexOf(a)] === undefined);
    assert.equal(unnamed.length, 0, `arrivals without their tenant as user: ${JSON.stringify(unnamed.slice(0, 5))}`);
    assert.deepEqual(served.filter((s) => s.tokens !== PROMPT_TOKENS + OUTPUT_TOKENS), [], 'every served request used exactly prompt + output tokens');
    assert.ok(worst.excess <= 0, `c${worst.tenant} admitted ${worst.tokens} tokens in the window from +${worst.at - t0} ms (allowed ${worst.allowed})`);
    assert.ok(
      providerWorst.excess <= 0,
      `the provider received ${providerWorst.tokens} tokens of c${providerWorst.tenant} in the window from +${providerWorst.at - t0} ms (allowed ${providerWorst.allowed})`,
    );

    const stats = await Promise.all(
      [...nodes.entries()].filter(([id]) => id !== 'node-2').map(async ([, n]) => (await signedRequest(`${n.url}/_quotaring/v1/handoff`)).body.json()),
    );
    process.stderr.write(`# handoff stats ${JSON.stringify(stats)}\n`);
    const lost = [...nodes.values()].flatMap((n) => n.proc.output().split('\n').filter((line) => line.includes('settlement lost')));
    assert.deepEqual(lost, []);

    // No slot left held: the slots of requests that died with node-3 were freed once it was proven
    // gone (its port refused, then its restart answered with another incarnation).
    const live = [...nodes.entries()].filter(([id]) => id !== 'node-2').map(([, n]) => n.url);
    for (let tenant = 0; tenant < TENANTS; tenant++) {
      let state: { here: boolean; owner: string; limits: { kind: string; remaining: number }[] } | undefined;
      for (const url of live) {
        const res = await signedRequest(`${url}/_quotaring/v1/tenants/c${tenant}`);
        const got = (await res.body.json()) as typeof state & object;
        if (got.here) state = got;
      }
      assert.ok(state !== undefined, `no live node decides for c${tenant}`);
      assert.equal(state.limits.find((l) => l.kind === 'concurrent')?.remaining, CONCURRENT, `c${tenant} on ${state.owner}`);
    }

    // Handoffs happened: the join moved tenants to node-4, the leave moved node-2's away.
    const logs = [...nodes.values()].map((n) => n.proc.output()).join('\n');
    assert.match(logs, /"msg":"handed off"/);
  });
});
