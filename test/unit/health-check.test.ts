/**
 * The router's health state machine on a fake clock (issue 13, "routers that fail safe"): probes
 * that time out for less than the grace never mark a member; a refused connection marks it at once;
 * answers to forwarded requests count as liveness; when every member is suspect the owner still
 * gets its tenants unless it is unreachable.
 */
import assert from 'node:assert/strict';
import { beforeEach, describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import type { Member, Ring } from '../../src/coord/types.ts';
import { chooseMember, chooseSpreadMember, fallbackFor } from '../../src/router/choose-member.ts';
import { HealthCheck } from '../../src/router/health-check.ts';
import type { Probe } from '../../src/router/health-check.ts';
import { MemberPools } from '../../src/router/member-pools.ts';
import { Suspects } from '../../src/router/suspects.ts';

const m = (id: string): Member => ({ id, url: `http://127.0.0.1:1/${id}` });
const [A, B] = [m('a'), m('b')] as const;
const ring: Ring = { version: 'ab', members: [A, B], owner: () => A, range: (_t, k) => [A, B].slice(0, k) };

const OK: Probe = { ok: true };
const TIMEOUT: Probe = { ok: false, kind: 'timeout', reason: 'no answer within 500 ms' };
const REFUSED: Probe = { ok: false, kind: 'refused', reason: 'connection refused or reset' };
const STATUS: Probe = { ok: false, kind: 'status', reason: 'answered 503' };

describe('HealthCheck', () => {
  let clock: ManualClock;
  let suspects: Suspects;
  let health: HealthCheck;
  /** One round for member a: the probe starts now, takes `ms`, ends with `probe`. */
  const round = (probe: Probe, ms = probe === TIMEOUT ? 500 : 1): void => {
    const started = clock.now();
    clock.advance(ms);
    health.record('a', probe, started);
    clock.advance(1_000 - ms);
  };
  beforeEach(() => {
    clock = new ManualClock();
    suspects = new Suspects(clock);
    health = new HealthCheck({ ring: () => ring, pools: new MemberPools(), suspects, intervalMs: 1_000, graceMs: 3_000, clock });
  });

  test('timeouts spanning less than the grace never mark, however many rounds in a row', () => {
    for (let i = 0; i < 3; i++) round(TIMEOUT); // rounds at 0, 1, 2 s: the last ends at 2.5 s
    assert.deepEqual(suspects.list(), []);
    round(OK);
    for (let i = 0; i < 3; i++) round(TIMEOUT); // a 200 started a new run
    assert.deepEqual(suspects.list(), []);
  });

  test('timeouts spanning the grace mark the member unresponsive; a 200 clears it', () => {
    for (let i = 0; i < 3; i++) round(TIMEOUT);
    round(TIMEOUT); // started at 3 s, ends at 3.5 s: 3.5 s since the first started
    assert.deepEqual(suspects.list(), ['a']);
    assert.equal(suspects.kindOf('a'), 'unresponsive');
    assert.equal(suspects.unreachable('a'), false);
    round(OK);
    assert.deepEqual(suspects.list(), []);
  });

  test('a refused connection marks at once, unreachable, and stays until a 200', () => {
    round(REFUSED);
    assert.equal(suspects.kindOf('a'), 'unreachable');
    health.noteAnswer('a'); // an answer in flight from before the crash does not clear it
    clock.advance(1e9);
    assert.equal(suspects.unreachable('a'), true);
    round(OK);
    assert.equal(suspects.has('a'), false);
  });

  test('non-200 answers mark after two rounds in a row, without the grace', () => {
    round(STATUS);
    assert.deepEqual(suspects.list(), []);
    round(STATUS);
    assert.equal(suspects.kindOf('a'), 'unresponsive');
    health.noteAnswer('a'); // the node says it is unwell: only its 200 clears that
    assert.equal(suspects.has('a'), true);
  });

  test('answers to forwarded requests are liveness: they end a run of timeouts and prevent the mark', () => {
    for (let i = 0; i < 10; i++) {
      round(TIMEOUT);
      health.noteAnswer('a');
    }
    assert.deepEqual(suspects.list(), []);
  });

  test('a timeout during which a forwarded request was answered is not a missed round', () => {
    round(TIMEOUT);
    for (let i = 0; i < 10; i++) {
      const started = clock.now();
      clock.advance(200);
      health.noteAnswer('a');
      clock.advance(300);
      health.record('a', TIMEOUT, started);
      clock.advance(500);
    }
    assert.deepEqual(suspects.list(), []);
  });

  test('an answer to a forwarded request clears a mark made for timeouts', () => {
    for (let i = 0; i < 4; i++) round(TIMEOUT);
    assert.equal(suspects.kindOf('a'), 'unresponsive');
    health.noteAnswer('a');
    assert.deepEqual(suspects.list(), []);
  });

  test('checkOnce probes every ring member and applies the outcomes', async () => {
    const outcomes: Record<string, Probe> = { a: REFUSED, b: TIMEOUT };
    const check = new HealthCheck({ ring: () => ring, pools: new MemberPools(), suspects, intervalMs: 1_000, graceMs: 3_000, clock, probe: async (entry) => outcomes[entry.prefix.slice(1)] ?? OK });
    await check.checkOnce();
    await check.checkOnce();
    assert.deepEqual(suspects.list(), ['a']);
  });
});

describe('chooseMember when every member is suspect', () => {
  test('the owner anyway when it is only unresponsive, without a stand-in header', () => {
    const s = new Suspects(new ManualClock());
    s.markDown('a', 'unresponsive');
    s.markDown('b', 'unresponsive');
    const isSuspect = (id: string): boolean => s.has(id);
    const isUnreachable = (id: string): boolean => s.unreachable(id);
    const target = chooseMember(ring, 't', isSuspect, undefined, isUnreachable);
    assert.equal(target?.id, 'a');
    assert.equal(fallbackFor(ring, 't', target!, isSuspect), undefined);
    assert.equal(chooseSpreadMember(ring, 't', 2, isSuspect, undefined, isUnreachable)?.id, 'a');
    // Never the excluded member (the retry after the owner failed), and the old rule without the predicate.
    assert.equal(chooseMember(ring, 't', isSuspect, 'a', isUnreachable), undefined);
    assert.equal(chooseMember(ring, 't', isSuspect), undefined);
  });

  test('not when the owner is unreachable (a refused connection): undefined, the router answers 503', () => {
    const s = new Suspects(new ManualClock());
    s.markFor('a', 1_000);
    s.markDown('b', 'unresponsive');
    assert.equal(chooseMember(ring, 't', (id) => s.has(id), undefined, (id) => s.unreachable(id)), undefined);
  });

  test('a non-suspect member still comes first', () => {
    const s = new Suspects(new ManualClock());
    s.markDown('a', 'unresponsive');
    assert.equal(chooseMember(ring, 't', (id) => s.has(id), undefined, (id) => s.unreachable(id))?.id, 'b');
  });
});
