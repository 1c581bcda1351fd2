/**
 * Micro-benchmark of the in-RAM limiter: ns per acquire + settle + release over three limits
 * (requests token bucket, tokens token bucket, concurrency) with 100k tenants picked at random.
 *
 * Run: `node --import tsx bench/micro/limiter.ts [--tenants 100000] [--runs 7] [--ops 1000000] [--policy-lookup map|const]`
 * Prints one JSON line, then a readable line. Timing is per batch of 1,000 operations
 * (hrtime around each batch, so the timer's own cost is amortised; request ids are made
 * between batches, untimed); the figure is the median
 * batch of each run, then the median over runs.
 */
import { parseArgs } from 'node:util';
import { systemClock } from '../../src/clock.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Policy } from '../../src/limiter/index.ts';

const { values } = parseArgs({
  options: {
    tenants: { type: 'string', default: '100000' },
    runs: { type: 'string', default: '7' },
    ops: { type: 'string', default: '1000000' },
    /** `map`: policyFor is a Map lookup per acquire (as in the gateway); `const`: one shared policy, no lookup. */
    'policy-lookup': { type: 'string', default: 'map' },
  },
});
const TENANTS = Number(values.tenants);
const RUNS = Number(values.runs);
const OPS = Number(values.ops);
const BATCH = 1000;

const policy: Policy = {
  limits: [
    { name: 'requests/1m', kind: 'requests', limit: 600, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'tokens/1m', kind: 'tokens', limit: 200_000, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'concurrent', kind: 'concurrent', limit: 20, leaseTtlMs: 60_000 },
  ],
};
const tenantNames = Array.from({ length: TENANTS }, (_, i) => `tenant-${i}`);
const policies = new Map<string, Policy>(tenantNames.map((t) => [t, policy]));
const constPolicy = values['policy-lookup'] === 'const';
const limiter = new Limiter({ clock: systemClock, policyFor: constPolicy ? () => policy : (t) => policies.get(t) });

// Deterministic pseudo-random tenant sequence (xorshift32), fresh id strings (hash not cached).
let x = 0x9e3779b9;
const order = new Uint32Array(OPS);
for (let i = 0; i < OPS; i++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  order[i] = (x >>> 0) % TENANTS;
}

function median(sorted: readonly number[]): number {
  return sorted[Math.floor(sorted.length / 2)] as number;
}

let seq = 0;

function run(): { medianNs: number; p99Ns: number; admitted: number } {
  const samples: number[] = [];
  const ids: string[] = new Array<string>(BATCH).fill('');
  let admitted = 0;
  for (let b = 0; b < OPS; b += BATCH) {
    // Fresh request ids, made outside the timed region (like a gateway's per-request id).
    for (let k = 0; k < BATCH; k++) ids[k] = `req-${b + k}-${seq++}`;
    const t0 = process.hrtime.bigint();
    for (let i = b; i < b + BATCH; i++) {
      const tenant = tenantNames[order[i] as number] as string;
      const id = ids[i - b] as string;
      const r = limiter.acquire(tenant, { id, tokens: 1200 });
      if (r.ok) {
        admitted++;
        limiter.settle(tenant, id, 900);
        limiter.release(tenant, id);
      }
    }
    samples.push(Number(process.hrtime.bigint() - t0) / BATCH);
  }
  samples.sort((a, b) => a - b);
  return { medianNs: median(samples), p99Ns: samples[Math.floor(samples.length * 0.99)] as number, admitted };
}

run(); // warm-up: JIT and every tenant's state
const results = Array.from({ length: RUNS }, run);
const medians = results.map((r) => r.medianNs).sort((a, b) => a - b);
const out = {
  bench: 'limiter.acquire+settle+release',
  limits: policy.limits.map((l) => l.name),
  tenants: TENANTS,
  policyLookup: constPolicy ? 'const' : 'map',
  tenantsInMemory: limiter.size,
  opsPerRun: OPS,
  runs: RUNS,
  medianNsPerOp: Math.round(median(medians)),
  runMediansNs: medians.map((m) => Math.round(m)),
  p99BatchNsPerOp: Math.round(Math.max(...results.map((r) => r.p99Ns))),
  admittedRatio: results.reduce((s, r) => s + r.admitted, 0) / (OPS * RUNS),
  heapUsedMB: Math.round(process.memoryUsage().heapUsed / 1e6),
  node: process.version,
};
console.log(JSON.stringify(out));
console.log(
  `limiter: ${out.medianNsPerOp} ns per acquire+settle+release (median of ${RUNS} runs × ${OPS} ops, ` +
    `3 limits, ${TENANTS} tenants; run medians ${out.runMediansNs.join('/')} ns; worst p99 batch ${out.p99BatchNsPerOp} ns)`,
);
