/**
 * Reads the rate-limit headers a provider sends on a successful reply (the gateway's provider
 * feedback, `src/globalcap/provider-feedback.ts`); `rate-limit-headers.ts` writes the same headers.
 * - OpenAI ("Rate limits" guide, "Rate limits in headers",
 *   https://platform.openai.com/docs/guides/rate-limits) and Azure OpenAI (which sends the
 *   `remaining` headers only): `x-ratelimit-remaining-requests|tokens`, `x-ratelimit-limit-*`,
 *   `x-ratelimit-reset-*` as a Go duration (`1s`, `6m0s`, `1.574s`, `20ms`).
 * - Anthropic ("Rate limits", "Response headers", https://docs.anthropic.com/en/api/rate-limits):
 *   `anthropic-ratelimit-requests|tokens-remaining|limit|reset`, reset as an RFC 3339 time.
 *
 * Values come from an upstream that may be buggy or compromised: each is read by a linear scan of
 * at most {@link MAX_HEADER_CHARS} characters (no backtracking regex), and one that is negative, not
 * a number, too long or too large is left out and counted as invalid, never thrown.
 */

type Headers = Readonly<Record<string, string | string[] | undefined>>;

/** Longest header value read, characters; a longer one is invalid. */
export const MAX_HEADER_CHARS = 40;
/** Largest count accepted (remaining, limit): 10^15 units; a larger one is invalid. */
export const MAX_COUNT = 1e15;
/** Longest reset accepted, ms (one day); a longer one is clamped to it. */
export const MAX_RESET_MS = 86_400_000;

/** What a provider said of one kind (requests or tokens) on one reply. */
export interface KindReading {
  /** Units left at the provider when it answered, integer ≥ 0. */
  readonly remaining: number;
  /** The provider's limit, integer ≥ 1, when it sent one. */
  readonly limit?: number;
  /** Ms from the reply until the limit is back to full (0 ..= {@link MAX_RESET_MS}), when it sent one. */
  readonly resetMs?: number;
}

/** The rate-limit headers of one reply, by kind. */
export interface ProviderRateLimits {
  readonly requests?: KindReading;
  readonly tokens?: KindReading;
  /** Rate-limit header values present but unusable (garbage, negative, too long, too large), by kind. */
  readonly invalid: { readonly requests: number; readonly tokens: number };
}

function one(headers: Headers, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A non-negative integer of at most 16 digits (surrounding spaces allowed), or undefined. */
export function parseCount(raw: string): number | undefined {
  if (raw.length > MAX_HEADER_CHARS) return undefined;
  const s = raw.trim();
  if (s.length === 0 || s.length > 16) return undefined;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  const n = Number(s);
  return n <= MAX_COUNT ? n : undefined;
}

const UNIT_MS: Readonly<Record<string, number>> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1, us: 0.001, µs: 0.001, ns: 0.000001 };

/**
 * A Go duration as `time.Duration.String()` prints it (`0s`, `20ms`, `1.574s`, `6m0s`, `1h2m3s`),
 * in ms, or undefined when it is not one (sign, unknown unit, empty number, too long).
 */
export function parseGoDuration(raw: string): number | undefined {
  if (raw.length > MAX_HEADER_CHARS) return undefined;
  const s = raw.trim();
  if (s === '0') return 0;
  let ms = 0;
  let i = 0;
  let parts = 0;
  while (i < s.length) {
    const start = i;
    let dot = false;
    while (i < s.length) {
      const c = s.charCodeAt(i);
      if (c === 46 && !dot) dot = true;
      else if (c < 48 || c > 57) break;
      i++;
    }
    const num = s.slice(start, i);
    if (num === '' || num === '.') return undefined;
    const unitStart = i;
    while (i < s.length && !(s.charCodeAt(i) >= 48 && s.charCodeAt(i) <= 57) && s[i] !== '.') i++;
    const unit = UNIT_MS[s.slice(unitStart, i)];
    if (unit === undefined) return undefined;
    ms += Number(num) * unit;
    parts++;
  }
  return parts === 0 || !Number.isFinite(ms) ? undefined : ms;
}

/**
 * An RFC 3339 time (`2023-11-14T22:14:21Z`, fractions and offsets allowed) as ms since the epoch,
 * or undefined. Checked character by character before `Date.parse`, which is lenient.
 */
export function parseRfc3339(raw: string): number | undefined {
  if (raw.length > MAX_HEADER_CHARS) return undefined;
  const s = raw.trim();
  // YYYY-MM-DDTHH:MM:SS, then an optional fraction, then Z or ±HH:MM.
  const shape = 'dddd-dd-ddTdd:dd:dd';
  if (s.length < shape.length + 1) return undefined;
  for (let i = 0; i < shape.length; i++) {
    const c = s[i] as string;
    if (shape[i] === 'd' ? !(c >= '0' && c <= '9') : shape[i] === 'T' ? c !== 'T' && c !== 't' : c !== shape[i]) return undefined;
  }
  let i = shape.length;
  if (s[i] === '.') {
    i++;
    const from = i;
    while (i < s.length && (s[i] as string) >= '0' && (s[i] as string) <= '9') i++;
    if (i === from) return undefined;
  }
  const zone = s.slice(i);
  const offset = zone.length === 6 && (zone[0] === '+' || zone[0] === '-') && zone[3] === ':' && [1, 2, 4, 5].every((k) => (zone[k] as string) >= '0' && (zone[k] as string) <= '9');
  if (zone !== 'Z' && zone !== 'z' && !offset) return undefined;
  const at = Date.parse(s);
  return Number.isFinite(at) ? at : undefined;
}

/**
 * The provider's rate limits of one reply: for each kind, OpenAI's / Azure's `x-ratelimit-*` and
 * Anthropic's `anthropic-ratelimit-*` (the least remaining when both are sent). A kind is present
 * only when its `remaining` parses; its `limit` and `resetMs` only when theirs do (a reset is clamped
 * to [0, {@link MAX_RESET_MS}]). Never throws.
 * @param nowMs ms since the epoch, when the reply came (for Anthropic's reset times).
 */
export function readProviderRateLimits(headers: Headers, nowMs: number): ProviderRateLimits {
  const invalid = { requests: 0, tokens: 0 };
  const out: { requests?: KindReading; tokens?: KindReading } = {};
  for (const kind of ['requests', 'tokens'] as const) {
    const field = <T>(name: string, parse: (raw: string) => T | undefined): T | undefined => {
      const raw = one(headers, name);
      if (raw === undefined) return undefined;
      const v = typeof raw === 'string' ? parse(raw) : undefined;
      if (v === undefined) invalid[kind]++;
      return v;
    };
    const readings: KindReading[] = [];
    const families = [
      { remaining: `x-ratelimit-remaining-${kind}`, limit: `x-ratelimit-limit-${kind}`, reset: (): number | undefined => field(`x-ratelimit-reset-${kind}`, parseGoDuration) },
      {
        remaining: `anthropic-ratelimit-${kind}-remaining`,
        limit: `anthropic-ratelimit-${kind}-limit`,
        reset: (): number | undefined => {
          const at = field(`anthropic-ratelimit-${kind}-reset`, parseRfc3339);
          return at === undefined ? undefined : at - nowMs;
        },
      },
    ];
    for (const f of families) {
      const remaining = field(f.remaining, parseCount);
      const limit = field(f.limit, parseCount);
      const reset = f.reset();
      if (remaining === undefined) continue;
      readings.push({
        remaining,
        ...(limit === undefined || limit < 1 ? {} : { limit }),
        ...(reset === undefined ? {} : { resetMs: Math.min(MAX_RESET_MS, Math.max(0, reset)) }),
      });
    }
    let least: KindReading | undefined;
    for (const r of readings) if (least === undefined || r.remaining < least.remaining) least = r;
    if (least !== undefined) out[kind] = least;
  }
  return { ...out, invalid };
}
