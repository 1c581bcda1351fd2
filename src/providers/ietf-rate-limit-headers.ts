/**
 * The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10, as read in the working
 * group's repository of September 2025: `RateLimit-Policy` §3, `RateLimit` §4; drafts -11 and -12
 * were not checked), built from the same binding limits as OpenAI's `x-ratelimit-*` (see
 * `rate-limit-headers.ts`), so the two dialects never disagree:
 * - one Quota Policy Item per kind the tenant is limited by (§3.1): `"requests"`, `"tokens"`,
 *   `"concurrency"`, each the binding (least remaining) limit of that kind, `q` its limit (§3.1.1);
 * - one Service Limit Item per policy in `RateLimit` (§4.1): `r` its remaining (§4.1.1), `t` its
 *   reset in whole seconds (§4.1.2: no sub-second precision): `x-ratelimit-reset-*` rounded up (`t` is left out for concurrency: a slot frees when a request ends).
 * Quota units (§3.1.2): `requests` is the default and not written; concurrency is
 * `qu="concurrent-requests"` (registered, §10.3); tokens are not a registered unit, and the draft
 * lists no custom-unit rule but "other parameters ... regarded as comments" (§3.1). Leaving `qu`
 * out would read as the default `requests`, a wrong unit, so tokens are sent as `qu="tokens"`: a
 * client that only accepts registered units ignores that item, none misreads it. Budgets (cost
 * limits, micro-dollars) are not a quota unit and stay in `x-quotaring-budget-*`. No `w` (optional,
 * §3.1.3: the limit states carry no window) and no `pk` (§3.1.4: the partition is the caller's own
 * tenant or key; a key, or anything derived from it, is never sent).
 */
import type { LimitState } from '../limiter/types.ts';
import { binding, type HeaderMap } from './rate-limit-headers.ts';
import { serializeList, type SfItem } from './structured-fields.ts';

const POLICIES = [
  { kind: 'requests', id: 'requests', unit: undefined },
  { kind: 'tokens', id: 'tokens', unit: 'tokens' },
  { kind: 'concurrent', id: 'concurrency', unit: 'concurrent-requests' },
] as const;

/**
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers §3, §4) of the binding
 * limit of each kind, e.g. `RateLimit-Policy: "requests";q=60, "tokens";q=20000;qu="tokens"` and
 * `RateLimit: "requests";r=59;t=1, "tokens";r=19941;t=1`. Empty when no requests, tokens or
 * concurrency limit applies. Header names are lower case, as the other dialects'.
 */
export function ietfRateLimitHeaders(limits: readonly LimitState[]): HeaderMap {
  const policy: SfItem[] = [];
  const current: SfItem[] = [];
  for (const p of POLICIES) {
    const l = binding(limits, p.kind);
    if (l === undefined) continue;
    policy.push({ value: p.id, params: p.unit === undefined ? [['q', l.limit]] : [['q', l.limit], ['qu', p.unit]] });
    current.push({ value: p.id, params: p.kind === 'concurrent' ? [['r', l.remaining]] : [['r', l.remaining], ['t', resetSeconds(l.resetMs)]] });
  }
  if (policy.length === 0) return {};
  return { 'ratelimit-policy': serializeList(policy), ratelimit: serializeList(current) };
}

/** Whole seconds until `ms` from now, rounded up (§4.1.2: delay-seconds); negative reads as 0. */
export function resetSeconds(ms: number): number {
  return ms > 0 ? Math.ceil(Math.ceil(ms) / 1000) : 0;
}
