/**
 * Compaction of the file store (`FileStore.compact`, and at `open` when the file has more than
 * 10,000 row lines and more than twice as many as rows): rewrites the file with the latest line of
 * each row only (tombstones kept: followers behind still learn of the deletion), through a
 * temporary file, fsync and rename, under the lock. Trade-off: the audit history of superseded lines
 * is gone (`audit` then lists each row's last write only), and `head(known)` must trust that a
 * version at or below the compaction point that has no line any more was superseded rather than
 * lost. Without it the file grows by one line (about 200 bytes) per change and every process reads
 * all of it at start.
 */
import { closeSync, fsyncSync, openSync, renameSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import { fsyncDir, writeAll } from './file-writes.ts';
import { CatalogueUnavailable } from './store.ts';
import type { CatalogueRow } from './store.ts';
import { wallNow } from '../clock.ts';

/** `open` compacts when the file has more row lines than this, and more than twice its rows. */
const COMPACT_MIN_LINES = 10_000;

/** What `FileStore.compact` did. */
export interface Compaction {
  /** Row lines before and after. */
  readonly before: number;
  readonly after: number;
}

/** Whether `open` compacts a file of `lines` row lines holding `rows` rows (mostly superseded lines). */
export function worthCompacting(lines: number, rows: number): boolean {
  return lines > COMPACT_MIN_LINES && lines > 2 * rows;
}

/**
 * Replaces the file at `path` by its compacted form: `{"compacted": head}`, `{"advance": floor}`
 * when the floor is above the head, then the `kept` rows (the latest line of each) in order. A
 * temporary file beside it is written and fsynced, renamed over it, and the folder fsynced; other
 * processes notice the new inode and read it again. Call it under the lock.
 * @throws CatalogueUnavailable when the file cannot be written (the old file stays).
 */
export function writeCompacted(path: string, head: number, floor: number, kept: readonly CatalogueRow[]): void {
  const lines = [JSON.stringify({ compacted: head })];
  if (floor > head) lines.push(JSON.stringify({ advance: floor }));
  for (const r of kept) lines.push(JSON.stringify(r));
  const tmp = `${path}.compact-${process.pid}-${wallNow()}`; // wall time: only makes the name unique
  try {
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeAll(fd, Buffer.from(lines.join('\n') + '\n'));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
    fsyncDir(dirname(path));
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {
      // not created, or already renamed
    }
    throw new CatalogueUnavailable(`catalogue store: cannot compact ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}
