/**
 * RedisGuard over a `redisForDecisions` client against a real redis-server that the test freezes
 * (SIGSTOP), thaws (SIGCONT), kills (SIGKILL) and restarts empty on the same port. The steps run in
 * order on one server; latencies are measured with `performance.now()` and printed as diagnostics.
 *
 * test/helpers/redis.ts does not expose the server's process (needed for SIGSTOP) nor a restart on
 * the same port, so this file starts its own redis-server, with the same flags.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { systemClock } from '../../src/clock.ts';
import { redisForDecisions } from '../../src/redis/connection.ts';
import { RedisGuard } from '../../src/redis/guard.ts';
import type { BreakerChangeReason, BreakerState, GuardResult } from '../../src/redis/guard.ts';
import { freePort } from '../helpers/processes.ts';
import { pings } from '../helpers/redis.ts';

/** Starts `redis-server` on `port` (no persistence) and waits until it answers PING (10 s at most). */
async function spawnRedis(port: number): Promise<ChildProcess> {
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && proc.exitCode === null) {
    if (await pings(port)) return proc;
    await sleep(20);
  }
  proc.kill('SIGKILL');
  throw new Error(`redis-server did not answer PING on port ${port}`);
}

/** Resolves once `proc` exited (at once if it already has). */
function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => proc.once('exit', () => resolve()));
}

/** One guarded call and how long it took, ms. */
async function timed<T>(guard: RedisGuard, call: () => Promise<T>): Promise<{ result: GuardResult<T>; ms: number }> {
  const start = performance.now();
  const result = await guard.run(call);
  return { result, ms: performance.now() - start };
}

/** The q-quantile (0..1) of `values` (nearest rank). */
function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}

const fmt = (ms: number): string => `${ms.toFixed(3)} ms`;

/** Length of ioredis's offline queue (internal field; stays 0 with enableOfflineQueue off). */
function offlineQueueLength(redis: Redis): number {
  return (redis as unknown as { offlineQueue: { length: number } }).offlineQueue.length;
}

describe('RedisGuard on a real redis-server', () => {
  let port: number;
  let proc: ChildProcess;
  let redis: Redis;
  let guard: RedisGuard;
  const changes: [BreakerState, BreakerChangeReason][] = [];
  const incr = (): Promise<number> => redis.incr('qr:test:guard');

  before(async () => {
    port = await freePort();
    proc = await spawnRedis(port);
    redis = redisForDecisions(`redis://127.0.0.1:${port}`);
    await new Promise<void>((resolve) => redis.once('ready', () => resolve()));
    guard = new RedisGuard({ clock: systemClock, onChange: (s, r) => changes.push([s, r]) });
  });

  after(async () => {
    redis.disconnect();
    proc.kill('SIGKILL'); // works on a stopped process too
    await exited(proc);
  });

  test('healthy: every call is ok, in order', async (t) => {
    // A guard with a 1 s timeout: this test is about order and answers, and on a loaded 2-core CI
    // machine one INCR in 2,000 can take over 15 ms (a timeout there is the guard working, and is
    // tested below with SIGSTOP). The latencies are reported, not asserted.
    const patient = new RedisGuard({ clock: systemClock, timeoutMs: 1_000 });
    const latencies: number[] = [];
    for (let i = 1; i <= 2_000; i++) {
      const { result, ms } = await timed(patient, incr);
      assert.deepEqual(result, { ok: true, value: i });
      latencies.push(ms);
    }
    assert.equal(patient.state, 'closed');
    t.diagnostic(`healthy INCR through the guard (2,000 sequential): p50 ${fmt(quantile(latencies, 0.5))}, p99 ${fmt(quantile(latencies, 0.99))}, max ${fmt(Math.max(...latencies))}`);
  });

  test('SIGSTOP: 3 timeouts within 50 ms each open the breaker; then open answers in < 1 ms without Redis', async (t) => {
    proc.kill('SIGSTOP');
    const timeouts: number[] = [];
    for (let i = 0; i < 3; i++) {
      assert.equal(guard.state, 'closed');
      const { result, ms } = await timed(guard, incr);
      assert.deepEqual(withoutLate(result), { ok: false, reason: 'timeout' });
      assert.ok(ms < 50, `timeout took ${ms} ms`);
      timeouts.push(ms);
    }
    assert.equal(guard.state, 'open');
    assert.deepEqual(changes, [['open', 'timeout']]);

    let called = 0;
    const open: number[] = [];
    for (let i = 0; i < 1_000; i++) {
      const { result, ms } = await timed(guard, () => {
        called++;
        return incr();
      });
      assert.deepEqual(result, { ok: false, reason: 'open' });
      open.push(ms);
    }
    assert.equal(called, 0);
    assert.ok(quantile(open, 0.99) < 1, `open p99 ${quantile(open, 0.99)} ms`);
    t.diagnostic(`timeout (Redis stopped, timeoutMs 15): ${timeouts.map(fmt).join(', ')}`);
    t.diagnostic(`open answers (1,000): p50 ${fmt(quantile(open, 0.5))}, p99 ${fmt(quantile(open, 0.99))}, max ${fmt(Math.max(...open))}`);
  });

  test('still stopped after openMs: the probe times out and re-opens the breaker', async (t) => {
    await sleep(1_000);
    const { result, ms } = await timed(guard, incr);
    assert.deepEqual(withoutLate(result), { ok: false, reason: 'timeout' });
    assert.ok(ms < 50, `probe took ${ms} ms`);
    assert.equal(guard.state, 'open');
    assert.deepEqual(changes.slice(1), [
      ['half_open', 'open_elapsed'],
      ['open', 'timeout'],
    ]);
    t.diagnostic(`failed probe: ${fmt(ms)}`);
  });

  test('SIGCONT: a probe closes the breaker within 2 s; the timed-out INCRs were applied late', async (t) => {
    const start = performance.now();
    proc.kill('SIGCONT');
    let first: GuardResult<number> = { ok: false, reason: 'open' };
    while (!first.ok && performance.now() - start < 2_000) {
      first = await guard.run(incr);
      if (!first.ok) await sleep(10);
    }
    const recoveredMs = performance.now() - start;
    // 2,000 + the 3 timed-out calls + the failed probe, all written before the freeze ended and run
    // by Redis once thawed: a timeout does not mean the command was not applied.
    assert.deepEqual(first, { ok: true, value: 2_005 });
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes.slice(3), [
      ['half_open', 'open_elapsed'],
      ['closed', 'probe_ok'],
    ]);
    assert.deepEqual(await guard.run(incr), { ok: true, value: 2_006 });
    t.diagnostic(`SIGCONT → first ok through the guard: ${recoveredMs.toFixed(0)} ms (breaker re-opened before SIGCONT, openMs 1,000)`);
  });

  test('SIGKILL: calls fail fast (error or timeout), nothing is queued, the breaker opens after 3', async (t) => {
    proc.kill('SIGKILL');
    await exited(proc);
    const failures: number[] = [];
    for (let i = 0; i < 3; i++) {
      const { result, ms } = await timed(guard, incr);
      assert.ok(!result.ok && (result.reason === 'error' || result.reason === 'timeout'), JSON.stringify(result));
      assert.ok(ms < 50, `failure took ${ms} ms`);
      failures.push(ms);
    }
    assert.equal(guard.state, 'open');
    assert.equal(changes.length, 6);
    // the client itself, without the guard: rejected at once rather than queued
    const start = performance.now();
    await assert.rejects(redis.incr('qr:test:guard'));
    const directMs = performance.now() - start;
    assert.ok(directMs < 50, `direct INCR took ${directMs} ms`);
    assert.equal(offlineQueueLength(redis), 0);
    t.diagnostic(`Redis killed: guarded failures ${failures.map(fmt).join(', ')}; unguarded INCR rejected in ${fmt(directMs)}`);
  });

  test('restarted empty on the same port: recovers within openMs + reconnect backoff', async (t) => {
    await sleep(1_000); // breaker ready to probe; the client is retrying with its capped backoff
    const down = await timed(guard, incr); // the probe, Redis still down: fails fast, re-opens
    assert.ok(!down.result.ok && down.result.reason !== 'open', JSON.stringify(down.result));
    assert.ok(down.ms < 50, `probe took ${down.ms} ms`);
    assert.equal(guard.state, 'open');

    const start = performance.now();
    proc = await spawnRedis(port);
    let first: GuardResult<number> = { ok: false, reason: 'open' };
    while (!first.ok && performance.now() - start < 3_000) {
      first = await guard.run(incr);
      if (!first.ok) await sleep(10);
    }
    const recoveredMs = performance.now() - start;
    assert.deepEqual(first, { ok: true, value: 1 }); // an empty Redis
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes.at(-1), ['closed', 'probe_ok']);
    t.diagnostic(`restart → first ok through the guard: ${recoveredMs.toFixed(0)} ms`);
    t.diagnostic(`stats: ${JSON.stringify(guard.stats)}`);
  });
});

/** A guard result without the `late` promise of a timeout (compared separately where it matters). */
function withoutLate(r: object | undefined): object | undefined {
  if (r === undefined) return r;
  const { late: _late, ...rest } = r as { late?: unknown };
  return rest;
}
