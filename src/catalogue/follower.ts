/**
 * Keeps a process's {@link Catalogue} in step with the catalogue store: every row the store holds
 * reaches RAM within one notification (PostgreSQL LISTEN/NOTIFY, a file watch) or, when a
 * notification is lost, within one `poll` period (a version check, one round trip). Requests never
 * wait for the store; the store being down only stops changes.
 *
 * Start: the last local copy first (when there is one, so that a process starts while the store is
 * down), then every row written since the copy's version. A process with neither a store that
 * answers nor a copy cannot know its tenants: `start` throws, saying so.
 *
 * A store that went back in time (restored from an older backup, replaced, a file truncated) is
 * noticed at the next version check: the write a process last applied is no longer there. The
 * rule is **the newest knowledge wins, as for the global cap's re-seed**: every row this process
 * holds at a newer version than the store's copy of it, or that the store lacks (a revoked key, a
 * deleted tenant, a tenant created after the backup), is written back, and the store's version
 * counter is moved past the highest version seen; rows the store has that this process does not
 * know are then read as usual. So a restore never resurrects a revoked key that any running process
 * saw revoked, and says so (log `catalogue store went back in time`, metric). What no running process
 * saw (a change made and lost while every process was down) cannot be recovered.
 */
import { createReadStream } from 'node:fs';
import { mkdir, open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import type { Catalogue } from './catalogue.ts';
import { CatalogueUnavailable } from './store.ts';
import type { CatalogueRow, CatalogueStore, RowWrite } from './store.ts';

/** Rows read per `readSince` page. */
const PAGE = 5_000;

/** What the follower logs through (pino's shape). */
export interface FollowerLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Options of a {@link CatalogueFollower}. */
export interface FollowerOptions {
  readonly catalogue: Catalogue;
  readonly store: CatalogueStore;
  /** Period of the version check, ms. */
  readonly pollMs: number;
  /** File of this process's local copy; undefined: none (a file store is its own copy). */
  readonly copyPath?: string;
  readonly log: FollowerLog;
  /** Called after rows were applied, with the tenants they changed. */
  readonly onApplied?: (tenants: ReadonlySet<string>) => void;
}

/** Follows a catalogue store into a process's RAM. */
export class CatalogueFollower {
  readonly #o: FollowerOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #reachable = false;
  #closed = false;
  #copyDirty = false;
  #copying: Promise<void> | undefined;
  /** Times the store was found to have gone back in time. */
  regressions = 0;

  constructor(opts: FollowerOptions) {
    this.#o = opts;
  }

  /** Whether the last call to the store succeeded. */
  get reachable(): boolean {
    return this.#reachable;
  }

  /**
   * Loads the local copy (if any), then catches up with the store; then follows it.
   * @throws Error when the store cannot be reached and there is no local copy to start from.
   */
  async start(): Promise<void> {
    const { catalogue, store, log } = this.#o;
    let fromCopy = 0;
    if (this.#o.copyPath !== undefined) fromCopy = await readCopy(this.#o.copyPath, catalogue);
    try {
      await store.open();
      await this.#catchUp();
    } catch (err) {
      if (!(err instanceof CatalogueUnavailable) && !isConnectionError(err)) throw err;
      if (fromCopy === 0 && catalogue.head.version === 0 && this.#o.copyPath !== undefined) {
        throw new Error(`the catalogue store (${store.kind}) does not answer (${(err as Error).message}) and there is no local copy at ${this.#o.copyPath} to start from: start it once with the store up`);
      }
      if (this.#o.copyPath === undefined) throw new Error(`the catalogue store (${store.kind}) does not answer: ${(err as Error).message}`);
      log.warn({ store: store.kind, version: catalogue.head.version, rows: fromCopy }, 'catalogue store unreachable: serving from the local copy until it answers');
    }
    store.onChange(() => this.kick());
    this.#schedule();
    log.info({ store: store.kind, version: catalogue.head.version, ...catalogue.size }, 'catalogue loaded');
  }

  /** Checks the store now (a notification, or a write this process just made). Resolves when applied. */
  kick(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false;
          await this.#catchUp();
        } while (this.#again && !this.#closed);
      } catch (err) {
        if (this.#reachable) this.#o.log.warn({ err: (err as Error).message, store: this.#o.store.kind }, 'catalogue store unreachable: serving from the catalogue held, changes refused until it answers');
        this.#reachable = false;
      } finally {
        this.#running = undefined;
      }
    })();
    return this.#running;
  }

  /** Stops following and writes the local copy a last time. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    await this.#running;
    await this.#copying;
    if (this.#copyDirty) await this.#writeCopy();
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      void this.kick().finally(() => this.#schedule());
    }, this.#o.pollMs);
    this.#timer.unref();
  }

  async #catchUp(): Promise<void> {
    const { catalogue, store, log } = this.#o;
    const known = catalogue.head;
    const head = await store.head(known.version === 0 ? undefined : known);
    this.#reachable = true;
    if (!head.consistent || head.version < known.version) {
      this.regressions += 1;
      log.error({ store: store.kind, held: known.version, store_version: head.version }, 'catalogue store went back in time (restored from an older backup?): writing back what this process knows that it lacks');
      await this.#writeBack(known.version);
      return this.#catchUp();
    }
    let since = known.version;
    const changed = new Set<string>();
    while (since < head.version) {
      const rows = await store.readSince(since, PAGE);
      if (rows.length === 0) break;
      const applied = catalogue.apply(rows);
      for (const t of applied.tenants) changed.add(t);
      for (const p of applied.problems) log.warn({ problem: p }, 'catalogue row skipped');
      since = (rows.at(-1) as CatalogueRow).version;
      if (rows.length < PAGE) break;
    }
    if (changed.size > 0) {
      this.#o.onApplied?.(changed);
      this.#copyLater();
    }
  }

  /** Writes back every row held newer than the store's copy, then moves the store's counter past `held`. */
  async #writeBack(held: number): Promise<void> {
    const { catalogue, store, log } = this.#o;
    const stored = new Map<string, number>();
    for (let since = 0; ; ) {
      const rows = await store.readSince(since, PAGE);
      for (const r of rows) stored.set(`${r.kind}/${r.id}`, r.version);
      if (rows.length < PAGE) break;
      since = (rows.at(-1) as CatalogueRow).version;
    }
    const back: RowWrite[] = [];
    for (const row of catalogue.rows()) {
      const theirs = stored.get(`${row.kind}/${row.id}`);
      if (theirs !== undefined && theirs >= row.version) continue;
      if (row.deleted && theirs === undefined) continue; // nothing to delete there
      back.push({ kind: row.kind, id: row.id, deleted: row.deleted, doc: row.doc, ...(row.tenant === undefined ? {} : { tenant: row.tenant }), ...(row.hash === undefined ? {} : { hash: row.hash }) });
    }
    await store.advanceTo(held);
    // Tenants before their keys: a key written back names a tenant that exists.
    back.sort((a, b) => rank(a) - rank(b));
    for (let i = 0; i < back.length; i += PAGE) await store.write({ rows: back.slice(i, i + PAGE), actor: 'write-back' });
    // Re-read everything from the store at its new versions.
    catalogue.setHead(0, 0);
    log.warn({ rows: back.length, revoked: back.filter((r) => r.deleted && r.kind === 'key').length }, 'catalogue written back to the store');
  }

  #copyLater(): void {
    if (this.#o.copyPath === undefined) return;
    this.#copyDirty = true;
    if (this.#copying !== undefined) return;
    this.#copying = (async () => {
      // Coalesce bursts: at most one copy a second.
      await new Promise((r) => setTimeout(r, 1_000).unref());
      while (this.#copyDirty) await this.#writeCopy();
    })().finally(() => {
      this.#copying = undefined;
    });
  }

  async #writeCopy(): Promise<void> {
    const path = this.#o.copyPath;
    if (path === undefined) return;
    this.#copyDirty = false;
    try {
      await writeCopy(path, this.#o.catalogue);
    } catch (err) {
      this.#o.log.warn({ err: (err as Error).message, path }, 'catalogue local copy not written');
    }
  }
}

function rank(r: RowWrite): number {
  return r.kind === 'plan' ? 0 : r.kind === 'tenant' ? 1 : 2;
}

function isConnectionError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|57P0[1-3])$/.test(code);
}

/**
 * Writes the catalogue's rows to `path` (NDJSON: a head line, then one row a line), atomically
 * (temp file, fsync, rename), in chunks so the event loop keeps serving.
 */
export async function writeCopy(path: string, catalogue: Catalogue): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  const file = await open(tmp, 'w', 0o600);
  try {
    let chunk = `${JSON.stringify({ head: catalogue.head })}\n`;
    for (const row of catalogue.rows()) {
      chunk += `${JSON.stringify(row)}\n`;
      if (chunk.length > 1 << 20) {
        await file.write(chunk);
        chunk = '';
      }
    }
    await file.write(chunk);
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(tmp, path);
}

/** Loads a local copy into `catalogue`; returns the rows read (0 when there is none). Bad lines are skipped. */
export async function readCopy(path: string, catalogue: Catalogue): Promise<number> {
  let head: { version: number; at: number } | undefined;
  let n = 0;
  let batch: CatalogueRow[] = [];
  try {
    const lines = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
    for await (const line of lines) {
      if (line === '') continue;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        continue;
      }
      if (head === undefined) {
        const h = (value as { head?: { version?: unknown; at?: unknown } }).head;
        if (h === undefined || !Number.isSafeInteger(h.version) || !Number.isSafeInteger(h.at)) return 0;
        head = { version: h.version as number, at: h.at as number };
        continue;
      }
      if (!isRow(value)) continue;
      batch.push(value);
      n += 1;
      if (batch.length >= PAGE) {
        batch.sort((a, b) => a.version - b.version);
        catalogue.apply(batch);
        batch = [];
      }
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
  batch.sort((a, b) => a.version - b.version);
  catalogue.apply(batch);
  if (head !== undefined) catalogue.setHead(head.version, head.at);
  return n;
}

/** Whether a parsed line has the shape of a {@link CatalogueRow} (docs are validated when applied). */
export function isRow(v: unknown): v is CatalogueRow {
  if (typeof v !== 'object' || v === null) return false;
  const r = v as Record<string, unknown>;
  return (
    (r.kind === 'plan' || r.kind === 'tenant' || r.kind === 'key') &&
    typeof r.id === 'string' &&
    /^[A-Za-z0-9._-]{1,64}$/.test(r.id) &&
    Number.isSafeInteger(r.version) &&
    (r.version as number) > 0 &&
    typeof r.deleted === 'boolean' &&
    typeof r.doc === 'object' &&
    r.doc !== null &&
    !Array.isArray(r.doc) &&
    (r.tenant === undefined || typeof r.tenant === 'string') &&
    (r.hash === undefined || typeof r.hash === 'string') &&
    Number.isSafeInteger(r.at) &&
    typeof r.actor === 'string'
  );
}
