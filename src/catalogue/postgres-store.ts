/**
 * The catalogue store of a cluster: PostgreSQL, through `pg`. Tables (in `schema`, default
 * `quotaring`): `rows` (the latest version of each plan, tenant and key; tombstones kept),
 * `log` (the audit log: one line per row written, append-only) and the sequence `version_seq`.
 *
 * Every write runs in one transaction that first takes a transaction advisory lock, so versions
 * commit in the order they are assigned: a follower that read every row up to version V and then
 * reads `version > V` never misses a row committed later with a smaller version. Writes are admin
 * changes (rare); reads are a follower's catch-up (`readSince`) and version check (`head`), never a
 * request's. After commit, `pg_notify('quotaring_catalogue', version)` wakes every follower (LISTEN
 * on a dedicated connection, re-established with backoff when it drops); the followers' poll heals
 * a lost notification.
 *
 * Connection and timeout failures become {@link CatalogueUnavailable}; the URL (credentials
 * included) is never logged.
 */
import pg from 'pg';
import { CatalogueConflict, CatalogueUnavailable } from './store.ts';
import type { AuditEntry, CatalogueRow, CatalogueStore, CatalogueWrite, RowKind, StoreHead } from './store.ts';

/** NOTIFY channel of catalogue writes. */
export const NOTIFY_CHANNEL = 'quotaring_catalogue';
/** Advisory lock key serializing writes (and DDL at open). */
const WRITE_LOCK = 7_345_901_237;
/** Rows per INSERT statement of a bulk write. */
const BATCH = 2_000;

/** Options of a {@link PostgresStore}. */
export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/db`: a secret, never logged. */
  readonly url: string;
  /** Schema of the tables (a lower-case SQL identifier). @default quotaring */
  readonly schema?: string;
  /** Longest statement, ms. @default 5000 */
  readonly statementTimeoutMs?: number;
  /** Longest connection attempt, ms. @default 2000 */
  readonly connectTimeoutMs?: number;
  /** Pool size. @default 4 */
  readonly poolSize?: number;
}

interface DbRow {
  kind: RowKind;
  id: string;
  version: string;
  deleted: boolean;
  tenant: string | null;
  hash: string | null;
  doc: Record<string, unknown>;
  at: string;
  actor: string;
}

function num(v: string | number): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new Error(`not a safe integer from PostgreSQL: ${String(v)}`);
  return n;
}

function toRow(r: DbRow): CatalogueRow {
  return { kind: r.kind, id: r.id, version: num(r.version), deleted: r.deleted, ...(r.tenant === null ? {} : { tenant: r.tenant }), ...(r.hash === null ? {} : { hash: r.hash }), doc: r.doc, at: num(r.at), actor: r.actor };
}

/** A connection, timeout or server-shutdown error (the store is away, not the request wrong). */
function unavailable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown };
  if (typeof e.code === 'string' && (/^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH)$/.test(e.code) || /^(08|57P|53)/.test(e.code))) return true;
  return typeof e.message === 'string' && /timeout|terminat|Connection|connect|ended/i.test(e.message);
}

/** The catalogue in PostgreSQL. */
export class PostgresStore implements CatalogueStore {
  readonly kind = 'postgres';
  readonly #url: string;
  readonly #schema: string;
  readonly #pool: pg.Pool;
  readonly #connectTimeoutMs: number;
  readonly #listeners: ((version: number) => void)[] = [];
  #listener: pg.Client | undefined;
  #listenTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(o: PostgresStoreOptions) {
    this.#url = o.url;
    this.#schema = o.schema ?? 'quotaring';
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(this.#schema)) throw new Error('schema: a lower-case SQL identifier');
    this.#connectTimeoutMs = o.connectTimeoutMs ?? 2_000;
    this.#pool = new pg.Pool({ connectionString: o.url, max: o.poolSize ?? 4, connectionTimeoutMillis: this.#connectTimeoutMs, statement_timeout: o.statementTimeoutMs ?? 5_000, query_timeout: (o.statementTimeoutMs ?? 5_000) + 1_000, idleTimeoutMillis: 30_000 });
    // An idle client's error (the server went away) must not crash the process.
    this.#pool.on('error', () => {});
  }

  async open(): Promise<void> {
    const s = this.#schema;
    await this.#tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [WRITE_LOCK]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${s}.rows (kind text NOT NULL, id text NOT NULL, version bigint NOT NULL, deleted boolean NOT NULL, tenant text, hash text, doc jsonb NOT NULL, at bigint NOT NULL, actor text NOT NULL, PRIMARY KEY (kind, id))`);
      await c.query(`CREATE INDEX IF NOT EXISTS rows_version ON ${s}.rows (version)`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${s}.log (version bigint PRIMARY KEY, at bigint NOT NULL, actor text NOT NULL, kind text NOT NULL, id text NOT NULL, op text NOT NULL)`);
      await c.query(`CREATE SEQUENCE IF NOT EXISTS ${s}.version_seq`);
    });
    this.#listen();
  }

  async readSince(since: number, max: number): Promise<CatalogueRow[]> {
    const res = await this.#query<DbRow>(`SELECT kind, id, version, deleted, tenant, hash, doc, at, actor FROM ${this.#schema}.rows WHERE version > $1 ORDER BY version LIMIT $2`, [since, max]);
    return res.rows.map(toRow);
  }

  async head(known?: { readonly version: number; readonly at: number }): Promise<StoreHead> {
    const res = await this.#query<{ head: string | null; at: string | null }>(`SELECT (SELECT max(version) FROM ${this.#schema}.log) AS head, (SELECT at FROM ${this.#schema}.log WHERE version = $1) AS at`, [known?.version ?? 0]);
    const r = res.rows[0];
    const version = r?.head === null || r?.head === undefined ? 0 : num(r.head);
    if (known === undefined || known.version === 0) return { version, consistent: true };
    return { version, consistent: r?.at !== null && r?.at !== undefined && num(r.at) === known.at };
  }

  async write(write: CatalogueWrite): Promise<CatalogueRow[]> {
    const s = this.#schema;
    return this.#tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [WRITE_LOCK]);
      for (const cond of write.conditions ?? []) {
        const res = await c.query<{ version: string; deleted: boolean }>(`SELECT version, deleted FROM ${s}.rows WHERE kind = $1 AND id = $2`, [cond.kind, cond.id]);
        const row = res.rows[0];
        const live = row !== undefined && !row.deleted;
        if (cond.live !== undefined && live !== cond.live) throw new CatalogueConflict(cond, `${cond.kind} ${cond.id} ${cond.live ? 'does not exist' : 'exists already'}`);
        if (cond.version !== undefined && (row === undefined || num(row.version) !== cond.version)) throw new CatalogueConflict(cond, `${cond.kind} ${cond.id} is at version ${row?.version ?? 'none'}, not ${cond.version}`);
      }
      const out: CatalogueRow[] = [];
      for (let i = 0; i < write.rows.length; i += BATCH) {
        const batch = write.rows.slice(i, i + BATCH);
        const res = await c.query<DbRow>(
          `WITH input AS (
             SELECT ord, kind, id, deleted, tenant, hash, doc::jsonb AS doc, nextval('${s}.version_seq') AS version,
                    (extract(epoch from clock_timestamp()) * 1000)::bigint AS at
             FROM unnest($1::int[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::text[], $7::text[]) AS t(ord, kind, id, deleted, tenant, hash, doc)
             ORDER BY ord
           ), logged AS (
             INSERT INTO ${s}.log (version, at, actor, kind, id, op) SELECT version, at, $8, kind, id, CASE WHEN deleted THEN 'delete' ELSE 'put' END FROM input
           )
           INSERT INTO ${s}.rows (kind, id, version, deleted, tenant, hash, doc, at, actor)
           SELECT kind, id, version, deleted, tenant, hash, doc, at, $8 FROM input ORDER BY ord
           ON CONFLICT (kind, id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted, tenant = EXCLUDED.tenant, hash = EXCLUDED.hash, doc = EXCLUDED.doc, at = EXCLUDED.at, actor = EXCLUDED.actor
           RETURNING kind, id, version, deleted, tenant, hash, doc, at, actor`,
          [batch.map((_, j) => j), batch.map((r) => r.kind), batch.map((r) => r.id), batch.map((r) => r.deleted), batch.map((r) => r.tenant ?? null), batch.map((r) => r.hash ?? null), batch.map((r) => JSON.stringify(r.doc)), write.actor],
        );
        const byRef = new Map(res.rows.map((r) => [`${r.kind}/${r.id}`, toRow(r)]));
        for (const r of batch) out.push(byRef.get(`${r.kind}/${r.id}`) as CatalogueRow);
      }
      const last = out.at(-1);
      if (last !== undefined) await c.query('SELECT pg_notify($1, $2)', [NOTIFY_CHANNEL, String(last.version)]);
      return out;
    });
  }

  async audit(before: number | undefined, max: number): Promise<AuditEntry[]> {
    const res = await this.#query<{ version: string; at: string; actor: string; kind: RowKind; id: string; op: 'put' | 'delete' }>(`SELECT version, at, actor, kind, id, op FROM ${this.#schema}.log WHERE version < $1 ORDER BY version DESC LIMIT $2`, [before ?? Number.MAX_SAFE_INTEGER, max]);
    return res.rows.map((r) => ({ version: num(r.version), at: num(r.at), actor: r.actor, kind: r.kind, id: r.id, op: r.op }));
  }

  async advanceTo(version: number): Promise<void> {
    await this.#tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [WRITE_LOCK]);
      const res = await c.query<{ last_value: string; is_called: boolean }>(`SELECT last_value, is_called FROM ${this.#schema}.version_seq`);
      const r = res.rows[0];
      const current = r === undefined ? 0 : r.is_called ? num(r.last_value) : num(r.last_value) - 1;
      if (current < version) await c.query(`SELECT setval('${this.#schema}.version_seq', $1, true)`, [version]);
    });
  }

  onChange(listener: (version: number) => void): void {
    this.#listeners.push(listener);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#listenTimer !== undefined) clearTimeout(this.#listenTimer);
    const l = this.#listener;
    this.#listener = undefined;
    await l?.end().catch(() => {});
    await this.#pool.end().catch(() => {});
  }

  /** LISTENs on a dedicated connection; reconnects with backoff (0.25 s doubling to 5 s) when it drops. */
  #listen(delayMs = 250): void {
    if (this.#closed || this.#listener !== undefined) return;
    const client = new pg.Client({ connectionString: this.#url, connectionTimeoutMillis: this.#connectTimeoutMs, keepAlive: true });
    this.#listener = client;
    let retried = false;
    const retry = (): void => {
      if (retried) return;
      retried = true;
      if (this.#listener === client) this.#listener = undefined;
      void client.end().catch(() => {});
      if (this.#closed) return;
      this.#listenTimer = setTimeout(() => this.#listen(Math.min(delayMs * 2, 5_000)), delayMs);
      this.#listenTimer.unref();
    };
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', (n) => {
      const v = Number(n.payload);
      if (n.channel !== NOTIFY_CHANNEL || !Number.isSafeInteger(v)) return;
      for (const l of this.#listeners) l(v);
    });
    client
      .connect()
      .then(() => client.query(`LISTEN ${NOTIFY_CHANNEL}`))
      .then(() => {
        // Reconnected: a change may have been missed meanwhile; let followers check.
        for (const l of this.#listeners) l(-1);
      })
      .catch(retry);
  }

  async #query<T extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<pg.QueryResult<T>> {
    try {
      return await this.#pool.query<T>(sql, params);
    } catch (err) {
      if (unavailable(err)) throw new CatalogueUnavailable((err as Error).message);
      throw err;
    }
  }

  async #tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (err) {
      throw new CatalogueUnavailable((err as Error).message);
    }
    let broken = false;
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      if (err instanceof CatalogueConflict) throw err;
      if (unavailable(err)) {
        broken = true;
        throw new CatalogueUnavailable((err as Error).message);
      }
      throw err;
    } finally {
      client.release(broken);
    }
  }
}
