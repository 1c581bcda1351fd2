/**
 * The embedded catalogue store: one append-only NDJSON file that the processes of one machine
 * share (`npm start`, a single node, a few processes on one host). No server.
 *
 * Format (`file-format.ts`): each line is one JSON object: a {@link CatalogueRow}, `{"advance": v}`
 * or `{"compacted": v}`. A line that does not parse, is not one of those (id 1-64 of A-Z a-z 0-9 .
 * _ -, integer versions) or whose version is not above the previous row's is skipped and reported
 * ({@link FileStore.problems}, `onProblem`); the store never throws on it.
 *
 * Multi-process rules:
 * - Writers (`write`, `advanceTo`, `compact`) hold an inter-process lock (`proper-lockfile`: a
 *   directory `<path>.lock`, waited for at most 2 s, then {@link CatalogueUnavailable}), within a
 *   process one at a time (`file-lock.ts`). Under it a writer reads what others appended, checks
 *   its conditions, appends all its lines in one write and fsyncs, then releases. So versions are
 *   assigned in file order, and a reader that has read up to byte N has every version below the
 *   ones after N.
 *   A lock left by a crashed process is taken over after 10 s (stale); writes meanwhile answer 503.
 * - Readers tail the file: a directory watch, and a size check every `pollMs`, read only the bytes
 *   appended since the last read; a torn last line (a write in progress, or one cut by a crash)
 *   waits until its newline. A writer that finds a torn tail under the lock (its writer crashed)
 *   ends it with a newline first, so that line is skipped, never glued to the next row.
 * - A file that shrank or was replaced (another inode: compaction, a restore from an older copy) is
 *   read again from the start; `head` then reports a restore as gone back in time.
 *
 * Durability (`file-writes.ts`): `write` resolves only after the lines are fsynced (and the folder
 * once, when the file was created): a crash after that loses nothing. A write that fails part way
 * is truncated back.
 *
 * Compaction (`compact`, and at `open` when the file is mostly superseded lines) rewrites the file
 * with the latest line of each row only: see `file-compaction.ts` for when and its trade-off.
 */
import { closeSync, fstatSync, openSync, readSync, watch } from 'node:fs';
import type { FSWatcher, Stats } from 'node:fs';
import { basename, dirname } from 'node:path';
import { worthCompacting, writeCompacted } from './file-compaction.ts';
import type { Compaction } from './file-compaction.ts';
import { parseLine, rowLine } from './file-format.ts';
import { FileLock } from './file-lock.ts';
import { appendSynced, createFile } from './file-writes.ts';
import { checkWrite, conflictOf } from './store-checks.ts';
import { CatalogueUnavailable } from './store.ts';
import type { AuditEntry, CatalogueRow, CatalogueStore, CatalogueWrite, StoreHead } from './store.ts';
import { wallNow } from '../clock.ts';

export type { Compaction } from './file-compaction.ts';

/** Bytes read per `readSync` while catching up. */
const READ_CHUNK = 4 << 20;
/** Problems kept for {@link FileStore.problems} (later ones only counted and passed to `onProblem`). */
const MAX_PROBLEMS = 1_000;

/** Options of a {@link FileStore}. */
export interface FileStoreOptions {
  /** The catalogue file; created (with its folder, mode 0600) when missing. */
  readonly path: string;
  /** Period of the size check that notices other processes' writes, ms (a directory watch notices most sooner). @default 200 */
  readonly pollMs?: number;
  /** Called with each skipped line's reason (path, byte offset, why). */
  readonly onProblem?: (problem: string) => void;
}

const rowKey = (r: { readonly kind: string; readonly id: string }): string => `${r.kind}/${r.id}`;

/** The embedded store: an append-only file shared by the processes of one machine. */
export class FileStore implements CatalogueStore {
  readonly kind = 'file';
  readonly #path: string;
  readonly #pollMs: number;
  readonly #onProblem: ((problem: string) => void) | undefined;

  // What has been read of the file.
  /** `kind/id` → latest row line (the same object as in `#log`). */
  #rows = new Map<string, CatalogueRow>();
  /** Every row line read, in file order, which is version order. */
  #log: CatalogueRow[] = [];
  #ino = -1;
  #birthMs = -1;
  #offset = 0;
  /** Bytes after the last newline read (a torn or in-progress line). */
  #partial: Buffer = Buffer.alloc(0);
  /** Version of the last row line. */
  #version = 0;
  /** Highest `advance` line. */
  #floor = 0;
  /** Highest `compacted` line. */
  #compactedThrough = 0;

  readonly #problems: string[] = [];
  readonly #listeners: ((version: number) => void)[] = [];
  #announced = 0;
  #announcing: NodeJS.Immediate | undefined;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** This process's turn and the file lock, held by writers. */
  readonly #lock: FileLock;
  #closed = false;

  /** @throws Error when `pollMs` is not a positive integer. */
  constructor(opts: FileStoreOptions) {
    this.#path = opts.path;
    this.#pollMs = opts.pollMs ?? 200;
    if (!Number.isSafeInteger(this.#pollMs) || this.#pollMs <= 0) throw new Error(`FileStore: pollMs must be a positive integer, got ${this.#pollMs}`);
    this.#onProblem = opts.onProblem;
    this.#lock = new FileLock(this.#path, (p) => this.#problem(p));
  }

  /** Lines skipped so far, each with its reason (the first {@link MAX_PROBLEMS}). */
  problems(): readonly string[] {
    return this.#problems;
  }

  /**
   * Creates the file when missing, reads it, compacts it when it is mostly superseded lines (see
   * the header; skipped with a problem when the lock is busy), and starts tailing it.
   * @throws CatalogueUnavailable when the file cannot be created or read.
   */
  async open(): Promise<void> {
    createFile(this.#path);
    this.#catchUp();
    if (worthCompacting(this.#log.length, this.#rows.size)) {
      try {
        await this.compact();
      } catch (err) {
        if (!(err instanceof CatalogueUnavailable)) throw err;
        this.#problem(`${this.#path}: not compacted at open: ${err.message}`);
      }
    }
    this.#announced = this.#version;
    if (this.#timer === undefined && !this.#closed) {
      this.#timer = setInterval(() => this.#poll(), this.#pollMs);
      this.#timer.unref();
      try {
        // The folder, not the file: a compaction or restore replaces the file's inode.
        const name = basename(this.#path);
        this.#watcher = watch(dirname(this.#path), { persistent: false }, (_event, file) => {
          if (file === null || file === name) this.#poll();
        });
        this.#watcher.on('error', () => {});
      } catch {
        // No watch on this file system: the size check alone.
      }
    }
  }

  /** Rows with version > `since`, in version order, at most `max` (reads what was appended first). @throws CatalogueUnavailable */
  async readSince(since: number, max: number): Promise<CatalogueRow[]> {
    this.#catchUp();
    const out: CatalogueRow[] = [];
    for (let i = this.#firstAbove(since); i < this.#log.length && out.length < max; i++) {
      const r = this.#log[i] as CatalogueRow;
      if (this.#rows.get(rowKey(r)) === r) out.push(r);
    }
    return out;
  }

  /**
   * The last row line's version; `consistent` when the file has the line `known` names with the
   * same `at`, or has no line for it but was compacted at or above it (superseded, see the header).
   * @throws CatalogueUnavailable
   */
  async head(known?: { readonly version: number; readonly at: number }): Promise<StoreHead> {
    this.#catchUp();
    if (known === undefined) return { version: this.#version, consistent: true };
    const line = this.#log[this.#firstAbove(known.version - 1)];
    const consistent = line !== undefined && line.version === known.version ? line.at === known.at : known.version <= this.#compactedThrough;
    return { version: this.#version, consistent };
  }

  /**
   * Under the lock: catches up, checks the conditions, appends the rows at the next versions
   * (`at` = this machine's clock, once per write) in one write, fsyncs. A `(kind, id)` given twice
   * is stored at its last occurrence (both lines are in the audit log).
   * @throws CatalogueConflict on the first condition that does not hold (nothing written).
   * @throws CatalogueUnavailable when the lock stays busy for 2 s or the file cannot be written (nothing written).
   * @throws Error when a row is malformed or the actor is not 1-128 characters.
   */
  async write(write: CatalogueWrite): Promise<CatalogueRow[]> {
    checkWrite(write);
    return this.#exclusive(() => {
      this.#catchUp();
      for (const c of write.conditions ?? []) conflictOf(c, this.#rows.get(rowKey(c)));
      if (write.rows.length === 0) return [];
      let next = Math.max(this.#version, this.#floor);
      const at = wallNow(); // wall time: written to the shared file, read by other processes
      const lines = write.rows.map((r) => rowLine(r, ++next, at, write.actor));
      const from = this.#log.length;
      this.#append(lines.join('\n') + '\n');
      this.#catchUp();
      const stored = this.#log.slice(from);
      if (stored.length !== lines.length || stored[0]?.version !== next - lines.length + 1) {
        throw new CatalogueUnavailable(`catalogue store: ${this.#path} changed under the lock while writing (another program edits it?)`);
      }
      return stored;
    });
  }

  /** Audit entries (row lines) with version < `before`, newest first, at most `max`. @throws CatalogueUnavailable */
  async audit(before: number | undefined, max: number): Promise<AuditEntry[]> {
    this.#catchUp();
    const out: AuditEntry[] = [];
    const end = before === undefined ? this.#log.length : this.#firstAbove(before - 1);
    for (let i = end - 1; i >= 0 && out.length < max; i--) {
      const r = this.#log[i] as CatalogueRow;
      out.push({ version: r.version, at: r.at, actor: r.actor, kind: r.kind, id: r.id, op: r.deleted ? 'delete' : 'put' });
    }
    return out;
  }

  /** Appends `{"advance": version}` under the lock unless the next version is already above it. @throws CatalogueUnavailable */
  async advanceTo(version: number): Promise<void> {
    if (!Number.isSafeInteger(version)) throw new Error(`advanceTo: not a safe integer: ${version}`);
    await this.#exclusive(() => {
      this.#catchUp();
      if (Math.max(this.#version, this.#floor) < version) this.#append(`${JSON.stringify({ advance: version })}\n`);
      this.#catchUp();
    });
  }

  /**
   * Rewrites the file with the latest line of each row (`file-compaction.ts`): a temporary file
   * beside it, fsynced, renamed over it, the folder fsynced; other processes notice the new inode
   * and read it again. Under the lock.
   * @throws CatalogueUnavailable when the lock stays busy or the file cannot be written (the old file stays).
   */
  async compact(): Promise<Compaction> {
    return this.#exclusive(() => {
      this.#catchUp();
      const before = this.#log.length;
      const kept = this.#log.filter((r) => this.#rows.get(rowKey(r)) === r);
      writeCompacted(this.#path, this.#version, this.#floor, kept);
      this.#catchUp();
      return { before, after: kept.length };
    });
  }

  /** Calls `listener` with the new head after a catch-up read new lines (this process's writes too), soon after, not inside the call that read them. */
  onChange(listener: (version: number) => void): void {
    this.#listeners.push(listener);
  }

  /** Stops tailing; waits for this process's write in progress. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#announcing !== undefined) clearImmediate(this.#announcing);
    this.#announcing = undefined;
    this.#watcher?.close();
    this.#watcher = undefined;
    await this.#lock.idle();
  }

  /** Index of the first row line with version > `version` (binary search: lines are in version order). */
  #firstAbove(version: number): number {
    let lo = 0;
    let hi = this.#log.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.#log[mid] as CatalogueRow).version > version) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  /** Runs `fn` holding this process's turn and the file lock (`file-lock.ts`). @throws CatalogueUnavailable */
  async #exclusive<T>(fn: () => T): Promise<T> {
    if (this.#closed) throw new CatalogueUnavailable('catalogue store: closed');
    return this.#lock.hold(fn);
  }

  /** Appends `text` in one write and fsyncs, ending a torn tail first; truncates back on failure. Under the lock. */
  #append(text: string): void {
    // A torn last line under the lock is a crashed writer's: end it (skipped as a problem) so our first line stays whole.
    appendSynced(this.#path, this.#partial.length > 0 ? `\n${text}` : text);
  }

  #poll(): void {
    if (this.#closed) return;
    try {
      this.#catchUp();
    } catch {
      // Unreadable for now (being replaced, a permission change): the next poll tries again.
    }
  }

  /** Reads what was appended since the last read (everything again when the file shrank or was replaced). @throws CatalogueUnavailable */
  #catchUp(): void {
    let fd: number;
    try {
      fd = openSync(this.#path, 'r');
    } catch (err) {
      throw new CatalogueUnavailable(`catalogue store: cannot read ${this.#path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    try {
      const st = fstatSync(fd);
      if (st.ino !== this.#ino || st.birthtimeMs !== this.#birthMs || st.size < this.#offset) this.#reset(st);
      const chunk = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(st.size - this.#offset, 1)));
      while (this.#offset < st.size) {
        const n = readSync(fd, chunk, 0, Math.min(chunk.length, st.size - this.#offset), this.#offset);
        if (n === 0) break;
        this.#take(chunk.subarray(0, n));
      }
    } catch (err) {
      if (err instanceof CatalogueUnavailable) throw err;
      throw new CatalogueUnavailable(`catalogue store: cannot read ${this.#path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    } finally {
      closeSync(fd);
    }
    this.#announce();
  }

  #reset(st: Stats): void {
    this.#ino = st.ino;
    this.#birthMs = st.birthtimeMs;
    this.#offset = 0;
    this.#partial = Buffer.alloc(0);
    this.#rows = new Map();
    this.#log = [];
    this.#version = 0;
    this.#floor = 0;
    this.#compactedThrough = 0;
  }

  /** Parses the complete lines of `bytes` (after what was left of the previous read); keeps the rest, undecoded, for later. */
  #take(bytes: Buffer): void {
    const data = this.#partial.length === 0 ? bytes : Buffer.concat([this.#partial, bytes]);
    const base = this.#offset - this.#partial.length;
    let start = 0;
    for (let nl = data.indexOf(0x0a); nl !== -1; nl = data.indexOf(0x0a, start)) {
      this.#line(data.toString('utf8', start, nl), base + start);
      start = nl + 1;
    }
    this.#partial = Buffer.from(data.subarray(start));
    this.#offset += bytes.length;
  }

  /** Applies one line read at byte `at` (`file-format.ts`); a bad line, or a row not after the previous one, is a problem. */
  #line(text: string, at: number): void {
    const line = parseLine(text);
    if (line.type === 'blank') return;
    if (line.type === 'bad') {
      this.#problem(`${this.#path}: line at byte ${at}: ${line.why}, skipped`);
    } else if (line.type === 'advance') {
      this.#floor = Math.max(this.#floor, line.version);
    } else if (line.type === 'compacted') {
      this.#compactedThrough = Math.max(this.#compactedThrough, line.version);
    } else if (line.row.version <= this.#version) {
      this.#problem(`${this.#path}: line at byte ${at}: version ${line.row.version} is not after ${this.#version}, skipped`);
    } else {
      this.#version = line.row.version;
      this.#rows.set(rowKey(line.row), line.row);
      this.#log.push(line.row);
    }
  }

  #problem(p: string): void {
    if (this.#problems.length < MAX_PROBLEMS) this.#problems.push(p);
    this.#onProblem?.(p);
  }

  /** Tells the listeners of a new head, once, after the current call (a listener may call back in). */
  #announce(): void {
    if (this.#version === this.#announced || this.#announcing !== undefined || this.#closed || this.#listeners.length === 0) {
      if (this.#listeners.length === 0) this.#announced = this.#version;
      return;
    }
    this.#announcing = setImmediate(() => {
      this.#announcing = undefined;
      if (this.#closed || this.#version === this.#announced) return;
      this.#announced = this.#version;
      for (const l of this.#listeners) {
        try {
          l(this.#version);
        } catch {
          // A listener's fault is its own.
        }
      }
    });
  }
}
