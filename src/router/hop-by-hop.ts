/**
 * Header filtering for a proxy hop: hop-by-hop headers (RFC 9110 §7.6.1) and the headers a
 * `Connection` header names are not forwarded, in either direction.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Headers that describe one connection, not the message (RFC 9110 §7.6.1, plus `proxy-connection`). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Header values as node and undici give them (names lower case). */
export type HeaderBag = Record<string, string | string[] | undefined>;

function connectionTokens(headers: HeaderBag): Set<string> | undefined {
  const value = headers.connection;
  if (value === undefined || value === 'keep-alive' || value === 'close') return undefined;
  const joined = Array.isArray(value) ? value.join(',') : value;
  return new Set(joined.split(',').map((t) => t.trim().toLowerCase()).filter((t) => t.length > 0));
}

/**
 * A copy of `headers` without hop-by-hop headers, without the headers named in `Connection`, and
 * without any name in `drop` (lower case). Undefined values are left out.
 */
export function endToEndHeaders(headers: HeaderBag | IncomingHttpHeaders, drop: ReadonlySet<string> = new Set()): Record<string, string | string[]> {
  const named = connectionTokens(headers);
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || drop.has(name) || named?.has(name) === true) continue;
    out[name] = value;
  }
  return out;
}
