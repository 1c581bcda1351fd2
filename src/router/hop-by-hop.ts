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

/**
 * The end-to-end headers of undici's raw response headers (`[name, value, ...]` as Buffers) as a
 * flat `[name, value, ...]` array for `ServerResponse.writeHead`: names lower case, values as sent
 * (latin1), repeated fields kept in order; hop-by-hop headers and those named in `Connection` left out.
 */
export function endToEndRawHeaders(raw: readonly Buffer[]): string[] {
  const out: string[] = [];
  let named: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = (raw[i] as Buffer).toString('latin1').toLowerCase();
    const value = (raw[i + 1] as Buffer).toString('latin1');
    if (!HOP_BY_HOP.has(name)) {
      out.push(name, value);
    } else if (name === 'connection' && value !== 'keep-alive' && value !== 'close') {
      named ??= new Set();
      for (const t of value.split(',')) if (t.trim() !== '') named.add(t.trim().toLowerCase());
    }
  }
  if (named === undefined) return out;
  const kept: string[] = [];
  for (let i = 0; i < out.length; i += 2) if (!named.has(out[i] as string)) kept.push(out[i] as string, out[i + 1] as string);
  return kept;
}

/**
 * The end-to-end headers of a request as a flat `[name, value, ...]` array for undici (names lower
 * case as node parsed them): {@link endToEndHeaders}'s rule without building an object.
 */
export function endToEndHeaderList(headers: IncomingHttpHeaders, drop: ReadonlySet<string>): string[] {
  const named = connectionTokens(headers);
  const out: string[] = [];
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || drop.has(name) || (named !== undefined && named.has(name))) continue;
    if (typeof value === 'string') out.push(name, value);
    else for (const v of value) out.push(name, v);
  }
  return out;
}
