/** `npm run bench`, phase 1: throughput of every setup at fixed connections, and its Markdown (the table and the projected ceilings). */
import type autocannon from 'autocannon';
import { commandDelta } from '../lib/cluster-processes.ts';
import { chatBody, median, runAutocannon } from '../lib/load.ts';
import { CONNECTIONS, DURATION_S, PROMPT_TOKENS, REWARM_S, ROUNDS, TENANTS, WARMUP_S, cpuOf, fmt0, fmt1, keys, log, signed } from './compare-setup.ts';
import type { Percentiles, Setup, SetupMode, SetupResult } from './compare-setup.ts';

/** autocannon's percentile fields, as fractions of requests. */
const PERCENTILE_FIELDS: readonly [keyof autocannon.Histogram, number][] = [
  ['p0_001', 0.001], ['p0_01', 0.01], ['p0_1', 0.1], ['p1', 1], ['p2_5', 2.5], ['p10', 10], ['p25', 25], ['p50', 50],
  ['p75', 75], ['p90', 90], ['p97_5', 97.5], ['p99', 99], ['p99_9', 99.9], ['p99_99', 99.99], ['p99_999', 99.999],
];

/**
 * Warms every setup until each tenant was sent two requests, then runs `ROUNDS` rounds of autocannon over
 * them in turn: req/s, latencies, Redis commands and CPU, and each process's CPU per 2xx request (µs).
 */
export async function throughput(setups: readonly Setup[]): Promise<SetupResult[]> {
  const body = chatBody(PROMPT_TOKENS);
  log(`throughput: ${setups.length} setups up; warm-up of ${WARMUP_S} s runs until every tenant was sent 2 requests, then ${ROUNDS} rounds × ${DURATION_S} s`);
  // Until every tenant was seen twice: a node claims a tenant (one Redis read) at its first request, and
  // a slow start (JIT, tokenizer) can leave tenants unseen after a timed warm-up, so their claims
  // landed in the measured rounds.
  for (const s of setups) {
    let sent = 0;
    while (sent < 2 * TENANTS) sent += (await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: WARMUP_S, firstKey: sent })).requests.total;
  }
  const results = new Map<string, SetupResult>(
    setups.map((s) => [
      s.name,
      { setup: s.name, mode: s.mode, nodes: s.nodes, rps: [], p50: [], p99: [], p999: [], percentiles: {}, served: 0, non2xx: 0, errors: 0, seconds: 0, redisCalls: {}, redisCpuS: 0, gatewayCpuS: 0, routerCpuS: 0, gatewayCpuUs: [], routerCpuUs: [] },
    ]),
  );
  const rounds = new Map<string, { rps: number; percentiles: Percentiles }[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of setups) {
      if (s.redis !== undefined) await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: REWARM_S });
      const before = { calls: await s.redis?.commandCalls(), redisCpu: (await s.redis?.cpuSeconds()) ?? 0, gw: cpuOf(s.gateways), router: cpuOf([s.router]) };
      const r = await runAutocannon({ url: s.url, bodies: [body], keys, connections: CONNECTIONS, durationS: DURATION_S });
      const after = { calls: await s.redis?.commandCalls(), redisCpu: (await s.redis?.cpuSeconds()) ?? 0, gw: cpuOf(s.gateways), router: cpuOf([s.router]) };
      const row = results.get(s.name) as SetupResult;
      row.rps.push(r.requests.average);
      row.p50.push(r.latency.p50);
      row.p99.push(r.latency.p99);
      row.p999.push(r.latency.p99_9);
      row.served += r['2xx'];
      row.non2xx += r.non2xx;
      row.errors += r.errors;
      row.seconds += r.duration;
      row.redisCpuS += after.redisCpu - before.redisCpu;
      row.gatewayCpuS += after.gw - before.gw;
      row.routerCpuS += after.router - before.router;
      row.gatewayCpuUs.push(((after.gw - before.gw) * 1e6) / Math.max(1, r['2xx']));
      row.routerCpuUs.push(((after.router - before.router) * 1e6) / Math.max(1, r['2xx']));
      if (before.calls !== undefined && after.calls !== undefined) {
        for (const [cmd, calls] of commandDelta(before.calls, after.calls)) if (cmd !== 'info') row.redisCalls[cmd] = (row.redisCalls[cmd] ?? 0) + calls;
      }
      const percentiles = Object.fromEntries(PERCENTILE_FIELDS.map(([field, p]) => [String(p), r.latency[field]]));
      rounds.set(s.name, [...(rounds.get(s.name) ?? []), { rps: r.requests.average, percentiles }]);
      log(`round ${round + 1}/${ROUNDS} ${s.name.padEnd(34)} ${r.requests.average.toFixed(0)} req/s p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms CPU µs/request ${(row.gatewayCpuUs.at(-1) ?? NaN).toFixed(1)} + router ${(row.routerCpuUs.at(-1) ?? NaN).toFixed(1)} non-2xx ${r.non2xx} errors ${r.errors}`);
    }
  }
  // Why a node may claim tenants it did not hold (a Redis read each): its router routed around a member.
  for (const s of setups) {
    const lines = s.router?.output().split('\n') ?? [];
    const count = (msg: string): number => lines.filter((l) => l.includes(msg)).length;
    if (s.router !== undefined) log(`${s.name}: router marked a member suspect ${count('member suspect')} times, retried ${count('member unreachable')} requests on the next member`);
    const messages = new Map<string, number>();
    for (const g of s.redis === undefined ? [] : s.gateways) {
      for (const l of g.output().split('\n')) {
        const msg = /"msg":"([^"]*)"/.exec(l)?.[1];
        if (msg !== undefined) messages.set(msg, (messages.get(msg) ?? 0) + 1);
      }
    }
    if (messages.size > 0) log(`${s.name}: node warnings ${JSON.stringify(Object.fromEntries(messages))}`);
  }
  for (const [name, rs] of rounds) {
    const byRps = [...rs].sort((a, b) => a.rps - b.rps);
    (results.get(name) as SetupResult).percentiles = (byRps[Math.floor((byRps.length - 1) / 2)] as { percentiles: Percentiles }).percentiles;
  }
  return [...results.values()];
}

/** Derived per-request figures of a setup. */
export function perRequest(r: SetupResult): { commands: number; scripts: number; redisCpuUs: number; gatewayCpuUs: number; routerCpuUs: number } {
  const served = Math.max(1, r.served);
  const commands = Object.values(r.redisCalls).reduce((a, b) => a + b, 0);
  const scripts = (r.redisCalls['evalsha'] ?? 0) + (r.redisCalls['eval'] ?? 0);
  return { commands: commands / served, scripts: scripts / served, redisCpuUs: (r.redisCpuS / served) * 1e6, gatewayCpuUs: (r.gatewayCpuS / served) * 1e6, routerCpuUs: (r.routerCpuS / served) * 1e6 };
}

/** The throughput table of summary.md (Markdown lines). */
export function throughputMarkdown(results: readonly SetupResult[]): string[] {
  const direct = results.find((r) => r.mode === 'direct');
  const d = direct === undefined ? { p50: NaN, p99: NaN, p999: NaN } : { p50: median(direct.p50), p99: median(direct.p99), p999: median(direct.p999) };
  const lines = [
    `### Throughput and latency at ${CONNECTIONS} connections — ${ROUNDS} rounds × ${DURATION_S} s interleaved, ${TENANTS} tenants, ${PROMPT_TOKENS}-token prompts, simulator \`--ttft-ms 0\` (medians over rounds; latencies in autocannon's whole ms)`,
    '',
    '| setup | req/s | p50 ms | p99 ms | p99.9 ms | added p50 / p99 / p99.9 ms | Redis commands / request | Lua script calls / request | Redis CPU µs / request | proxy CPU µs / request | node CPU µs / request | router CPU µs / request | non-2xx + errors |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const p = perRequest(r);
    const quotaring = r.mode === 'sharded' || r.mode === 'central';
    const added = r.mode === 'direct' ? '—' : `${signed(median(r.p50) - d.p50)} / ${signed(median(r.p99) - d.p99)} / ${signed(median(r.p999) - d.p999)}`;
    const redis = r.mode === 'direct' || r.mode === 'bare' ? ['—', '—', '—'] : [p.commands.toFixed(4), p.scripts.toFixed(3), fmt1(p.redisCpuUs)];
    const cpu = [r.mode === 'bare' || r.mode === 'reference' ? fmt1(p.gatewayCpuUs) : '—', quotaring ? fmt1(p.gatewayCpuUs) : '—', quotaring ? fmt1(p.routerCpuUs) : '—'];
    lines.push(`| ${r.setup} | ${fmt0(median(r.rps))} | ${fmt1(median(r.p50))} | ${fmt1(median(r.p99))} | ${fmt1(median(r.p999))} | ${added} | ${redis.join(' | ')} | ${cpu.join(' | ')} | ${r.non2xx + r.errors} |`);
  }
  const ratio = [1, 2, 3].map((n) => {
    const s = results.find((r) => r.mode === 'sharded' && r.nodes === n);
    const c = results.find((r) => r.mode === 'central' && r.nodes === n);
    return s === undefined || c === undefined ? '—' : `${(median(s.rps) / median(c.rps)).toFixed(2)}×`;
  });
  lines.push('', `Sharded / central req/s with 1, 2, 3 nodes: ${ratio.join(', ')} (target ≥ 1.5×). CPU per request: total over the rounds / requests served; the ratios of issue 16 (last table) are medians of the per-round ratios.`);
  lines.push(
    '',
    'One 2-core machine runs the load generator, the simulator, every Redis, the routers and the nodes: more nodes add processes competing for the same two cores, so the node counts show the cost of each design on shared CPU, not how it scales on separate machines — the ceilings below do that with the measured CPU per request.',
  );
  return lines;
}

/** The projected ceilings of summary.md: one Redis core and one node core saturated, from the CPU per request of the largest cluster of each mode. */
export function ceilingsMarkdown(results: readonly SetupResult[]): string[] {
  const pick = (mode: SetupMode): SetupResult | undefined => results.filter((r) => r.mode === mode).sort((a, b) => b.nodes - a.nodes)[0];
  const lines = ['### Projected ceilings (from the CPU per request measured above, largest cluster of each mode)', ''];
  const s = pick('sharded');
  const c = pick('central');
  const ref = pick('reference');
  lines.push(
    'A Redis server executes commands on one core, so a design whose every request runs Redis work saturates one Redis at R = 1 / (Redis CPU seconds per request); a node saturates its core at 1 / (gateway CPU seconds per request), so N nodes on N cores serve N / c_node.',
    '',
    '| design | Redis CPU µs / request (c_redis) | one Redis saturates at (1 / c_redis) | gateway CPU µs / request (c_node) | one node core saturates at (1 / c_node) | ceiling with N nodes on N cores |',
    '|---|---|---|---|---|---|',
  );
  for (const [name, r] of [['sharded', s], ['central', c], ['reference (one proxy)', ref]] as const) {
    if (r === undefined) continue;
    const p = perRequest(r);
    const redisMax = 1e6 / p.redisCpuUs;
    const nodeMax = 1e6 / p.gatewayCpuUs;
    const ceiling = name === 'sharded' ? `N × ${fmt0(nodeMax)} req/s (Redis is not on the request path: it reaches ${fmt0(redisMax)} req/s only at N ≈ ${fmt0(redisMax / nodeMax)})` : `min(N × ${fmt0(nodeMax)}, ${fmt0(redisMax)}) req/s: capped by Redis from N ≈ ${fmt1(redisMax / nodeMax)}`;
    lines.push(`| ${name} | ${fmt1(p.redisCpuUs)} | ${fmt0(redisMax)} req/s | ${fmt1(p.gatewayCpuUs)} | ${fmt0(nodeMax)} req/s | ${ceiling} |`);
  }
  lines.push('', 'Routers add their own CPU per request (column above) and scale out the same way (they keep no state).');
  return lines;
}
