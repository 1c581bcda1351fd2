/**
 * Joining while Redis may be unreachable (`src/coord/membership/join.ts`): the first attempt's outcome, the
 * background retries until one succeeds, an abort, the throttled log lines, and `membersUnread`.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { membersUnread, startOrKeepTrying } from '../../src/coord/membership/join.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Membership, Ring } from '../../src/coord/types.ts';

function recordingLog(): { lines: { level: string; msg: string; obj: object }[]; warn(obj: object, msg: string): void; info(obj: object, msg: string): void } {
  const lines: { level: string; msg: string; obj: object }[] = [];
  return { lines, warn: (obj, msg) => lines.push({ level: 'warn', msg, obj }), info: (obj, msg) => lines.push({ level: 'info', msg, obj }) };
}

/** An attempt that throws `failures` times (with the given messages, cycling), then succeeds. */
function failing(failures: number, messages: readonly string[] = ['connect ECONNREFUSED']): { attempt: () => Promise<void>; calls: () => number } {
  let calls = 0;
  return {
    calls: () => calls,
    attempt: async () => {
      calls++;
      if (calls <= failures) throw new Error(messages[(calls - 1) % messages.length]);
    },
  };
}

describe('startOrKeepTrying', () => {
  test('a first attempt that succeeds: started, done true, nothing logged', async () => {
    const log = recordingLog();
    const a = failing(0);
    const first = await startOrKeepTrying(a.attempt, { retryMs: 1, signal: new AbortController().signal, log, what: 'node n1' });
    assert.equal(first.started, true);
    assert.equal(await first.done, true);
    assert.equal(a.calls(), 1);
    assert.deepEqual(log.lines, []);
  });

  test('failures are retried in the background until one succeeds; one warning per distinct error, one info at the join', async () => {
    const log = recordingLog();
    const a = failing(5, ['connect ECONNREFUSED', 'connect ECONNREFUSED', 'connect ECONNREFUSED', 'WRONGPASS', 'WRONGPASS']);
    const first = await startOrKeepTrying(a.attempt, { retryMs: 1, signal: new AbortController().signal, log, what: 'node n1', redis: 'redis://127.0.0.1:1' });
    assert.equal(first.started, false);
    assert.equal(a.calls(), 1, 'startOrKeepTrying resolves after the first attempt');
    assert.equal(await first.done, true);
    assert.equal(a.calls(), 6);
    assert.deepEqual(
      log.lines.map((l) => [l.level, (l.obj as { err?: string }).err ?? null]),
      [
        ['warn', 'connect ECONNREFUSED'],
        ['warn', 'WRONGPASS'],
        ['info', null],
      ],
    );
    assert.equal((log.lines[0]?.obj as { redis?: string }).redis, 'redis://127.0.0.1:1');
    assert.match(log.lines[0]?.msg ?? '', /node n1 is up but not in the cluster/);
    assert.deepEqual(log.lines[2]?.obj && (log.lines[2].obj as { attempts: number }).attempts, 6);
  });

  test('an abort stops the retries: done resolves false and no attempt starts after it', async () => {
    const log = recordingLog();
    const a = failing(Infinity);
    const stop = new AbortController();
    const first = await startOrKeepTrying(a.attempt, { retryMs: 60_000, signal: stop.signal, log, what: 'router' });
    assert.equal(first.started, false);
    stop.abort();
    assert.equal(await first.done, false);
    assert.equal(a.calls(), 1);
  });
});

describe('membersUnread', () => {
  const ring: Ring = createRing([]);
  const base: Membership = { start: async () => {}, stop: async () => {}, ring: () => ring, onChange: () => () => {} };
  test('a membership without a shared store (static members) is never unread', () => {
    assert.equal(membersUnread(base), false);
  });
  test('a shared-store membership is unread until its first read', () => {
    const sync: { last?: number } = {};
    const m: Membership = { ...base, lastSyncMs: () => sync.last };
    assert.equal(membersUnread(m), true);
    sync.last = 1_000;
    assert.equal(membersUnread(m), false);
  });
});
