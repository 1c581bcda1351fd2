/**
 * The contract of `src/catalogue/store.ts`, as one suite that every catalogue store passes against
 * its real backing (a PostgreSQL, a file). Two instances on one backing stand for two processes.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CatalogueConflict } from '../../src/catalogue/store.ts';
import type { CatalogueRow, CatalogueStore, RowCondition, RowWrite } from '../../src/catalogue/store.ts';

/**
 * Makes a store instance on the backing named `backing` (a lower-case name such as `b7`: a schema,
 * a file name). Each test uses a backing of its own, empty at first; calling it twice with the same
 * name gives two instances on one backing (two processes).
 */
export type MakeStore = (backing: string) => CatalogueStore;

/** Waits until `check` holds, every 20 ms, at most `ms` (generous: a loaded 2-core machine). */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `not within ${ms} ms: ${what}`);
    await sleep(20);
  }
}

const tenant = (id: string, doc: Record<string, unknown> = {}): RowWrite => ({ kind: 'tenant', id, deleted: false, doc });
const tombstone = (id: string): RowWrite => ({ kind: 'tenant', id, deleted: true, doc: {} });

/** Every row from `since` on, through pages of `page` rows, checking each page is in version order after `since`. */
export async function readAll(store: CatalogueStore, since = 0, page = 1_000): Promise<CatalogueRow[]> {
  const out: CatalogueRow[] = [];
  for (;;) {
    const rows = await store.readSince(since, page);
    for (const r of rows) {
      assert.ok(r.version > since, `readSince(${since}) returned version ${r.version}`);
      since = r.version;
    }
    out.push(...rows);
    if (rows.length < page) return out;
  }
}

/** Registers the conformance suite of one store kind. */
export function describeStoreConformance(name: string, makeStore: MakeStore): void {
  describe(`${name} store: conformance`, () => {
    let opened: CatalogueStore[] = [];
    let backings = 0;
    afterEach(async () => {
      const stores = opened;
      opened = [];
      await Promise.all(stores.map((s) => s.close()));
    });
    /** `count` instances on a new empty backing, opened at once (as processes starting together). */
    const instances = async (count: number): Promise<CatalogueStore[]> => {
      const backing = `b${++backings}`;
      const stores = Array.from({ length: count }, () => makeStore(backing));
      opened.push(...stores);
      await Promise.all(stores.map((s) => s.open()));
      return stores;
    };
    const one = async (): Promise<CatalogueStore> => (await instances(1))[0] as CatalogueStore;
    const two = async (): Promise<[CatalogueStore, CatalogueStore]> => (await instances(2)) as [CatalogueStore, CatalogueStore];

    test('an empty store: head 0 and consistent, nothing to read, no audit', async () => {
      const s = await one();
      assert.deepEqual(await s.head(), { version: 0, consistent: true });
      assert.deepEqual(await s.readSince(0, 10), []);
      assert.deepEqual(await s.audit(undefined, 10), []);
    });

    test('versions strictly increase across writes and instances; rows come back as stored, in the order given', async () => {
      const [a, b] = await two();
      const w1 = await a.write({
        actor: 'alice',
        rows: [
          { kind: 'plan', id: 'free', deleted: false, doc: { limits: [{ requests: 10 }] } },
          { kind: 'tenant', id: 'acme', deleted: false, doc: { plan: 'free', nested: { a: [1, 'two', null] } } },
          { kind: 'key', id: 'k_1', deleted: false, tenant: 'acme', hash: 'h'.repeat(43), doc: {} },
        ],
      });
      assert.deepEqual(w1.map((r) => [r.kind, r.id, r.actor]), [['plan', 'free', 'alice'], ['tenant', 'acme', 'alice'], ['key', 'k_1', 'alice']]);
      for (let i = 1; i < w1.length; i++) assert.ok((w1[i] as CatalogueRow).version > (w1[i - 1] as CatalogueRow).version);
      for (const r of w1) assert.ok(Number.isSafeInteger(r.at) && r.at > 0 && r.version > 0);
      assert.equal(w1[2]?.tenant, 'acme');
      assert.equal(w1[2]?.hash, 'h'.repeat(43));
      const w2 = await b.write({ actor: 'bob', rows: [tenant('acme', { plan: 'pro' })] });
      const w3 = await a.write({ actor: 'alice', rows: [tenant('beta')] });
      assert.ok((w2[0] as CatalogueRow).version > (w1[2] as CatalogueRow).version);
      assert.ok((w3[0] as CatalogueRow).version > (w2[0] as CatalogueRow).version);
      // As stored: what another instance reads back equals what write returned.
      assert.deepEqual(await readAll(b), [w1[0], w1[2], w2[0], w3[0]]);
      assert.equal((await b.head()).version, w3[0]?.version);
    });

    test('readSince pages return every row once, at its latest version, tombstones included', async () => {
      const [a, b] = await two();
      await a.write({ actor: 'x', rows: Array.from({ length: 25 }, (_, i) => tenant(`r${i}`, { n: i })) });
      await b.write({ actor: 'x', rows: [tenant('r3', { n: 'again' })] });
      await a.write({ actor: 'x', rows: [tenant('r24', { n: 'again' }), tenant('r10', { n: 'again' })] });
      const [del] = await b.write({ actor: 'x', rows: [tombstone('r5')] });
      const rows = await readAll(a, 0, 4);
      assert.equal(rows.length, 25);
      assert.deepEqual(new Set(rows.map((r) => r.id)).size, 25);
      const byId = new Map(rows.map((r) => [r.id, r]));
      for (const id of ['r3', 'r24', 'r10']) assert.deepEqual(byId.get(id)?.doc, { n: 'again' });
      assert.deepEqual(byId.get('r5'), del);
      assert.equal(del?.deleted, true);
      assert.deepEqual(del?.doc, {});
      // The last page and after: the tombstone is the newest row; nothing after it.
      assert.deepEqual(await a.readSince((del?.version ?? 0) - 1, 10), [del]);
      assert.deepEqual(await a.readSince(del?.version ?? 0, 10), []);
    });

    test('a deleted row can be created again; the tombstone and the new row reach readers in order', async () => {
      const [a, b] = await two();
      const [made] = await a.write({ actor: 'x', rows: [tenant('t')] });
      const [gone] = await a.write({ actor: 'x', rows: [tombstone('t')], conditions: [{ kind: 'tenant', id: 't', live: true }] });
      assert.deepEqual(await b.readSince(made?.version ?? 0, 10), [gone]);
      const [back] = await b.write({ actor: 'y', rows: [tenant('t', { again: true })], conditions: [{ kind: 'tenant', id: 't', live: false }] });
      assert.deepEqual(await a.readSince(gone?.version ?? 0, 10), [back]);
    });

    test('every condition kind, holding and failing; a failed one writes nothing', async () => {
      const [a, b] = await two();
      const [live] = await a.write({ actor: 'x', rows: [tenant('live')] });
      await a.write({ actor: 'x', rows: [tenant('gone')] });
      const [gone] = await a.write({ actor: 'x', rows: [tombstone('gone')] });
      const lv = live?.version ?? 0;
      const gv = gone?.version ?? 0;
      const cases: [RowCondition, boolean][] = [
        [{ kind: 'tenant', id: 'live', live: true }, true],
        [{ kind: 'tenant', id: 'gone', live: true }, false],
        [{ kind: 'tenant', id: 'absent', live: true }, false],
        [{ kind: 'tenant', id: 'live', live: false }, false],
        [{ kind: 'tenant', id: 'gone', live: false }, true],
        [{ kind: 'tenant', id: 'absent', live: false }, true],
        [{ kind: 'tenant', id: 'live', version: lv }, true],
        [{ kind: 'tenant', id: 'live', version: lv + 1 }, false],
        [{ kind: 'tenant', id: 'gone', version: gv }, true],
        [{ kind: 'tenant', id: 'absent', version: lv }, false],
        [{ kind: 'tenant', id: 'live', live: true, version: lv }, true],
        [{ kind: 'tenant', id: 'live', live: true, version: gv }, false],
        [{ kind: 'plan', id: 'live', live: true }, false], // same id, another kind
      ];
      let n = 0;
      for (const [cond, holds] of cases) {
        const label = JSON.stringify(cond);
        const before = await b.head();
        const rows = [{ kind: 'plan', id: `ok${++n}`, deleted: false, doc: {} } satisfies RowWrite];
        if (holds) {
          const [w] = await a.write({ actor: 'x', rows, conditions: [cond] });
          assert.ok((w?.version ?? 0) > before.version, label);
          continue;
        }
        await assert.rejects(a.write({ actor: 'x', rows, conditions: [cond] }), (err: unknown) => {
          assert.ok(err instanceof CatalogueConflict, `${label}: ${String(err)}`);
          assert.deepEqual(err.condition, cond, label);
          return true;
        });
        assert.deepEqual(await b.head(), before, label);
        assert.deepEqual(await b.readSince(before.version, 10), [], label);
      }
      // Several conditions and rows: the second condition fails, nothing of the write is stored.
      const before = await b.head();
      const auditBefore = await b.audit(undefined, 100);
      await assert.rejects(
        a.write({ actor: 'x', rows: [tenant('n1'), tenant('n2'), tombstone('live')], conditions: [{ kind: 'tenant', id: 'live', live: true }, { kind: 'tenant', id: 'gone', live: true }] }),
        (err: unknown) => err instanceof CatalogueConflict && err.condition.id === 'gone',
      );
      assert.deepEqual(await b.head(), before);
      assert.deepEqual(await b.audit(undefined, 100), auditBefore);
      assert.deepEqual((await readAll(b)).filter((r) => r.id === 'n1' || r.id === 'n2' || (r.id === 'live' && r.deleted)), []);
    });

    test('a malformed write is refused before anything is stored', async () => {
      const s = await one();
      await assert.rejects(s.write({ actor: 'x', rows: [tenant('has space')] }), /malformed row/);
      await assert.rejects(s.write({ actor: 'x', rows: [tenant('a'.repeat(65))] }), /malformed row/);
      await assert.rejects(s.write({ actor: '', rows: [tenant('t')] }), /actor/);
      assert.deepEqual(await s.head(), { version: 0, consistent: true });
    });

    test('the audit log lists every row written, newest first, with actor, op and time; before pages it', async () => {
      const [a, b] = await two();
      const w1 = await a.write({ actor: 'alice', rows: [tenant('t1'), tenant('t2')] });
      const w2 = await b.write({ actor: 'bob', rows: [tombstone('t1')] });
      const w3 = await a.write({ actor: 'carol', rows: [tenant('t2', { v: 2 })] });
      const all = [...w1, ...w2, ...w3].map((r) => ({ version: r.version, at: r.at, actor: r.actor, kind: r.kind, id: r.id, op: r.deleted ? 'delete' : 'put' })).reverse();
      assert.deepEqual(await b.audit(undefined, 10), all);
      assert.deepEqual(await b.audit(undefined, 2), all.slice(0, 2));
      assert.deepEqual(await a.audit(all[1]?.version, 10), all.slice(2));
      assert.deepEqual(await a.audit(all[3]?.version, 10), []);
      assert.deepEqual(all.map((e) => [e.id, e.op, e.actor]), [['t2', 'put', 'carol'], ['t1', 'delete', 'bob'], ['t2', 'put', 'alice'], ['t1', 'put', 'alice']]);
    });

    test('head: consistent while the store holds the write a follower saw, not when it names another', async () => {
      const [a, b] = await two();
      const [w] = await a.write({ actor: 'x', rows: [tenant('t')] });
      const known = { version: w?.version ?? 0, at: w?.at ?? 0 };
      assert.deepEqual(await b.head(known), { version: known.version, consistent: true });
      assert.deepEqual(await b.head({ ...known, at: known.at + 1 }), { version: known.version, consistent: false });
      assert.deepEqual(await b.head({ version: known.version + 5, at: known.at }), { version: known.version, consistent: false });
      // Still consistent after the row was written again (the earlier write is still the store's).
      const [later] = await b.write({ actor: 'x', rows: [tenant('t', { v: 2 })] });
      assert.deepEqual(await a.head(known), { version: later?.version, consistent: true });
      assert.deepEqual(await a.head(), { version: later?.version, consistent: true });
    });

    test('advanceTo: the next version is above it, on every instance; a lower one changes nothing', async () => {
      const [a, b] = await two();
      const [w] = await a.write({ actor: 'x', rows: [tenant('t')] });
      const target = (w?.version ?? 0) + 1_000;
      await b.advanceTo(target);
      const [next] = await a.write({ actor: 'x', rows: [tenant('u')] });
      assert.ok((next?.version ?? 0) > target, `${next?.version} > ${target}`);
      await a.advanceTo(5);
      await b.advanceTo(next?.version ?? 0);
      const [after] = await b.write({ actor: 'x', rows: [tenant('v')] });
      assert.equal(after?.version, (next?.version ?? 0) + 1);
    });

    test('onChange: a write through another instance (another process) is announced, and one through this instance', async () => {
      const [a, b] = await two();
      const heardByB: number[] = [];
      const heardByA: number[] = [];
      b.onChange((v) => heardByB.push(v));
      a.onChange((v) => heardByA.push(v));
      const [w] = await a.write({ actor: 'x', rows: [tenant('t')] });
      await until('b told of a\'s write', () => heardByB.some((v) => v >= (w?.version ?? 0)));
      await until('a told of its own write', () => heardByA.some((v) => v >= (w?.version ?? 0)));
      const [w2] = await b.write({ actor: 'x', rows: [tenant('u')] });
      await until('a told of b\'s write', () => heardByA.some((v) => v >= (w2?.version ?? 0)));
    });

    test('a (kind, id) written twice in one write is stored at its last occurrence', async () => {
      const [a, b] = await two();
      const w = await a.write({ actor: 'x', rows: [tenant('t', { n: 1 }), tenant('u'), tenant('t', { n: 2 })] });
      assert.deepEqual(w.map((r) => r.doc), [{ n: 1 }, {}, { n: 2 }]);
      assert.deepEqual(await readAll(b), [w[1], w[2]]);
      assert.equal((await b.audit(undefined, 10)).length, 3);
    });

    test('a bulk write of 2,500 rows in one call: versions increasing in the order given, all read back', async () => {
      const [a, b] = await two();
      const rows = Array.from({ length: 2_500 }, (_, i) => ({ kind: 'key', id: `k${i}`, deleted: false, tenant: `t${i % 7}`, hash: `${i}`.padStart(43, 'h'), doc: { i } }) satisfies RowWrite);
      const w = await a.write({ actor: 'import', rows });
      assert.equal(w.length, rows.length);
      w.forEach((r, i) => {
        assert.equal(r.id, `k${i}`);
        if (i > 0) assert.ok(r.version > (w[i - 1] as CatalogueRow).version);
      });
      assert.deepEqual(await readAll(b, 0, 700), w);
    });

    test('concurrent writers on two instances never share or reorder versions, and a reader in a loop misses no row, on a third instance (a follower) and on one of the writers', async () => {
      const [a, b, follower] = (await instances(3)) as [CatalogueStore, CatalogueStore, CatalogueStore];
      let done = false;
      /** Reads `store` in a loop, pages of 3, until one more page after the last write resolved: each row once, in version order. */
      const readInLoop = async (store: CatalogueStore, who: string): Promise<Map<string, number>> => {
        const seen = new Map<string, number>();
        let since = 0;
        for (;;) {
          const finished = done; // read once more after the last write resolved
          const rows = await store.readSince(since, 3);
          for (const r of rows) {
            assert.ok(r.version > since, `${who}: ${r.version} after ${since}`);
            assert.ok(!seen.has(r.id), `${who}: ${r.id} twice`);
            seen.set(r.id, r.version);
            since = r.version;
          }
          if (finished && rows.length < 3) return seen;
          await sleep(rows.length === 0 ? 2 : 0);
        }
      };
      const reading = Promise.all([readInLoop(follower, 'follower'), readInLoop(b, 'writer b')]);
      reading.catch(() => {}); // awaited below; its failure is reported there
      const writes = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).write({ actor: `w${i}`, rows: Array.from({ length: 1 + (i % 3) }, (_, j) => tenant(`c${i}-${j}`)) })),
      );
      done = true;
      const [seenByFollower, seenByWriter] = await reading;
      const versions = writes.flat().map((r) => r.version);
      assert.equal(new Set(versions).size, versions.length, 'no version given twice');
      for (const w of writes) for (let j = 1; j < w.length; j++) assert.ok((w[j] as CatalogueRow).version > (w[j - 1] as CatalogueRow).version, 'a write\'s rows in the order given');
      const written = new Map(writes.flat().map((r): [string, number] => [r.id, r.version]).sort());
      assert.deepEqual(new Map([...seenByFollower].sort()), written, 'the follower');
      assert.deepEqual(new Map([...seenByWriter].sort()), written, 'writer b');
    });
  });
}
