/**
 * The periods of a budget (a `cost` limit): fixed windows aligned to the Unix epoch, or calendar
 * days, weeks (Monday first, ISO 8601) and months in an IANA time zone. A period is `[start, end)`
 * in epoch ms; every node computes the same boundaries from the time alone, so no state says when a
 * period began. Calendar boundaries are local midnights found with `Intl.DateTimeFormat` (the ICU
 * time-zone database Node ships), so a month in a zone with daylight saving time is an hour shorter
 * or longer than its days × 24 h.
 */

/** How a budget renews. */
export type BudgetPeriod =
  /** Fixed windows of `ms` (≥ 1 s) aligned to the epoch: `[k × ms, (k + 1) × ms)` (1d windows start at 00:00 UTC). */
  | { readonly kind: 'window'; readonly ms: number }
  /** Calendar periods starting at local midnight in `timeZone` (an IANA name such as `Europe/Paris`). */
  | { readonly kind: 'calendar'; readonly unit: 'day' | 'week' | 'month'; readonly timeZone: string };

/** Longest a period can last, ms: a 31-day month plus an hour of DST, or the window. Bounds stored state. */
export function longestPeriodMs(p: BudgetPeriod): number {
  if (p.kind === 'window') return p.ms;
  return (p.unit === 'month' ? 31 : p.unit === 'week' ? 7 : 1) * 86_400_000 + 3_600_000;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

/**
 * True when `timeZone` is an IANA zone this Node knows (`UTC`, `Europe/Paris`, ...).
 */
export function isTimeZone(timeZone: string): boolean {
  try {
    formatterOf(timeZone);
    return true;
  } catch {
    return false;
  }
}

/** @throws RangeError for an unknown zone. */
function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', { timeZone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formatters.set(timeZone, f);
  }
  return f;
}

/** Local calendar fields of instant `t` in `timeZone`. */
function localFields(t: number, timeZone: string): { y: number; mo: number; d: number; h: number; mi: number; s: number } {
  const out = { y: 0, mo: 0, d: 0, h: 0, mi: 0, s: 0 };
  for (const part of formatterOf(timeZone).formatToParts(t)) {
    const v = Number(part.value);
    if (part.type === 'year') out.y = v;
    else if (part.type === 'month') out.mo = v;
    else if (part.type === 'day') out.d = v;
    else if (part.type === 'hour') out.h = v;
    else if (part.type === 'minute') out.mi = v;
    else if (part.type === 'second') out.s = v;
  }
  return out;
}

/** Offset of `timeZone` from UTC at instant `t`, ms (local − UTC), at whole-second precision. */
function offsetAt(t: number, timeZone: string): number {
  const f = localFields(t, timeZone);
  const local = Date.UTC(f.y, f.mo - 1, f.d, f.h, f.mi, f.s);
  return local - Math.floor(t / 1_000) * 1_000;
}

/**
 * The first instant of local date `y-mo-d` in `timeZone` (its midnight, or the end of a DST gap
 * that swallows midnight). `Date.UTC` normalises an out-of-range day or month (day 32 → next month).
 */
function startOfLocalDay(y: number, mo: number, d: number, timeZone: string): number {
  const wall = Date.UTC(y, mo - 1, d);
  // Two rounds find the offset in force at that wall time (it may differ from the offset at `wall` read as UTC).
  let t = wall - offsetAt(wall, timeZone);
  t = wall - offsetAt(t, timeZone);
  // A midnight inside a DST gap does not exist: `t` fell before it (the offset after the gap read
  // back). The day starts when the gap does: the instant the offset before it reads as midnight.
  const f = localFields(t, timeZone);
  if (Date.UTC(f.y, f.mo - 1, f.d) < wall) t = wall - offsetAt(t, timeZone);
  return t;
}

/**
 * The period of `p` that contains instant `t` (epoch ms): `start ≤ t < end`.
 * @throws RangeError for an unknown time zone.
 */
export function periodAt(p: BudgetPeriod, t: number): { readonly start: number; readonly end: number } {
  if (p.kind === 'window') {
    const start = Math.floor(t / p.ms) * p.ms;
    return { start, end: start + p.ms };
  }
  const tz = p.timeZone;
  const f = localFields(t, tz);
  let y = f.y;
  let mo = f.mo;
  let d = f.d;
  let nextDays = 1;
  if (p.unit === 'month') {
    const start = startOfLocalDay(y, mo, 1, tz);
    const end = startOfLocalDay(mo === 12 ? y + 1 : y, mo === 12 ? 1 : mo + 1, 1, tz);
    return t < start ? periodAt(p, start - 1) : { start, end };
  }
  if (p.unit === 'week') {
    const dow = new Date(Date.UTC(y, mo - 1, d)).getUTCDay(); // 0 Sunday
    const back = (dow + 6) % 7; // days since Monday
    const monday = new Date(Date.UTC(y, mo - 1, d - back));
    y = monday.getUTCFullYear();
    mo = monday.getUTCMonth() + 1;
    d = monday.getUTCDate();
    nextDays = 7;
  }
  const start = startOfLocalDay(y, mo, d, tz);
  const end = startOfLocalDay(y, mo, d + nextDays, tz);
  return t < start ? periodAt(p, start - 1) : { start, end };
}
