/**
 * End to end, issue 13 "Partition tests across hosts": Redis, the provider simulator, a router and
 * three nodes, each in its own network namespace (test/helpers/netns.ts), under a steady load from
 * this process through the router while links are cut and healed:
 *
 * 1. a node cut from Redis, not from the router;
 * 2. the router cut from a node (the node stays in the ring, heartbeating);
 * 3. a node cut from its successor (the next member of its tenants' ranges);
 * 4. an owner SIGSTOPped (alive, silent), then SIGCONTinued;
 * 5. Redis SIGKILLed and started again from an RDB saved 6 s earlier (its member set, checkpoints
 *    and run_id older than what the nodes know).
 *
 * Each fault lasts {@link FAULT_MS}, then the cluster gets {@link SETTLE_MS} (more than a window) to
 * recover before the next. Tenants: nine, three owned by each node, with sliding-window limits of
 * {@link WINDOW_MS} (short so the test is quick): even tenants are bound by `requests: 8/10s`, odd
 * ones by `tokens: 1000/10s` (each request is exactly 100 tokens: an 80-token prompt counted exactly
 * plus 20 output tokens the simulator fills); each tenant asks 2 requests a second (2.5×/2× its
 * limit), odd tenants streaming, so requests are in flight at every cut.
 *
 * Checked per scenario, from the client side (a request counts in a window only when it was sent
 * and answered inside it: a lower bound of what the gateway admitted there): no 5xx and no failed or
 * timed-out request during the scenario, and for every tenant and every window starting in the
 * scenario, admitted requests and tokens ≤ limit + the scenario's bound. Each bound is derived from
 * the design as it stands (README "Membership, ownership and handoff", "Status and known gaps"),
 * with the tenant's own admissions over named intervals (see `SCENARIOS` below). A scenario that
 * fails today because the system over-admits is marked `todo` with what is missing (issue 13): its
 * bound is not loosened.
 *
 * Needs root and iproute2 (`ip netns`); skipped with the reason otherwise (CI runs as root).
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { createRing } from '../../src/coord/ring/ring.ts';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { writeConfig } from '../helpers/processes.ts';
import { createNetwork, netnsUnavailable } from '../helpers/netns.ts';
import type { HostProcess, Netns } from '../helpers/netns.ts';
import { startLoad, usageTokens } from '../helpers/load-sender.ts';
import type { Load, SentRequest } from '../helpers/load-sender.ts';

const WINDOW_MS = 10_000;
const FAULT_MS = 5_000;
const SETTLE_MS = 12_000;
/** Requests a second sent per tenant. */
const RATE = 2;
const PROMPT_TOKENS = 80;
const OUTPUT_TOKENS = 20;
const COST = PROMPT_TOKENS + OUTPUT_TOKENS;
/** Cluster timings (and the design's periods the bounds are made of). */
const HEARTBEAT_MS = 200;
const DEAD_AFTER_MS = 1_000;
const HEALTH_CHECK_MS = 200;
const CHECKPOINT_MS = 1_000;
/** A client request unanswered this long counts as failed. */
const CLIENT_TIMEOUT_MS = 30_000;
const NODES = ['node-1', 'node-2', 'node-3'] as const;
const SIM_KEY = 'sim-partition-key';
const PORT = 8080;

interface Limits {
  readonly requests: number;
  readonly tokens: number;
}
const limitsOf = (i: number): Limits => (i % 2 === 0 ? { requests: 8, tokens: 2_000 } : { requests: 50, tokens: 1_000 });

/** One request of a tenant, times in clock ms; status -2: no answer within {@link CLIENT_TIMEOUT_MS}. */
type Sent = SentRequest<string>;

/** An interval of a tenant's own admissions that the bound allows on top of the limit. */
type Interval = readonly [from: number, to: number];

const unavailable = netnsUnavailable();
const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
const jsonBody = JSON.stringify({ ...prompts.body(PROMPT_TOKENS), max_tokens: OUTPUT_TOKENS });
const streamBody = JSON.stringify({ ...prompts.body(PROMPT_TOKENS), max_tokens: OUTPUT_TOKENS, stream: true, stream_options: { include_usage: true } });

/**
 * Worst window of one tenant for one measure, against `limit` + its admissions in each `extra`
 * interval that lies within one window length of it. An interval counts for windows after it too: a
 * node that missed admissions made at time x (a stale checkpoint, a stand-in's usage not yet given
 * back) sees sliding windows [t − W, t] short of them for every t < x + W, so the extra admissions
 * it makes then land in windows that start after x.
 */
function worstWindow(
  ok: readonly Sent[],
  fromRange: Interval,
  measure: (s: Sent) => number,
  limit: number,
  extra: readonly Interval[],
): { excess: number; at: number; admitted: number; allowed: number } {
  let worst = { excess: -Infinity, at: 0, admitted: 0, allowed: 0 };
  const starts = ok.map((s) => s.start).filter((t) => t >= fromRange[0] && t <= fromRange[1]);
  for (const from of [fromRange[0], ...starts]) {
    const to = from + WINDOW_MS;
    let admitted = 0;
    for (const s of ok) if (s.start >= from && s.end < to) admitted += measure(s);
    let allowed = limit;
    for (const [a, b] of extra) {
      if (b < from - WINDOW_MS || a >= to) continue;
      for (const s of ok) if (s.start <= b && s.end >= a) allowed += measure(s);
    }
    if (admitted - allowed > worst.excess) worst = { excess: admitted - allowed, at: from, admitted, allowed };
  }
  return worst;
}

describe('partitions across hosts (network namespaces)', { skip: unavailable === undefined ? false : `${unavailable}; run as root with iproute2 installed` }, () => {
  let net: Netns;
  const procs = new Map<string, HostProcess>();
  let redisDir = '';
  let redisProc: ReturnType<Netns['spawn']> | undefined;
  let admin: Redis | undefined;
  let routerUrl = '';
  const tenants: { id: string; key: string; limits: Limits; owner: string; successor: string }[] = [];
  let load: Load<Sent> | undefined;
  let sent: Sent[] = [];
  let t0 = 0;
  const agent = new Agent({ connections: 64 });

  const redisIp = (): string => net.host('redis').ip;

  async function startRedis(): Promise<void> {
    redisProc = net.spawn('redis', 'redis-server', ['--port', '6379', '--bind', redisIp(), '--protected-mode', 'no', '--dir', redisDir, '--dbfilename', 'dump.rdb', '--save', '', '--appendonly', 'no']);
    const deadline = Date.now() + 10_000;
    if (admin === undefined) {
      admin = new Redis({ host: redisIp(), port: 6379, maxRetriesPerRequest: 1 });
      admin.on('error', () => {});
    }
    while (Date.now() < deadline) {
      try {
        if ((await admin.ping()) === 'PONG') return;
      } catch {
        // not up yet
      }
      await sleep(50);
    }
    throw new Error('redis-server did not answer in its namespace');
  }

  async function killRedis(): Promise<void> {
    const proc = redisProc;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGKILL');
    await exited;
  }

  before(async () => {
    net = createNetwork(['redis', 'sim', 'router', ...NODES]);
    redisDir = mkdtempSync(join(tmpdir(), 'quotaring-partition-redis-'));
    await startRedis();
    const simUrl = `http://${net.host('sim').ip}:9090`;
    const nodeUrl = (id: string): string => `http://${net.host(id).ip}:${PORT}`;
    // Three tenants owned by each node (ring of the nodes' advertised URLs, as routers build it).
    const ring = createRing(NODES.map((id) => ({ id, url: nodeUrl(id) })));
    for (let i = 0; tenants.length < 9 && i < 1_000; i++) {
      const id = `p${i}`;
      const [owner, successor] = ring.range(id, 2);
      if (owner === undefined || successor === undefined || tenants.filter((t) => t.owner === owner.id).length >= 3) continue;
      const n = tenants.length;
      tenants.push({ id, key: `key-partition-${id}-0000`, limits: limitsOf(n), owner: owner.id, successor: successor.id });
    }
    const config = writeConfig({
      server: { log_level: 'info' },
      cluster: {
        name: 'partition',
        redis: { url: `redis://${redisIp()}:6379` },
        heartbeat: `${HEARTBEAT_MS}ms`,
        dead_after: `${DEAD_AFTER_MS}ms`,
        health_check: `${HEALTH_CHECK_MS}ms`,
        handoff: { drain: '600ms', checkpoint: `${CHECKPOINT_MS}ms` },
      },
      tenants: tenants.map((t) => ({
        id: t.id,
        keys: [t.key],
        limits: [
          { requests: t.limits.requests, window: '10s', algorithm: 'sliding_window' },
          { tokens: t.limits.tokens, window: '10s', algorithm: 'sliding_window' },
        ],
      })),
      models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', estimator: 'exact', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'QUOTARING_SIM_KEY' }],
    });
    const env = { QUOTARING_SIM_KEY: SIM_KEY };
    procs.set('sim', await net.runCli('sim', ['simulate', '--host', '0.0.0.0', '--port', '9090', '--ttft-ms', '100', '--tps', '100'], `${simUrl}/sim/stats`, env));
    for (const id of NODES) {
      procs.set(id, await net.runCli(id, ['node', '--config', config, '--id', id, '--host', '0.0.0.0', '--port', String(PORT), '--url', nodeUrl(id)], `${nodeUrl(id)}/readyz`, env, 30_000));
    }
    routerUrl = `http://${net.host('router').ip}:${PORT}`;
    procs.set('router', await net.runCli('router', ['router', '--config', config, '--host', '0.0.0.0', '--port', String(PORT)], `${routerUrl}/readyz`, env, 30_000));
    // Every node in the router's ring before the load starts.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const res = await request(`${routerUrl}/readyz`);
      const ready = (await res.body.json()) as { members?: number };
      if (ready.members === NODES.length) break;
      assert.ok(Date.now() < deadline, `router sees ${ready.members} members`);
      await sleep(100);
    }
    process.stderr.write(`# tenants ${JSON.stringify(tenants.map((t) => `${t.id}@${t.owner}→${t.successor}`))}\n`);

    t0 = Date.now();
    // Odd tenants stream; a request unanswered after CLIENT_TIMEOUT_MS is aborted (-2).
    load = startLoad({
      streams: tenants.map((tenant, i) => ({ id: tenant.id, key: tenant.key, streaming: i % 2 === 1, ratePerS: RATE })),
      stagger: true,
      t0,
      url: `${routerUrl}/v1/chat/completions`,
      headers: (t) => ({ authorization: `Bearer ${t.key}`, 'content-type': 'application/json' }),
      body: (t) => (t.streaming ? streamBody : jsonBody),
      dispatcher: agent,
      timeoutMs: CLIENT_TIMEOUT_MS,
      onAnswer: (s, res, text) => {
        if (res.statusCode === 200) {
          const tokens = usageTokens(text);
          s.tokens = tokens ?? -1;
          if (tokens === undefined) s.status = -1;
        } else if (res.statusCode !== 429) {
          process.stderr.write(`# ${res.statusCode} for ${s.tenant} at +${Date.now() - t0} ms: ${text.slice(0, 300)}\n`);
        }
      },
      onError: (s, err) => process.stderr.write(`# request of ${s.tenant} sent at +${s.start - t0} ms failed: ${err.message}\n`),
    });
    sent = load.sent;
    // Past the first window: every tenant is at its limit when the first fault comes.
    await sleep(WINDOW_MS + 1_000);
  });

  after(async () => {
    await load?.stop();
    await Promise.race([load?.settled(), sleep(5_000)]);
    await agent.close();
    // QUOTARING_PARTITION_DUMP=<dir>: every request seen by the client and each process's output, for a failure's evidence.
    const dump = process.env['QUOTARING_PARTITION_DUMP'];
    if (dump !== undefined && dump !== '') {
      writeFileSync(join(dump, 'requests.json'), JSON.stringify({ t0, tenants, sent }));
      for (const [name, p] of procs) writeFileSync(join(dump, `${name}.log`), p.output());
    }
    await Promise.all([...procs.values()].map((p) => p.stop()));
    admin?.disconnect();
    await killRedis();
    net?.destroy();
  });

  /**
   * Waits for the settle period, then checks the scenario that began at `phaseStart`: no request
   * started since then failed or got a 5xx, and for every tenant, windows starting from
   * `phaseStart − window` to now − window hold ≤ limit + the tenant's admissions in `extra(tenant)`.
   */
  async function check(name: string, phaseStart: number, extra: (tenant: (typeof tenants)[number]) => readonly Interval[]): Promise<void> {
    await sleep(SETTLE_MS);
    const phaseEnd = Date.now();
    const during = sent.filter((s) => s.start >= phaseStart && s.end !== 0 && s.start < phaseEnd);
    const byStatus = new Map<number, number>();
    for (const s of during) byStatus.set(s.status, (byStatus.get(s.status) ?? 0) + 1);
    const summary = JSON.stringify(Object.fromEntries(byStatus));
    const lines: string[] = [];
    const failures: string[] = [];
    for (const tenant of tenants) {
      const ok = sent.filter((s) => s.tenant === tenant.id && s.status === 200 && s.end !== 0);
      const range: Interval = [phaseStart - WINDOW_MS, phaseEnd - WINDOW_MS];
      const intervals = extra(tenant);
      const req = worstWindow(ok, range, () => 1, tenant.limits.requests, intervals);
      const tok = worstWindow(ok, range, (s) => s.tokens, tenant.limits.tokens, intervals);
      lines.push(`${tenant.id}@${tenant.owner} requests ${req.admitted}/${req.allowed} tokens ${tok.admitted}/${tok.allowed} at +${req.at - t0}/+${tok.at - t0} ms`);
      if (req.excess > 0) failures.push(`${tenant.id} (owner ${tenant.owner}): ${req.admitted} requests in the window from +${req.at - t0} ms, allowed ${req.allowed} (limit ${tenant.limits.requests})`);
      if (tok.excess > 0) failures.push(`${tenant.id} (owner ${tenant.owner}): ${tok.admitted} tokens in the window from +${tok.at - t0} ms, allowed ${tok.allowed} (limit ${tenant.limits.tokens})`);
    }
    process.stderr.write(`# ${name}: statuses ${summary}; worst windows (admitted/allowed):\n#   ${lines.join('\n#   ')}\n`);
    const bad = [...byStatus.keys()].filter((status) => status !== 200 && status !== 429);
    assert.deepEqual(bad, [], `${name}: statuses ${summary}`);
    assert.ok((byStatus.get(200) ?? 0) > 0 && (byStatus.get(429) ?? 0) > 0, `${name}: statuses ${summary}`);
    assert.deepEqual(
      during.filter((s) => s.status === 200 && s.tokens !== COST).map((s) => `${s.tenant}: ${s.tokens}`),
      [],
      `${name}: every admitted request uses exactly ${COST} tokens`,
    );
    assert.deepEqual(failures, [], `${name}: over-admission`);
  }

  // Bound: to the rest of the cluster a node cut from Redis is a crashed one. Its heartbeats stop,
  // it leaves every ring after dead_after, and its tenants' new owners start from its last
  // checkpoint in Redis (it can write none while cut). What it admitted since that checkpoint is
  // lost: the tenant's admissions from one checkpoint period before the cut until routers stop
  // sending to it (dead_after + a heartbeat + a health check). On healing its membership finds its
  // drop recorded by the others: it drops its tenants and reloads them from the interim owners' handoff
  // (src/coord/handoff/rejoin.ts): bound 0 there. (Before, it never saw the ring without it and decided
  // from its RAM state at the cut: 1,600-1,700 tokens against 1,000 in one window.)
  test(
    'a node cut from Redis, not from the router',
    async () => {
      // Cut when the tenants are being refused (each window's first half admits, its second refuses:
      // the load started at t0 and asks twice the limit), so the bound's interval holds few admissions
      // and what the return of node-1 does stands out.
      await sleep((16_000 - ((Date.now() - t0) % WINDOW_MS)) % WINDOW_MS);
      const phaseStart = Date.now();
      const node = 'node-1';
      net.cut(node, 'redis');
      const cutAt = Date.now();
      await sleep(FAULT_MS);
      net.heal(node, 'redis');
      process.stderr.write(`# node-1 cut from Redis at +${cutAt - t0} ms, healed at +${Date.now() - t0} ms\n`);
      await check('node cut from Redis', phaseStart, (t) => (t.owner === node ? [[cutAt - CHECKPOINT_MS, cutAt + DEAD_AFTER_MS + HEARTBEAT_MS + HEALTH_CHECK_MS]] : []));
    },
  );

  // Bound (README, "a live owner routed around"): the router marks the node suspect and sends its
  // tenants to the next member, which stands in from the owner's last checkpoint (up to one
  // checkpoint period old: the tenant's admissions then count twice) and, once the owner is back,
  // the owner decides without the stand-in's usage for up to two checkpoint periods (plus a health
  // check for the router to see it again).
  test('the router cut from a node', async () => {
    const phaseStart = Date.now();
    const node = 'node-2';
    net.cut('router', node);
    const cutAt = Date.now();
    await sleep(FAULT_MS);
    net.heal('router', node);
    const healAt = Date.now();
    process.stderr.write(`# router cut from node-2 at +${cutAt - t0} ms, healed at +${healAt - t0} ms\n`);
    await check('router cut from a node', phaseStart, (t) =>
      t.owner === node
        ? [
            [cutAt - CHECKPOINT_MS, cutAt],
            [healAt, healAt + 2 * CHECKPOINT_MS + 2 * HEALTH_CHECK_MS],
          ]
        : [],
    );
  });

  // Bound 0: nothing on a tenant's decision path goes between a node and its successor while both
  // are in every ring and reachable by the router (handoffs and settlements cross only on ring
  // changes; checkpoints go to Redis).
  test('a node cut from its successor', async () => {
    const phaseStart = Date.now();
    const node = 'node-3';
    const successors = tenants.filter((t) => t.owner === node).map((t) => t.successor);
    const successor = successors.sort((a, b) => successors.filter((s) => s === b).length - successors.filter((s) => s === a).length)[0] as string;
    net.cut(node, successor);
    const cutAt = Date.now();
    await sleep(FAULT_MS);
    net.heal(node, successor);
    process.stderr.write(`# node-3 cut from ${successor} at +${cutAt - t0} ms, healed at +${Date.now() - t0} ms\n`);
    await check('node cut from its successor', phaseStart, () => []);
  });

  // Bound: as for the router cut (the owner is alive but silent: a stand-in decides from its last
  // checkpoint; after SIGCONT the owner is blind to the stand-in's usage for up to two checkpoint
  // periods).
  test('an owner SIGSTOPped, then SIGCONTinued', async () => {
    const phaseStart = Date.now();
    const node = 'node-1';
    const proc = procs.get(node) as HostProcess;
    proc.proc.kill('SIGSTOP');
    const stopAt = Date.now();
    await sleep(FAULT_MS);
    proc.proc.kill('SIGCONT');
    const contAt = Date.now();
    process.stderr.write(`# node-1 SIGSTOP at +${stopAt - t0} ms, SIGCONT at +${contAt - t0} ms\n`);
    await check('owner SIGSTOPped', phaseStart, (t) =>
      t.owner === node
        ? [
            [stopAt - CHECKPOINT_MS, stopAt],
            [contAt, contAt + 2 * CHECKPOINT_MS + 2 * HEALTH_CHECK_MS],
          ]
        : [],
    );
  });

  // Bound 0: an ordinary tenant is decided in its owner's RAM and Redis holds only membership and
  // checkpoints; a Redis that comes back older must not change owners nor make any node decide from
  // the older checkpoints.
  test('Redis restored from an older RDB', async () => {
    const phaseStart = Date.now();
    const client = admin as Redis;
    await client.save();
    copyFileSync(join(redisDir, 'dump.rdb'), join(redisDir, 'old.rdb'));
    const savedAt = Date.now();
    await sleep(6_000);
    await killRedis();
    copyFileSync(join(redisDir, 'old.rdb'), join(redisDir, 'dump.rdb'));
    await startRedis();
    const restoredAt = Date.now();
    process.stderr.write(`# Redis saved at +${savedAt - t0} ms, restored from it at +${restoredAt - t0} ms\n`);
    await check('Redis restored from an older RDB', phaseStart, () => []);
  });
});
