/**
 * `node --import tsx bench/router/router-saturation.ts` (after `npm run build`): does a router route around
 * live nodes when the machine's CPU is saturated? A sharded cluster (its own redis-server, 2 nodes,
 * one router) under the throughput benchmark's load (autocannon, fixed connections, 200-token
 * prompts, 1,000 unlimited tenants, the simulator answering at once) for a bounded run; counts the
 * answers by status (the only 503 a router answers itself here is `no_healthy_node`: the tenants'
 * limits never refuse) and the router's "member suspect" log lines. Environment: SAT_DURATION (20 s), SAT_CONNECTIONS (64),
 * SAT_TENANTS (1,000).
 */
import autocannon from 'autocannon';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort, ProcessGroup, stopOnSignals } from '../lib/cluster-processes.ts';
import { chatBody, MODEL } from '../lib/load.ts';

const DURATION_S = Number(process.env['SAT_DURATION'] ?? 20);
const CONNECTIONS = Number(process.env['SAT_CONNECTIONS'] ?? 64);
const TENANTS = Number(process.env['SAT_TENANTS'] ?? 1_000);

const group = new ProcessGroup();
stopOnSignals(() => group.stopAll());

try {
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  await group.cli('simulator', ['simulate', '--port', String(simPort), '--ttft-ms', '0'], `${simUrl}/sim/stats`);
  const keys = Array.from({ length: TENANTS }, (_, i) => `bench-sat-key-${i}`);
  const cluster = await startBenchCluster(group, {
    tag: 'sat',
    nodes: 2,
    mode: 'sharded',
    config: {
      tenants: keys.map((key, i) => ({ id: `t${i}`, keys: [key], limits: [{ requests: 1_000_000_000, window: '1m' }, { tokens: 1_000_000_000_000, window: '1m' }, { concurrent: 10_000 }] })),
      models: [{ name: MODEL, encoding: 'o200k_base', estimator: 'estimate', deployments: ['sim'] }],
      deployments: [{ name: 'sim', provider: 'openai', base_url: simUrl, api_key_env: 'BENCH_SIM_KEY' }],
    },
    env: { BENCH_SIM_KEY: 'bench-sim-key' },
  });
  const body = chatBody(200);
  let i = 0;
  const result = await autocannon({
    url: `${cluster.url}/v1/chat/completions`,
    connections: CONNECTIONS,
    duration: DURATION_S,
    requests: [{ method: 'POST', setupRequest: (req) => ({ ...req, headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[i++ % keys.length]}` }, body }) }],
  });
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([status, s]) => [status, s.count ?? 0]));
  const suspectLines = cluster.router.output().split('\n').filter((l) => l.includes('member suspect'));
  const report = {
    setup: `${cluster.name}, ${CONNECTIONS} connections, ${DURATION_S} s, ${TENANTS} tenants`,
    requests: result.requests.total,
    rps: Math.round(result.requests.average),
    p99Ms: result.latency.p99,
    statuses,
    errors: result.errors,
    timeouts: result.timeouts,
    routerSuspectLines: suspectLines.length,
  };
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  for (const line of suspectLines.slice(0, 5)) process.stdout.write(`${line}\n`);
} finally {
  await group.stopAll();
}
