/**
 * RedisGuard's state machine with a fake clock (open period), node's mock timers (the call
 * timeout) and fake async calls whose promises the test settles by hand. No Redis here: the
 * integration test runs the guard against a real redis-server.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { RedisGuard } from '../../src/redis/guard.ts';
import type { BreakerChangeReason, BreakerState, GuardResult, RedisGuardOptions } from '../../src/redis/guard.ts';

/** A promise the test settles itself. */
interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}
function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every pending promise callback run (setImmediate is not mocked). */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const fail = (): Promise<never> => Promise.reject(new Error('ECONNRESET'));
const noscript = (): Promise<never> => Promise.reject(new Error('NOSCRIPT No matching script. Please use EVAL.'));
const ok = <T>(value: T) => (): Promise<T> => Promise.resolve(value);

/** A guard on a ManualClock with mocked setTimeout, recording every state change. */
function setup(t: TestContext, options: Partial<RedisGuardOptions> = {}) {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const clock = new ManualClock(0);
  const changes: [BreakerState, BreakerChangeReason][] = [];
  const guard = new RedisGuard({ clock, onChange: (s, r) => changes.push([s, r]), ...options });
  /** A call that counts how often the guard started it. */
  let started = 0;
  const counted =
    <T>(fn: () => Promise<T>) =>
    (): Promise<T> => {
      started++;
      return fn();
    };
  /** Opens the breaker with three errors at the current time. */
  const open = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
  };
  return { clock, guard, changes, counted, started: () => started, open, tick: (ms: number) => t.mock.timers.tick(ms) };
}

describe('RedisGuard closed', () => {
  test('an answer in time is returned as ok with its value', async (t) => {
    const { guard, changes } = setup(t);
    assert.deepEqual(await guard.run(ok(42)), { ok: true, value: 42 });
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, []);
    assert.deepEqual(guard.stats, { calls: 1, ok: 1, timeouts: 0, errors: 0, noscript: 0, rejectedOpen: 0, opened: 0, closed: 0 });
  });

  test('3 consecutive errors open the breaker; the first two leave it closed', async (t) => {
    const { guard, changes } = setup(t);
    assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, []);
    assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
    assert.deepEqual(changes, [['open', 'error']]);
    assert.deepEqual(guard.stats, { calls: 3, ok: 0, timeouts: 0, errors: 3, noscript: 0, rejectedOpen: 0, opened: 1, closed: 0 });
  });

  test('a call that throws synchronously is an error and a failure', async (t) => {
    const { guard } = setup(t, { failuresToOpen: 1 });
    const result = await guard.run(() => {
      throw new Error('boom');
    });
    assert.deepEqual(result, { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
  });

  test('a success resets the count: fail, fail, ok, fail, fail stays closed; a third fail opens', async (t) => {
    const { guard } = setup(t);
    await guard.run(fail);
    await guard.run(fail);
    await guard.run(ok('x'));
    await guard.run(fail);
    await guard.run(fail);
    assert.equal(guard.state, 'closed');
    await guard.run(fail);
    assert.equal(guard.state, 'open');
  });

  test('failuresToOpen is honoured (5)', async (t) => {
    const { guard } = setup(t, { failuresToOpen: 5 });
    for (let i = 0; i < 4; i++) await guard.run(fail);
    assert.equal(guard.state, 'closed');
    await guard.run(fail);
    assert.equal(guard.state, 'open');
  });

  test('a timed-out call hands its late outcome to the caller (a lease granted after the timeout is not lost)', async (t) => {
    const { guard, tick } = setup(t);
    const slow = deferred<string>();
    const pending = guard.run(() => slow.promise);
    tick(15);
    await flush();
    const result = await pending;
    assert.equal(result.ok, false);
    assert.ok(!result.ok && result.reason === 'timeout' && result.late !== undefined);
    slow.resolve('granted');
    assert.equal(await (result as { late: Promise<string> }).late, 'granted');
  });

  test('no answer within timeoutMs is a timeout, exactly at timeoutMs (15 ms by default)', async (t) => {
    const { guard, tick, changes } = setup(t);
    const never = deferred<string>();
    let result: GuardResult<string> | undefined;
    void guard.run(() => never.promise).then((r) => (result = r));
    tick(14);
    await flush();
    assert.equal(result, undefined);
    tick(1);
    await flush();
    assert.deepEqual(withoutLate(result), { ok: false, reason: 'timeout' });
    // three timeouts in a row open the breaker with reason 'timeout'
    for (let i = 0; i < 2; i++) {
      const p = guard.run(() => never.promise);
      tick(15);
      assert.deepEqual(withoutLate(await p), { ok: false, reason: 'timeout' });
    }
    assert.equal(guard.state, 'open');
    assert.deepEqual(changes, [['open', 'timeout']]);
    assert.equal(guard.stats.timeouts, 3);
  });

  test('a custom timeoutMs (40) is used', async (t) => {
    const { guard, tick } = setup(t, { timeoutMs: 40 });
    const late = deferred<string>();
    let result: GuardResult<string> | undefined;
    void guard.run(() => late.promise).then((r) => (result = r));
    tick(39);
    late.resolve('in time');
    await flush();
    assert.deepEqual(result, { ok: true, value: 'in time' });
  });

  test('late results are ignored: two timed-out calls answering late do not reset the count', async (t) => {
    const { guard, tick } = setup(t);
    const a = deferred<string>();
    const b = deferred<string>();
    const ra = guard.run(() => a.promise);
    tick(15);
    assert.deepEqual(withoutLate(await ra), { ok: false, reason: 'timeout' });
    const rb = guard.run(() => b.promise);
    tick(15);
    assert.deepEqual(withoutLate(await rb), { ok: false, reason: 'timeout' });
    a.resolve('late');
    b.resolve('late');
    await flush();
    assert.equal(guard.stats.ok, 0);
    const never = deferred<string>();
    const rc = guard.run(() => never.promise);
    tick(15);
    assert.deepEqual(withoutLate(await rc), { ok: false, reason: 'timeout' });
    assert.equal(guard.state, 'open');
  });

  test('late rejections of timed-out calls leave no unhandled rejection', async (t) => {
    const unhandled: unknown[] = [];
    const listener = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', listener);
    t.after(() => process.off('unhandledRejection', listener));
    const { guard, tick } = setup(t, { failuresToOpen: 10 });
    const pending = [deferred<string>(), deferred<string>(), deferred<string>()];
    for (const d of pending) {
      const r = guard.run(() => d.promise);
      tick(15);
      assert.deepEqual(withoutLate(await r), { ok: false, reason: 'timeout' });
    }
    pending[0]?.reject(new Error('Connection is closed.'));
    pending[1]?.reject(new Error('NOSCRIPT No matching script.'));
    pending[2]?.reject(new Error('MaxRetriesPerRequestError'));
    await flush();
    await flush();
    assert.deepEqual(unhandled, []);
    assert.deepEqual(guard.stats, { calls: 3, ok: 0, timeouts: 3, errors: 0, noscript: 0, rejectedOpen: 0, opened: 0, closed: 0 });
  });

  test('NOSCRIPT is reported as error but is not a failure (and resets the count: Redis answered)', async (t) => {
    const { guard, changes } = setup(t);
    for (let i = 0; i < 5; i++) assert.deepEqual(await guard.run(noscript), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'closed');
    await guard.run(fail);
    await guard.run(fail);
    await guard.run(noscript);
    await guard.run(fail);
    await guard.run(fail);
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, []);
    assert.deepEqual(guard.stats, { calls: 10, ok: 0, timeouts: 0, errors: 10, noscript: 6, rejectedOpen: 0, opened: 0, closed: 0 });
  });

  test('an error whose message merely contains NOSCRIPT later is a failure', async (t) => {
    const { guard } = setup(t);
    for (let i = 0; i < 3; i++) await guard.run(() => Promise.reject(new Error('ERR something NOSCRIPT')));
    assert.equal(guard.state, 'open');
  });
});

describe('RedisGuard open and half-open', () => {
  test('open answers open at once without calling Redis, until openMs passed', async (t) => {
    const { guard, clock, counted, started, open } = setup(t);
    await open();
    for (let i = 0; i < 5; i++) assert.deepEqual(await guard.run(counted(ok(1))), { ok: false, reason: 'open' });
    clock.advance(999);
    assert.deepEqual(await guard.run(counted(ok(1))), { ok: false, reason: 'open' });
    assert.equal(started(), 0);
    assert.equal(guard.state, 'open');
    assert.deepEqual(guard.stats, { calls: 9, ok: 0, timeouts: 0, errors: 3, noscript: 0, rejectedOpen: 6, opened: 1, closed: 0 });
  });

  test('after openMs exactly one probe goes through; its success closes the breaker', async (t) => {
    const { guard, clock, counted, started, open, changes } = setup(t);
    await open();
    clock.advance(1_000);
    const probe = deferred<string>();
    const probeResult = guard.run(counted(() => probe.promise));
    assert.equal(guard.state, 'half_open');
    assert.equal(started(), 1);
    // others still get 'open' while the probe is in flight, without calling Redis
    for (let i = 0; i < 3; i++) assert.deepEqual(await guard.run(counted(ok('other'))), { ok: false, reason: 'open' });
    assert.equal(started(), 1);
    probe.resolve('pong');
    assert.deepEqual(await probeResult, { ok: true, value: 'pong' });
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, [
      ['open', 'error'],
      ['half_open', 'open_elapsed'],
      ['closed', 'probe_ok'],
    ]);
    assert.deepEqual(await guard.run(counted(ok('again'))), { ok: true, value: 'again' });
    assert.equal(started(), 2);
    assert.deepEqual(guard.stats, { calls: 8, ok: 2, timeouts: 0, errors: 3, noscript: 0, rejectedOpen: 3, opened: 1, closed: 1 });
  });

  test('a failed probe (timeout) re-opens the breaker for another openMs from the failure', async (t) => {
    const { guard, clock, counted, started, open, tick, changes } = setup(t);
    await open();
    clock.advance(1_500);
    const never = deferred<string>();
    const probe = guard.run(counted(() => never.promise));
    clock.advance(15);
    tick(15);
    assert.deepEqual(withoutLate(await probe), { ok: false, reason: 'timeout' });
    assert.equal(guard.state, 'open');
    // one failure re-opens (not failuresToOpen); open for 1,000 ms from the probe's failure
    clock.advance(999);
    assert.deepEqual(await guard.run(counted(ok(1))), { ok: false, reason: 'open' });
    assert.equal(started(), 1);
    clock.advance(1);
    assert.deepEqual(await guard.run(counted(ok(1))), { ok: true, value: 1 });
    assert.equal(started(), 2);
    assert.deepEqual(changes, [
      ['open', 'error'],
      ['half_open', 'open_elapsed'],
      ['open', 'timeout'],
      ['half_open', 'open_elapsed'],
      ['closed', 'probe_ok'],
    ]);
    assert.deepEqual(guard.stats, { calls: 6, ok: 1, timeouts: 1, errors: 3, noscript: 0, rejectedOpen: 1, opened: 2, closed: 1 });
  });

  test('a failed probe (error) re-opens with reason error', async (t) => {
    const { guard, clock, open, changes } = setup(t, { openMs: 200 });
    await open();
    clock.advance(200);
    assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
    assert.deepEqual(changes.at(-1), ['open', 'error']);
  });

  test('a NOSCRIPT probe closes the breaker (Redis answered)', async (t) => {
    const { guard, clock, open } = setup(t);
    await open();
    clock.advance(1_000);
    assert.deepEqual(await guard.run(noscript), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'closed');
  });

  test('a late answer of a call started before the breaker opened does not close it', async (t) => {
    const { guard, clock } = setup(t);
    const slow = deferred<string>();
    const slowResult = guard.run(() => slow.promise);
    await guard.run(fail);
    await guard.run(fail);
    await guard.run(fail);
    assert.equal(guard.state, 'open');
    clock.advance(1_000);
    const probe = deferred<string>();
    const probeResult = guard.run(() => probe.promise);
    assert.equal(guard.state, 'half_open');
    slow.resolve('in time, but from before'); // within its own 15 ms: its caller gets it
    assert.deepEqual(await slowResult, { ok: true, value: 'in time, but from before' });
    assert.equal(guard.state, 'half_open'); // not closed by an answer from before the outage
    probe.reject(new Error('ECONNREFUSED'));
    assert.deepEqual(await probeResult, { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
  });

  test('a late failure of a call started before the breaker opened does not re-open a half-open one', async (t) => {
    const { guard, clock } = setup(t);
    const slow = deferred<string>();
    const slowResult = guard.run(() => slow.promise);
    for (let i = 0; i < 3; i++) await guard.run(fail);
    clock.advance(1_000);
    const probe = deferred<string>();
    const probeResult = guard.run(() => probe.promise);
    slow.reject(new Error('Connection is closed.'));
    assert.deepEqual(await slowResult, { ok: false, reason: 'error' });
    assert.equal(guard.state, 'half_open');
    probe.resolve('pong');
    assert.deepEqual(await probeResult, { ok: true, value: 'pong' });
    assert.equal(guard.state, 'closed');
  });

  test('openMs 0 probes on the next call', async (t) => {
    const { guard, open } = setup(t, { openMs: 0 });
    await open();
    assert.deepEqual(await guard.run(ok('probe')), { ok: true, value: 'probe' });
    assert.equal(guard.state, 'closed');
  });

  test('an onChange that throws does not make run reject', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(w.message);
    };
    process.on('warning', onWarning);
    t.after(() => process.off('warning', onWarning));
    const guard = new RedisGuard({
      clock: new ManualClock(0),
      failuresToOpen: 1,
      onChange: () => {
        throw new Error('logger down');
      },
    });
    assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
    await flush();
    assert.deepEqual(warnings, ['RedisGuard onChange(open, error) threw: Error: logger down']);
  });
});

describe('RedisGuard probe and warm-up', () => {
  test('probe goes through an open breaker at once (no wait for openMs), as its half-open probe; success closes it', async (t) => {
    const { guard, changes, counted, started, open, clock } = setup(t);
    await open();
    clock.advance(10);
    assert.deepEqual(await guard.run(counted(ok(1))), { ok: false, reason: 'open' });
    assert.equal(started(), 0);
    assert.deepEqual(await guard.probe(counted(ok('PONG'))), { ok: true, value: 'PONG' });
    assert.equal(started(), 1);
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, [['open', 'error'], ['half_open', 'open_elapsed'], ['closed', 'probe_ok']]);
  });

  test('a failed probe re-opens for openMs; a probe while another is in flight is answered open without a call', async (t) => {
    const { guard, counted, started, open, clock } = setup(t);
    await open();
    const d = deferred<string>();
    const first = guard.probe(counted(() => d.promise));
    assert.equal(guard.state, 'half_open');
    assert.deepEqual(await guard.probe(counted(ok('x'))), { ok: false, reason: 'open' });
    assert.equal(started(), 1);
    d.reject(new Error('ECONNREFUSED'));
    assert.deepEqual(await first, { ok: false, reason: 'error' });
    assert.equal(guard.state, 'open');
    clock.advance(999);
    assert.deepEqual(await guard.run(counted(ok(1))), { ok: false, reason: 'open' });
    assert.equal(started(), 1);
  });

  test('probe on a closed breaker is an ordinary call', async (t) => {
    const { guard, changes } = setup(t);
    assert.deepEqual(await guard.probe(ok('PONG')), { ok: true, value: 'PONG' });
    assert.deepEqual(changes, []);
  });

  test('warming up: failures are returned but do not open the breaker, until warmedUp()', async (t) => {
    const { guard, changes, tick } = setup(t, { warmUp: true });
    assert.equal(guard.warming, true);
    for (let i = 0; i < 10; i++) assert.deepEqual(await guard.run(fail), { ok: false, reason: 'error' });
    const late = guard.run(() => new Promise<never>(() => undefined));
    tick(15);
    await flush();
    assert.equal((await late).ok, false);
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, []);
    assert.equal(guard.stats.errors, 10);
    assert.equal(guard.stats.timeouts, 1);
    guard.warmedUp();
    guard.warmedUp();
    assert.equal(guard.warming, false);
    for (let i = 0; i < 3; i++) await guard.run(fail);
    assert.equal(guard.state, 'open');
  });
  test('calls started during the warm-up do not open the breaker when they fail after it ended (a cold start\'s first burst)', async (t) => {
    const { guard, changes, tick } = setup(t, { warmUp: true });
    const burst = Array.from({ length: 5 }, () => guard.run(() => new Promise<never>(() => undefined)));
    guard.warmedUp();
    tick(15);
    await flush();
    for (const r of await Promise.all(burst)) assert.equal(r.ok, false);
    assert.equal(guard.stats.timeouts, 5);
    assert.equal(guard.state, 'closed');
    assert.deepEqual(changes, []);
    // Calls started after the warm-up count as before.
    for (let i = 0; i < 3; i++) await guard.run(fail);
    assert.equal(guard.state, 'open');
  });
});

describe('RedisGuard options', () => {
  test('invalid options throw RangeError', () => {
    const clock = new ManualClock(0);
    assert.throws(() => new RedisGuard({ clock, timeoutMs: 0 }), RangeError);
    assert.throws(() => new RedisGuard({ clock, timeoutMs: Number.POSITIVE_INFINITY }), RangeError);
    assert.throws(() => new RedisGuard({ clock, failuresToOpen: 0 }), RangeError);
    assert.throws(() => new RedisGuard({ clock, failuresToOpen: 2.5 }), RangeError);
    assert.throws(() => new RedisGuard({ clock, openMs: -1 }), RangeError);
    assert.equal(new RedisGuard({ clock }).state, 'closed');
  });
});

/** A guard result without the `late` promise of a timeout (compared separately where it matters). */
function withoutLate(r: object | undefined): object | undefined {
  if (r === undefined) return r;
  const { late: _late, ...rest } = r as { late?: unknown };
  return rest;
}
