/**
 * Issue 25, fencing, on a real redis-server: drops are recorded atomically against the dropped
 * member's heartbeat (`lua/drop-members.lua`, `dropSilentMembers`), an observer removes a silent
 * member only once its drop is recorded, and `syncNow()` / `lastBeatSentMs()` of
 * `RedisMembership` (a fresh heartbeat + read on demand, never rejecting).
 *
 * The race of the issue is built in-process, without timing luck: a member's syncs fail (as if it
 * were stalled) until the observer is about to record its drop; the test then runs the member's
 * sync just before (or just after) the observer's script, through a hook on the observer's
 * connection.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.ts';
import { DROPS_TTL_MS, DROP_MEMBERS_SCRIPT, dropSilentMembers } from '../../src/coord/membership/member-drops.ts';
import { MAX_ENTRIES_READ, RedisMembership, dropsKey, membersKey } from '../../src/coord/membership/redis-membership.ts';
import type { Member, Ring } from '../../src/coord/types.ts';
import { luaScriptPath } from '../../src/redis/lua-scripts.ts';
import { signedMemberEntry } from '../../src/security/member-entry.ts';
import { TEST_SECRET } from '../helpers/cluster-secret.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const CLUSTER = 'drops';
const MEMBERS = membersKey(CLUSTER);
const DROPS = dropsKey(CLUSTER);
const member = (i: number): Member => ({ id: `node-${i}`, url: `http://127.0.0.1:${8180 + i}` });
const entry = (i: number): string => signedMemberEntry(member(i), TEST_SECRET);
const ids = (ring: Ring): string[] => ring.members.map((m) => m.id);

/** Redis TIME, whole ms. */
async function redisNow(c: Redis): Promise<number> {
  const [sec, usec] = await c.time();
  return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
}

/** Polls `cond` every 5 ms. @throws after `timeoutMs` with `what`. */
async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(5);
  }
}

/**
 * Runs `hook` around the first calls of the drop script on `client` (ioredis defines the command on
 * the connection at its first use: the hook wraps what it defines). `before` runs before the call
 * is sent (it may throw: the call then fails as a Redis error would), `after` once it answered.
 */
function hookDropScript(client: Redis, hook: { before?: () => Promise<void>; after?: (reply: string[]) => Promise<void>; times?: number }): { calls: string[][] } {
  const calls: string[][] = [];
  let left = hook.times ?? 1;
  const define = client.defineCommand.bind(client);
  client.defineCommand = (name, definition) => {
    define(name, definition);
    const target = client as unknown as Record<string, (...args: string[]) => Promise<unknown>>;
    const original = target[name];
    assert.ok(original !== undefined);
    target[name] = async (...args: string[]) => {
      calls.push(args.slice(7));
      if (left <= 0) return original.apply(client, args);
      left--;
      await hook.before?.();
      const reply = await original.apply(client, args);
      await hook.after?.(reply as string[]);
      return reply;
    };
  };
  return { calls };
}

/** Makes `client`'s pipelines fail while `stalled` is set: its syncs send nothing (a stalled process, as far as Redis can tell). */
function stallable(client: Redis): { stalled: boolean } {
  const state = { stalled: false };
  const pipeline = client.pipeline.bind(client);
  client.pipeline = ((...args: Parameters<Redis['pipeline']>) => {
    if (state.stalled) throw new Error('stalled (test)');
    return pipeline(...args);
  }) as Redis['pipeline'];
  return state;
}

let redis: RunningRedis;
let admin: Redis;
before(async () => {
  redis = await startRedis();
  admin = redis.client();
});
after(async () => {
  await redis.stop();
});
beforeEach(async () => {
  await redis.flush();
});

describe('drop-members.lua', () => {
  test('the file has its header; a member with a fresh heartbeat is refused, a stale or absent one recorded, one already recorded kept as it was (exact hash)', async () => {
    const lua = readFileSync(luaScriptPath(DROP_MEMBERS_SCRIPT), 'utf8');
    assert.ok(lua.startsWith(`--[[\n${DROP_MEMBERS_SCRIPT}:`));
    for (const part of ['KEYS[1]', 'KEYS[2]', 'ARGV[1]', 'ARGV[5]', 'ARGV[6..]', 'Reply:', 'Clock:']) assert.ok(lua.includes(part), `header names ${part}`);

    const now = await redisNow(admin);
    const deadAfterMs = 3_000;
    await admin.zadd(MEMBERS, now - 100, entry(1)); // fresh
    await admin.zadd(MEMBERS, now - 5_000, entry(2)); // stale
    await admin.zadd(MEMBERS, now + 9_000_000, entry(5)); // beyond the window: not believed
    await admin.zadd(MEMBERS, now, 'not json', now, '{"id":5}', now, '["node-3"]'); // junk counts for nothing
    await admin.hset(DROPS, 'node-4', '123');
    const request = { membersKey: MEMBERS, dropsKey: DROPS, minScore: now - deadAfterMs, maxScore: now + 5_000, dropsAt: now, maxEntries: MAX_ENTRIES_READ };
    const recorded = await dropSilentMembers(admin, { ...request, ids: ['node-1', 'node-2', 'node-3', 'node-4', 'node-5'] });
    assert.deepEqual(recorded, ['node-2', 'node-3', 'node-4', 'node-5']);
    assert.deepEqual(await admin.hgetall(DROPS), { 'node-2': String(now), 'node-3': String(now), 'node-4': '123', 'node-5': String(now) });
    const pttl = await admin.pttl(DROPS);
    assert.ok(pttl > DROPS_TTL_MS - 5_000 && pttl <= DROPS_TTL_MS, `pttl ${pttl}`);
    // A score exactly at the threshold is a live heartbeat (the readers' window is inclusive).
    await admin.zadd(MEMBERS, now - deadAfterMs, entry(6));
    assert.deepEqual(await dropSilentMembers(admin, { ...request, ids: ['node-6'] }), []);
    assert.equal(await admin.hexists(DROPS, 'node-6'), 0);
    // Nothing to record: the hash's expiry is not renewed.
    await admin.pexpire(DROPS, 10_000);
    assert.deepEqual(await dropSilentMembers(admin, { ...request, ids: ['node-1'] }), []);
    assert.ok((await admin.pttl(DROPS)) <= 10_000);
    assert.deepEqual(await dropSilentMembers(admin, { ...request, ids: [] }), []);
  });

  test('entries scanned are bounded: beyond maxEntries (lowest scores first) a heartbeat is not seen; bad arguments are an error', async () => {
    const now = await redisNow(admin);
    await admin.zadd(MEMBERS, now - 200, entry(1), now - 100, entry(2));
    const request = { membersKey: MEMBERS, dropsKey: DROPS, minScore: now - 1_000, maxScore: now + 1_000, dropsAt: now, ids: ['node-1', 'node-2'] };
    assert.deepEqual(await dropSilentMembers(admin, { ...request, maxEntries: 1 }), ['node-2']);
    assert.deepEqual(await admin.hgetall(DROPS), { 'node-2': String(now) });
    await assert.rejects(dropSilentMembers(admin, { ...request, maxEntries: 0 }), /bad arguments/);
  });
});

describe('RedisMembership drops (real redis-server)', () => {
  const made: RedisMembership[] = [];
  const errors: Error[] = [];
  const make = (self: Member | undefined, client: Redis = redis.client(), heartbeatMs = 100, deadAfterMs = 300, clock?: ManualClock): RedisMembership => {
    const m = new RedisMembership({
      redis: client,
      cluster: CLUSTER,
      secret: TEST_SECRET,
      ...(self === undefined ? {} : { self }),
      ...(clock === undefined ? {} : { clock }),
      heartbeatMs,
      deadAfterMs,
      onError: (err) => errors.push(err),
    });
    made.push(m);
    return m;
  };
  afterEach(async () => {
    await Promise.all(made.splice(0).map((m) => m.stop()));
    errors.length = 0;
  });

  test('a dead node leaves an observer\'s ring only once its drop is recorded, and the hash holds exactly that drop', async () => {
    const observer = make(member(1));
    const deadClient = redis.client();
    const dead = make(member(2), deadClient);
    await observer.start();
    await dead.start();
    await waitFor('agreement', () => ids(observer.ring()).length === 2, 2_000);
    const recordedAtChange: Promise<Record<string, string>>[] = [];
    observer.onChange(() => recordedAtChange.push(admin.hgetall(DROPS)));
    deadClient.disconnect();
    await waitFor('drop of node-2', () => ids(observer.ring()).join() === 'node-1', 2_000);
    const [atChange] = await Promise.all(recordedAtChange);
    assert.deepEqual(Object.keys(atChange ?? {}), ['node-2'], 'recorded before the ring changed');
    const drops = await admin.hgetall(DROPS);
    assert.deepEqual(Object.keys(drops), ['node-2']);
    assert.ok(Number(drops['node-2']) > 0);
    assert.equal(recordedAtChange.length, 1);
  });

  test('the race of issue 25: the stalled member\'s heartbeat and read land between the observer\'s read and its drop: the script refuses, the observer keeps it, no drop recorded', async () => {
    const observerClient = redis.client();
    const observer = make(member(1), observerClient);
    const wokenClient = redis.client();
    const stall = stallable(wokenClient);
    const woken = make(member(2), wokenClient);
    await observer.start();
    await woken.start();
    await waitFor('agreement', () => ids(observer.ring()).length === 2 && ids(woken.ring()).length === 2, 2_000);
    const observed: string[][] = [];
    observer.onChange((r) => observed.push(ids(r)));
    let wokeOk: boolean | undefined;
    const hook = hookDropScript(observerClient, {
      before: async () => {
        // The observer has read node-2 as silent for deadAfterMs; node-2 wakes and syncs first.
        stall.stalled = false;
        wokeOk = await woken.syncNow(1_000);
      },
    });
    stall.stalled = true;
    await waitFor('the observer asks to drop node-2', () => hook.calls.length > 0, 2_000);
    await waitFor('the woken sync', () => wokeOk !== undefined, 2_000);
    assert.equal(wokeOk, true);
    assert.deepEqual(hook.calls[0], ['node-2']);
    await sleep(400); // more heartbeats of both
    assert.deepEqual(observed, [], 'the observer never dropped node-2');
    assert.deepEqual(ids(observer.ring()), ['node-1', 'node-2']);
    assert.deepEqual(ids(woken.ring()), ['node-1', 'node-2']);
    assert.equal(woken.rejoins(), 0);
    assert.deepEqual(await admin.hgetall(DROPS), {});
  });

  test('the other order: the drop is recorded before the woken member\'s heartbeat: its first sync (syncNow) shows it the ring without itself', async () => {
    const observerClient = redis.client();
    const observer = make(member(1), observerClient);
    const wokenClient = redis.client();
    const stall = stallable(wokenClient);
    const woken = make(member(2), wokenClient);
    await observer.start();
    await woken.start();
    await waitFor('agreement', () => ids(observer.ring()).length === 2 && ids(woken.ring()).length === 2, 2_000);
    let atWake: { ok: boolean; ring: string[]; rejoins: number } | undefined;
    hookDropScript(observerClient, {
      after: async (reply) => {
        assert.deepEqual(reply, ['node-2']);
        stall.stalled = false;
        const ok = await woken.syncNow(1_000);
        atWake = { ok, ring: ids(woken.ring()), rejoins: woken.rejoins() };
      },
    });
    stall.stalled = true;
    await waitFor('the woken sync', () => atWake !== undefined, 3_000);
    assert.deepEqual(atWake, { ok: true, ring: ['node-1'], rejoins: 1 }, 'learnt from its first sync after waking');
    // It then acknowledges the drop and everyone takes it back.
    await waitFor('rejoin', () => ids(observer.ring()).length === 2 && ids(woken.ring()).length === 2, 2_000);
    assert.deepEqual(await admin.hgetall(DROPS), {});
  });

  test('a failed drop script drops nothing (reported); the next sync drops the dead member', async () => {
    const observerClient = redis.client();
    const observer = make(member(1), observerClient);
    const deadClient = redis.client();
    const dead = make(member(2), deadClient);
    await observer.start();
    await dead.start();
    await waitFor('agreement', () => ids(observer.ring()).length === 2, 2_000);
    let ringDuringFailure: string[] | undefined;
    const hook = hookDropScript(observerClient, {
      before: () => {
        ringDuringFailure = ids(observer.ring());
        return Promise.reject(new Error('drop script failed (test)'));
      },
    });
    deadClient.disconnect();
    await waitFor('drop of node-2', () => ids(observer.ring()).join() === 'node-1', 2_000);
    assert.deepEqual(ringDuringFailure, ['node-1', 'node-2'], 'kept while the call was in flight');
    assert.ok(hook.calls.length >= 2, 'asked again');
    assert.ok(errors.some((e) => e.message === 'drop script failed (test)'));
    assert.deepEqual(Object.keys(await admin.hgetall(DROPS)), ['node-2']);
  });

  test('syncNow resolves true once a fresh sync applied a member change (listeners called first); lastBeatSentMs is the clock at its heartbeat; undefined on a router', async () => {
    const clock = new ManualClock(1_000_000);
    const node = make(member(1), redis.client(), 10_000, 30_000, clock); // timers never fire during the test
    const router = make(undefined, redis.client(), 10_000, 30_000);
    assert.equal(await node.syncNow(100), false, 'before start');
    await node.start();
    await router.start();
    assert.equal(node.lastBeatSentMs(), 1_000_000);
    assert.equal(router.lastBeatSentMs(), undefined);
    const heard: string[][] = [];
    node.onChange((r) => heard.push(ids(r)));
    await admin.zadd(MEMBERS, await redisNow(admin), entry(2)); // no announcement: only a read finds it
    clock.advance(5_000);
    const ok = await node.syncNow(1_000);
    assert.equal(ok, true);
    assert.deepEqual(heard, [['node-1', 'node-2']]);
    assert.deepEqual(ids(node.ring()), ['node-1', 'node-2']);
    assert.equal(node.lastBeatSentMs(), 1_005_000);
    assert.equal(await router.syncNow(1_000), true);
    assert.deepEqual(ids(router.ring()), ['node-1', 'node-2']);
    assert.equal(router.lastBeatSentMs(), undefined);
    await node.stop();
    assert.equal(await node.syncNow(100), false, 'once stopped');
  });

  test('syncNow while a sync is in flight waits for the one after it', async () => {
    const client = redis.client();
    const node = make(member(1), client, 10_000, 30_000);
    await node.start();
    let execs = 0;
    let release: (() => void) | undefined;
    const pipeline = client.pipeline.bind(client);
    client.pipeline = ((...args: Parameters<Redis['pipeline']>) => {
      const p = pipeline(...args);
      const exec = p.exec.bind(p);
      p.exec = (async () => {
        const n = ++execs;
        if (n === 1) await new Promise<void>((resolve) => (release = resolve));
        return exec();
      }) as typeof p.exec;
      return p;
    }) as Redis['pipeline'];
    node.refresh(); // sync 1, held before its request is sent
    await waitFor('sync 1 in flight', () => release !== undefined, 1_000);
    let execsAtResolve: number | undefined;
    const done = node.syncNow(2_000).then((ok) => {
      execsAtResolve = execs;
      return ok;
    });
    await sleep(20);
    release?.();
    assert.equal(await done, true);
    assert.equal(execsAtResolve, 2, 'resolved by the sync after the one in flight');
  });

  test('syncNow resolves false within about its timeout against a frozen Redis (SIGSTOP) and a killed one, and at once on a failed sync; it never rejects', async () => {
    const own = await startRedis();
    try {
      const node = make(member(1), own.client(), 10_000, 30_000);
      await node.start();
      own.signal('SIGSTOP');
      let t0 = performance.now();
      assert.equal(await node.syncNow(300), false);
      let ms = performance.now() - t0;
      assert.ok(ms >= 290 && ms < 800, `frozen: false after ${ms.toFixed(0)} ms`);
      own.signal('SIGCONT');
      assert.equal(await node.syncNow(2_000), true, 'thawed: the next fresh sync succeeds');

      await own.kill();
      t0 = performance.now();
      assert.equal(await node.syncNow(300), false);
      ms = performance.now() - t0;
      assert.ok(ms < 800, `killed: false after ${ms.toFixed(0)} ms`);

      // A connection closed for good fails every command at once: false without waiting for the timeout.
      await own.restart();
      const closed = own.client();
      const failing = make(member(2), closed, 10_000, 30_000);
      await failing.start();
      closed.disconnect();
      t0 = performance.now();
      assert.equal(await failing.syncNow(5_000), false);
      ms = performance.now() - t0;
      assert.ok(ms < 1_000, `failed: false after ${ms.toFixed(0)} ms`);
    } finally {
      await Promise.all(made.map((m) => m.stop()));
      await own.stop();
    }
  });
});
