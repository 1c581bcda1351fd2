/**
 * End to end, hot tenants FOUND by their owner (issue 4: "A tenant ... found hot by its owner
 * (sustained rate above `hot.threshold_rps`), is routed over k nodes (`ring.range`) ... Routers learn
 * the hot set through Redis (and config) within 1 s."). Real processes: redis-server, the simulator,
 * three nodes with Redis membership (heartbeat 200 ms, dead_after 1 s) and one router; `cluster.hot:
 * { threshold_rps: 40, spread: 3, sustain: 1s, cooldown: 3s }`. No tenant is configured hot.
 *
 * Tenants:
 * - `busy`: tokens 30,000 / 1m (token bucket: capacity 30,000, refill 500 tokens/s) and concurrent
 *   30 (10 per node when spread: never the refusing limit at these rates);
 * - `calm`: tokens 1,000,000 / 1m, concurrent 10, at 5 req/s for the whole run: far below the
 *   threshold, so it must stay on its one owner (every answer a 200 from that node);
 * - `probe`: configured `spread: 3`, used once before the run to learn each process's
 *   `x-quotaring-request-id` prefix (`<8 hex>-<random>`, per process) with one request sent straight
 *   to each node: a 200 names the node that decided it. Refusals (429) carry no request id, so "served
 *   by" below counts 200s only.
 *
 * Load (exact tokens: a 40-token prompt counted exactly plus `max_tokens` = output, which the
 * simulator fills exactly via the forwarded `x-sim-output-tokens`; reservation == usage):
 * 1. `busy` at 100 req/s for 10 s, 100-token requests (10,000 tokens/s, 20× the refill). The owner's
 *    rate (1 s time constant) crosses 40 after ≈ 0.51 s and stays there; after `sustain` (1 s) the
 *    owner charges its usage to the global cap and marks the tenant in `qr:{hotdetect}:hot`: expected
 *    at ≈ 1.5 s, when ≈ 15,000 of the 30,000 tokens are used. The bucket then lasts until ≈ 3.2 s
 *    (≈ 15,750 left at 9,500 tokens/s net), so for ≈ 1.7 s after the promotion every request is
 *    admitted wherever it lands: the first 200 from a node other than the owner measures when the
 *    router AND that node (each polls the hot set every 500 ms; a node that has not read it yet
 *    answers 421 and the router retries at the owner) learnt the tenant is hot. After that the
 *    three nodes lease the 500 tokens/s refill.
 * 2. `busy` at 5 req/s for 9 s, 200-token requests (1,000 tokens/s: twice the refill, so the bucket
 *    stays empty through the cooldown and an owner that took the tenant back with a fresh bucket —
 *    not charged with the usage read from the global cap — would admit up to 30,000 tokens more and
 *    break the bound below). The owner sees 1/3 of 5 req/s; × k = 5 req/s < threshold / 2 = 20, so
 *    it stops refreshing the entry ≤ ≈ 1.9 s into phase 2 (its rate decays from ≈ 33 with a 1 s time
 *    constant and it refreshes at most once a second), the entry lapses 3 s after its last refresh
 *    (≤ ≈ 14.9 s of the run) and everyone drops it at `until` by its own clock: the last 3 s of
 *    phase 2 (16–19 s) must be served by the owner alone, ≈ 2.5 admitted requests a second.
 *
 * Asserted:
 * (a) exactly one 'hot tenant: spread over k nodes' line, from `busy`'s ring owner; every `busy` 200
 *     sent before it came from the owner (and there were some); after it, all three nodes served
 *     `busy` in phase 1; from the log line (pino `time`, ms) to the end of the first 200 served by a
 *     non-owner (client `Date.now()`, same machine clock) ≤ 1,000 ms — the response's end bounds from
 *     above when the router learnt (it routed the request before);
 * (b) the 200s of `busy` sent in the last 3 s of phase 2 (at least 3) all came from the owner, and the
 *     owner logged 'hot tenant cooled: back on its owner with its usage from the global cap';
 * (c) `calm`: every request a 200, all from its ring owner; never in the hot set;
 * (d) for `busy`, for every interval [a, b] (a = a 200's start, b = a 200's end), the tokens of the
 *     200s sent at or after a and answered by b ≤ 30,000 + 500 × (b − a) s, with no slack: a token
 *     bucket that starts full never admits more; the client-side count is a lower bound of what was
 *     admitted in [a, b]; reservation == usage; every process and Redis share this machine's clock.
 *     This holds across the promotion (the cap charged with the owner's usage) and the cooldown (the
 *     owner charged with the cap's usage);
 * (e) no 5xx and no failed request: every `busy` answer is a 200 or a 429 `rate_limit_exceeded`
 *     (and some 429s in phase 1: the limit was binding); every 200 used exactly its tokens.
 * The figures (time to spread, time to learn, lapse and time back to owner, tokens vs bound, statuses)
 * are printed on stdout as `# hot detect: {...}`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member } from '../../src/coord/types.ts';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { worstInterval } from '../helpers/bounds.ts';
import { startNodesAndRouter } from '../helpers/cluster.ts';
import { startRedis } from '../helpers/redis.ts';
import { startLoad, totalTokens } from '../helpers/load-sender.ts';
import type { SentRequest } from '../helpers/load-sender.ts';

const CLUSTER = 'hotdetect';
const CAPACITY = 30_000;
const REFILL_PER_S = CAPACITY / 60;
const PROMPT = 40;
/** Output tokens of phase 1 (100-token requests) and phase 2 (200-token requests). */
const OUTPUT_1 = 60;
const OUTPUT_2 = 160;
const PHASE1_MS = 10_000;
const PHASE1_RPS = 100;
const PHASE2_MS = 9_000;
const PHASE2_RPS = 5;
const CALM_RPS = 5;
const RUN_MS = PHASE1_MS + PHASE2_MS;
/** Phase 2's last 3 s: `busy` must be on its owner alone. */
const TAIL_FROM_MS = RUN_MS - 3_000;
const LEARN_MAX_MS = 1_000;
const BUSY_KEY = 'key-busy-tenant-0000';
const CALM_KEY = 'key-calm-tenant-0000';
const PROBE_KEY = 'key-probe-tenant-0000';
const SIM_KEY = 'sim-hotdetect-key';
const SPREAD_MSG = 'hot tenant: spread over k nodes';
const COOLED_OWNER_MSG = 'hot tenant cooled: back on its owner with its usage from the global cap';
const COOLED_SET_MSG = 'hot tenants cooled: back on their owners';

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
const bodyOf = (output: number): string => JSON.stringify({ ...prompts.body(PROMPT), max_tokens: output });
const headers = (key: string, output: number): Record<string, string> => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim-output-tokens': String(output) });

/** One request, times in clock ms. */
type Sent = SentRequest<'busy' | 'calm'> & {
  /** The tokens it must use: prompt + its phase's output. */
  readonly cost: number;
  /** The node that served a 200. */
  node: string;
  /** `429 <x-quotaring-error> <limit>` or `<status>`, for the report. */
  kind: string;
  problem?: string;
};

interface LogLine {
  readonly node: string;
  readonly time: number;
  readonly msg: string;
  readonly level: number;
  readonly tenant?: string;
  readonly cooled?: string[];
  readonly used?: unknown;
}

function logLines(node: string, output: string): LogLine[] {
  const out: LogLine[] = [];
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push({ node, ...(JSON.parse(line) as Omit<LogLine, 'node'>) });
    } catch {
      // not a log line
    }
  }
  return out;
}



describe('a tenant found hot by its owner, spread over 3 nodes, then back on its owner', () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  const procs: Running[] = [];
  const nodeProcs: Running[] = [];
  const members: Member[] = [];
  let router = '';

  before(async () => {
    redis = await startRedis();
    const simPort = await freePort();
    const simUrl = `http://127.0.0.1:${simPort}`;
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: {
        name: CLUSTER,
        redis: { url: redis.url },
        heartbeat: '200ms',
        dead_after: '1s',
        hot: { threshold_rps: 40, spread: 3, sustain: '1s', cooldown: '3s' },
      },
      tenants: [
        { id: 'busy', keys: [BUSY_KEY], limits: [{ tokens: CAPACITY, window: '1m' }, { concurrent: 30 }] },
        { id: 'calm', keys: [CALM_KEY], limits: [{ tokens: 1_000_000, window: '1m' }, { concurrent: 10 }] },
        { id: 'probe', keys: [PROBE_KEY], spread: 3, limits: [{ tokens: 1_000_000, window: '1m' }, { concurrent: 3 }] },
      ],
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY', forward_headers: ['x-sim-output-tokens'] }],
    });
    const env = { QUOTARING_SIM_KEY: SIM_KEY };
    procs.push(await runCli(['simulate', '--port', String(simPort)], `${simUrl}/sim/stats`, env));
    // Every process on the ring of the three nodes before anything is measured.
    const cluster = await startNodesAndRouter(config, env);
    procs.push(...cluster.all);
    nodeProcs.push(...cluster.nodes);
    members.push(...cluster.members);
    router = cluster.routerUrl;
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await redis?.stop();
  });

  test('spread within 1 s of the owner finding it hot, back on the owner after the cooldown, within its token bucket throughout', { timeout: RUN_MS + 40_000 }, async () => {
    const agent = new Agent({ connections: 64 });
    const admin = redis.client();
    const ring = createRing(members);
    const owner = ring.owner('busy')?.id ?? '';
    const calmOwner = ring.owner('calm')?.id ?? '';

    // Each node's request-id prefix, from one request of the probe tenant sent straight to it.
    const nodeOfPrefix = new Map<string, string>();
    for (const m of members) {
      const res = await request(`${m.url}/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers: headers(PROBE_KEY, OUTPUT_1), body: bodyOf(OUTPUT_1) });
      const text = await res.body.text();
      assert.equal(res.statusCode, 200, text);
      const id = String(res.headers['x-quotaring-request-id'] ?? '');
      assert.match(id, /^[0-9a-f]{8}-/);
      nodeOfPrefix.set(id.slice(0, 8), m.id);
    }
    assert.equal(nodeOfPrefix.size, 3, 'three processes, three request-id prefixes');
    assert.deepEqual(await admin.hgetall(`qr:{${CLUSTER}}:hot`), {}, 'the hot set is empty before the run');

    const bodies = new Map([OUTPUT_1, OUTPUT_2].map((o) => [o, bodyOf(o)]));
    const t0 = Date.now();
    const load = startLoad({
      streams: [
        { id: 'busy', output: OUTPUT_1, ratePerS: PHASE1_RPS, untilMs: PHASE1_MS },
        { id: 'busy', output: OUTPUT_2, ratePerS: PHASE2_RPS, fromMs: PHASE1_MS, untilMs: RUN_MS },
        // Half an interval off busy's phase 2 so the two do not fire together.
        { id: 'calm', output: OUTPUT_1, ratePerS: CALM_RPS, fromMs: 100, untilMs: RUN_MS },
      ] as const,
      t0,
      url: `${router}/v1/chat/completions`,
      headers: (t) => headers(t.id === 'busy' ? BUSY_KEY : CALM_KEY, t.output),
      body: (t) => bodies.get(t.output) as string,
      dispatcher: agent,
      fields: (t): { cost: number; node: string; kind: string; problem?: string } => ({ cost: PROMPT + t.output, node: '', kind: '' }),
      onAnswer: (s, res, text) => {
        s.kind = String(res.statusCode);
        if (res.statusCode === 200) {
          s.tokens = totalTokens(text);
          const id = String(res.headers['x-quotaring-request-id'] ?? '');
          s.node = nodeOfPrefix.get(id.slice(0, 8)) ?? `unknown ${id}`;
          if (s.tokens !== s.cost) s.problem = `200 with ${s.tokens} tokens, expected ${s.cost}`;
        } else if (res.statusCode === 429) {
          const message = (JSON.parse(text) as { error: { message: string } }).error.message;
          const limit = /Rate limit reached for (\S+)/.exec(message)?.[1] ?? message.slice(0, 60);
          s.kind = `429 ${String(res.headers['x-quotaring-error'])} ${limit}`;
          if (res.headers['x-quotaring-error'] !== 'rate_limit_exceeded' || !(Number(res.headers['retry-after']) > 0)) s.problem = `${s.kind}: ${message}`;
        } else {
          s.problem = `${res.statusCode}: ${text.slice(0, 200)}`;
        }
      },
      onError: (s, err) => {
        s.kind = 'error';
        s.problem = err.message;
      },
    });
    await load.ended;
    await load.settled();
    const sent: Sent[] = load.sent;
    await sleep(600); // every process's next read of the hot set, and the nodes' logs flushed
    const hotHash = await admin.hgetall(`qr:{${CLUSTER}}:hot`);
    await agent.close();

    // The nodes' logs.
    const logs = nodeProcs.flatMap((p, i) => logLines(members[i]?.id ?? '', p.output()));
    const spreadLines = logs.filter((l) => l.msg === SPREAD_MSG);
    const busySpread = spreadLines.filter((l) => l.tenant === 'busy');
    const cooledOwner = logs.filter((l) => l.msg === COOLED_OWNER_MSG && l.tenant === 'busy');
    const cooledSet = logs.filter((l) => l.msg === COOLED_SET_MSG);
    const warnings = logs.filter((l) => l.level >= 40 || /fallback|breaker/i.test(l.msg)).map((l) => `${l.node} ${((l.time - t0) / 1_000).toFixed(3)}s ${l.msg}`);
    const spreadAt = busySpread[0]?.time ?? Infinity;

    const busy = sent.filter((s) => s.tenant === 'busy');
    const calm = sent.filter((s) => s.tenant === 'calm');
    const busyOk = busy.filter((s) => s.status === 200);
    const calmOk = calm.filter((s) => s.status === 200);
    const phase1End = t0 + PHASE1_MS;
    const beforeSpread = busyOk.filter((s) => s.start < spreadAt);
    const spreadPhase1 = busyOk.filter((s) => s.start >= spreadAt && s.start < phase1End);
    const firstNonOwner = busyOk.filter((s) => s.node !== owner).sort((x, y) => x.end - y.end)[0];
    const lastNonOwner = busyOk.filter((s) => s.node !== owner).sort((x, y) => y.start - x.start)[0];
    const tail = busyOk.filter((s) => s.start >= t0 + TAIL_FROM_MS);
    const nodesOf = (list: readonly Sent[]): Record<string, number> => {
      const by: Record<string, number> = {};
      for (const s of list) by[s.node] = (by[s.node] ?? 0) + 1;
      return by;
    };
    const statuses = (list: readonly Sent[]): Record<string, number> => {
      const by: Record<string, number> = {};
      for (const s of list) by[s.kind] = (by[s.kind] ?? 0) + 1;
      return by;
    };
    const worst = worstInterval(busyOk, CAPACITY, REFILL_PER_S);
    const runEnd = busy.reduce((last, s) => Math.max(last, s.end), 0);
    const admitted = busyOk.reduce((sum, s) => sum + s.tokens, 0);
    const wholeBound = CAPACITY + (REFILL_PER_S * (runEnd - (busy[0]?.start ?? t0))) / 1_000;
    const busyEntry = hotHash['busy'] === undefined ? undefined : (JSON.parse(hotHash['busy']) as { k: number; until: number });
    const rel = (t: number | undefined): number | null => (t === undefined || !Number.isFinite(t) ? null : t - t0);
    const figures = {
      owner,
      calmOwner,
      spreadLogMs: rel(spreadAt),
      firstNonOwner200: firstNonOwner === undefined ? null : { node: firstNonOwner.node, startMs: rel(firstNonOwner.start), endMs: rel(firstNonOwner.end) },
      learnMs: firstNonOwner === undefined ? null : firstNonOwner.end - spreadAt,
      learnFromStartMs: firstNonOwner === undefined ? null : firstNonOwner.start - spreadAt,
      hotEntryUntilMs: rel(busyEntry?.until),
      lastNonOwner200StartMs: rel(lastNonOwner?.start),
      ownerCooledLog: cooledOwner.map((l) => ({ node: l.node, atMs: l.time - t0, used: l.used })),
      setCooledLogs: cooledSet.map((l) => ({ node: l.node, atMs: l.time - t0, cooled: l.cooled })),
      busy200sBeforeSpread: nodesOf(beforeSpread),
      // Admitted by the owner while it was promoting the tenant (usage read, charge to the cap and mark in flight).
      busy200sStartedInThe30msBeforeTheSpreadLine: beforeSpread.filter((s) => s.start >= spreadAt - 30).map((s) => `${s.start - t0}-${s.end - t0}`),
      busy200sSpreadPhase1: nodesOf(spreadPhase1),
      busy200sTail: nodesOf(tail),
      calm200s: nodesOf(calmOk),
      busyStatuses: statuses(busy),
      calmStatuses: statuses(calm),
      busyAdmittedTokens: admitted,
      busyWholeRunBound: Math.floor(wholeBound),
      worstInterval: { aMs: rel(worst.a), bMs: rel(worst.b), admitted: worst.admitted, bound: Math.floor(worst.bound), excess: Math.round(worst.excess) },
      hotHash,
      warnings: warnings.slice(0, 20),
    };
    console.log(`# hot detect: ${JSON.stringify(figures)}`);

    // (e) No 5xx, no failed request; every 200 used exactly its tokens; the limit was binding.
    assert.deepEqual(
      sent.filter((s) => s.problem !== undefined).slice(0, 10).map((s) => `${s.tenant} at ${s.start - t0} ms: ${s.problem}`),
      [],
    );
    assert.ok(busy.length >= (PHASE1_RPS * PHASE1_MS + PHASE2_RPS * PHASE2_MS) / 1_000 - 2, `only ${busy.length} busy requests sent`);
    assert.ok(busy.some((s) => s.status === 429 && s.start < phase1End), 'busy was refused in phase 1: its tokens limit was binding');

    // (a) Found hot by its owner, spread over the three nodes within 1 s of that.
    assert.ok(owner !== '' && calmOwner !== '');
    assert.deepEqual(
      spreadLines.map((l) => `${l.node} ${String(l.tenant)}`),
      [`${owner} busy`],
      'exactly one spread line, for busy, from its owner',
    );
    assert.ok(beforeSpread.length > 0, 'busy was served before it was found hot');
    assert.deepEqual(Object.keys(nodesOf(beforeSpread)), [owner], 'before the spread line busy was served by its owner alone');
    assert.deepEqual(Object.keys(nodesOf(spreadPhase1)).sort(), members.map((m) => m.id).sort(), 'after the spread line all three nodes served busy');
    assert.ok(firstNonOwner !== undefined);
    assert.ok(firstNonOwner.end - spreadAt <= LEARN_MAX_MS, `first 200 from a non-owner ${firstNonOwner.end - spreadAt} ms after the spread line (> ${LEARN_MAX_MS} ms)`);

    // (b) Back on its owner in the last 3 s of phase 2, with its usage from the global cap.
    assert.ok(tail.length >= 3, `only ${tail.length} busy 200s in the last 3 s`);
    assert.deepEqual(Object.keys(nodesOf(tail)), [owner], 'busy served by its owner alone in the last 3 s');
    assert.deepEqual(
      cooledOwner.map((l) => l.node),
      [owner],
      `the owner logged '${COOLED_OWNER_MSG}' once`,
    );
    assert.equal(busyEntry?.k, 3, 'the hot set held busy over k = 3');

    // (c) calm was never spread.
    assert.equal(calmOk.length, calm.length, 'every calm request got a 200');
    assert.deepEqual(Object.keys(nodesOf(calmOk)), [calmOwner], 'calm served by its owner alone');
    assert.equal(hotHash['calm'], undefined, 'calm never entered the hot set');

    // (d) busy within its token bucket over every interval, across both transitions.
    assert.ok(
      worst.excess <= 0,
      `busy admitted beyond its limit: ${worst.admitted} tokens within [${worst.a - t0}, ${worst.b - t0}] ms, bound ${CAPACITY} + ${REFILL_PER_S}/s × ${((worst.b - worst.a) / 1_000).toFixed(3)} s = ${worst.bound.toFixed(0)} (excess ${worst.excess.toFixed(0)})`,
    );
  });
});
