/**
 * The file store's durable writes: creating the catalogue file, appending lines in one fsynced
 * write (truncated back when it fails part way), and the fsync helpers compaction uses too. A write
 * that returned is on disk: a crash after it loses nothing.
 */
import { closeSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { CatalogueUnavailable } from './store.ts';

/**
 * Creates the file (mode 0600) and its folder when missing, fsyncing the folder once when the file
 * was created. An existing file is left as it is.
 * @throws CatalogueUnavailable when it cannot be created.
 */
export function createFile(path: string): void {
  try {
    mkdirSync(dirname(path), { recursive: true });
    try {
      closeSync(openSync(path, 'wx', 0o600));
      fsyncDir(dirname(path));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  } catch (err) {
    throw new CatalogueUnavailable(`catalogue store: cannot create ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/**
 * Appends `text` to the file in one write and fsyncs it; on failure truncates the file back to its
 * size before (or leaves a torn line for the next writer to end). Call it under the lock.
 * @throws CatalogueUnavailable when the file cannot be opened or written (nothing appended).
 */
export function appendSynced(path: string, text: string): void {
  let fd: number;
  try {
    fd = openSync(path, 'a');
  } catch (err) {
    throw new CatalogueUnavailable(`catalogue store: cannot write ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  let size = -1;
  try {
    size = fstatSync(fd).size;
    writeAll(fd, Buffer.from(text));
    fsyncSync(fd);
  } catch (err) {
    try {
      if (size >= 0) ftruncateSync(fd, size);
    } catch {
      // the next writer ends the torn line
    }
    throw new CatalogueUnavailable(`catalogue store: cannot write ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  } finally {
    closeSync(fd);
  }
}

/** Writes all of `buf` at the file position of `fd` (looping over short writes). */
export function writeAll(fd: number, buf: Buffer): void {
  for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off, buf.length - off);
}

/** fsync of a folder, so that a file created or renamed in it survives a crash (a no-op where folders cannot be opened). */
export function fsyncDir(dir: string): void {
  let fd: number;
  try {
    fd = openSync(dir, 'r');
  } catch {
    return;
  }
  try {
    fsyncSync(fd);
  } catch {
    // not supported here
  } finally {
    closeSync(fd);
  }
}
