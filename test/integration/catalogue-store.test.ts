/**
 * The catalogue follower against a real PostgreSQL: catch-up, the local copy, a store restored from
 * an older backup (a revoked key stays revoked and is written back), a store that does not answer;
 * and a file store whose file is rewritten in place under it. The store contract itself (versions in
 * commit order, conditions, tombstones, the audit log, notifications, two instances as two
 * processes) is the conformance suite of `test/helpers/store-conformance.ts`, run for each store by
 * `catalogue-postgres.test.ts` and `catalogue-file.test.ts`.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildConfig } from '../../src/config/load.ts';
import { CatalogueAdmin } from '../../src/catalogue/admin.ts';
import { FileStore } from '../../src/catalogue/file-store.ts';
import { CatalogueFollower } from '../../src/catalogue/follower.ts';
import { PostgresStore } from '../../src/catalogue/postgres-store.ts';
import { CatalogueUnavailable } from '../../src/catalogue/store.ts';
import { postgresBin, startPostgres } from '../helpers/postgres.ts';
import type { RunningPostgres } from '../helpers/postgres.ts';
import { until } from '../helpers/store-conformance.ts';

const silent = { info() {}, warn() {}, error() {} };
const rawConfig = {
  catalogue: { store: 'postgres' },
  plans: [{ name: 'free', limits: [{ requests: 10, window: '1m' }] }],
  models: [{ name: 'm', encoding: 'none', deployments: ['d'] }],
  deployments: [{ name: 'd', provider: 'openai', base_url: 'http://127.0.0.1:1' }],
};
const fresh = () => buildConfig(rawConfig, 'c.yaml', {});

describe('catalogue stores', () => {
  let pg: RunningPostgres;
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-catalogue-'));
  before(async () => {
    pg = await startPostgres();
  });
  after(async () => {
    await pg.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('file store: a torn last line waits for the rest; a garbage line is skipped and reported', async () => {
    const path = join(dir, 'torn.ndjson');
    const s = new FileStore({ path });
    await s.open();
    const row = { kind: 'tenant', id: 'x', version: 1, deleted: false, doc: {}, at: 1, actor: 'a' };
    const line = JSON.stringify(row);
    writeFileSync(path, `not json\n${line.slice(0, 20)}`);
    assert.equal((await s.head()).version, 0);
    writeFileSync(path, `not json\n${line}\n`);
    assert.equal((await s.head()).version, 1);
    assert.equal(s.problems().length, 1);
    await s.close();
  });

  test('follower: catches up, applies changes within its poll period, starts from its local copy while PostgreSQL is down', async () => {
    const url = pg.url;
    const writer = new PostgresStore({ url, schema: 'follow' });
    await writer.open();
    const loaded = fresh();
    const adminStore = new PostgresStore({ url, schema: 'follow' });
    const follower = new CatalogueFollower({ catalogue: loaded.catalogue, store: adminStore, pollMs: 100, copyPath: join(dir, 'copy.ndjson'), log: silent });
    await follower.start();
    const admin = new CatalogueAdmin({ catalogue: loaded.catalogue, store: adminStore, follower });
    const created = (await admin.createTenant({ id: 'acme', plan: 'free', issue_key: true }, 'ops')) as { status: number; body: { key: { key: string; id: string } } };
    assert.equal(created.status, 201);
    assert.equal(loaded.accessByKey.get(created.body.key.key)?.tenant.id, 'acme', 'applied before the admin call answers');
    // Another process's follower sees it within its poll period.
    const other = fresh();
    const otherFollower = new CatalogueFollower({ catalogue: other.catalogue, store: new PostgresStore({ url, schema: 'follow' }), pollMs: 100, log: silent, copyPath: join(dir, 'copy-other.ndjson') });
    await otherFollower.start();
    assert.equal(other.accessByKey.get(created.body.key.key)?.tenant.id, 'acme');
    const revoked = await admin.revoke(created.body.key.id, 'ops');
    assert.equal(revoked.status, 200);
    await until('revocation seen by the other process', () => other.accessByKey.get(created.body.key.key) === undefined, 2_000);
    await follower.close();
    await otherFollower.close();
    assert.match(readFileSync(join(dir, 'copy.ndjson'), 'utf8'), /"acme"/);

    // PostgreSQL down: a new process starts from its copy; changes answer 503.
    await pg.kill();
    const restarted = fresh();
    const downStore = new PostgresStore({ url, schema: 'follow', connectTimeoutMs: 500 });
    const f2 = new CatalogueFollower({ catalogue: restarted.catalogue, store: downStore, pollMs: 100, copyPath: join(dir, 'copy.ndjson'), log: silent });
    await f2.start();
    assert.equal(restarted.catalogue.has('acme'), true);
    assert.equal(restarted.accessByKey.get(created.body.key.key), undefined, 'the revoked key is not in the copy');
    const refused = await new CatalogueAdmin({ catalogue: restarted.catalogue, store: downStore, follower: f2 }).createTenant({ id: 'new' }, 'ops');
    assert.equal(refused.status, 503);
    assert.equal((refused.body as { error: { code: string } }).error.code, 'catalogue_unavailable');
    // No copy and no database: a clear refusal to start.
    const none = new CatalogueFollower({ catalogue: fresh().catalogue, store: new PostgresStore({ url, schema: 'follow', connectTimeoutMs: 500 }), pollMs: 100, copyPath: join(dir, 'missing.ndjson'), log: silent });
    await assert.rejects(none.start(), /does not answer .* no local copy at .*missing\.ndjson/);
    await pg.start();
    await until('follower reconnected', async () => {
      await f2.kick();
      return f2.reachable;
    }, 10_000);
    await f2.close();
    await writer.close();
    await downStore.close();
  });

  test('PostgreSQL restored from an older backup: a revoked key stays revoked and is written back; the store is told', async () => {
    const url = pg.url;
    const store = new PostgresStore({ url, schema: 'restore' });
    await store.open();
    const loaded = fresh();
    const follower = new CatalogueFollower({ catalogue: loaded.catalogue, store, pollMs: 100, log: silent });
    await follower.start();
    const admin = new CatalogueAdmin({ catalogue: loaded.catalogue, store, follower });
    const made = (await admin.createTenant({ id: 'victim', plan: 'free', issue_key: true }, 'ops')) as { body: { key: { key: string; id: string } } };
    // The backup: taken while the key is live.
    const bin = postgresBin();
    const dump = execFileSync(join(bin, 'pg_dump'), ['--dbname', url, '--schema', 'restore', '--clean', '--if-exists'], { encoding: 'utf8' });
    assert.equal((await admin.revoke(made.body.key.id, 'ops')).status, 200);
    assert.equal(loaded.accessByKey.get(made.body.key.key), undefined);
    // Restore the older backup behind the running process's back.
    execFileSync(join(bin, 'psql'), ['--dbname', url, '-q', '-v', 'ON_ERROR_STOP=1'], { input: dump, stdio: ['pipe', 'ignore', 'pipe'] });
    await follower.kick();
    assert.equal(follower.regressions, 1);
    assert.equal(loaded.accessByKey.get(made.body.key.key), undefined, 'still revoked in RAM');
    const row = (await store.readSince(0, 100)).find((r) => r.kind === 'key' && r.id === made.body.key.id);
    assert.equal(row?.deleted, true, 'the revocation was written back to the restored database');
    // A process started after the restore reads it revoked too.
    const late = fresh();
    const f2 = new CatalogueFollower({ catalogue: late.catalogue, store: new PostgresStore({ url, schema: 'restore' }), pollMs: 100, log: silent });
    await f2.start();
    assert.equal(late.accessByKey.get(made.body.key.key), undefined);
    assert.equal(late.catalogue.has('victim'), true);
    await f2.close();
    await follower.close();
    await store.close();
  });

  test('the store does not answer: calls fail with CatalogueUnavailable in bounded time', async () => {
    const s = new PostgresStore({ url: 'postgres://postgres@127.0.0.1:1/none', connectTimeoutMs: 300 });
    const t0 = Date.now();
    await assert.rejects(s.head(), CatalogueUnavailable);
    assert.ok(Date.now() - t0 < 5_000);
    await s.close();
  });
});
