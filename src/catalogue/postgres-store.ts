/**
 * The catalogue store of a cluster: PostgreSQL, through `pg`. In `schema` (default `quotaring`):
 *
 * - `rows`: the latest version of each plan, tenant and key (tombstones kept), indexed by version;
 * - `log`: the audit log, one line per row written, append-only (`head` reads its newest line);
 * - `version_seq`: the store-wide version counter.
 *
 * Ordering rule: every write runs in one transaction that first takes a transaction advisory lock,
 * then draws its versions, then commits; the lock is released only once the commit is visible. So
 * versions become visible in the order they are drawn, and a follower that has read every row up
 * to V and then reads `version > V` never misses a row committed later with a smaller version.
 * Writes are admin changes (rare); reads are a follower's catch-up (`readSince`) and check
 * (`head`), never a request's.
 *
 * Notifications: `pg_notify('<schema>_catalogue', <head version>)` inside the write, delivered at
 * commit, LISTENed on one dedicated connection that is re-established with backoff (0.25 s doubling
 * to 5 s) when it drops; after it comes back listeners get the current head (a change may have been
 * missed meanwhile). Followers poll too, so a lost notification only delays a change.
 *
 * Fault bounds: a connection attempt gives up after `connectTimeoutMs`, a statement after
 * `statementTimeoutMs` (server side; the client gives up 1 s later on a silent socket); a process
 * that vanished mid-write holds the write lock at most `idle_in_transaction_session_timeout`
 * (max(10 s, 5 × statementTimeoutMs)) or until TCP keepalive (10 s idle) notices. Each of those
 * failures is a {@link CatalogueUnavailable}; errors of a dropped idle connection are absorbed (no
 * unhandled 'error' event). The URL carries credentials: it is never logged nor put in an error.
 */
import pg from 'pg';
import { isRow } from './follower.ts';
import { checkWrite, conflictOf } from './store-checks.ts';
import { CatalogueConflict, CatalogueUnavailable } from './store.ts';
import type { AuditEntry, CatalogueRow, CatalogueStore, CatalogueWrite, RowCondition, RowKind, StoreHead } from './store.ts';

/** Advisory lock key serializing writes, `advanceTo` and the DDL of `open`. */
const WRITE_LOCK = 7_345_901_237;
/** Rows per INSERT statement of a bulk write (each statement sends arrays, not one row each). */
const BATCH = 2_000;
/** Delay before the first reconnection of the LISTEN connection, ms (doubles up to {@link LISTEN_BACKOFF_MAX_MS}). */
const LISTEN_BACKOFF_MS = 250;
const LISTEN_BACKOFF_MAX_MS = 5_000;

/** Options of a {@link PostgresStore}. */
export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/db`: a secret, never logged. */
  readonly url: string;
  /** Schema of the tables: a lower-case SQL identifier (1-40 of a-z 0-9 _, not starting with a digit). @default quotaring */
  readonly schema?: string;
  /** Longest statement, ms (PostgreSQL's `statement_timeout`), waiting for the write lock included. @default 2000 */
  readonly statementTimeoutMs?: number;
  /** Longest connection attempt (or wait for a free pooled connection), ms. @default 2000 */
  readonly connectTimeoutMs?: number;
  /** Pooled connections for queries (the LISTEN connection is one more). @default 4 */
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

/** A bigint column as a JS number. @throws Error when it is not a safe integer. */
function num(v: string | number): number {
  const n = typeof v === 'number' ? v : Number(v);
  if (!Number.isSafeInteger(n)) throw new Error(`catalogue store: not a safe integer from PostgreSQL: ${String(v)}`);
  return n;
}

/** A `rows` line as a {@link CatalogueRow}. @throws Error when it is malformed (a hand-edited table). */
function toRow(r: DbRow): CatalogueRow {
  const row = { kind: r.kind, id: r.id, version: num(r.version), deleted: r.deleted, ...(r.tenant === null ? {} : { tenant: r.tenant }), ...(r.hash === null ? {} : { hash: r.hash }), doc: r.doc, at: num(r.at), actor: r.actor };
  if (!isRow(row)) throw new Error(`catalogue store: malformed row in PostgreSQL: ${String(r.kind)} ${String(r.id)} at version ${r.version}`);
  return row;
}

/** SQLSTATE classes of an unreachable or overloaded server: connection exception, insufficient resources, shutdown/starting up, statement timeout. */
const UNAVAILABLE_SQLSTATE = /^(08...|53...|57P0[1-4]|57014)$/;
/** Socket errors of `net`/`dns`. */
const UNAVAILABLE_ERRNO = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
/** `pg`'s own errors without a code (it names them only in the message). */
const UNAVAILABLE_MESSAGE = /Connection terminated|timeout exceeded when trying to connect|Query read timeout|not queryable|Client was closed|Cannot use a pool after calling end/i;

/** True for a connection, timeout or server-shutdown error (the store is away, not the request wrong). */
export function isUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  if (typeof e.code === 'string') return UNAVAILABLE_SQLSTATE.test(e.code) || UNAVAILABLE_ERRNO.has(e.code);
  return typeof e.message === 'string' && UNAVAILABLE_MESSAGE.test(e.message);
}

/** `host:port/db` of a URL, without its credentials, for messages. */
function where(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname}`;
  } catch {
    return '(unparsable URL)';
  }
}

function positiveInt(name: string, v: number): number {
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`PostgresStore: ${name} must be a positive integer, got ${v}`);
  return v;
}

/** The catalogue in PostgreSQL. */
export class PostgresStore implements CatalogueStore {
  readonly kind = 'postgres';
  readonly #url: string;
  readonly #where: string;
  readonly #schema: string;
  readonly #channel: string;
  readonly #pool: pg.Pool;
  readonly #connectTimeoutMs: number;
  readonly #queryTimeoutMs: number;
  readonly #listeners: ((version: number) => void)[] = [];
  #listener: pg.Client | undefined;
  #listenTimer: NodeJS.Timeout | undefined;
  #listenBackoffMs = LISTEN_BACKOFF_MS;
  #listenedOnce = false;
  #opened = false;
  #closed = false;

  /** @throws Error when `schema` is not a plain lower-case identifier or a number option is not a positive integer. */
  constructor(o: PostgresStoreOptions) {
    this.#url = o.url;
    this.#where = where(o.url);
    this.#schema = o.schema ?? 'quotaring';
    if (!/^[a-z_][a-z0-9_]{0,39}$/.test(this.#schema)) throw new Error('PostgresStore: schema must be a lower-case SQL identifier (a-z 0-9 _, at most 40)');
    this.#channel = `${this.#schema}_catalogue`;
    const statementTimeoutMs = positiveInt('statementTimeoutMs', o.statementTimeoutMs ?? 2_000);
    this.#connectTimeoutMs = positiveInt('connectTimeoutMs', o.connectTimeoutMs ?? 2_000);
    this.#queryTimeoutMs = statementTimeoutMs + 1_000;
    this.#pool = new pg.Pool({
      connectionString: o.url,
      max: positiveInt('poolSize', o.poolSize ?? 4),
      connectionTimeoutMillis: this.#connectTimeoutMs,
      statement_timeout: statementTimeoutMs,
      query_timeout: this.#queryTimeoutMs,
      idle_in_transaction_session_timeout: Math.max(10_000, 5 * statementTimeoutMs),
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      application_name: 'quotaring-catalogue',
    });
    // An idle pooled connection's error (the server went away): the pool drops that client; the
    // next query reconnects or fails as CatalogueUnavailable.
    this.#pool.on('error', () => {});
  }

  /** NOTIFY channel of this schema's writes: `<schema>_catalogue` (`quotaring_catalogue` by default). */
  get channel(): string {
    return this.#channel;
  }

  /**
   * Creates the schema, tables, index and sequence when missing (under the write lock, so processes
   * opening at once do not collide), then starts LISTENing (waits for the first attempt, which may
   * fail: it is retried in the background).
   * @throws CatalogueUnavailable when PostgreSQL does not answer.
   */
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
    if (!this.#opened) {
      this.#opened = true;
      await this.#listen();
    }
  }

  /** Rows with version > `since`, in version order, at most `max`. @throws CatalogueUnavailable */
  async readSince(since: number, max: number): Promise<CatalogueRow[]> {
    const res = await this.#query<DbRow>(`SELECT kind, id, version, deleted, tenant, hash, doc, at, actor FROM ${this.#schema}.rows WHERE version > $1 ORDER BY version LIMIT $2`, [since, max]);
    return res.rows.map(toRow);
  }

  /** The newest version in the audit log (0 when empty) and whether it holds `known` (one round trip). @throws CatalogueUnavailable */
  async head(known?: { readonly version: number; readonly at: number }): Promise<StoreHead> {
    const s = this.#schema;
    const res = await this.#query<{ head: string | null; at: string | null }>(`SELECT (SELECT max(version) FROM ${s}.log) AS head, (SELECT at FROM ${s}.log WHERE version = $1) AS at`, [known?.version ?? 0]);
    const r = res.rows[0];
    const version = r?.head == null ? 0 : num(r.head);
    if (known === undefined) return { version, consistent: true };
    return { version, consistent: r?.at != null && num(r.at) === known.at };
  }

  /**
   * One transaction: the write lock, the conditions (in the order given), then the rows in batches
   * of {@link BATCH} (each row its own version; a `(kind, id)` given twice is stored at its last
   * occurrence, both are in the audit log), then the notification. `at` is PostgreSQL's clock, once
   * per write.
   * @throws CatalogueConflict on the first condition that does not hold (nothing written).
   * @throws CatalogueUnavailable when PostgreSQL does not answer (nothing written, or — if the
   *   connection dropped during COMMIT — possibly everything: check with `readSince`).
   * @throws Error when a row is malformed (a bad id, kind or doc) or the actor is not 1-128 characters.
   */
  async write(write: CatalogueWrite): Promise<CatalogueRow[]> {
    checkWrite(write);
    const s = this.#schema;
    return this.#tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [WRITE_LOCK]);
      const conds = write.conditions ?? [];
      const check = await c.query<{ at: string; found: [number, number | null, boolean | null][] }>(
        `SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS at,
                coalesce((SELECT json_agg(json_build_array(c.ord, r.version, r.deleted) ORDER BY c.ord)
                          FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS c(kind, id, ord)
                          LEFT JOIN ${s}.rows r ON r.kind = c.kind AND r.id = c.id), '[]'::json) AS found`,
        [conds.map((x) => x.kind), conds.map((x) => x.id)],
      );
      const first = check.rows[0];
      if (first === undefined) throw new Error('catalogue store: no answer to the condition check');
      for (const [ord, version, deleted] of first.found) conflictOf(conds[ord - 1] as RowCondition, version === null ? undefined : { version: num(version), deleted: deleted === true });
      const at = num(first.at);
      const out: CatalogueRow[] = [];
      for (let i = 0; i < write.rows.length; i += BATCH) {
        const batch = write.rows.slice(i, i + BATCH);
        const docs = batch.map((r) => JSON.stringify(r.doc));
        const res = await c.query<{ version: string }>(
          `WITH input AS MATERIALIZED (
             SELECT t.ord, t.kind, t.id, t.deleted, t.tenant, t.hash, t.doc::jsonb AS doc, nextval('${s}.version_seq') AS version
             FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(kind, id, deleted, tenant, hash, doc, ord) ORDER BY ord) t
           ), logged AS (
             INSERT INTO ${s}.log (version, at, actor, kind, id, op)
             SELECT version, $7, $8, kind, id, CASE WHEN deleted THEN 'delete' ELSE 'put' END FROM input
           ), stored AS (
             INSERT INTO ${s}.rows (kind, id, version, deleted, tenant, hash, doc, at, actor)
             SELECT DISTINCT ON (kind, id) kind, id, version, deleted, tenant, hash, doc, $7, $8 FROM input ORDER BY kind, id, ord DESC
             ON CONFLICT (kind, id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted, tenant = EXCLUDED.tenant, hash = EXCLUDED.hash, doc = EXCLUDED.doc, at = EXCLUDED.at, actor = EXCLUDED.actor
           )
           SELECT version FROM input ORDER BY ord`,
          [batch.map((r) => r.kind), batch.map((r) => r.id), batch.map((r) => r.deleted), batch.map((r) => r.tenant ?? null), batch.map((r) => r.hash ?? null), docs, at, write.actor],
        );
        if (res.rows.length !== batch.length) throw new Error(`catalogue store: ${res.rows.length} versions for ${batch.length} rows`);
        batch.forEach((r, j) => {
          const { kind, id, deleted, tenant, hash } = r;
          out.push({ kind, id, version: num((res.rows[j] as { version: string }).version), deleted, ...(tenant === undefined ? {} : { tenant }), ...(hash === undefined ? {} : { hash }), doc: JSON.parse(docs[j] as string) as Record<string, unknown>, at, actor: write.actor });
        });
      }
      const last = out.at(-1);
      if (last !== undefined) await c.query('SELECT pg_notify($1, $2)', [this.#channel, String(last.version)]);
      return out;
    });
  }

  /** Audit entries with version < `before`, newest first, at most `max`. @throws CatalogueUnavailable */
  async audit(before: number | undefined, max: number): Promise<AuditEntry[]> {
    const res = await this.#query<{ version: string; at: string; actor: string; kind: RowKind; id: string; op: 'put' | 'delete' }>(`SELECT version, at, actor, kind, id, op FROM ${this.#schema}.log WHERE version < $1 ORDER BY version DESC LIMIT $2`, [before ?? Number.MAX_SAFE_INTEGER, max]);
    return res.rows.map((r) => ({ version: num(r.version), at: num(r.at), actor: r.actor, kind: r.kind, id: r.id, op: r.op }));
  }

  /** `setval` under the write lock so that the next version drawn is > `version`; no-op when it already is. @throws CatalogueUnavailable */
  async advanceTo(version: number): Promise<void> {
    num(version);
    const seq = `${this.#schema}.version_seq`;
    await this.#tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [WRITE_LOCK]);
      await c.query(`SELECT setval('${seq}', $1, true) FROM ${seq} WHERE (CASE WHEN is_called THEN last_value ELSE last_value - 1 END) < $1`, [version]);
    });
  }

  /** Calls `listener` with the head version of each notification (payloads that are not a safe integer ignored), and with the current head after the LISTEN connection came back. */
  onChange(listener: (version: number) => void): void {
    this.#listeners.push(listener);
  }

  /** Stops reconnecting, ends the LISTEN connection and the pool (waiting for queries in flight). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#listenTimer !== undefined) clearTimeout(this.#listenTimer);
    this.#listenTimer = undefined;
    const l = this.#listener;
    this.#listener = undefined;
    await l?.end().catch(() => {});
    await this.#pool.end().catch(() => {});
  }

  #emit(version: number): void {
    for (const l of this.#listeners) {
      try {
        l(version);
      } catch {
        // A listener's fault is its own; the others still hear of the change.
      }
    }
  }

  /** One attempt to connect the LISTEN connection; on failure, or when it drops later, the next is scheduled with backoff. Never throws. */
  async #listen(): Promise<void> {
    if (this.#closed || this.#listener !== undefined) return;
    const client = new pg.Client({ connectionString: this.#url, connectionTimeoutMillis: this.#connectTimeoutMs, query_timeout: this.#queryTimeoutMs, keepAlive: true, keepAliveInitialDelayMillis: 10_000, application_name: 'quotaring-catalogue-listen' });
    this.#listener = client;
    let dropped = false;
    const drop = (): void => {
      if (dropped) return;
      dropped = true;
      if (this.#listener === client) this.#listener = undefined;
      void client.end().catch(() => {});
      if (this.#closed) return;
      const delay = this.#listenBackoffMs;
      this.#listenBackoffMs = Math.min(delay * 2, LISTEN_BACKOFF_MAX_MS);
      this.#listenTimer = setTimeout(() => {
        this.#listenTimer = undefined;
        void this.#listen();
      }, delay);
      this.#listenTimer.unref();
    };
    client.on('error', drop);
    client.on('end', drop);
    client.on('notification', (n) => {
      if (n.channel !== this.#channel || n.payload === undefined || !/^[0-9]{1,16}$/.test(n.payload)) return;
      const v = Number(n.payload);
      if (Number.isSafeInteger(v)) this.#emit(v);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.#channel}`);
    } catch {
      drop();
      return;
    }
    if (dropped) return;
    this.#listenBackoffMs = LISTEN_BACKOFF_MS;
    if (this.#listenedOnce) {
      // Back after a drop: a write may have been missed meanwhile.
      this.head().then(
        (h) => this.#emit(h.version),
        () => {},
      );
    }
    this.#listenedOnce = true;
  }

  #unavailable(err: unknown): CatalogueUnavailable {
    return new CatalogueUnavailable(`catalogue store: PostgreSQL at ${this.#where} does not answer: ${(err as Error).message}`);
  }

  async #query<T extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<pg.QueryResult<T>> {
    if (this.#closed) throw new CatalogueUnavailable('catalogue store: closed');
    try {
      return await this.#pool.query<T>(sql, params);
    } catch (err) {
      if (isUnavailable(err)) throw this.#unavailable(err);
      throw err;
    }
  }

  async #tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.#closed) throw new CatalogueUnavailable('catalogue store: closed');
    let client: pg.PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (err) {
      throw this.#unavailable(err);
    }
    let broken = false;
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (err) {
      if (isUnavailable(err)) broken = true;
      else
        await client.query('ROLLBACK').catch(() => {
          broken = true;
        });
      if (err instanceof CatalogueConflict) throw err;
      if (isUnavailable(err)) throw this.#unavailable(err);
      throw err;
    } finally {
      // A broken connection is destroyed (its transaction, if any, dies with it), not reused.
      client.release(broken);
    }
  }
}
