/**
 * Seeding and reading PostgreSQL for `npm run bench:catalogue` (bench/catalogue/catalogue.ts): a catalogue of
 * N tenants on a few plans with one issued key each, written straight into the store's tables with
 * `INSERT … SELECT FROM generate_series` (hashes computed in SQL), the keys of a sample rebuilt in
 * the clear, and the database's counters that show whether requests cost PostgreSQL anything.
 *
 * Tenant n (1-based) is `t<n, 8 digits>` on plan `PLANS[n % PLANS.length]`, version base + 2n − 1;
 * its key `qr_k<n, 15 digits>_<base64url sha256 of "<salt>:<n>">` (public id `k<n, 15 digits>`: 16
 * of a-z 0-9, as `keys.ts` issues), stored as base64url SHA-256 of the whole key, version base + 2n.
 * The versions are a block reserved from `<schema>.version_seq` (one nextval, then setval past the
 * block), so the store's next write continues after them; every row has its audit log line (the
 * followers' `head` reads max(version) from the log).
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { keyHash } from '../../src/catalogue/keys.ts';
import { PostgresStore } from '../../src/catalogue/postgres-store.ts';

/** Plans of the seeded tenants (defined in the bench config's YAML `plans:`). */
export const PLANS = ['free', 'pro', 'team'] as const;

/** A seeded tenant whose key the bench holds in the clear. */
export interface SampleKey {
  readonly n: number;
  readonly tenant: string;
  readonly keyId: string;
  readonly key: string;
}

/** What {@link seedCatalogue} did. */
export interface Seeded {
  readonly schema: string;
  readonly tenants: number;
  /** Rows written (tenants + keys). */
  readonly rows: number;
  readonly firstVersion: number;
  readonly lastVersion: number;
  /** Seconds: the inserts (rows and log), then VACUUM ANALYZE. */
  readonly insertS: number;
  readonly vacuumS: number;
  /** Bytes of the schema's tables and indexes after seeding. */
  readonly bytes: number;
  readonly sample: readonly SampleKey[];
  /** Sample keys whose SQL-computed hash equals `keyHash` of the key (must be all). */
  readonly hashesVerified: number;
}

export const tenantId = (n: number): string => `t${String(n).padStart(8, '0')}`;
export const keyIdOf = (n: number): string => `k${String(n).padStart(15, '0')}`;
/** The clear key of seeded tenant n. */
export const seededKey = (salt: string, n: number): string => `qr_${keyIdOf(n)}_${createHash('sha256').update(`${salt}:${n}`).digest('base64url')}`;

/** base64url without padding of a bytea expression, in SQL. */
const b64url = (bytea: string): string => `translate(rtrim(encode(${bytea}, 'base64'), '='), '+/', '-_')`;

/**
 * Creates the store's tables (`PostgresStore.open`) in `schema` and writes `tenants` tenants with a
 * key each; keeps `sampleSize` keys (spread evenly over 1..tenants) in the clear and checks their
 * hashes against `keyHash`. @throws Error when a sample hash differs.
 */
export async function seedCatalogue(url: string, schema: string, tenants: number, sampleSize: number, salt: string): Promise<Seeded> {
  const store = new PostgresStore({ url, schema, statementTimeoutMs: 600_000 });
  await store.open();
  await store.close();
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const s = schema;
    const t0 = performance.now();
    await c.query('BEGIN');
    const base = Number((await c.query<{ v: string }>(`SELECT nextval('${s}.version_seq') AS v`)).rows[0]?.v);
    const last = base + 2 * tenants;
    await c.query(`SELECT setval('${s}.version_seq', $1, true)`, [last]);
    const at = Date.now();
    const plans = `ARRAY[${PLANS.map((p) => `'${p}'`).join(',')}]`;
    const keyExpr = `'qr_k' || lpad(n::text, 15, '0') || '_' || ${b64url(`sha256(convert_to($3 || ':' || n, 'UTF8'))`)}`;
    // nextval took `base`; the block is base + 1 ..= base + 2·tenants (tenant n at base + 2n − 1, its key at base + 2n).
    await c.query(
      `INSERT INTO ${s}.rows (kind, id, version, deleted, tenant, hash, doc, at, actor)
       SELECT 'tenant', 't' || lpad(n::text, 8, '0'), $1::bigint + 2 * n - 1, false, NULL, NULL,
              jsonb_build_object('plan', (${plans})[1 + n % ${PLANS.length}]), $2::bigint, 'import'
       FROM generate_series(1, $4::int) AS n
       UNION ALL
       SELECT 'key', 'k' || lpad(n::text, 15, '0'), $1::bigint + 2 * n, false, 't' || lpad(n::text, 8, '0'),
              ${b64url(`sha256(convert_to(${keyExpr}, 'UTF8'))`)}, '{}'::jsonb, $2::bigint, 'import'
       FROM generate_series(1, $4::int) AS n`,
      [base, at, salt, tenants],
    );
    await c.query(`INSERT INTO ${s}.log (version, at, actor, kind, id, op) SELECT version, at, actor, kind, id, 'put' FROM ${s}.rows WHERE version > $1 AND version <= $2`, [base, last]);
    await c.query('COMMIT');
    const t1 = performance.now();
    await c.query(`VACUUM ANALYZE ${s}.rows`);
    await c.query(`VACUUM ANALYZE ${s}.log`);
    const t2 = performance.now();
    const size = await c.query<{ b: string }>(`SELECT sum(pg_total_relation_size(c.oid))::bigint AS b FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = $1 AND c.relkind = 'r'`, [s]);
    const count = Math.min(sampleSize, tenants);
    const ns = Array.from({ length: count }, (_, i) => 1 + Math.floor((i * tenants) / count));
    const sample = ns.map((n) => ({ n, tenant: tenantId(n), keyId: keyIdOf(n), key: seededKey(salt, n) }));
    const stored = await c.query<{ id: string; hash: string; tenant: string }>(`SELECT id, hash, tenant FROM ${s}.rows WHERE kind = 'key' AND id = ANY($1::text[])`, [sample.map((k) => k.keyId)]);
    const byId = new Map(stored.rows.map((r) => [r.id, r]));
    let verified = 0;
    for (const k of sample) {
      const row = byId.get(k.keyId);
      if (row === undefined || row.tenant !== k.tenant || row.hash !== keyHash(k.key)) throw new Error(`seeded key ${k.keyId}: the hash computed in SQL (${row?.hash ?? 'no row'}) is not keyHash of the key (${keyHash(k.key)})`);
      verified += 1;
    }
    return { schema, tenants, rows: 2 * tenants, firstVersion: base + 1, lastVersion: last, insertS: (t1 - t0) / 1_000, vacuumS: (t2 - t1) / 1_000, bytes: Number(size.rows[0]?.b ?? 0), sample, hashesVerified: verified };
  } finally {
    await c.end();
  }
}

/** PostgreSQL's counters at one moment: transactions committed in this database, scans of a schema's `rows` and `log` tables. */
export interface PgCounters {
  readonly atMs: number;
  readonly xactCommit: number;
  readonly rowsScans: number;
  readonly rowsTuplesRead: number;
  readonly logScans: number;
}

/** Reads {@link PgCounters} (a fresh snapshot: `pg_stat_clear_snapshot()` first). */
export async function pgCounters(c: pg.Client, schema: string): Promise<PgCounters> {
  await c.query('SELECT pg_stat_clear_snapshot()');
  const r = await c.query<{ xact: string; rows_scans: string | null; rows_read: string | null; log_scans: string | null }>(
    `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS xact,
            (SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'rows') AS rows_scans,
            (SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'rows') AS rows_read,
            (SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'log') AS log_scans`,
    [schema],
  );
  const row = r.rows[0];
  return { atMs: performance.now(), xactCommit: Number(row?.xact ?? NaN), rowsScans: Number(row?.rows_scans ?? NaN), rowsTuplesRead: Number(row?.rows_read ?? NaN), logScans: Number(row?.log_scans ?? NaN) };
}

/** The postmaster's pid and data folder of the server `c` is connected to (to kill it synchronously on a crash). */
export async function postmasterOf(c: pg.Client): Promise<{ pid: number; dataDir: string }> {
  const dir = (await c.query<{ data_directory: string }>('SHOW data_directory')).rows[0]?.data_directory ?? '';
  const pid = (await c.query<{ pid: string }>(`SELECT (regexp_split_to_array(pg_read_file('postmaster.pid'), E'\\n'))[1] AS pid`)).rows[0]?.pid;
  return { pid: Number(pid), dataDir: dir };
}
