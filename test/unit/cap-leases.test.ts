/**
 * CapLeases with a fake clock and a fake CapScripts that does the Lua scripts' bucket
 * arithmetic in TypeScript (same refill, grant, wait and refund rules), so every number is exact.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock.ts';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import type { CapLeasesOptions } from '../../src/globalcap/cap-leases.ts';
import { capKey } from '../../src/globalcap/keys.ts';
import type { ReseedOptions, ReseedResult } from '../../src/globalcap/reconcile.ts';
import type { CapScripts, LeaseOptions, LeaseResult, TokenBucketOptions, TokenBucketResult } from '../../src/globalcap/scripts.ts';

type Call = { op: 'lease'; key: string; o: LeaseOptions } | { op: 'tokenBucket'; key: string; o: TokenBucketOptions } | { op: 'reseed'; key: string; o: ReseedOptions };

/** lua/token-bucket.lua and lua/lease.lua in TypeScript, on the test's clock. */
class FakeScripts implements CapScripts {
  readonly calls: Call[] = [];
  readonly levels = new Map<string, { l: number; t: number }>();
  /** When set, every call rejects (Redis down). */
  down = false;
  /** When set, calls wait until `release()` (a slow Redis). */
  hold = false;
  #held: (() => void)[] = [];

  constructor(readonly clock: ManualClock) {}

  release(): void {
    for (const r of this.#held.splice(0)) r();
  }

  level(key: string, capacity: number, rate: number): number {
    const s = this.levels.get(key) ?? { l: capacity, t: this.clock.now() };
    return Math.min(capacity, s.l + ((this.clock.now() - s.t) * rate) / 1000);
  }

  async #gate(): Promise<void> {
    if (this.hold) await new Promise<void>((r) => this.#held.push(r));
    if (this.down) throw new Error('connect ECONNREFUSED');
  }

  async tokenBucket(key: string, o: TokenBucketOptions): Promise<TokenBucketResult> {
    this.calls.push({ op: 'tokenBucket', key, o });
    await this.#gate();
    let level = this.level(key, o.capacity, o.ratePerSec);
    if (o.cost < 0) level = Math.min(o.capacity, level - o.cost);
    else if (o.force === true || level - o.cost >= 0) level -= o.cost;
    else return { allowed: false, waitMs: Math.ceil(((o.cost - level) * 1000) / o.ratePerSec), level: Math.floor(level) };
    this.levels.set(key, { l: level, t: this.clock.now() });
    return { allowed: true, waitMs: 0, level: Math.floor(level) };
  }

  /** lua/reseed.lua without the epoch's base (one reseed per epoch in these tests). */
  async reseed(key: string, o: ReseedOptions): Promise<ReseedResult> {
    this.calls.push({ op: 'reseed', key, o });
    await this.#gate();
    const before = this.level(key, o.capacity, o.ratePerSec);
    const level = Math.min(before, o.capacity, o.knownLevel + (o.ageMs * o.ratePerSec) / 1000);
    this.levels.set(key, { l: level, t: this.clock.now() });
    return { before: Math.floor(before), level: Math.floor(level), base: Math.floor(level) };
  }

  async lease(key: string, o: LeaseOptions): Promise<LeaseResult> {
    this.calls.push({ op: 'lease', key, o });
    await this.#gate();
    const level = this.level(key, o.capacity, o.ratePerSec);
    const granted = Math.min(o.want, Math.floor(level));
    if (granted < o.min) return { granted: 0, waitMs: Math.ceil(((o.min - level) * 1000) / o.ratePerSec), level: Math.floor(level) };
    this.levels.set(key, { l: level - granted, t: this.clock.now() });
    return { granted, waitMs: 0, level: Math.floor(level - granted) };
  }

  leases(key: string): LeaseOptions[] {
    return this.calls.flatMap((c) => (c.op === 'lease' && c.key === key ? [c.o] : []));
  }
}

const RPM = capKey('c1', 'deployment:gpt:rpm');
const TPM = capKey('c1', 'deployment:gpt:tpm');

/** Deployment gpt {rpm 1000, tpm 60,000, headroom 0.9}: capacities 900 requests and 54,000 tokens (15/s and 900/s). */
function setup(extra: Partial<CapLeasesOptions> = {}): { clock: ManualClock; scripts: FakeScripts; leases: CapLeases } {
  const clock = new ManualClock(1_000_000);
  const scripts = new FakeScripts(clock);
  const leases = new CapLeases({
    cluster: 'c1',
    deployments: { gpt: { rpm: 1000, tpm: 60_000 } },
    scripts,
    clock,
    blockMs: 250,
    reseed: (key, o) => scripts.reseed(key, o),
    sweepMs: 0,
    ...extra,
  });
  return { clock, scripts, leases };
}

describe('CapLeases', () => {
  test('buckets: capacity = quota × headroom, refill capacity / 60 s, keys by deployment; first take renews and waits', async () => {
    const { scripts, leases } = setup();
    assert.deepEqual(leases.take('gpt', { tokens: 500 }), { ok: false, waitMs: 5 });
    // min block = 100 ms of refill: 2 requests (1.5 rounded up), 90 tokens; a refused take asks at least for what it lacks.
    assert.deepEqual(scripts.leases(RPM), [{ capacity: 900, ratePerSec: 15, want: 2, min: 1, ttlMs: 60_000 }]);
    assert.deepEqual(scripts.leases(TPM), [{ capacity: 54_000, ratePerSec: 900, want: 500, min: 500, ttlMs: 60_000 }]);
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 500 }), { ok: true });
    const v = leases.view('gpt');
    assert.equal(v.requests?.balance, 1);
    assert.equal(v.tokens?.balance, 0);
    assert.equal(v.tokens?.capacity, 54_000);
  });

  test('a cost above a bucket capacity is refused for good (waitMs -1) without a Redis call', () => {
    const { scripts, leases } = setup();
    assert.deepEqual(leases.take('gpt', { tokens: 54_001 }), { ok: false, waitMs: -1 });
    assert.equal(scripts.calls.length, 0);
    assert.throws(() => leases.take('nope', { tokens: 1 }), RangeError);
    assert.throws(() => leases.take('gpt', { tokens: -1 }), RangeError);
  });

  test('block = spend rate × 250 ms at steady load, capped at capacity / (4 × live nodes); a few renewals a second', async () => {
    // tpm 6,000,000: capacity 5,400,000, refill 90,000 tokens/s, more than the load below; min block 1 ms of refill = 90.
    let nodes = 3;
    const { clock, scripts, leases } = setup({ liveNodes: () => nodes, minBlockMs: 1, deployments: { gpt: { rpm: 1000, tpm: 6_000_000 } } });
    // 100 tokens every 10 ms (10,000 tokens/s) for 10 s, renewals answered at once.
    let refused = 0;
    let leasesInLastSecond = 0;
    for (let i = 0; i < 1000; i++) {
      if (i === 900) leasesInLastSecond = scripts.leases(TPM).length;
      if (!leases.take('gpt', { tokens: 100, requests: 0 }).ok) refused++;
      await leases.whenRenewed('gpt');
      clock.advance(10);
    }
    leasesInLastSecond = scripts.leases(TPM).length - leasesInLastSecond;
    // Steady decayed counter: 100 / (1 − e^(−10/1000)) = 10,050.0 tokens (within 0.005% after 10 s)
    // → block ⌈10,049.5 × 250 / 1000⌉ = 2,513.
    const last = scripts.leases(TPM).at(-1);
    assert.equal(last?.want, 2513);
    assert.equal(last?.min, 90);
    assert.equal(leasesInLastSecond, 4);
    assert.equal(refused, 1);
    // With 600 live nodes the block is capped at 5,400,000 / (4 × 600) = 2,250.
    nodes = 600;
    for (let i = 0; i < 100; i++) {
      leases.take('gpt', { tokens: 100, requests: 0 });
      await leases.whenRenewed('gpt');
      clock.advance(10);
    }
    assert.equal(leases.view('gpt').tokens?.block, 2250);
    assert.equal(scripts.leases(TPM).at(-1)?.want, 2250);
  });

  test('renews only below the low-water mark (half a block), one lease call per bucket', async () => {
    const { scripts, leases } = setup();
    const t = (tokens: number): boolean => leases.take('gpt', { tokens, requests: 0 }).ok;
    assert.equal(t(1000), false);
    await leases.whenRenewed('gpt');
    assert.equal(scripts.leases(TPM).length, 1);
    assert.equal(t(1000), true); // balance 0 < half a block
    assert.equal(scripts.leases(TPM).length, 2);
    // Block = max(min block 90, last take 1000, ⌈spent 1000 × 250 / 1000⌉ = 250) = 1000; min = what
    // the next take of 1,000 lacks (balance 0).
    assert.deepEqual(scripts.leases(TPM)[1], { capacity: 54_000, ratePerSec: 900, want: 1000, min: 1000, ttlMs: 60_000 });
    await leases.whenRenewed('gpt');
    assert.equal(leases.view('gpt').tokens?.balance, 1000);
    // After k takes of 100 (no time passes; the refused first take spent nothing): balance
    // 1000 − 100k, block ⌈(1000 + 100k) / 4⌉.
    for (let k = 1; k <= 7; k++) assert.equal(t(100), true);
    assert.equal(scripts.leases(TPM).length, 2); // k = 7: 300 ≥ 425 / 2
    assert.equal(t(100), true); // k = 8: 200 < 450 / 2
    assert.equal(scripts.leases(TPM).length, 3);
    assert.deepEqual(scripts.leases(TPM)[2], { capacity: 54_000, ratePerSec: 900, want: 450, min: 90, ttlMs: 60_000 });
  });

  test('never more than one renewal in flight per bucket; refused takes wait pendingWaitMs', async () => {
    const { scripts, leases } = setup();
    scripts.hold = true;
    for (let i = 0; i < 5; i++) assert.deepEqual(leases.take('gpt', { tokens: 10 }), { ok: false, waitMs: 5 });
    assert.equal(scripts.leases(TPM).length, 1);
    assert.equal(scripts.leases(RPM).length, 1);
    assert.equal(leases.view('gpt').tokens?.renewing, true);
    scripts.release();
    await leases.whenRenewed('gpt');
    assert.equal(leases.view('gpt').tokens?.renewing, false);
    assert.equal(leases.view('gpt').tokens?.balance, 90);
  });

  test('a denied lease makes takes wait the bucket waitMs, and no call is sent before it', async () => {
    const { clock, scripts, leases } = setup();
    scripts.levels.set(TPM, { l: 0, t: clock.now() });
    leases.take('gpt', { tokens: 450 });
    await leases.whenRenewed('gpt');
    // 450 tokens at 900/s: 500 ms.
    assert.deepEqual(leases.take('gpt', { tokens: 450 }), { ok: false, waitMs: 500 });
    clock.advance(499);
    assert.deepEqual(leases.take('gpt', { tokens: 450 }), { ok: false, waitMs: 1 });
    assert.equal(scripts.leases(TPM).length, 1);
    clock.advance(1);
    assert.deepEqual(leases.take('gpt', { tokens: 450 }), { ok: false, waitMs: 5 });
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 450 }), { ok: true });
    assert.equal(scripts.leases(TPM).length, 3);
  });

  test("with 3 live nodes a denied lease waits the bucket's real refill time (not × 3); a starved bucket asks for its fair part of 2 × blockMs of refill", async () => {
    const { clock, scripts, leases } = setup({ liveNodes: () => 3 });
    scripts.levels.set(TPM, { l: 0, t: clock.now() });
    leases.take('gpt', { tokens: 90, requests: 0 });
    await leases.whenRenewed('gpt');
    // 90 tokens at 900/s: 100 ms, the Lua's wait as it is.
    assert.deepEqual(leases.take('gpt', { tokens: 90, requests: 0 }), { ok: false, waitMs: 100 });
    clock.advance(500); // 450 refilled
    leases.take('gpt', { tokens: 90, requests: 0 });
    // Starved: want = max(90, ⌈900/s × 0.5 s / 3⌉ = 150).
    assert.deepEqual(scripts.leases(TPM).at(-1), { capacity: 54_000, ratePerSec: 900, want: 150, min: 90, ttlMs: 60_000 });
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 90, requests: 0 }), { ok: true });
    // A deeper deficit: 900 − 60 held = 840 tokens short at 900/s is 934 ms.
    await leases.whenRenewed('gpt');
    scripts.levels.set(TPM, { l: 0, t: clock.now() });
    const big = leases.take('gpt', { tokens: 900, requests: 0 });
    assert.equal(big.ok, false);
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 900, requests: 0 }), { ok: false, waitMs: 934 });
  });

  test('a low-water renewal asks at least what the next take lacks: no fragment smaller than a take is leased', async () => {
    const { clock, scripts, leases } = setup();
    const t = (tokens: number): ReturnType<CapLeases['take']> => leases.take('gpt', { tokens, requests: 0 });
    t(1000);
    await leases.whenRenewed('gpt');
    scripts.levels.set(TPM, { l: 500, t: clock.now() });
    assert.deepEqual(t(1000), { ok: true }); // low-water renewal: want 1000, min 1000; the bucket holds 500
    await leases.whenRenewed('gpt');
    assert.equal(leases.view('gpt').tokens?.balance, 0, 'denied: a 500 fragment could not serve a take of 1,000');
    // 500 tokens short at 900/s: 556 ms.
    assert.deepEqual(t(1000), { ok: false, waitMs: 556 });
    assert.equal(scripts.leases(TPM).length, 2);
  });

  test('a lease expires leaseTtlMs after its call was sent; its unspent units go back to Redis', async () => {
    const { clock, scripts, leases } = setup({ leaseTtlMs: 5000, idleMs: 60_000 });
    leases.take('gpt', { tokens: 1000 });
    await leases.whenRenewed('gpt');
    clock.advance(4999);
    await leases.sweep();
    assert.equal(leases.view('gpt').tokens?.balance, 1000);
    assert.equal(scripts.calls.filter((c) => c.op === 'tokenBucket').length, 0);
    clock.advance(1);
    await leases.sweep();
    assert.equal(leases.view('gpt').tokens?.balance, 0);
    const back = scripts.calls.flatMap((c) => (c.op === 'tokenBucket' ? [[c.key, c.o.cost, c.o.force]] : []));
    assert.deepEqual(back, [
      [RPM, -2, true],
      [TPM, -1000, true],
    ]);
    assert.equal(scripts.level(TPM, 54_000, 900), 54_000);
    assert.deepEqual(leases.givenBack, { sent: 1002, answered: 1002 });
    assert.deepEqual(leases.take('gpt', { tokens: 1000 }), { ok: false, waitMs: 5 });
  });

  test('an idle bucket (no take for idleMs) gives its unspent units back before they expire; a busy one keeps them', async () => {
    const { clock, scripts, leases } = setup({ idleMs: 1000 });
    const t = (tokens: number): ReturnType<CapLeases['take']> => leases.take('gpt', { tokens, requests: 0 });
    t(1000);
    await leases.whenRenewed('gpt');
    assert.deepEqual(t(100), { ok: true });
    await leases.whenRenewed('gpt');
    const held = leases.view('gpt').tokens?.balance ?? 0;
    assert.ok(held > 0);
    clock.advance(999);
    await leases.sweep();
    assert.equal(leases.view('gpt').tokens?.balance, held, 'not idle yet');
    clock.advance(1);
    await leases.sweep();
    assert.equal(leases.view('gpt').tokens?.balance, 0);
    assert.deepEqual(
      scripts.calls.flatMap((c) => (c.op === 'tokenBucket' ? [[c.key, c.o.cost]] : [])),
      [[TPM, -held]],
    );
    // 1,000 + 100 taken 1 s ago, refilled 900 since; the held units are back.
    assert.equal(scripts.level(TPM, 54_000, 900), 54_000);
  });

  test('a small bucket is never prefetched from: two nodes on a 2 rpm quota each lease exactly one request', async () => {
    const clock = new ManualClock(1_000_000);
    const scripts = new FakeScripts(clock);
    const node = (): CapLeases =>
      new CapLeases({ cluster: 'c1', deployments: { gpt: { rpm: 2, headroom: 1 } }, scripts, clock, liveNodes: () => 2, sweepMs: 0 });
    const [a, b] = [node(), node()];
    for (const n of [a, b]) {
      const first = n.take('gpt', { tokens: 0 });
      assert.deepEqual(await n.takeAfterRenewals('gpt', { tokens: 0 }, first), { ok: true });
      await n.whenRenewed('gpt');
    }
    assert.deepEqual(
      scripts.leases(capKey('c1', 'deployment:gpt:rpm')).map((o) => [o.want, o.min]),
      [
        [1, 1],
        [1, 1],
      ],
    );
    // Full: 1 request refills in 30 s, the Lua's wait as it is.
    const third = a.take('gpt', { tokens: 0 });
    assert.deepEqual(await a.takeAfterRenewals('gpt', { tokens: 0 }, third), { ok: false, waitMs: 30_000 });
  });

  test('refund adds to the local balance, debit may take it negative, the next grant repays the debt', async () => {
    const { scripts, leases } = setup();
    const t = (tokens: number): ReturnType<CapLeases['take']> => leases.take('gpt', { tokens, requests: 0 });
    t(1000);
    await leases.whenRenewed('gpt');
    t(1000);
    await leases.whenRenewed('gpt'); // low-water renewal granted 1000
    leases.refund('gpt', { tokens: 300 });
    assert.equal(leases.view('gpt').tokens?.balance, 1300);
    leases.debit('gpt', { tokens: 1500 });
    assert.equal(leases.view('gpt').tokens?.balance, -200);
    assert.equal(scripts.leases(TPM).length, 2); // refund and debit never call Redis
    assert.deepEqual(t(100), { ok: false, waitMs: 5 });
    // min = cost + debt = 300; want = block + debt = max(90, 100, ⌈spent (1000 + 1500) / 4⌉ = 625) + 200
    // (the refused first take spent nothing).
    assert.deepEqual(scripts.leases(TPM)[2], { capacity: 54_000, ratePerSec: 900, want: 825, min: 300, ttlMs: 60_000 });
    await leases.whenRenewed('gpt');
    assert.equal(leases.view('gpt').tokens?.balance, 625);
    assert.deepEqual(t(100), { ok: true });
    assert.equal(leases.view('gpt').tokens?.balance, 525);
  });

  test('Redis down: fallback to capacity / live nodes per minute, probes once per probeIntervalMs, leaves on success', async () => {
    const changes: boolean[] = [];
    const { clock, scripts, leases } = setup({ liveNodes: () => 3, onFallbackChange: (on) => changes.push(on) });
    scripts.down = true;
    assert.deepEqual(leases.take('gpt', { tokens: 100 }), { ok: false, waitMs: 5 });
    await leases.whenRenewed('gpt');
    assert.equal(leases.inFallback, true);
    assert.deepEqual(changes, [true]);
    // Share: 54,000 / 3 = 18,000 tokens and 300 requests per minute.
    assert.deepEqual(leases.take('gpt', { tokens: 18_000 }), { ok: true });
    // 1 token refills in 60,000 / 18,000 = 3.33 ms.
    assert.deepEqual(leases.take('gpt', { tokens: 1 }), { ok: false, waitMs: 4 });
    assert.equal(scripts.leases(TPM).length, 1); // no probe before probeIntervalMs (1 s)
    clock.advance(1000);
    assert.deepEqual(leases.take('gpt', { tokens: 300 }), { ok: true }); // 300 refilled in 1 s
    // The low-water probe: in fallback it charges the units spent from the share (it fails here).
    assert.equal(scripts.leases(TPM).length, 1);
    assert.equal(scripts.calls.filter((c) => c.key === TPM).length, 2);
    await leases.whenRenewed('gpt');
    assert.equal(leases.inFallback, true);
    scripts.down = false;
    clock.advance(1000);
    assert.deepEqual(leases.take('gpt', { tokens: 1 }), { ok: true }); // from the share; its low-water probe succeeds
    // The probe charges what the node spent from its share and Redis never saw: 18,000 + 300 + 1
    // tokens, not drained (the other nodes may have leased the whole refill meanwhile), capped at
    // one share (18,000).
    assert.equal(leases.view('gpt').tokens?.unreconciled, 18_000);
    assert.equal(scripts.leases(TPM).length, 1);
    const charges = scripts.calls.flatMap((c) => (c.op === 'tokenBucket' && c.key === TPM ? [c.o] : []));
    assert.deepEqual(charges.slice(1), [{ capacity: 54_000, ratePerSec: 900, cost: 18_000, force: true, ttlMs: 60_000 }]);
    await leases.whenRenewed('gpt');
    assert.equal(leases.inFallback, false);
    assert.deepEqual(changes, [true, false]);
    assert.equal(leases.view('gpt').tokens?.unreconciled, 0);
    assert.equal(scripts.level(TPM, 54_000, 900), 54_000 - 18_000);
    // Then the leases resume: the next take renews from the reconciled bucket.
    assert.deepEqual(leases.take('gpt', { tokens: 1 }), { ok: false, waitMs: 5 });
    assert.equal(scripts.leases(TPM).length, 2);
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 1 }), { ok: true });
  });

  test('a blip (one failed call, breaker still closed): no fallback; the waiting take is served from the share, the next take renews at once', async () => {
    let blips = 1;
    const changes: boolean[] = [];
    const { scripts, leases } = setup({
      liveNodes: () => 3,
      onFallbackChange: (on) => changes.push(on),
      call: async (fn) => {
        if (blips > 0) {
          blips--;
          return { ok: false, open: false };
        }
        return { ok: true, value: await fn() };
      },
    });
    const first = leases.take('gpt', { tokens: 1000, requests: 0 });
    assert.deepEqual(first, { ok: false, waitMs: 5 });
    assert.deepEqual(await leases.takeAfterRenewals('gpt', { tokens: 1000, requests: 0 }, first), { ok: true }, 'from the share (18,000 / min)');
    assert.equal(leases.inFallback, false);
    assert.deepEqual(changes, []);
    assert.equal(leases.view('gpt').tokens?.unreconciled, 1000, 'charged before the next lease');
    await leases.whenRenewed('gpt'); // that take's renewal: the charge of 1,000
    assert.equal(scripts.level(TPM, 54_000, 900), 53_000);
    assert.equal(leases.view('gpt').tokens?.unreconciled, 0);
  });

  test('a blip whose share is spent: the refusal waits no longer than the blip, and the next take leases from Redis', async () => {
    let blips = 1;
    const { clock, leases } = setup({
      liveNodes: () => 3,
      call: async (fn) => {
        if (blips > 0) {
          blips--;
          return { ok: false, open: false };
        }
        return { ok: true, value: await fn() };
      },
    });
    const first = leases.take('gpt', { tokens: 18_000, requests: 0 });
    assert.deepEqual(await leases.takeAfterRenewals('gpt', { tokens: 18_000, requests: 0 }, first), { ok: true }, 'the whole share (54,000 / 3)');
    // The share is spent: its refill (300 tokens/s) would say 3,334 ms for 1,000 tokens; the blip ends in 50 ms.
    const refused = leases.take('gpt', { tokens: 1_000, requests: 0 });
    assert.equal(refused.ok, false);
    assert.ok(!refused.ok && refused.waitMs > 0 && refused.waitMs <= 50, `waits ${JSON.stringify(refused)}`);
    clock.advance(50);
    const after = leases.take('gpt', { tokens: 1_000, requests: 0 });
    assert.deepEqual(await leases.takeAfterRenewals('gpt', { tokens: 1_000, requests: 0 }, after), { ok: true }, 'leased from Redis');
    assert.equal(leases.inFallback, false);
  });

  test('Redis restarted empty: the bucket is re-seeded to the level the node last saw (refilled) before the next lease, and no lease is sent while the connection is down', async () => {
    const { clock, scripts, leases } = setup({ liveNodes: () => 2 });
    const t = (tokens: number): ReturnType<CapLeases['take']> => leases.take('gpt', { tokens, requests: 0 });
    t(10_000);
    await leases.whenRenewed('gpt');
    assert.deepEqual(t(10_000), { ok: true });
    // A small bucket (10,000 × 4 × 2 nodes > 54,000) is never prefetched from: a second lease only
    // for a refused take, held unspent when the connection drops.
    assert.deepEqual(t(10_000), { ok: false, waitMs: 5 });
    await leases.whenRenewed('gpt');
    const before = scripts.calls.length;
    clock.advance(1000);
    // The level the node last saw in Redis (after its second lease), refilled over the 1 s since.
    const seenLevel = leases.view('gpt').tokens?.level ?? 0;
    assert.equal(seenLevel, 54_000 - 20_000 + 900);
    leases.connectionLost();
    scripts.levels.clear(); // the restart: Redis lost every bucket
    assert.equal(leases.inFallback, true, 'no connection: fallback');
    assert.deepEqual(t(10_000), { ok: true }); // from the lease still held (the low-water renewal is held back)
    // The share (54,000 / 2) less the 19,550 this node used: 10,000 waits (10,000 − 7,450) / 450 per s.
    assert.deepEqual(t(10_000), { ok: false, waitMs: 5667 });
    assert.equal(scripts.calls.length, before, 'nothing sent while the connection is down');
    // Spent 10,000 (1 s ago) and 10,000 (now); drained at 900 / 2 = 450 tokens/s for 1 s: 19,550.
    assert.equal(leases.view('gpt').tokens?.knownUsage, 19_550);
    leases.restored('r1:e1');
    leases.reconnected();
    assert.equal(leases.view('gpt').tokens?.unreconciled, 0, 'the 10,000 came from the lease: already counted in the level seen');
    assert.deepEqual(t(10_000), { ok: false, waitMs: 5667 }); // still in fallback; its probe is the reseed
    await leases.whenRenewed('gpt');
    await leases.whenRenewed('gpt');
    assert.equal(leases.inFallback, false);
    const reseeds = scripts.calls.filter((c) => c.op === 'reseed');
    assert.deepEqual(reseeds.map((c) => c.key), [TPM], 'the tokens bucket re-seeded (the requests bucket was never leased: nothing known)');
    // Not the 19,550 of known usage on top of it (what the node spent came from leases the level already lacks).
    assert.equal(Math.floor(scripts.level(TPM, 54_000, 900)), seenLevel, 'the restarted bucket holds the level the node knew');
    assert.deepEqual(t(10_000), { ok: false, waitMs: 5 }); // now the lease
    await leases.whenRenewed('gpt');
    assert.deepEqual(t(10_000), { ok: true });
  });

  test('fallback share after the cluster emptied the bucket: no fresh share for a node that used less than its part (fallbackBudget)', async () => {
    const { clock, scripts, leases } = setup({ liveNodes: () => 2 });
    const t = (tokens: number): ReturnType<CapLeases['take']> => leases.take('gpt', { tokens, requests: 0 });
    t(10_000);
    await leases.whenRenewed('gpt');
    assert.deepEqual(t(10_000), { ok: true }); // this node's only use: 10,000 of its 27,000 part
    // The other node takes the rest of the bucket; this node's next lease is denied and sees it empty.
    scripts.levels.set(TPM, { l: 0, t: clock.now() });
    assert.deepEqual(t(10_000), { ok: false, waitMs: 5 });
    await leases.whenRenewed('gpt');
    assert.equal(leases.view('gpt').tokens?.level, 0);
    leases.connectionLost();
    assert.equal(leases.inFallback, true);
    // Its part less its use would be 17,000 (enough for this take), but the bucket it saw was empty:
    // the share starts empty and refills at 900 / 2 = 450 tokens/s, so 10,000 waits 22.2 s.
    assert.deepEqual(t(10_000), { ok: false, waitMs: 22_223 });
    clock.advance(22_223);
    assert.deepEqual(t(10_000), { ok: true });
  });

  test('probeAnswered leaves fallback without a take, but not while the connection is held (before reconnected)', () => {
    const { leases } = setup();
    leases.connectionLost();
    assert.equal(leases.inFallback, true);
    leases.probeAnswered();
    assert.equal(leases.inFallback, true, 'held: a restarted Redis must first hear of the usage');
    leases.reconnected();
    assert.equal(leases.inFallback, true, 'reconnected alone waits for an answer');
    leases.probeAnswered();
    assert.equal(leases.inFallback, false);
  });

  test('probeAnswered after a restart: re-seeds first, and leaves fallback when the charge is answered', async () => {
    const { scripts, leases } = setup({ liveNodes: () => 2 });
    leases.take('gpt', { tokens: 1000, requests: 0 });
    await leases.whenRenewed('gpt');
    assert.deepEqual(leases.take('gpt', { tokens: 1000, requests: 0 }), { ok: true });
    await leases.whenRenewed('gpt');
    leases.connectionLost();
    scripts.levels.clear(); // restarted empty
    const before = scripts.calls.length;
    leases.restored('r1:e1');
    leases.reconnected();
    leases.probeAnswered();
    assert.equal(leases.inFallback, true, 'still on the shares while the charge is in flight');
    await leases.whenRenewed('gpt');
    assert.equal(leases.inFallback, false);
    assert.ok(scripts.calls.length > before, 'the charge was sent without a take');
    assert.equal(leases.view('gpt').tokens?.unreconciled, 0);
  });

  test('reconnected without a restart charges nothing', async () => {
    const { scripts, leases } = setup();
    leases.take('gpt', { tokens: 1000 });
    await leases.whenRenewed('gpt');
    leases.connectionLost();
    leases.reconnected();
    assert.equal(leases.view('gpt').tokens?.unreconciled, 0);
    assert.equal(scripts.calls.filter((c) => c.op !== 'lease').length, 0);
  });

  test('define: a hot tenant group shares its buckets with a model-scoped group; fallback share is capacity / k', async () => {
    let k = 3;
    const { clock, scripts, leases } = setup({ localOnly: false });
    const tpm = { kind: 'tokens' as const, name: 'tenant:acme:tokens:6000/60000', capacity: 6000, windowMs: 60_000 };
    const rpd = { kind: 'requests' as const, name: 'tenant:acme@gpt:requests:100/86400000', capacity: 100, windowMs: 86_400_000 };
    leases.define('tenant:acme', { buckets: [tpm], share: () => k });
    leases.define('tenant:acme@gpt', { buckets: [tpm, rpd], share: () => k });
    assert.throws(() => leases.define('x', { buckets: [{ ...tpm, capacity: 7000 }], share: () => 1 }), RangeError);
    assert.deepEqual(leases.take('tenant:acme@gpt', { tokens: 600 }), { ok: false, waitMs: 5 });
    await leases.whenRenewed('tenant:acme@gpt');
    assert.deepEqual(leases.take('tenant:acme@gpt', { tokens: 600 }), { ok: true });
    assert.equal(leases.buckets('tenant:acme')[0]?.balance, 0, 'the same tokens bucket');
    await leases.whenRenewed('tenant:acme@gpt');
    scripts.down = true;
    clock.advance(60_000); // the lease expired, and this node's known usage drained (at 6,000 / 3 per minute)
    assert.equal(leases.buckets('tenant:acme')[0]?.knownUsage, 0);
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1 }), { ok: false, waitMs: 5 });
    await leases.whenRenewed('tenant:acme');
    assert.equal(leases.inFallback, true);
    // Share: 6,000 / 3 per minute.
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1999 }), { ok: true });
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1 }), { ok: true });
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1 }), { ok: false, waitMs: 30 });
    // Back on Redis (the probe charges the 2,000 spent from the share), then down again: the new
    // share starts with the usage this node already has in the window, not full.
    scripts.down = false;
    clock.advance(1000);
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1 }), { ok: true }, 'from the share (33 refilled); its probe charges');
    await leases.whenRenewed('tenant:acme');
    assert.equal(leases.inFallback, false);
    scripts.down = true;
    clock.advance(6000); // the leases expire; known usage 2,000 − 7 s × 33.3/s ≈ 1,767
    assert.deepEqual(leases.take('tenant:acme', { tokens: 1 }), { ok: false, waitMs: 5 });
    await leases.whenRenewed('tenant:acme');
    assert.equal(leases.inFallback, true);
    assert.equal(leases.take('tenant:acme', { tokens: 1999 }).ok, false, 'not a fresh share');
    assert.equal(leases.buckets('tenant:acme')[0]?.knownUsage, 2001 - (7 * 100) / 3, '1,999 + 1 + 1 from the share, drained 7 s at 100/3 per s');
    assert.deepEqual(leases.take('tenant:acme', { tokens: 232 }), { ok: true }); // 2,000 − 1,767.7 = 232.3 left
    assert.equal(leases.take('tenant:acme', { tokens: 1 }).ok, false);
    // A shrinking view (share 3 → 2) neither grows the share nor speeds the drain: the largest share seen counts.
    k = 2;
    assert.equal(leases.buckets('tenant:acme')[0]?.capacity, 6000);
  });

  test('providerLimited drains both cluster buckets by retryAfter × rate with force and zeroes the local balance', async () => {
    const { scripts, leases } = setup();
    leases.take('gpt', { tokens: 1000 });
    await leases.whenRenewed('gpt');
    await leases.providerLimited('gpt', { retryAfterMs: 2000 });
    const drains = scripts.calls.filter((c) => c.op === 'tokenBucket');
    assert.deepEqual(drains, [
      { op: 'tokenBucket', key: RPM, o: { capacity: 900, ratePerSec: 15, cost: 30, force: true, ttlMs: 60_000 } },
      { op: 'tokenBucket', key: TPM, o: { capacity: 54_000, ratePerSec: 900, cost: 1800, force: true, ttlMs: 60_000 } },
    ]);
    assert.equal(leases.view('gpt').tokens?.balance, 0);
    assert.equal(leases.view('gpt').requests?.balance, 0);
    assert.equal(scripts.level(TPM, 54_000, 900), 54_000 - 1000 - 1800);
  });

  test('close returns unspent balances to Redis (negative cost) and charges debt; take throws afterwards', async () => {
    const { scripts, leases } = setup();
    leases.take('gpt', { tokens: 1000 });
    await leases.whenRenewed('gpt');
    leases.refund('gpt', { tokens: 400 });
    await leases.close();
    const back = scripts.calls.filter((c) => c.op === 'tokenBucket');
    assert.deepEqual(
      back.map((c) => [c.key, c.o.cost]),
      [
        [RPM, -2],
        [TPM, -1400],
      ],
    );
    assert.equal(scripts.level(TPM, 54_000, 900), 54_000);
    assert.throws(() => leases.take('gpt', { tokens: 1 }), /closed/);
    await leases.close();
    assert.equal(scripts.calls.length, 4);
  });
});
