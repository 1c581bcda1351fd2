/**
 * The line format of the file store: each line of the NDJSON file is one JSON object, one of
 * - a {@link CatalogueRow} (`kind, id, version, deleted, tenant?, hash?, doc, at, actor`); the
 *   latest line of a `(kind, id)` is its row, and every row line is an audit entry;
 * - `{"advance": v}`: the next version assigned is > v (written by `advanceTo`);
 * - `{"compacted": v}`: this file was compacted when its head was v (first line of a compacted file).
 * Here: one line parsed on its own, and a row line formatted. Whether a row's version comes after
 * the previous row's is the store's check (it depends on the lines before).
 */
import { isRow } from './follower.ts';
import type { CatalogueRow, RowWrite } from './store.ts';

/** One line of the file, parsed: blank, a marker (`advance`, `compacted`) with its version, a row, or bad with why. */
export type FileLine =
  | { readonly type: 'blank' }
  | { readonly type: 'advance'; readonly version: number }
  | { readonly type: 'compacted'; readonly version: number }
  | { readonly type: 'row'; readonly row: CatalogueRow }
  | { readonly type: 'bad'; readonly why: string };

const BLANK: FileLine = { type: 'blank' };

/**
 * Parses one line (without its newline). A marker's version is a safe integer >= 0; a row has the
 * shape {@link isRow} checks (id 1-64 of A-Z a-z 0-9 . _ -, integer versions, doc an object) and
 * is copied with only its known fields. Never throws.
 */
export function parseLine(text: string): FileLine {
  if (text.trim() === '') return BLANK;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { type: 'bad', why: 'not JSON' };
  }
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && (keys[0] === 'advance' || keys[0] === 'compacted')) {
      const n = o[keys[0]];
      if (typeof n === 'number' && Number.isSafeInteger(n) && n >= 0) return { type: keys[0], version: n };
    }
  }
  if (!isRow(v)) return { type: 'bad', why: 'not a catalogue row (kind plan|tenant|key, id 1-64 of A-Z a-z 0-9 . _ -, integer version and at, doc an object)' };
  const { kind, id, version, deleted, tenant, hash, doc, at, actor } = v;
  return { type: 'row', row: { kind, id, version, deleted, ...(tenant === undefined ? {} : { tenant }), ...(hash === undefined ? {} : { hash }), doc, at, actor } };
}

/** The line (without its newline) of row `r` written at `version`, time `at`, by `actor`. */
export function rowLine(r: RowWrite, version: number, at: number, actor: string): string {
  const { kind, id, deleted, tenant, hash, doc } = r;
  return JSON.stringify({ kind, id, version, deleted, ...(tenant === undefined ? {} : { tenant }), ...(hash === undefined ? {} : { hash }), doc, at, actor });
}
