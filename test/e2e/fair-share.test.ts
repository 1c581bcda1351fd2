/**
 * End to end, fair shares of a provider quota across a cluster: Redis, the simulator enforcing
 * 60,000 tokens a minute per key itself, three nodes and a router. Three deployments, each with
 * its own key (so its own provider quota), `tpm: 60000`, headroom 0.9, `algorithm: sliding_window`
 * (no more than the quota in any 60 s) and `fair_share: { reserve: 0.5 }`, run at once:
 * - `equal`: tenants of weight 1;
 * - `weighted`: its A has weight 2 (2:1:1:1);
 * - `floored`: its D has a floor of 20% of the quota.
 * On each, A asks 5x the quota, B and C each 10% of it, and D is idle for a minute, asks 30% for a
 * minute, is idle for a minute, and asks 30% again for 40 s. Every request is 1,000 tokens (an
 * 800-token prompt counted exactly, 200 out).
 *
 * About 4 minutes (the three deployments run at once). It once failed in 3 of 3 runs: one request
 * of a tenant asking 10% (C, on `equal`, its first, 1.3 s after the start) got 429
 * `rate_limit_exceeded` although within its share. The cause: a Redis call past the guard's 15 ms
 * timeout at startup (a blip) served the take from the node's fallback share, spent by A, and the
 * refusal's wait was that share's refill (3.3 s, more than the 2 s a request within its share
 * waits) rather than the blip's 50 ms; a blip's refusal now waits no longer than the blip
 * (`lease-spend.ts`). The report lists each node's guard timeouts so a run shows whether blips
 * happened.
 *
 * Checked at the provider (the simulator's arrival log, by key and by the body's `user`): no 429
 * and no 60 s window above the quota; B and C get ≥ 99% of what they ask; D, from `RETURN_BOUND_MS`
 * after it comes back, ≥ 95% of the smaller of what it asks and its water-filled share; A at least
 * 95% of its water-filled share; the provider receives ≥ 95% of the cluster's cap (quota × headroom)
 * from 10 s in.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Agent, request } from 'undici';
import { waterFill } from '../../src/fairshare/water-fill.ts';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import { startLoad } from '../helpers/load-sender.ts';

const QUOTA_TPM = 60_000;
const HEADROOM = 0.9;
const TOKENS = 1_000;
const RUN_MS = 220_000;
/** D's bursts: [from, until) ms after the start. */
const D_BURSTS: readonly (readonly [number, number])[] = [
  [60_000, 120_000],
  [180_000, 220_000],
];
/**
 * D gets its share within this after it comes back: a tenant no report names gets the water line
 * at once (its first request), and its demand is in every node's table within one exchange
 * (500 ms) plus the time its decayed ask rate takes to pass its share (τ = 2 s).
 */
const RETURN_BOUND_MS = 5_000;
/** Requests a second: A 5x the quota, B and C 10%, D 30% (the quota is 1 request of 1,000 tokens a second). */
const RATE = { A: 5, B: 0.1, C: 0.1, D: 0.3 } as const;
const SETUPS = [
  { name: 'equal', weights: { A: 1, B: 1, C: 1, D: 1 }, floorD: 0 },
  { name: 'weighted', weights: { A: 2, B: 1, C: 1, D: 1 }, floorD: 0 },
  { name: 'floored', weights: { A: 1, B: 1, C: 1, D: 1 }, floorD: 0.2 },
] as const;
type Letter = keyof typeof RATE;
const LETTERS: readonly Letter[] = ['A', 'B', 'C', 'D'];

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });

interface Arrival {
  readonly at: number;
  readonly user: string | null;
  readonly status: number | null;
  readonly key: string;
}

describe('fair shares of a provider quota on 3 nodes through Redis', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const procs: Running[] = [];
  let simUrl = '';
  let router = '';
  const nodes: string[] = [];

  before(async () => {
    redis = await startRedis();
    const simPort = await freePort();
    simUrl = `http://127.0.0.1:${simPort}`;
    const config = writeConfig({
      server: { log_level: 'warn' },
      cluster: { name: 'fair', redis: { url: redis.url }, heartbeat: '200ms', dead_after: '1s' },
      tenants: SETUPS.flatMap((s) =>
        LETTERS.map((l) => ({
          id: `${s.name}-${l}`,
          keys: [`key-${s.name}-${l}-0000`],
          limits: [],
          share: { weight: s.weights[l], floor: l === 'D' ? s.floorD : 0 },
        })),
      ),
      models: SETUPS.map((s) => ({ name: `m-${s.name}`, encoding: 'o200k_base', estimator: 'exact', deployments: [s.name] })),
      deployments: SETUPS.map((s) => ({
        name: s.name,
        provider: 'openai',
        base_url: simUrl,
        api_key_env: `SIM_KEY_${s.name.toUpperCase()}`,
        quota: { tpm: QUOTA_TPM, algorithm: 'sliding_window' },
        headroom: HEADROOM,
        fair_share: { reserve: 0.5 },
      })),
    });
    const env = Object.fromEntries(SETUPS.map((s) => [`SIM_KEY_${s.name.toUpperCase()}`, `sim-key-${s.name}`]));
    procs.push(await runCli(['simulate', '--port', String(simPort), '--tpm', String(QUOTA_TPM)], `${simUrl}/sim/stats`, env));
    for (let i = 1; i <= 3; i++) {
      const port = await freePort();
      nodes.push(`http://127.0.0.1:${port}`);
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

  test('no window above the quota; B and C get what they ask, D its share soon after it returns, A the rest; ≥ 95% used', { timeout: RUN_MS + 120_000 }, async () => {
    const agent = new Agent({ connections: 64 });
    interface Stream {
      readonly id: string;
      readonly ratePerS: number;
      readonly fromMs?: number;
      readonly untilMs: number;
    }
    const streams = SETUPS.flatMap((s) =>
      LETTERS.flatMap((l): Stream[] => {
        const id = `${s.name}-${l}`;
        if (l !== 'D') return [{ id, ratePerS: RATE[l], untilMs: RUN_MS }];
        return D_BURSTS.map(([fromMs, untilMs]) => ({ id, ratePerS: RATE[l], fromMs, untilMs }));
      }),
    );
    const bodies = new Map(SETUPS.flatMap((s) => LETTERS.map((l) => [`${s.name}-${l}`, JSON.stringify({ ...prompts.body(800), model: `m-${s.name}`, max_tokens: 200, user: `${s.name}-${l}` })])));
    const load = startLoad({
      streams,
      stagger: true,
      relative: true,
      url: `${router}/v1/chat/completions`,
      headers: (st) => ({ authorization: `Bearer key-${st.id}-0000`, 'content-type': 'application/json' }),
      body: (st) => bodies.get(st.id) as string,
      dispatcher: agent,
      timeoutMs: 30_000,
      onAnswer: (rec, res, text) => {
        if (res.statusCode !== 200 && res.statusCode !== 429) rec.error = text.slice(0, 200);
        if (res.statusCode === 429) rec.error = String(res.headers['x-quotaring-error']);
      },
    });
    await load.ended;
    await load.settled();
    await agent.close();
    const t0 = load.t0;
    const log = (await (await request(`${simUrl}/sim/arrivals`)).body.json()) as { arrivals: Arrival[]; evicted: number };
    assert.equal(log.evicted, 0);

    const odd = load.sent.filter((s) => s.status !== 200 && s.status !== 429);
    assert.deepEqual(
      odd.map((s) => `${s.tenant} ${s.status} ${s.error ?? ''}`),
      [],
    );
    const report: string[] = [];
    const problems: string[] = [];
    const check = (ok: boolean, what: string): void => {
      if (!ok) problems.push(what);
    };
    for (const s of SETUPS) {
      const key = `sim-key-${s.name}`;
      const arrivals = log.arrivals.filter((a) => a.key === key);
      // 1. At the provider: no 429, and no 60 s window (ending at any arrival) above the quota.
      check(arrivals.filter((a) => a.status === 429).length === 0, `${s.name}: provider 429s`);
      let most = 0;
      for (let i = 0, j = 0; i < arrivals.length; i++) {
        while ((arrivals[j] as Arrival).at <= (arrivals[i] as Arrival).at - 60_000) j++;
        most = Math.max(most, (i - j + 1) * TOKENS);
      }
      check(most <= QUOTA_TPM, `${s.name}: ${most} tokens in one 60 s window at the provider`);
      // 2. What each tenant asked and got, client side (sent = asked), and its water-filled share.
      const sent = (l: Letter, from = 0, until = RUN_MS) => load.sent.filter((r) => r.tenant === `${s.name}-${l}` && r.start >= from && r.start < until);
      const ok = (l: Letter, from = 0, until = RUN_MS) => sent(l, from, until).filter((r) => r.status === 200).length;
      const capPerS = (QUOTA_TPM * HEADROOM) / 60 / TOKENS;
      const fairOf = (dAsks: boolean): Map<string, number> =>
        waterFill(
          capPerS,
          LETTERS.filter((l) => l !== 'D' || dAsks).map((l) => ({ id: l, demand: RATE[l], weight: s.weights[l], floor: l === 'D' ? s.floorD * capPerS : 0 })),
        ).share as Map<string, number>;
      for (const l of ['B', 'C'] as const) {
        const got = ok(l) / sent(l).length;
        const refusals = sent(l).filter((r) => r.status !== 200).map((r) => `${(r.start / 1000).toFixed(1)}s ${r.error ?? r.status}`);
        report.push(`${s.name} ${l}: ${ok(l)}/${sent(l).length}${refusals.length > 0 ? ` refused: ${refusals.join(', ')}` : ''}`);
        check(got >= 0.99, `${s.name} ${l} got ${ok(l)} of ${sent(l).length}`);
      }
      const fairD = fairOf(true).get('D') as number;
      for (const [from, until] of D_BURSTS) {
        const asked = sent('D', from + RETURN_BOUND_MS, until).length;
        const owed = Math.min(asked, Math.floor((fairD * (until - from - RETURN_BOUND_MS)) / 1_000));
        const got = ok('D', from + RETURN_BOUND_MS, until);
        report.push(`${s.name} D burst at ${from / 1000}s: ${got} of ${asked} asked (owed ${owed}); in the first ${RETURN_BOUND_MS / 1000} s ${ok('D', from, from + RETURN_BOUND_MS)}/${sent('D', from, from + RETURN_BOUND_MS).length}`);
        check(got >= Math.floor(0.95 * owed), `${s.name}: D got ${got}, owed ${owed}`);
      }
      // A's share: while D is idle and while it asks, weighted by time.
      const dMs = D_BURSTS.reduce((t, [f, u]) => t + (u - f), 0);
      const owedA = ((fairOf(false).get('A') as number) * (RUN_MS - dMs) + (fairOf(true).get('A') as number) * dMs) / 1_000;
      report.push(`${s.name} A: ${ok('A')} of ${sent('A').length} asked (owed ${owedA.toFixed(1)})`);
      check(ok('A') >= 0.95 * owedA - 6, `${s.name}: A got ${ok('A')}, owed ${owedA.toFixed(1)}`);
      // 3. Utilisation: from 10 s in, what the provider received against the cap.
      const from = t0 + 10_000;
      const received = arrivals.filter((a) => a.at >= from && a.at < t0 + RUN_MS && a.status === 200).length;
      const cap = (capPerS * (RUN_MS - 10_000)) / 1_000;
      report.push(`${s.name}: most in a 60 s window ${most}; used ${received} of ${cap.toFixed(0)} (${((received / cap) * 100).toFixed(1)}%)`);
      check(received >= 0.95 * cap, `${s.name}: the provider received ${received} requests from 10 s in, cap ${cap.toFixed(0)}`);
    }
    for (const node of nodes) {
      const text = await (await request(`${node}/metrics`)).body.text();
      const calls = [...text.matchAll(/^quotaring_redis_guard_calls_total\{guard="cap",result="(\w+)"\} (\d+)/gm)].map((m) => `${m[1]} ${m[2]}`);
      report.push(`${node}: cap guard calls ${calls.join(', ')}`);
    }
    process.stderr.write(`# ${report.join('\n# ')}\n`);
    assert.deepEqual(problems, []);
  });
});
