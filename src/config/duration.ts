/**
 * Durations in config: a number of milliseconds, or a string of one or more `<n><unit>` parts with
 * units ms, s, m, h, d (`500ms`, `1s`, `1m`, `1h30m`, `1d`).
 */

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;

/**
 * Parses a duration string to ms.
 * @returns ms (may be fractional for `1.5ms`), or `undefined` when the string is not a duration.
 */
export function parseDuration(text: string): number | undefined {
  if (text.length === 0) return undefined;
  PART.lastIndex = 0;
  let total = 0;
  let end = 0;
  for (let m = PART.exec(text); m !== null; m = PART.exec(text)) {
    total += Number(m[1]) * (UNIT_MS[m[2] ?? ''] ?? Number.NaN);
    end = PART.lastIndex;
  }
  return end === text.length && Number.isFinite(total) ? total : undefined;
}

/**
 * Short name of a window for limit names: `60000` → `1m`, `86400000` → `1d`, `90000` → `90s`.
 */
export function windowLabel(ms: number): string {
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1_000]] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
