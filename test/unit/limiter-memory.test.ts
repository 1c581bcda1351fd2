import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ManualClock } from '../../src/clock.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Policy } from '../../src/limiter/index.ts';

/** `gc()` even without `--expose-gc` (the flag is set at run time; a fresh context sees it). */
function getGc(): (() => void) | undefined {
  if (typeof globalThis.gc === 'function') return globalThis.gc as () => void;
  try {
    setFlagsFromString('--expose-gc');
    const gc: unknown = runInNewContext('gc');
    return typeof gc === 'function' ? (gc as () => void) : undefined;
  } catch {
    return undefined;
  }
}

test('1,000,000 tenants acquire once; after a full window sweep() drops them all and the heap comes back', () => {
  const N = 1_000_000;
  const clock = new ManualClock(1_700_000_000_000);
  const policy: Policy = {
    limits: [
      { name: 'req/1m', kind: 'requests', limit: 10, windowMs: 60_000, algorithm: 'token_bucket' },
      { name: 'tok/1m', kind: 'tokens', limit: 1000, windowMs: 60_000, algorithm: 'sliding_window' },
      { name: 'conc', kind: 'concurrent', limit: 5, leaseTtlMs: 30_000 },
    ],
  };
  const limiter = new Limiter({ clock, policyFor: () => policy });
  const gc = getGc();
  gc?.();
  const before = process.memoryUsage().heapUsed;

  for (let i = 0; i < N; i++) {
    const tenant = `tenant-${i}`;
    const r = limiter.acquire(tenant, { id: 'req-1', tokens: 100 });
    if (!r.ok) assert.fail(`tenant ${i} refused`);
    // Half complete normally; the other half are lost requests left to expire.
    if (i % 2 === 0) {
      limiter.settle(tenant, 'req-1', 80);
      limiter.release(tenant, 'req-1');
    }
    clock.advance(0.01); // 10 s over the whole run
  }
  assert.equal(limiter.size, N);
  gc?.();
  const peak = process.memoryUsage().heapUsed;

  clock.advance(59_999); // the last acquire is 59.99 s old: its window entry is still in
  assert.equal(limiter.sweep() < N, true);
  clock.advance(60_000);
  limiter.sweep();
  assert.equal(limiter.size, 0);

  if (gc !== undefined) {
    gc();
    const after = process.memoryUsage().heapUsed;
    const perTenant = (peak - before) / N;
    console.log(`# memory: ${perTenant.toFixed(0)} B/tenant at peak; ${((after - before) / 1e6).toFixed(1)} MB left after sweep`);
    assert.ok(after - before < 16e6, `heap after sweep is ${((after - before) / 1e6).toFixed(1)} MB above the start`);
  }
});
