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

/**
 * Formats a duration the way OpenAI's `x-ratelimit-reset-*` headers do (Go's `time.Duration`
 * string): `0s`, `17ms`, `1s`, `1.574s`, `6m0s`, `2m59.56s`, `1h0m0s`. Rounded to whole ms.
 */
export function formatResetDuration(ms: number): string {
  const total = Math.max(0, Math.round(ms));
  if (total === 0) return '0s';
  if (total < 1_000) return `${total}ms`;
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor((total % 3_600_000) / 60_000);
  const sMs = total % 60_000;
  const whole = Math.floor(sMs / 1_000);
  const frac = sMs % 1_000;
  const s = frac === 0 ? `${whole}s` : `${whole}.${String(frac).padStart(3, '0').replace(/0+$/, '')}s`;
  if (h > 0) return `${h}h${m}m${s}`;
  if (m > 0) return `${m}m${s}`;
  return s;
}
