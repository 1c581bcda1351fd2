/**
 * Reading a request trace: a CSV with columns `TIMESTAMP,ContextTokens,GeneratedTokens` (the
 * Azure LLM inference traces published with the Splitwise paper, CC-BY 4.0 Microsoft; see
 * cluster/traces/README.md), plain or gzipped, into rows with times relative to the first row.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';

/** One request of a trace. */
export interface TraceRow {
  /** 0-based index of the row among the trace's data rows (header excluded), stable under selection. */
  readonly index: number;
  /** 1-based line number in the file (the header is line 1). */
  readonly line: number;
  /** Invocation time in ms since the trace's first row (fractional: the traces have 100 ns resolution). */
  readonly atMs: number;
  /** Prompt tokens (`ContextTokens`). */
  readonly promptTokens: number;
  /** Completion tokens (`GeneratedTokens`). */
  readonly completionTokens: number;
}

/** Which rows of a trace to keep. Offsets are from the trace's first row, whatever the selection. */
export interface TraceSelection {
  /** Keep rows with `atMs >= fromMs`. @default 0 */
  readonly fromMs?: number;
  /** Keep rows with `atMs < toMs`. @default Infinity */
  readonly toMs?: number;
  /** Keep at most this many rows (after the time window). @default Infinity */
  readonly limit?: number;
}

/** A trace that cannot be read: the message names the file (or source) and the line. */
export class TraceError extends Error {
  /** File name or source label. */
  readonly source: string;
  /** 1-based line number of the bad row, or 0 when the whole input is at fault. */
  readonly line: number;

  /** @param source file or label; @param line 1-based line (0: whole input); @param reason what is wrong. */
  constructor(source: string, line: number, reason: string) {
    super(line > 0 ? `${source}:${line}: ${reason}` : `${source}: ${reason}`);
    this.name = 'TraceError';
    this.source = source;
    this.line = line;
  }
}

const COLUMNS = ['TIMESTAMP', 'ContextTokens', 'GeneratedTokens'] as const;
const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?Z?$/;
const INTEGER = /^\d+$/;
/** 100 ns ticks per ms. */
const TICKS_PER_MS = 10_000;

/** A timestamp split into whole ms since the epoch and the 100 ns ticks within that second. */
interface Instant {
  readonly secondMs: number;
  readonly ticks: number;
}

function parseTimestamp(text: string): Instant | null {
  const m = TIMESTAMP.exec(text);
  if (m === null) return null;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const secondMs = Date.UTC(y, mo - 1, d, h, mi, s);
  const back = new Date(secondMs);
  // Date.UTC silently rolls over (month 13, second 61): reject what does not round-trip.
  if (back.getUTCFullYear() !== y || back.getUTCMonth() !== mo - 1 || back.getUTCDate() !== d || back.getUTCHours() !== h || back.getUTCMinutes() !== mi || back.getUTCSeconds() !== s) {
    return null;
  }
  return { secondMs, ticks: Number((m[7] ?? '').padEnd(7, '0')) };
}

function parseCount(source: string, line: number, column: string, text: string): number {
  if (!INTEGER.test(text)) throw new TraceError(source, line, `${column} "${text}" is not a non-negative integer`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new TraceError(source, line, `${column} "${text}" is too large`);
  return n;
}

function checkSelection(sel: TraceSelection): void {
  const { fromMs = 0, toMs = Infinity, limit = Infinity } = sel;
  if (!(fromMs >= 0)) throw new RangeError(`fromMs must be >= 0 (got ${fromMs})`);
  if (!(toMs >= fromMs)) throw new RangeError(`toMs must be >= fromMs (got ${toMs} < ${fromMs})`);
  if (!(limit >= 0) || (limit !== Infinity && !Number.isInteger(limit))) throw new RangeError(`limit must be a non-negative integer (got ${limit})`);
}

/**
 * Parses the text of a trace CSV (LF or CRLF line ends; the header names the columns, in any order,
 * extra columns ignored). Rows must be in time order. Parsing stops once the selection is full, so
 * rows after it are not checked.
 * @param text the CSV text.
 * @param selection time window (ms from the first row) and row limit.
 * @param source label used in error messages. @default 'trace'
 * @returns the selected rows, `atMs` measured from the trace's first row.
 * @throws TraceError for a missing column, a bad timestamp or count, a wrong number of fields,
 *   or a row earlier than the one before (the message names the line).
 * @throws RangeError for a bad selection.
 */
export function parseTrace(text: string, selection: TraceSelection = {}, source = 'trace'): TraceRow[] {
  checkSelection(selection);
  const { fromMs = 0, toMs = Infinity, limit = Infinity } = selection;
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  const header = (lines[0] ?? '').replace(/^\uFEFF/, '').split(',').map((c) => c.trim());
  if (lines.length === 0 || header.join('') === '') throw new TraceError(source, 0, `empty trace: expected a header ${COLUMNS.join(',')}`);
  const at = COLUMNS.map((c) => header.indexOf(c)) as [number, number, number];
  const missing = COLUMNS.filter((_, k) => at[k] === -1);
  if (missing.length > 0) throw new TraceError(source, 1, `header lacks column(s) ${missing.join(', ')} (expected ${COLUMNS.join(',')}, got ${header.join(',')})`);

  const rows: TraceRow[] = [];
  let first: Instant | null = null;
  let prevTicks = -Infinity;
  for (let k = 1; k < lines.length && rows.length < limit; k++) {
    const line = k + 1;
    const fields = (lines[k] as string).split(',');
    if (fields.length !== header.length) throw new TraceError(source, line, `expected ${header.length} fields, got ${fields.length}${lines[k] === '' ? ' (empty line)' : ''}`);
    const stamp = (fields[at[0]] as string).trim();
    const instant = parseTimestamp(stamp);
    if (instant === null) throw new TraceError(source, line, `TIMESTAMP "${stamp}" is not "YYYY-MM-DD hh:mm:ss[.fffffff]" (UTC)`);
    first ??= instant;
    // Whole 100 ns ticks since the first row: exact integers for spans up to ~28 years.
    const ticks = (instant.secondMs - first.secondMs) * TICKS_PER_MS + (instant.ticks - first.ticks);
    if (ticks < prevTicks) throw new TraceError(source, line, `TIMESTAMP ${stamp} is earlier than the row before: a trace must be in time order`);
    prevTicks = ticks;
    const promptTokens = parseCount(source, line, 'ContextTokens', (fields[at[1]] as string).trim());
    const completionTokens = parseCount(source, line, 'GeneratedTokens', (fields[at[2]] as string).trim());
    const atMs = ticks / TICKS_PER_MS;
    if (atMs >= toMs) break;
    if (atMs >= fromMs) rows.push({ index: k - 1, line, atMs, promptTokens, completionTokens });
  }
  return rows;
}

/**
 * Reads a trace file, plain or gzipped (detected by the gzip magic bytes, not the name).
 * @param file path of the CSV or CSV.gz.
 * @param selection time window (ms from the first row) and row limit.
 * @throws TraceError for unreadable or bad content (naming file and line); the fs error when the file cannot be read.
 */
export async function readTrace(file: string, selection: TraceSelection = {}): Promise<TraceRow[]> {
  return parseTraceBytes(await readFile(file), selection, file);
}

/** Synchronous {@link readTrace}, for scripts and benchmarks (same errors). */
export function parseTraceFile(file: string, selection: TraceSelection = {}): TraceRow[] {
  return parseTraceBytes(readFileSync(file), selection, file);
}

function parseTraceBytes(raw: Buffer, selection: TraceSelection, file: string): TraceRow[] {
  let bytes: Buffer = raw;
  if (raw[0] === 0x1f && raw[1] === 0x8b) {
    try {
      bytes = gunzipSync(raw);
    } catch (err) {
      throw new TraceError(file, 0, `not a valid gzip file (${(err as Error).message})`);
    }
  }
  return parseTrace(bytes.toString('utf8'), selection, file);
}
