/**
 * The PostgreSQL catalogue store against a real PostgreSQL (test/helpers/postgres.ts): the
 * conformance suite, then what only a server has: a restore from an older `pg_dump`, the server
 * SIGKILLed and started again, a bulk import of 10,000 rows in one write, per-schema notifications.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresStore } from '../../src/catalogue/postgres-store.ts';
import { CatalogueUnavailable } from '../../src/catalogue/store.ts';
import type { CatalogueRow, RowWrite } from '../../src/catalogue/store.ts';
import { startPostgres } from '../helpers/postgres.ts';
import type { RunningPostgres } from '../helpers/postgres.ts';
import { describeStoreConformance, readAll, until } from '../helpers/store-conformance.ts';

const tenant = (id: string): RowWrite => ({ kind: 'tenant', id, deleted: false, doc: {} });

/** Rejects with a clear message when `p` does not settle within `ms`: a hang, not a slow answer (the bound is far above the store's timeouts). */
async function settles<T>(what: string, p: Promise<T>, ms = 20_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms (hung)`)), ms);
  });
  try {
    return await Promise.race([p, hung]);
  } finally {
    clearTimeout(timer);
  }
}

describe('catalogue store on PostgreSQL', () => {
  let pg: RunningPostgres;
  before(async () => {
    pg = await startPostgres();
  });
  after(async () => {
    await pg?.stop();
  });

  describeStoreConformance('postgres', (backing) => new PostgresStore({ url: pg.url, schema: `conf_${backing}` }));

  test('head tells a database restored from an older pg_dump: the later write is gone; advanceTo moves past it', async () => {
    const s = new PostgresStore({ url: pg.url, schema: 'restore' });
    try {
      await s.open();
      const w1 = await s.write({ actor: 'x', rows: [tenant('a'), tenant('b')] });
      const known1 = { version: (w1[1] as CatalogueRow).version, at: (w1[1] as CatalogueRow).at };
      const dump = execFileSync(join(pg.bin, 'pg_dump'), ['--dbname', pg.url, '--schema', 'restore', '--no-owner'], { encoding: 'utf8' });
      const [w2] = await s.write({ actor: 'x', rows: [{ ...tenant('a'), deleted: true }] });
      const known2 = { version: w2?.version ?? 0, at: w2?.at ?? 0 };
      assert.deepEqual(await s.head(known2), { version: known2.version, consistent: true });

      pg.psql('DROP SCHEMA restore CASCADE');
      pg.psql(dump);

      assert.deepEqual(await s.head(known2), { version: known1.version, consistent: false }, 'the write a follower saw is gone');
      assert.deepEqual(await s.head(known1), { version: known1.version, consistent: true });
      assert.deepEqual((await readAll(s)).map((r) => [r.id, r.deleted]), [['a', false], ['b', false]]);
      await s.advanceTo(known2.version);
      const [w3] = await s.write({ actor: 'x', rows: [tenant('c')] });
      assert.ok((w3?.version ?? 0) > known2.version, 'no version a follower has seen is given again');
    } finally {
      await s.close();
    }
  });

  test('PostgreSQL SIGKILLed: every call fails with CatalogueUnavailable within the timeouts, none hangs; after the restart the store works and notifications resume', async () => {
    const opts = { url: pg.url, schema: 'crash', connectTimeoutMs: 500, statementTimeoutMs: 1_000 };
    const s = new PostgresStore(opts);
    const writer = new PostgresStore(opts);
    const heard: number[] = [];
    try {
      await s.open();
      await writer.open();
      s.onChange((v) => heard.push(v));
      const [w] = await writer.write({ actor: 'x', rows: [tenant('before')] });
      await until('notification before the crash', () => heard.includes(w?.version ?? -1));

      await pg.kill();
      const calls: [string, () => Promise<unknown>][] = [
        ['head', () => s.head()],
        ['readSince', () => s.readSince(0, 10)],
        ['audit', () => s.audit(undefined, 10)],
        ['write', () => s.write({ actor: 'x', rows: [tenant('during')] })],
        ['advanceTo', () => s.advanceTo(1_000)],
        ['open', () => new PostgresStore(opts).open()],
      ];
      for (const [name, call] of calls) {
        await assert.rejects(settles(name, call()), (err: unknown) => {
          assert.ok(err instanceof CatalogueUnavailable, `${name}: ${String(err)}`);
          return true;
        });
      }
      // The LISTEN connection's reconnection attempts fail meanwhile without an unhandled error.
      await sleep(1_000);

      await pg.restart();
      await until('store answers again', async () => {
        try {
          await s.head();
          return true;
        } catch (err) {
          assert.ok(err instanceof CatalogueUnavailable, String(err));
          return false;
        }
      }, 30_000);
      assert.deepEqual((await readAll(s)).map((r) => r.id), ['before']);
      let n = 0;
      await until('notifications resume', async () => {
        const [r] = await writer.write({ actor: 'x', rows: [tenant(`after${++n}`)] });
        await sleep(200);
        return heard.includes(r?.version ?? -1);
      }, 30_000);
    } finally {
      await s.close();
      await writer.close();
    }
  });

  test('a bulk write of 10,000 rows in one call completes and reads back', async () => {
    const s = new PostgresStore({ url: pg.url, schema: 'bulk', statementTimeoutMs: 30_000 });
    try {
      await s.open();
      const rows = Array.from({ length: 10_000 }, (_, i): RowWrite => ({ kind: 'key', id: `k${i}`, deleted: false, tenant: `t${i % 100}`, hash: `${i}`.padStart(43, 'h'), doc: { i } }));
      const written = await s.write({ actor: 'import', rows });
      assert.equal(written.length, 10_000);
      const read = await readAll(s, 0, 4_000);
      assert.equal(read.length, 10_000);
      assert.deepEqual(read.map((r) => r.id), rows.map((r) => r.id));
      assert.deepEqual(read.at(-1), written.at(-1));
      assert.equal((await s.head()).version, written.at(-1)?.version);
    } finally {
      await s.close();
    }
  });

  test('notifications are per schema: a write in another schema of the same database is not announced', async () => {
    const x = new PostgresStore({ url: pg.url, schema: 'chan_x' });
    const y = new PostgresStore({ url: pg.url, schema: 'chan_y' });
    try {
      await Promise.all([x.open(), y.open()]);
      const heard: number[] = [];
      y.onChange((v) => heard.push(v));
      await x.write({ actor: 'x', rows: [tenant('a'), tenant('b'), tenant('c')] });
      const [mine] = await y.write({ actor: 'x', rows: [tenant('a')] });
      await until('own schema announced', () => heard.includes(mine?.version ?? -1));
      assert.deepEqual(heard, [mine?.version]);
    } finally {
      await x.close();
      await y.close();
    }
  });

  test('an unreachable server: CatalogueUnavailable in bounded time, and the URL\'s password is in no message', async () => {
    const s = new PostgresStore({ url: 'postgres://quotaring:s3cr3t-pw@127.0.0.1:1/none', connectTimeoutMs: 300 });
    try {
      await assert.rejects(settles('open', s.open()), (err: unknown) => {
        assert.ok(err instanceof CatalogueUnavailable);
        assert.doesNotMatch(String(err.message), /s3cr3t/);
        assert.match(err.message, /127\.0\.0\.1:1/);
        return true;
      });
      await assert.rejects(settles('head', s.head()), CatalogueUnavailable);
    } finally {
      await s.close();
    }
  });
});
