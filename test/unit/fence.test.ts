/**
 * The fence of a node woken from a stall (`src/coord/handoff/fence.ts`), on a manual clock: a gap over half
 * of `dead_after` makes every decision wait for the member list to be read again and the tenants
 * taken back from their stand-ins, in that order, once for all the decisions that saw it; a shorter
 * gap costs nothing.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { Fence } from '../../src/coord/handoff/fence.ts';

function fence(opts: { sync?: () => Promise<boolean>; takeBack?: () => Promise<number> } = {}) {
  const clock = new ManualClock();
  const steps: string[] = [];
  const lines: string[] = [];
  const f = new Fence({
    clock,
    deadAfterMs: 1_000,
    waitMs: 250,
    syncNow: async (ms) => {
      steps.push(`sync ${ms}`);
      return opts.sync === undefined ? true : opts.sync();
    },
    takeBack: async (ms) => {
      steps.push(`takeBack ${ms}`);
      return opts.takeBack === undefined ? 2 : opts.takeBack();
    },
    log: { info: () => undefined, warn: (obj, msg) => lines.push(`${JSON.stringify(obj)} ${msg}`) },
  });
  return { clock, f, steps, lines };
}

describe('fence', () => {
  test('no gap, or one of at most half of dead_after: decisions go on at once, nothing is asked', () => {
    const { clock, f, steps } = fence();
    assert.equal(f.check(), undefined);
    clock.advance(500);
    assert.equal(f.check(), undefined);
    assert.deepEqual(steps, []);
    assert.equal(f.stats.wakes, 0);
  });

  test('a gap over half of dead_after: every decision waits for one catch-up (member list read, then the take-back), then goes on', async () => {
    let release = (): void => undefined;
    const { clock, f, steps, lines } = fence({ takeBack: () => new Promise((resolve) => (release = () => resolve(3))) });
    assert.equal(f.stale(), false);
    clock.advance(501);
    // A queued request's retry (a timer) must not be admitted now.
    assert.equal(f.stale(), true);
    const first = f.check();
    const second = f.check();
    assert.ok(first !== undefined && second !== undefined);
    assert.equal(f.fenced, true);
    let done = 0;
    void first.then(() => done++);
    void second.then(() => done++);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(steps, ['sync 1000', 'takeBack 1000']);
    assert.equal(done, 0, 'a decision went on before the stand-ins gave the tenants back');
    release();
    await Promise.all([first, second]);
    assert.equal(done, 2);
    assert.equal(f.fenced, false);
    assert.equal(f.stale(), false);
    assert.equal(f.check(), undefined);
    assert.deepEqual(f.stats, { wakes: 1, longestGapMs: 501, waited: 2 });
    assert.match(lines[0] ?? '', /"gapMs":501,"memberList":"read","takenBack":3/);
    assert.match(lines[0] ?? '', /woke from a stall longer than half of dead_after/);
  });

  test('each step waits at most the larger of wait_ms and dead_after', async () => {
    const clock = new ManualClock();
    const steps: number[] = [];
    const f = new Fence({ clock, deadAfterMs: 1_000, waitMs: 4_000, takeBack: async (ms) => (steps.push(ms), 0), log: { info: () => undefined, warn: () => undefined } });
    clock.advance(600);
    await f.check();
    assert.deepEqual(steps, [4_000]);
  });

  test('the member list cannot be read (Redis down, or no answer within the step wait): the tenants are taken back all the same', async () => {
    const { clock, f, steps, lines } = fence({ sync: async () => false });
    clock.advance(5_000);
    await f.check();
    assert.deepEqual(steps, ['sync 1000', 'takeBack 1000']);
    assert.match(lines[0] ?? '', /"memberList":"unreadable"/);
  });

  test('a step that throws does not keep the node fenced', async () => {
    const { clock, f } = fence({ sync: () => Promise.reject(new Error('boom')), takeBack: () => Promise.reject(new Error('boom')) });
    clock.advance(5_000);
    await f.check();
    assert.equal(f.fenced, false);
    assert.equal(f.check(), undefined);
  });

  test('dead_after must be positive', () => {
    assert.throws(() => new Fence({ clock: new ManualClock(), deadAfterMs: 0, waitMs: 1, takeBack: async () => 0, log: { info: () => undefined, warn: () => undefined } }), RangeError);
  });
});
