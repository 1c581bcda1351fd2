/**
 * How long a provider asks a client to wait after a 429, read from the headers each provider writes:
 * - `retry-after-ms` (OpenAI, Azure OpenAI: ms) and `x-ms-retry-after-ms` (Azure);
 * - `retry-after` (RFC 9110 §10.2.3: seconds, or an HTTP date);
 * - OpenAI's `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` (durations such as `1s`,
 *   `6m0s`, `1.574s`, `20ms`; https://platform.openai.com/docs/guides/rate-limits) of the limit whose
 *   `x-ratelimit-remaining-*` is 0;
 * - Anthropic's `anthropic-ratelimit-<limit>-reset` (RFC 3339 time;
 *   https://docs.anthropic.com/en/api/rate-limits) of the limit whose `-remaining` is 0.
 */
import { parseDuration } from '../config/duration.ts';

type Headers = Readonly<Record<string, string | string[] | undefined>>;

function one(headers: Headers, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The provider's wait in ms (≥ 0, rounded up), or undefined when the headers give none (then a
 * retry has no basis: the 429 may not be about time at all, e.g. a request too large for the quota).
 * @param now the current time, ms since the epoch (for `retry-after` dates and Anthropic resets).
 */
export function providerRetryWaitMs(headers: Headers, now: number): number | undefined {
  for (const name of ['retry-after-ms', 'x-ms-retry-after-ms']) {
    const ms = Number(one(headers, name));
    if (one(headers, name) !== undefined && Number.isFinite(ms) && ms >= 0) return Math.ceil(ms);
  }
  const after = one(headers, 'retry-after');
  if (after !== undefined && after.trim() !== '') {
    const s = Number(after);
    if (Number.isFinite(s) && s >= 0) return Math.ceil(s * 1_000);
    const date = Date.parse(after);
    if (Number.isFinite(date)) return Math.max(0, Math.ceil(date - now));
  }
  let wait: number | undefined;
  for (const kind of ['requests', 'tokens']) {
    if (one(headers, `x-ratelimit-remaining-${kind}`) !== '0') continue;
    const reset = one(headers, `x-ratelimit-reset-${kind}`);
    const ms = reset === undefined ? undefined : parseDuration(reset.trim());
    if (ms !== undefined) wait = Math.max(wait ?? 0, Math.ceil(ms));
  }
  for (const kind of ['requests', 'tokens', 'input-tokens', 'output-tokens']) {
    if (one(headers, `anthropic-ratelimit-${kind}-remaining`) !== '0') continue;
    const at = Date.parse(one(headers, `anthropic-ratelimit-${kind}-reset`) ?? '');
    if (Number.isFinite(at)) wait = Math.max(wait ?? 0, Math.max(0, Math.ceil(at - now)));
  }
  return wait;
}
