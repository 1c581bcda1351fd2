/**
 * End to end, a hot tenant spread over three nodes (issue 4: "A hot tenant at 5× one node's
 * capacity, spread over 3 nodes, stays within 1% of its TPM limit with at most 0.05 Redis calls per
 * request"). Real processes: redis-server, the simulator (no quota of its own), three nodes with Redis
 * membership and one router.
 *
 * Interpretation. One tenant `hot` with `spread: 3`, a tokens limit of 300,000 per minute (a token
 * bucket: capacity 300,000, refill 5,000 tokens/s, kept in Redis and leased in blocks by each node)
 * and a concurrency limit of 150 (50 per node: 600 ms of one node's traffic stalled in flight, so
 * every 429 comes from the tokens limit; 60 was reached once during a CPU stall on a shared 2-core VM). Every request uses exactly 100 tokens: a 40-token prompt (exact
 * counting) and `max_tokens` 60, and the simulator answers exactly 60 (`x-sim-output-tokens: 60`,
 * forwarded by the deployment), so the reservation equals the usage and nothing is refunded or
 * debited at settlement. The client offers 250 requests/s for 90 s through the router = 1,500,000
 * tokens a minute, 5× the limit ("5× one node's capacity": the tenant asks five times what it is
 * allowed; the router sends it round-robin to the three nodes of its range).
 *
 * Exact expectations:
 * - admitted tokens (sum of `usage.total_tokens` of the 200s; each must be exactly 100) over the run
 *   are within 1% of the allowance = the burst (capacity, 300,000: the bucket is full at the start)
 *   + 5,000 × the run's seconds (first request sent to last response received), ≈ 750,000. The upper
 *   bound is the safety property; the lower bound measures what leasing leaves unspent (units granted
 *   to a node and not spent by the end, or refilled in Redis and not yet leased).
 * - every other answer is a 429 `rate_limit_exceeded` for `tokens/1m` with a positive `retry-after`
 *   (no 5xx, no connection error);
 * - all three nodes served 200s. Nodes do not name themselves in responses, but
 *   `x-quotaring-request-id` is `<8 hex chars per process>-<128 random bits>`; before the run one request
 *   of a second spread tenant (`probe`, its own bucket) is sent straight to each node to learn its prefix.
 * - global-cap script calls (EVAL + EVALSHA in Redis `INFO commandstats`, read before and after the
 *   run) divided by the requests sent ≤ 0.05. Membership (the only other client of Redis here: spread
 *   tenants are never checkpointed or handed over) sends TIME + a ZADD/ZREMRANGEBYSCORE/ZRANGE
 *   pipeline per heartbeat and PUBLISH, never a script. Commandstats also counts the commands the
 *   scripts run inside Redis (one TIME and one HMGET each, HSET + PEXPIRE or DEL when they write);
 *   those are subtracted to report the commands clients sent.
 *
 * Logged besides: the split of script calls before and after 20 s (burst / at the cap), and each
 * node's fallback episodes (its log at `info`: a single Redis call over the 15 ms timeout puts a node
 * on its local share, capacity / 3 less what it already used in the window, until its next probe 1 s
 * later), the first suspect when the 1% bounds fail.
 *
 * Why 0.05 is reachable: at the cap the bucket refills 5,000 tokens/s; a node renews about twice a
 * second (blocks of 500 ms of its spend; a starved node asks again after 2 × 500 ms for its third of
 * that much refill): about 5–6 calls/s against 250 requests/s (measured 0.022 per request, with
 * admitted/allowance 0.993; a timed-out grant is credited when its answer arrives).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import type { Member } from '../../src/coord/types.ts';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { freePort, runCli, writeConfig } from '../helpers/processes.ts';
import type { Running } from '../helpers/processes.ts';
import { startNodesAndRouter } from '../helpers/cluster.ts';
import { startRedis } from '../helpers/redis.ts';
import { startLoad, totalTokens } from '../helpers/load-sender.ts';
import type { SentRequest } from '../helpers/load-sender.ts';

const CLUSTER = 'hot';
const LIMIT_TPM = 300_000;
const CONCURRENT = 150;
/** Every request uses exactly 100 tokens: prompt 40 (exact) + output 60. */
const PROMPT = 40;
const OUTPUT = 60;
const PER_REQUEST = PROMPT + OUTPUT;
/** 250 × 100 tokens/s = 1,500,000 tokens a minute = 5 × LIMIT_TPM. */
const RATE_PER_S = 250;
/**
 * 90 s: at the end up to one second of refill (5,000 tokens) waits in Redis for the next renewal of
 * the starved nodes (every 2 × blockMs = 1 s), and about one block per node is leased but unspent;
 * over 90 s that end effect weighs ≈ 0.6% of the allowance (≈ 0.9% over 60 s, too close to 1%).
 */
const RUN_MS = 90_000;
/** 300,000 tokens of burst at 25,000 − 5,000 tokens/s: spent after 15 s; from 20 s on the cap decides. */
const SPLIT_MS = 20_000;
const HOT_KEY = 'key-hot-tenant-0000';
const PROBE_KEY = 'key-probe-tenant-0000';
const BUCKET_KEY = `qr:${CLUSTER}:cap:{tenant:hot:tokens:${LIMIT_TPM}/60000}`;
const SIM_KEY = 'sim-hot-key';

const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
const body = JSON.stringify({ ...prompts.body(PROMPT), max_tokens: OUTPUT });
const headers = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim-output-tokens': String(OUTPUT) });

/** One request of `hot`, times in clock ms: the node that served a 200, what was wrong with an answer. */
type Sent = SentRequest<string> & { node: string; problem?: string };

/** `cmdstat_<name>:calls=<n>` of `INFO commandstats`, by command name. */
async function commandCalls(redis: Redis): Promise<Map<string, number>> {
  const text = await redis.info('commandstats');
  const calls = new Map<string, number>();
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1] as string, Number(m[2]));
  return calls;
}

/** A node's fallback episodes from its log lines, as `start-end` seconds after `t0` ("entering fallback" / "leaving fallback"). */
function fallbackEpisodes(log: string, t0: number): string[] {
  const out: string[] = [];
  for (const line of log.split('\n')) {
    if (!line.includes('fallback:')) continue;
    const { time, msg } = JSON.parse(line) as { time: number; msg: string };
    const at = ((time - t0) / 1_000).toFixed(2);
    if (msg.startsWith('entering')) out.push(`${at}-`);
    else if (out.length > 0) out[out.length - 1] += at;
  }
  return out;
}


describe('a hot tenant spread over 3 nodes at 5× its TPM limit', () => {
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
      cluster: { name: CLUSTER, redis: { url: redis.url } },
      tenants: [
        { id: 'hot', keys: [HOT_KEY], spread: 3, limits: [{ tokens: LIMIT_TPM, window: '1m' }, { concurrent: CONCURRENT }] },
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

  test('admitted tokens within 1% of the allowance, ≤ 0.05 cap script calls per request, all 3 nodes serve', { timeout: RUN_MS + 40_000 }, async () => {
    const agent = new Agent({ connections: 64 });
    const admin = redis.client();

    // Each node's request-id prefix, from one request of the probe tenant sent straight to it.
    const nodeOfPrefix = new Map<string, string>();
    for (const m of members) {
      const res = await request(`${m.url}/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers: headers(PROBE_KEY), body });
      const text = await res.body.text();
      assert.equal(res.statusCode, 200, text);
      const id = String(res.headers['x-quotaring-request-id'] ?? '');
      assert.match(id, /^[0-9a-f]{8}-/);
      nodeOfPrefix.set(id.slice(0, 8), m.id);
    }
    assert.equal(nodeOfPrefix.size, 3, 'three processes, three request-id prefixes');
    assert.equal(await admin.exists(BUCKET_KEY), 0, 'the hot bucket is untouched (full) before the run');

    const before = await commandCalls(admin);
    const t0 = Date.now();
    let mid: { sent: number; calls: Promise<Map<string, number>> } | undefined;
    const load = startLoad({
      streams: [{ id: 'hot', ratePerS: RATE_PER_S, untilMs: RUN_MS }],
      stopBy: 'clock',
      t0,
      url: `${router}/v1/chat/completions`,
      headers: () => headers(HOT_KEY),
      body,
      dispatcher: agent,
      fields: (): { node: string; problem?: string } => ({ node: '' }),
      // Split the script calls between the burst (the full bucket spent in ≈ 15 s) and the cap.
      beforeWait: () => {
        if (mid === undefined && Date.now() - t0 >= SPLIT_MS) mid = { sent: load.sent.length, calls: commandCalls(admin) };
      },
      onAnswer: (s, res, text) => {
        if (res.statusCode === 200) {
          s.tokens = totalTokens(text);
          s.node = nodeOfPrefix.get(String(res.headers['x-quotaring-request-id'] ?? '').slice(0, 8)) ?? `unknown ${String(res.headers['x-quotaring-request-id'])}`;
          if (s.tokens !== PER_REQUEST) s.problem = `200 with ${s.tokens} tokens`;
        } else if (res.statusCode === 429) {
          const message = (JSON.parse(text) as { error: { message: string } }).error.message;
          const retryAfter = Number(res.headers['retry-after']);
          if (res.headers['x-quotaring-error'] !== 'rate_limit_exceeded' || !(retryAfter > 0) || !message.includes('tokens/1m')) {
            s.problem = `429 ${String(res.headers['x-quotaring-error'])} retry-after ${String(res.headers['retry-after'])}: ${message}`;
          }
        } else {
          s.problem = `${res.statusCode}: ${text.slice(0, 200)}`;
        }
      },
      onError: (s, err) => {
        s.problem = err.message;
      },
    });
    await load.ended;
    await load.settled();
    const sent: Sent[] = load.sent;
    const runS = (sent.reduce((last, s) => Math.max(last, s.end), 0) - t0) / 1_000;
    // What Redis still holds for nobody: the bucket's level now (a missing key is a full bucket).
    const [[level, at], [sec, usec]] = await Promise.all([admin.hmget(BUCKET_KEY, 'l', 't'), admin.time()]);
    const redisNow = Number(sec) * 1_000 + Number(usec) / 1_000;
    const redisLevel = level === null || at === null ? LIMIT_TPM : Math.min(LIMIT_TPM, Number(level) + ((redisNow - Number(at)) * LIMIT_TPM) / 60_000);
    await sleep(200); // renewals started by the last takes land
    const afterRun = await commandCalls(admin);
    await agent.close();

    const diff = new Map<string, number>();
    for (const [name, calls] of afterRun) if (name !== 'info') diff.set(name, calls - (before.get(name) ?? 0));
    const d = (name: string): number => diff.get(name) ?? 0;
    const scripts = d('eval') + d('evalsha');
    const midCalls = await (mid as NonNullable<typeof mid>).calls;
    const scriptsOf = (m: Map<string, number>): number => (m.get('eval') ?? 0) + (m.get('evalsha') ?? 0);
    const burstScripts = scriptsOf(midCalls) - scriptsOf(before);
    const midSent = (mid as NonNullable<typeof mid>).sent;
    const counted = [...diff.values()].reduce((a, b) => a + b, 0);
    const insideScripts = 2 * scripts + d('hset') + d('pexpire') + d('del');
    const clientCommands = counted - insideScripts;

    const ok = sent.filter((s) => s.status === 200);
    const refused = sent.filter((s) => s.status === 429).length;
    const admitted = ok.reduce((sum, s) => sum + s.tokens, 0);
    const allowance = LIMIT_TPM + (LIMIT_TPM / 60) * runS;
    const ratio = admitted / allowance;
    const byNode: Record<string, number> = {};
    for (const s of ok) byNode[s.node] = (byNode[s.node] ?? 0) + 1;
    const figures = {
      requestsSent: sent.length,
      ok: ok.length,
      refused429: refused,
      other: sent.length - ok.length - refused,
      runSeconds: runS,
      admittedTokens: admitted,
      allowance: Math.round(allowance),
      admittedOverAllowance: Number(ratio.toFixed(5)),
      redisLevelAtEnd: Math.round(redisLevel),
      unaccounted: Math.round(allowance - admitted - redisLevel),
      okByNode: byNode,
      // A Redis call of the nodes that timed out (15 ms) puts the node on its local share until one succeeds.
      fallbackEpisodes: nodeProcs.map((p) => fallbackEpisodes(p.output(), t0)),
      capScriptCalls: scripts,
      capScriptCallsPerRequest: Number((scripts / sent.length).toFixed(5)),
      first20sScriptCallsPerRequest: Number((burstScripts / midSent).toFixed(5)),
      after20sScriptCallsPerRequest: Number(((scripts - burstScripts) / (sent.length - midSent)).toFixed(5)),
      commandsCountedPerRequest: Number((counted / sent.length).toFixed(5)),
      clientCommandsPerRequest: Number((clientCommands / sent.length).toFixed(5)),
      nonScriptClientCommands: clientCommands - scripts,
      commandstats: Object.fromEntries([...diff].filter(([, v]) => v > 0)),
    };
    console.log(`# hot tenant: ${JSON.stringify(figures)}`);


    assert.deepEqual(
      sent.filter((s) => s.problem !== undefined).slice(0, 10).map((s) => s.problem),
      [],
    );
    assert.ok(sent.length >= RATE_PER_S * (RUN_MS / 1_000) * 0.98, `only ${sent.length} requests sent`);
    assert.deepEqual(Object.keys(byNode).sort(), ['node-1', 'node-2', 'node-3']);
    assert.ok(admitted <= 1.01 * allowance, `admitted ${admitted} tokens, over 1.01 × the allowance ${allowance.toFixed(0)}`);
    assert.ok(admitted >= 0.99 * allowance, `admitted ${admitted} tokens, under 0.99 × the allowance ${allowance.toFixed(0)}`);
    assert.ok(scripts > 0, 'the nodes leased from Redis');
    assert.ok(scripts / sent.length <= 0.05, `${scripts} cap script calls for ${sent.length} requests`);
  });
});
