/**
 * The embedded catalogue store: one append-only NDJSON file that every process on the machine
 * shares (`npm start`, a single node, a few processes on one host). No server.
 *
 * Each line is a {@link CatalogueRow}; the latest line of a `(kind, id)` is its row. A write takes
 * an inter-process lock (`proper-lockfile`, a lock directory beside the file), reads the lines other
 * processes appended, checks its conditions, appends its rows at the next versions in one write,
 * fsyncs and releases the lock: after `write` resolves the rows survive a crash, and versions are
 * assigned in file order. Readers tail the file (a watch, and a size check every `pollMs`), reading
 * only appended bytes; a torn last line waits until it is complete; a line that does not parse is
 * skipped and reported. A file that shrank or was replaced (restored from an older copy) is read
 * again from the start, and `head` reports it as gone back in time.
 *
 * `{"advance": v}` lines move the next version past `v` (see `advanceTo`). There is no compaction:
 * the file grows by one line per change (about 200 bytes); a million changes are 200 MB read at start.
 */
import { closeSync, fstatSync, fsyncSync, mkdirSync, openSync, readSync, watch, writeSync } from 'node:fs';
import type { FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import lockfile from 'proper-lockfile';
import { isRow } from './follower.ts';
import { CatalogueConflict, CatalogueUnavailable } from './store.ts';
import type { AuditEntry, CatalogueRow, CatalogueStore, CatalogueWrite, StoreHead } from './store.ts';

/** Options of a {@link FileStore}. */
export interface FileStoreOptions {
  /** The catalogue file; created (with its folder) when missing. */
  readonly path: string;
  /** Period of the size check that notices other processes' writes, ms. @default 200 */
  readonly pollMs?: number;
}

/** The embedded store: an append-only file shared by the processes of one machine. */
export class FileStore implements CatalogueStore {
  readonly kind = 'file';
  readonly #path: string;
  readonly #pollMs: number;
  /** `kind/id` → latest row. */
  #rows = new Map<string, CatalogueRow>();
  /** Every row line read, in file order (the audit log). */
  #log: CatalogueRow[] = [];
  #offset = 0;
  #ino = -1;
  #partial = '';
  #version = 0;
  #floor = 0;
  readonly #problems: string[] = [];
  readonly #listeners: ((version: number) => void)[] = [];
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: FileStoreOptions) {
    this.#path = opts.path;
    this.#pollMs = opts.pollMs ?? 200;
  }

  /** Lines skipped so far, each with its reason. */
  problems(): readonly string[] {
    return this.#problems;
  }

  async open(): Promise<void> {
    try {
      mkdirSync(dirname(this.#path), { recursive: true });
      closeSync(openSync(this.#path, 'a', 0o600));
    } catch (err) {
      throw new CatalogueUnavailable(`cannot open ${this.#path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    this.#catchUp();
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#poll(), this.#pollMs);
      this.#timer.unref();
      try {
        this.#watcher = watch(this.#path, () => this.#poll());
        this.#watcher.unref();
        this.#watcher.on('error', () => {});
      } catch {
        // No watch on this file system: the size check alone.
      }
    }
  }

  async readSince(since: number, max: number): Promise<CatalogueRow[]> {
    this.#catchUp();
    const out: CatalogueRow[] = [];
    for (const row of this.#rows.values()) if (row.version > since) out.push(row);
    out.sort((a, b) => a.version - b.version);
    return out.slice(0, max);
  }

  async head(known?: { readonly version: number; readonly at: number }): Promise<StoreHead> {
    this.#catchUp();
    if (known === undefined || known.version === 0) return { version: this.#version, consistent: true };
    const line = this.#log.find((r) => r.version === known.version);
    return { version: this.#version, consistent: line !== undefined && line.at === known.at };
  }

  async write(write: CatalogueWrite): Promise<CatalogueRow[]> {
    const release = await this.#lock();
    try {
      this.#catchUp();
      for (const c of write.conditions ?? []) {
        const row = this.#rows.get(`${c.kind}/${c.id}`);
        const live = row !== undefined && !row.deleted;
        if (c.live !== undefined && live !== c.live) throw new CatalogueConflict(c, `${c.kind} ${c.id} ${c.live ? 'does not exist' : 'exists already'}`);
        if (c.version !== undefined && row?.version !== c.version) throw new CatalogueConflict(c, `${c.kind} ${c.id} is at version ${row?.version ?? 'none'}, not ${c.version}`);
      }
      let next = Math.max(this.#version, this.#floor);
      const at = Date.now();
      const rows = write.rows.map((r): CatalogueRow => ({ ...r, version: ++next, at, actor: write.actor }));
      if (rows.length > 0) this.#append(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
      this.#catchUp();
      return rows;
    } finally {
      await release();
    }
  }

  async audit(before: number | undefined, max: number): Promise<AuditEntry[]> {
    this.#catchUp();
    const out: AuditEntry[] = [];
    for (let i = this.#log.length - 1; i >= 0 && out.length < max; i--) {
      const r = this.#log[i] as CatalogueRow;
      if (before !== undefined && r.version >= before) continue;
      out.push({ version: r.version, at: r.at, actor: r.actor, kind: r.kind, id: r.id, op: r.deleted ? 'delete' : 'put' });
    }
    return out;
  }

  async advanceTo(version: number): Promise<void> {
    const release = await this.#lock();
    try {
      this.#catchUp();
      if (Math.max(this.#version, this.#floor) < version) this.#append(`${JSON.stringify({ advance: version })}\n`);
      this.#catchUp();
    } finally {
      await release();
    }
  }

  onChange(listener: (version: number) => void): void {
    this.#listeners.push(listener);
  }

  async close(): Promise<void> {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#watcher?.close();
  }

  async #lock(): Promise<() => Promise<void>> {
    try {
      return await lockfile.lock(this.#path, { retries: { retries: 40, minTimeout: 10, maxTimeout: 100 }, stale: 10_000, realpath: false });
    } catch (err) {
      throw new CatalogueUnavailable(`cannot lock ${this.#path}: ${(err as Error).message}`);
    }
  }

  #append(text: string): void {
    const fd = openSync(this.#path, 'a');
    try {
      writeSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  #poll(): void {
    const before = this.#version;
    try {
      this.#catchUp();
    } catch {
      return;
    }
    if (this.#version !== before) for (const l of this.#listeners) l(this.#version);
  }

  /** Reads what was appended since the last read (all of it again when the file shrank or was replaced). */
  #catchUp(): void {
    let fd: number;
    try {
      fd = openSync(this.#path, 'r');
    } catch (err) {
      throw new CatalogueUnavailable(`cannot read ${this.#path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    try {
      const st = fstatSync(fd);
      if (st.ino !== this.#ino || st.size < this.#offset) {
        this.#ino = st.ino;
        this.#offset = 0;
        this.#partial = '';
        this.#rows = new Map();
        this.#log = [];
        this.#version = 0;
        this.#floor = 0;
      }
      if (st.size === this.#offset) return;
      const buf = Buffer.alloc(st.size - this.#offset);
      let read = 0;
      while (read < buf.length) {
        const n = readSync(fd, buf, read, buf.length - read, this.#offset + read);
        if (n === 0) break;
        read += n;
      }
      this.#offset += read;
      const text = this.#partial + buf.subarray(0, read).toString('utf8');
      const lines = text.split('\n');
      this.#partial = lines.pop() ?? '';
      for (const line of lines) this.#line(line);
    } finally {
      closeSync(fd);
    }
  }

  #line(line: string): void {
    if (line.trim() === '') return;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      this.#problem(`line at version ${this.#version}: not JSON`);
      return;
    }
    const advance = (v as { advance?: unknown }).advance;
    if (typeof advance === 'number' && Number.isSafeInteger(advance)) {
      this.#floor = Math.max(this.#floor, advance);
      return;
    }
    if (!isRow(v) || v.version <= this.#version) {
      this.#problem(`line after version ${this.#version}: not a catalogue row, or not a newer version`);
      return;
    }
    this.#version = v.version;
    this.#rows.set(`${v.kind}/${v.id}`, v);
    this.#log.push(v);
  }

  #problem(p: string): void {
    if (this.#problems.length < 1_000) this.#problems.push(p);
  }
}
