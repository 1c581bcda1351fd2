import { test, describe, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.ts';
import { MAX_ENTRIES_READ, RedisMembership, membersKey, membershipChannel } from '../../src/coord/membership/redis-membership.ts';
import { signedMemberEntry } from '../../src/security/member-entry.ts';
import { TEST_SECRET, TEST_SECRET_VALUE } from '../helpers/cluster-secret.ts';
import { ClusterSecret } from '../../src/security/cluster-secret.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import type { Member, RejectedMemberEntry, Ring } from '../../src/coord/types.ts';
import { freePort } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const CLUSTER = 'test';
const member = (i: number): Member => ({ id: `node-${i}`, url: `http://127.0.0.1:${8080 + i}` });
const ids = (ring: Ring): string[] => ring.members.map((m) => m.id);

/** Polls `cond` every 5 ms; resolves with the ms it took. @throws after `timeoutMs` with `what`. */
async function waitFor(what: string, cond: () => boolean, timeoutMs: number): Promise<number> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(5);
  }
  return performance.now() - t0;
}

let redis: RunningRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});
beforeEach(async () => {
  await redis.flush();
});

/** Memberships of one test, each on its own connection (as separate processes would be); stopped at the end. */
function cluster(heartbeatMs: number, deadAfterMs: number) {
  const all: RedisMembership[] = [];
  const errors: Error[] = [];
  return {
    errors,
    add(self: Member | undefined, client: Redis = redis.client()): RedisMembership {
      const m = new RedisMembership({
        redis: client,
        cluster: CLUSTER,
        secret: TEST_SECRET,
        ...(self === undefined ? {} : { self }),
        heartbeatMs,
        deadAfterMs,
        onError: (err) => errors.push(err),
      });
      all.push(m);
      return m;
    },
    stopAll: () => Promise.all(all.map((m) => m.stop())),
  };
}

describe('RedisMembership (real redis-server)', () => {
  test('three nodes and a router started in any order agree on one ring version within 2 s', async () => {
    const expected = createRing([member(1), member(2), member(3)]).version;
    for (const order of [['router', 3, 1, 2], [2, 'router', 3, 1], [1, 2, 3, 'router']] as const) {
      await redis.flush();
      const c = cluster(100, 300);
      try {
        const started: RedisMembership[] = [];
        for (const who of order) {
          const m = c.add(who === 'router' ? undefined : member(who));
          await m.start();
          started.push(m);
          await sleep(30);
        }
        const ms = await waitFor(`agreement (order ${order.join(',')})`, () => started.every((m) => m.ring().version === expected), 2_000);
        assert.ok(ms < 2_000);
        for (const m of started) assert.deepEqual(ids(m.ring()), ['node-1', 'node-2', 'node-3']);
        assert.deepEqual(c.errors, []);
      } finally {
        await c.stopAll();
      }
    }
  });

  test('Redis down at start: start() rejects, nothing keeps running, and a later start() joins once Redis answers (issue 13: a node started while Redis is down)', async () => {
    const port = await freePort();
    const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 2, connectTimeout: 500 });
    client.on('error', () => {});
    const down = new RedisMembership({ redis: client, cluster: CLUSTER, secret: TEST_SECRET, self: member(1), heartbeatMs: 100, deadAfterMs: 300 });
    let late: RunningRedis | undefined;
    try {
      await assert.rejects(down.start());
      await assert.rejects(down.start(), 'a second attempt tries again (and fails again)');
      assert.equal(down.lastSyncMs(), undefined);
      assert.deepEqual(ids(down.ring()), []);
      late = await startRedis(port);
      let joined = false;
      for (let i = 0; i < 50 && !joined; i++) {
        joined = await down.start().then(
          () => true,
          () => false,
        );
        if (!joined) await sleep(100);
      }
      assert.ok(joined, 'a start() after Redis came up resolves');
      assert.deepEqual(ids(down.ring()), ['node-1']);
      // It heartbeats like any member: a router started now sees it.
      const c = cluster(100, 300);
      const router = c.add(undefined, late.client());
      await router.start();
      assert.deepEqual(ids(router.ring()), ['node-1']);
      await c.stopAll();
    } finally {
      await down.stop();
      client.disconnect();
      await late?.stop();
    }
  });

  test('joins and a graceful stop() reach everyone by pub/sub, well inside one heartbeat', async () => {
    // 1 s heartbeats: a change seen within 200 ms can only have come from the announcement.
    const c = cluster(1_000, 3_000);
    try {
      const router = c.add(undefined);
      await router.start();
      const rings: Ring[] = [];
      router.onChange((r) => rings.push(r));
      const nodes = [c.add(member(1)), c.add(member(2)), c.add(member(3))];
      for (const n of nodes) await n.start();
      const everyone = [router, ...nodes];
      const three = createRing([member(1), member(2), member(3)]).version;
      await waitFor('join of node-3', () => everyone.every((m) => m.ring().version === three), 200);

      await nodes[1]!.stop();
      const two = createRing([member(1), member(3)]).version;
      const others = [router, nodes[0]!, nodes[2]!];
      await waitFor('leave of node-2', () => others.every((m) => m.ring().version === two), 200);
      assert.deepEqual((await redis.client().zrange(membersKey(CLUSTER), 0, -1)).sort(), [signedMemberEntry(member(1), TEST_SECRET), signedMemberEntry(member(3), TEST_SECRET)]);
      assert.deepEqual(rings.map(ids), [['node-1'], ['node-1', 'node-2'], ['node-1', 'node-2', 'node-3'], ['node-1', 'node-3']]);
      assert.deepEqual(c.errors, []);
    } finally {
      await c.stopAll();
    }
  });

  test('Redis emptied under a running cluster (a restart without persistence): no one drops a live member; the list refills by heartbeats', async () => {
    // Heartbeats every 300 ms, dead after 1 s: a router that rebuilt its ring from the empty list
    // would route every tenant to whichever node beat first, and those nodes would start them fresh.
    const c = cluster(300, 1_000);
    try {
      const router = c.add(undefined);
      const nodes = [c.add(member(1)), c.add(member(2)), c.add(member(3))];
      for (const m of [router, ...nodes]) await m.start();
      const three = createRing([member(1), member(2), member(3)]).version;
      await waitFor('agreement', () => [router, ...nodes].every((m) => m.ring().version === three), 2_000);
      const changes: string[][] = [];
      router.onChange((r) => changes.push(ids(r)));
      for (const n of nodes) n.onChange((r) => changes.push(ids(r)));
      await redis.client().flushall();
      await sleep(1_500); // several heartbeats: every node has written itself back
      assert.deepEqual(changes, [], 'no view lost a member');
      assert.equal((await redis.client().zcard(membersKey(CLUSTER))), 3);
      // A graceful leave is still seen at once.
      await nodes[1]!.stop();
      const two = createRing([member(1), member(3)]).version;
      await waitFor('leave of node-2', () => [router, nodes[0]!, nodes[2]!].every((m) => m.ring().version === two), 250);
    } finally {
      await c.stopAll();
    }
  });

  test('a node that stops heartbeating (SIGKILL) is dropped after deadAfterMs, and keeps its own last view', async () => {
    const c = cluster(100, 300);
    try {
      const router = c.add(undefined);
      const killedClient = redis.client();
      const nodes = [c.add(member(1)), c.add(member(2), killedClient), c.add(member(3))];
      await router.start();
      for (const n of nodes) await n.start();
      const three = createRing([member(1), member(2), member(3)]).version;
      await waitFor('agreement', () => [router, ...nodes].every((m) => m.ring().version === three), 2_000);

      killedClient.disconnect(); // no ZREM, no announcement: its heartbeats fail from now on
      const killedAt = performance.now();
      await sleep(150);
      // Its last heartbeat is at most ~100 ms old at the kill, so it is still live 150 ms later.
      assert.equal(router.ring().version, three);
      const two = createRing([member(1), member(3)]).version;
      const others = [router, nodes[0]!, nodes[2]!];
      await waitFor('drop of node-2', () => others.every((m) => m.ring().version === two), 1_000);
      const tookMs = performance.now() - killedAt;
      assert.ok(tookMs >= 150 && tookMs < 800, `dropped ${tookMs.toFixed(0)} ms after the kill`);
      // The cut-off node saw only failures: it kept its last view and reported them.
      assert.equal(nodes[1]!.ring().version, three);
      assert.ok(c.errors.length >= 1);
      assert.ok(c.errors.every((e) => /Connection is closed/.test(e.message)), c.errors.map((e) => e.message).join('; '));
    } finally {
      await c.stopAll();
    }
  });

  test('a node cut from Redis and dropped by the others sees, on its return, the ring without it, then the ring with it (rejoin)', async () => {
    const c = cluster(100, 300);
    try {
      const cutClient = redis.client();
      const nodes = [c.add(member(1)), c.add(member(2), cutClient), c.add(member(3))];
      for (const n of nodes) await n.start();
      const three = createRing([member(1), member(2), member(3)]).version;
      const two = createRing([member(1), member(3)]).version;
      await waitFor('agreement', () => nodes.every((m) => m.ring().version === three), 2_000);
      const seen: string[] = [];
      nodes[1]!.onChange((ring) => seen.push(ring.version));

      cutClient.disconnect();
      await waitFor('drop of node-2', () => nodes[0]!.ring().version === two && nodes[2]!.ring().version === two, 2_000);
      // The drop is recorded by the nodes in contact; the cut node's entry is no evidence (a
      // heartbeat sent during a cut can reach Redis when the link heals): put it back as such a one would.
      const admin = redis.client();
      const deadline = performance.now() + 3_000;
      while ((await admin.hget(`qr:{${CLUSTER}}:dropped`, 'node-2')) === null) {
        assert.ok(performance.now() < deadline, 'node-2\'s drop never recorded');
        await sleep(20);
      }
      const [sec] = await admin.time();
      await admin.zadd(`qr:{${CLUSTER}}:members`, Number(sec) * 1000, signedMemberEntry(member(2), TEST_SECRET));
      admin.disconnect();
      // That late heartbeat does not bring node-2 back: it has not acknowledged its drop.
      await sleep(300);
      assert.equal(nodes[0]!.ring().version, two);
      assert.equal(nodes[2]!.ring().version, two);
      assert.deepEqual(seen, [], 'the cut node never saw a change while cut');

      // When node-2 sees itself in its ring again its drop is acknowledged already (the others
      // take it back, so the interim owners it claims from can see it and hand over), and the others
      // are told by a join note.
      const ackCheck = redis.client();
      const dropLeft: Promise<number>[] = [];
      nodes[1]!.onChange((ring) => {
        if (ring.version === three) dropLeft.push(ackCheck.hexists(`qr:{${CLUSTER}}:dropped`, 'node-2'));
      });
      const joins: string[] = [];
      const listener = redis.client();
      await listener.subscribe(membershipChannel(CLUSTER));
      listener.on('message', (_channel: string, message: string) => joins.push(message));
      await cutClient.connect();
      await waitFor('rejoin', () => nodes.every((m) => m.ring().version === three), 2_000);
      assert.deepEqual(seen, [createRing([member(1), member(3)]).version, three]);
      assert.deepEqual(await Promise.all(dropLeft), [0], 'node-2 saw itself in the ring before its drop was acknowledged');
      await waitFor('join note', () => joins.length > 0, 1_000);
      assert.deepEqual(joins.map((j) => JSON.parse(j) as unknown), [{ type: 'join', id: 'node-2' }]);
      ackCheck.disconnect();
      listener.disconnect();
      assert.equal(nodes[1]!.rejoins(), 1);
      assert.equal(nodes[0]!.rejoins(), 0);
    } finally {
      await c.stopAll();
    }
  });

  test('the ring is rebuilt only when the member list changes', async () => {
    const c = cluster(100, 300);
    try {
      const router = c.add(undefined);
      const nodes = [c.add(member(1)), c.add(member(2))];
      await router.start();
      for (const n of nodes) await n.start();
      await waitFor('agreement', () => router.ring().members.length === 2, 2_000);
      const ring = router.ring();
      let changes = 0;
      router.onChange(() => changes++);
      await sleep(600); // six heartbeats of everyone
      assert.equal(changes, 0);
      assert.equal(router.ring(), ring);
      await c.add(member(3)).start();
      await waitFor('join', () => router.ring().members.length === 3, 500);
      assert.equal(changes, 1);
    } finally {
      await c.stopAll();
    }
  });

  test('heartbeat scores come from Redis TIME (an offset to the wall clock measured with TIME), not the caller\'s clock; keys are hash-tagged by cluster', async () => {
    const client = redis.client();
    const m = new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: CLUSTER, self: member(1), heartbeatMs: 100, deadAfterMs: 300, clock: new ManualClock(978_307_200_000) });
    try {
      const redisTime = async (): Promise<number> => {
        const [sec, usec] = await client.time();
        return Number(sec) * 1000 + Number(usec) / 1000;
      };
      const redisBefore = await redisTime();
      await m.start();
      const redisNow = await redisTime();
      const entries = await client.zrange('qr:{test}:members', 0, -1, 'WITHSCORES');
      assert.equal(entries.length, 2);
      assert.equal(entries[0], signedMemberEntry(member(1), TEST_SECRET));
      assert.match(entries[0] ?? '', /^\{"id":"node-1","url":"http:\/\/127\.0\.0\.1:8081","sig":"[A-Za-z0-9_-]{43}"\}$/);
      const score = Number(entries[1]);
      // Redis time = wall clock + the offset measured by TIME, in whole ms: between TIME read before the
      // start and TIME read after it, within the 1 ms of that rounding (however long a loaded machine took).
      assert.ok(score > redisBefore - 1 && score < redisNow + 1, `score ${score} vs Redis TIME ${redisBefore} before and ${redisNow} after`);
      assert.equal(m.lastSyncMs(), 978_307_200_000);
    } finally {
      await m.stop();
    }
  });

  test('member entries written into Redis without a valid signature (unsigned, another secret, tampered URL) never join a ring; each is reported and counted once', async () => {
    const c = cluster(100, 300);
    const client = redis.client();
    try {
      const node = c.add(member(1));
      await node.start();
      const [sec, usec] = await client.time();
      const now = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
      const other = new ClusterSecret('not-the-cluster-secret-but-32-chars-long');
      const tampered = JSON.parse(signedMemberEntry(member(3), TEST_SECRET)) as Record<string, unknown>;
      tampered.url = 'http://attacker.example:80';
      await client.zadd(
        membersKey(CLUSTER),
        now, JSON.stringify({ id: 'evil-1', url: 'http://attacker.example:81' }),
        now, signedMemberEntry({ id: 'evil-2', url: 'http://attacker.example:82' }, other),
        now, JSON.stringify(tampered),
        now, 'not json',
      );
      const router = c.add(undefined);
      await router.start();
      await sleep(350); // three heartbeats: each entry read again and again
      assert.deepEqual(ids(router.ring()), ['node-1']);
      assert.deepEqual(ids(node.ring()), ['node-1']);
      assert.equal(router.rejectedEntries(), 4);
      // One report (rate-limited) counting the four; a listener attached late hears it.
      const heard: RejectedMemberEntry[] = [];
      router.onRejectedEntry((e) => heard.push(e));
      await sleep(250);
      assert.equal(heard.length, 1);
      assert.equal(heard[0]?.count, 4);
      assert.equal(router.rejectedEntries(), 4);
      assert.equal(router.stats().reports, 1);
    } finally {
      await c.stopAll();
    }
  });

  test('a departed node\'s signed entry replayed with a far-future score (9e15) never joins a ring and is deleted by a node', async () => {
    const c = cluster(100, 300);
    const client = redis.client();
    try {
      const router = c.add(undefined);
      const n1 = c.add(member(1));
      const n2 = c.add(member(2));
      for (const m of [router, n1, n2]) await m.start();
      await waitFor('both nodes in the router\'s ring', () => ids(router.ring()).length === 2, 2_000);
      const saved = (await client.zrange(membersKey(CLUSTER), 0, -1)).find((e) => e.includes('"node-2"'));
      assert.equal(saved, signedMemberEntry(member(2), TEST_SECRET));
      await n2.stop();
      await waitFor('node-2 gone', () => ids(router.ring()).join() === 'node-1' && ids(n1.ring()).join() === 'node-1', 2_000);
      const changes: string[][] = [];
      router.onChange((r) => changes.push(ids(r)));
      n1.onChange((r) => changes.push(ids(r)));
      await client.zadd(membersKey(CLUSTER), '9000000000000000', saved ?? '');
      await client.publish(membershipChannel(CLUSTER), JSON.stringify({ type: 'join', id: 'node-2' }));
      await sleep(300);
      assert.deepEqual(ids(router.ring()), ['node-1']);
      assert.deepEqual(ids(n1.ring()), ['node-1']);
      // node-1 deletes it (future pruning, once per deadAfterMs); meanwhile nobody took it in.
      const t0 = performance.now();
      while ((await client.zscore(membersKey(CLUSTER), saved ?? '')) !== null) {
        assert.ok(performance.now() - t0 < 3_000, 'the far-future entry was not deleted within 3 s');
        await sleep(20);
      }
      assert.deepEqual(changes, []);
      assert.equal(router.rejectedEntries(), 0);
    } finally {
      await c.stopAll();
    }
  });

  test('20,000 junk entries with future scores: each sync checks at most MAX_ENTRIES_READ of them, the ring is unchanged, reports are rate-limited', async () => {
    const c = cluster(100, 300);
    const client = redis.client();
    try {
      const router = c.add(undefined);
      const node = c.add(member(1));
      const startedAt = new Map<RedisMembership, number>([[node, performance.now()]]);
      await node.start();
      const [sec, usec] = await client.time();
      const now = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
      const key = membersKey(CLUSTER);
      // 10,000 far in the future (9e15) and 10,000 within the believable skew (now + 2 s, read until they age out).
      for (let b = 0; b < 20; b++) {
        const args: (string | number)[] = [];
        for (let i = b * 1_000; i < (b + 1) * 1_000; i++) args.push(i < 10_000 ? '9000000000000000' : now + 2_000, JSON.stringify({ id: `evil-${i}`, url: 'http://127.0.0.1:1', sig: 'A'.repeat(43) }));
        await client.zadd(key, ...args);
      }
      const heard: RejectedMemberEntry[] = [];
      router.onRejectedEntry((e) => heard.push(e));
      startedAt.set(router, performance.now());
      await router.start();
      await sleep(1_000); // about ten syncs each
      assert.deepEqual(ids(router.ring()), ['node-1']);
      assert.deepEqual(ids(node.ring()), ['node-1']);
      for (const m of [router, node]) {
        const { entriesChecked, readCapHits } = m.stats();
        // At most one sync per heartbeat (100 ms) since it started, plus its first and one woken by
        // the node's join announcement, each checking at most the cap. The node started before the
        // 20 inserts, which take long on a loaded machine: its bound grows with its running time.
        const syncs = Math.ceil((performance.now() - (startedAt.get(m) as number)) / 100) + 2;
        assert.ok(entriesChecked <= syncs * MAX_ENTRIES_READ, `checked ${entriesChecked} entries in at most ${syncs} syncs`);
        assert.ok(readCapHits >= 1, 'the cap was hit');
      }
      // The same capped slice is read each time: counted once, reported once (plus one cap report).
      assert.equal(router.rejectedEntries(), MAX_ENTRIES_READ - 1);
      assert.deepEqual(heard.map((e) => [e.problem, e.count]), [['bad_signature', MAX_ENTRIES_READ - 1], ['too_many_entries', 1]]);
      assert.equal(router.stats().reports, 2);
      // The node deleted the far-future ones.
      assert.equal(await client.zcount(key, `(${now + 120_000}`, '+inf'), 0);
    } finally {
      await c.stopAll();
    }
  });

  test('rotation: a router with the new secret and the old one as previous accepts entries signed with either', async () => {
    const NEW = new ClusterSecret('the-new-cluster-secret-of-32-characters!', TEST_SECRET_VALUE);
    const oldNode = new RedisMembership({ redis: redis.client(), secret: TEST_SECRET, cluster: CLUSTER, self: member(1), heartbeatMs: 100, deadAfterMs: 300 });
    const newNode = new RedisMembership({ redis: redis.client(), secret: NEW, cluster: CLUSTER, self: member(2), heartbeatMs: 100, deadAfterMs: 300 });
    const newOnly = new RedisMembership({ redis: redis.client(), secret: new ClusterSecret('the-new-cluster-secret-of-32-characters!'), cluster: CLUSTER, heartbeatMs: 100, deadAfterMs: 300 });
    try {
      for (const m of [oldNode, newNode, newOnly]) await m.start();
      await waitFor('both nodes in the rotating node\'s ring', () => ids(newNode.ring()).length === 2, 2_000);
      assert.deepEqual(ids(newNode.ring()), ['node-1', 'node-2']);
      // Once PREVIOUS is dropped, an entry signed with the old secret is ignored.
      await waitFor('the new-only router reads node-2', () => ids(newOnly.ring()).includes('node-2'), 2_000);
      assert.deepEqual(ids(newOnly.ring()), ['node-2']);
      assert.equal(newOnly.rejectedEntries(), 1);
    } finally {
      for (const m of [oldNode, newNode, newOnly]) await m.stop();
    }
  });

  test('a stalled Redis (CLIENT PAUSE longer than deadAfterMs) makes no one drop live members; a dead one still goes', async () => {
    const c = cluster(100, 300);
    try {
      const router = c.add(undefined);
      const killedClient = redis.client();
      const nodes = [c.add(member(1)), c.add(member(2)), c.add(member(3), killedClient)];
      await router.start();
      for (const n of nodes) await n.start();
      const three = createRing([member(1), member(2), member(3)]).version;
      await waitFor('agreement', () => [router, ...nodes].every((m) => m.ring().version === three), 2_000);
      const seen: string[][] = [];
      router.onChange((r) => seen.push(ids(r)));
      nodes[0]!.onChange((r) => seen.push(ids(r)));

      killedClient.disconnect();
      await redis.client().call('CLIENT', 'PAUSE', '800', 'ALL');
      await sleep(900);
      // Everyone's first read after the pause finds every heartbeat ~900 ms old; nobody prunes yet.
      assert.equal(router.ring().version, three);
      assert.equal(nodes[0]!.ring().version, three);
      assert.deepEqual(seen, []);
      // node-3 really is gone: it is dropped once the others have been in contact for deadAfterMs.
      const two = createRing([member(1), member(2)]).version;
      await waitFor('drop of node-3 after the pause', () => router.ring().version === two && nodes[0]!.ring().version === two, 1_500);
      assert.deepEqual(seen, [['node-1', 'node-2'], ['node-1', 'node-2']]);
      // Nobody was in contact during the pause: no live node thinks it was dropped.
      assert.deepEqual([nodes[0]!.rejoins(), nodes[1]!.rejoins()], [0, 0]);
    } finally {
      await c.stopAll();
    }
  });

  test('Redis down longer than deadAfterMs and back empty: a router keeps its members for deadAfterMs after contact resumes (silence counts only in contact)', async () => {
    const own = await startRedis();
    const errors: Error[] = [];
    const nodeClient = own.client();
    const router = new RedisMembership({ redis: own.client(), secret: TEST_SECRET, cluster: CLUSTER, heartbeatMs: 100, deadAfterMs: 300, onError: (e) => errors.push(e) });
    const node = new RedisMembership({ redis: nodeClient, secret: TEST_SECRET, cluster: CLUSTER, self: member(1), heartbeatMs: 100, deadAfterMs: 300, onError: (e) => errors.push(e) });
    const probe = own.client();
    try {
      await router.start();
      await node.start();
      await waitFor('agreement', () => router.ring().members.length === 1, 2_000);
      await own.kill();
      nodeClient.disconnect(); // the node dies during the outage: no heartbeat after the restart
      await sleep(800); // well over deadAfterMs without contact
      await own.restart(); // empty
      // The router's first read of the restarted Redis (its ZRANGEBYSCORE shows in the stats): the
      // member list is empty, but the router has been in contact for 0 ms, so the node stays.
      let syncedOnce = false;
      const t0 = performance.now();
      while (!syncedOnce && performance.now() - t0 < 10_000) {
        const stats = await probe.info('commandstats').catch(() => '');
        syncedOnce = /cmdstat_zrangebyscore:calls=\d+/.test(stats);
        if (!syncedOnce) await sleep(5);
      }
      assert.equal(syncedOnce, true, 'the router read the restarted Redis');
      await sleep(20);
      assert.deepEqual(ids(router.ring()), ['node-1'], 'a Redis outage is no evidence that a member died');
      // In contact for deadAfterMs without a heartbeat from it: now it goes.
      await waitFor('drop of the dead node', () => router.ring().members.length === 0, 2_000);
    } finally {
      probe.disconnect();
      await Promise.all([router.stop(), node.stop()]);
      await own.stop();
    }
  });

  test('Redis gone: every view stays, stop() still returns within about a heartbeat', async () => {
    const own = await startRedis();
    const errors: Error[] = [];
    const make = (self?: Member) =>
      new RedisMembership({ redis: own.client({ maxRetriesPerRequest: 1 }), secret: TEST_SECRET, cluster: CLUSTER, ...(self ? { self } : {}), heartbeatMs: 100, deadAfterMs: 300, onError: (e) => errors.push(e) });
    const router = make();
    const node = make(member(1));
    try {
      await router.start();
      await node.start();
      await waitFor('agreement', () => router.ring().members.length === 1, 1_000);
      const ring = router.ring();
      await own.stop();
      await sleep(500);
      assert.equal(router.ring(), ring);
      assert.deepEqual(ids(node.ring()), ['node-1']);
      const t0 = performance.now();
      await Promise.all([router.stop(), node.stop()]);
      const ms = performance.now() - t0;
      assert.ok(ms < 500, `stop took ${ms.toFixed(0)} ms`);
    } finally {
      await Promise.all([router.stop(), node.stop(), own.stop()]);
    }
  });

  test('stop() while start() is still running leaves no entry and no heartbeat behind', async () => {
    const client = redis.client();
    const m = new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: CLUSTER, self: member(1), heartbeatMs: 100, deadAfterMs: 300 });
    const starting = m.start();
    await m.stop();
    await starting;
    await sleep(300);
    assert.equal(await client.zcard(membersKey(CLUSTER)), 0);
    assert.deepEqual(await client.pubsub('NUMSUB', membershipChannel(CLUSTER)), [membershipChannel(CLUSTER), 0]);
  });

  test('start() rejects when Redis cannot be reached', async () => {
    const client = new Redis({ host: '127.0.0.1', port: await freePort(), lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null });
    client.on('error', () => {});
    const m = new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: CLUSTER, self: member(1) });
    try {
      await assert.rejects(m.start(), /enableOfflineQueue|Connection is closed|ECONNREFUSED/);
      assert.equal(m.ring().version, '');
    } finally {
      await m.stop();
      client.disconnect();
    }
  });

  test('rejects a cluster name that would break the hash tag, and deadAfterMs ≤ heartbeatMs', () => {
    const client = redis.client({ lazyConnect: true });
    assert.throws(() => new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: 'a}b' }), /cluster name/);
    assert.throws(() => new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: '' }), /cluster name/);
    assert.throws(() => new RedisMembership({ redis: client, secret: TEST_SECRET, cluster: 'x', heartbeatMs: 500, deadAfterMs: 500 }), /must exceed/);
  });
});
