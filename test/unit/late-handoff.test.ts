/**
 * A previous owner's handoff that arrives after the new owner stopped waiting for it
 * (`src/coord/handoff/late-handoff.ts`): the new owner decided from the previous owner's last checkpoint
 * while the previous owner went on deciding; merging the late handoff must leave the new owner with
 * what one limiter that saw every request of both would hold: sliding windows exactly, token
 * buckets exactly when no refill happened in between, and the previous owner's open requests
 * settled here as they would be there.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { ManualClock } from '../../src/clock.ts';
import { LateHandoffs, mergeLateHandoff } from '../../src/coord/handoff/late-handoff.ts';
import { Limiter } from '../../src/limiter/index.ts';
import type { Policy, TenantSnapshot } from '../../src/limiter/index.ts';

const T0 = 1_700_000_000_000;
const POLICY: Policy = {
  limits: [
    { name: 'tokens/10s', kind: 'tokens', limit: 100_000, windowMs: 10_000, algorithm: 'sliding_window' },
    { name: 'requests/10s', kind: 'requests', limit: 1_000, windowMs: 10_000, algorithm: 'sliding_window' },
    { name: 'tokens/1m', kind: 'tokens', limit: 200_000, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'requests/1m', kind: 'requests', limit: 1_200, windowMs: 60_000, algorithm: 'token_bucket' },
    { name: 'concurrent', kind: 'concurrent', limit: 1_000, leaseTtlMs: 60_000 },
  ],
};

type Side = 'previous' | 'next';
type Op = { readonly at: Side; readonly t: 'acquire'; readonly tokens: number } | { readonly at: Side; readonly t: 'settle'; readonly n: number; readonly actual: number } | { readonly t: 'advance'; readonly ms: number };
const side = fc.constantFrom('previous' as const, 'next' as const);
const acquireOrSettle: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ at: side, t: fc.constant('acquire' as const), tokens: fc.integer({ min: 0, max: 25 }) }) },
  { weight: 2, arbitrary: fc.record({ at: side, t: fc.constant('settle' as const), n: fc.nat(), actual: fc.integer({ min: 0, max: 40 }) }) },
);
const withAdvance: fc.Arbitrary<Op> = fc.oneof({ weight: 5, arbitrary: acquireOrSettle }, { weight: 1, arbitrary: fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3_000 }) }) });

function remaining(limiter: Limiter): Record<string, number> {
  return Object.fromEntries(limiter.peek('t').map((l) => [l.name, l.remaining]));
}

function windows(l: Limiter): unknown[] {
  return (l.exportTenant('t')?.limits ?? [])
    .flatMap((x) => (x.algorithm === 'sliding_window' ? x.entries.map((e) => [x.name, ...e]) : []))
    .sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
}

/**
 * Runs `before` on the previous owner, has the next owner load its checkpoint, runs `during` on
 * both (each on its own state; the reference sees everything), merges the previous owner's state
 * into the next owner's, then settles every request still open on both (the previous owner's
 * through the next owner: forwarded settlements). @returns the three limiters.
 */
function scenario(before: readonly Op[], during: readonly Op[]): { reference: Limiter; next: Limiter; clock: ManualClock } {
  const clock = new ManualClock(T0);
  const make = (): Limiter => new Limiter({ clock, policyFor: () => POLICY });
  const [reference, previous, next] = [make(), make(), make()];
  const open: Record<Side, string[]> = { previous: [], next: [] };
  let n = 0;
  const run = (op: Op, at: (s: Side) => Limiter): void => {
    if (op.t === 'advance') {
      clock.advance(op.ms);
      return;
    }
    if (op.t === 'acquire') {
      const id = `${op.at}-${n++}`;
      for (const l of [reference, at(op.at)]) assert.equal(l.acquire('t', { id, tokens: op.tokens }).ok, true);
      open[op.at].push(id);
      return;
    }
    const ids = open[op.at];
    if (ids.length === 0) return;
    const [id] = ids.splice(op.n % ids.length, 1) as [string];
    for (const l of [reference, at(op.at)]) {
      l.settle('t', id, op.actual);
      l.release('t', id);
    }
  };
  for (const op of before) run(op.t === 'advance' ? op : { ...op, at: 'previous' }, () => previous);
  // The next owner stops waiting and loads the checkpoint; the previous owner's requests then open stay its own.
  next.importTenant('t', previous.exportTenant('t') ?? { v: 1, at: clock.now(), limits: [], reservations: [] });
  const base = next.exportTenant('t');
  for (const op of during) run(op.t === 'advance' ? op : { ...op, at: op.at === 'previous' ? 'previous' : 'next' }, (s) => (s === 'previous' ? previous : next));
  const handed = JSON.parse(JSON.stringify(previous.exportTenant('t') ?? null)) as TenantSnapshot | null;
  if (handed !== null) next.importTenant('t', mergeLateHandoff(next.exportTenant('t'), base, handed, clock.now()));
  // Open requests end: the previous owner's settlements are forwarded to the next owner.
  for (const s of ['previous', 'next'] as const) {
    for (const id of open[s].splice(0)) {
      for (const l of [reference, next]) {
        l.settle('t', id, 7);
        l.release('t', id);
      }
    }
  }
  return { reference, next, clock };
}

describe('late handoff merge', () => {
  test('property: without refill in between, windows and slots are the one limiter that saw both, buckets never have more room (every open request settled)', () => {
    fc.assert(
      fc.property(fc.array(acquireOrSettle, { maxLength: 12 }), fc.array(acquireOrSettle, { maxLength: 40 }), (before, during) => {
        const { reference, next } = scenario(before, during);
        const got = remaining(next);
        const want = remaining(reference);
        for (const name of ['tokens/10s', 'requests/10s', 'concurrent', 'requests/1m']) assert.equal(got[name], want[name], name);
        assert.ok((got['tokens/1m'] as number) <= (want['tokens/1m'] as number), `tokens/1m ${got['tokens/1m']} > ${want['tokens/1m']}`);
        assert.deepEqual(windows(next), windows(reference));
      }),
      { numRuns: 300 },
    );
  });

  test('property: with time passing, windows stay exact and a bucket never has more room than the reference plus what refill could not hold', () => {
    fc.assert(
      fc.property(fc.array(withAdvance, { maxLength: 12 }), fc.array(withAdvance, { maxLength: 40 }), (before, during) => {
        const { reference, next } = scenario(before, during);
        assert.deepEqual(windows(next), windows(reference));
        const got = remaining(next);
        const want = remaining(reference);
        assert.equal(got['concurrent'], want['concurrent']);
        // Taken before the merge by the previous owner: at most 12 + 40 requests of ≤ 40 tokens; a
        // full bucket drops at most that much refill.
        assert.ok((got['tokens/1m'] as number) <= (want['tokens/1m'] as number) + 52 * 40, `tokens/1m ${got['tokens/1m']} vs ${want['tokens/1m']}`);
        assert.ok((got['requests/1m'] as number) <= (want['requests/1m'] as number) + 52, `requests/1m ${got['requests/1m']} vs ${want['requests/1m']}`);
      }),
      { numRuns: 300 },
    );
  });

  test('LateHandoffs: a claim expects the handoff of one node, once; unclaiming forgets it', () => {
    const late = new LateHandoffs();
    late.expect('t', 'node-a', undefined);
    assert.equal(late.take('t', 'node-b'), null);
    assert.deepEqual(late.take('t', 'node-a'), { from: 'node-a', base: undefined });
    assert.equal(late.take('t', 'node-a'), null);
    late.expect('u', 'node-a', undefined);
    late.forget('u');
    assert.equal(late.size, 0);
  });
});
