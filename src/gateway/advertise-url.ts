/**
 * The URL a node advertises (in its Redis membership entry: what routers and peers call) when no
 * `--url` is given: `http://<listen host>:<port>`. A wildcard listen address (`0.0.0.0`, `::`) is
 * not an address another host can reach — a router calling `http://0.0.0.0:8080` reaches its own
 * machine — so for a wildcard the node advertises its machine's one non-loopback address instead.
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { NetworkInterfaceInfo } from 'node:os';

/** Listen addresses that mean "every address of this machine". */
const WILDCARDS = new Set(['0.0.0.0', '::', '[::]', '']);

/** `http://<host>:<port>`, an IPv6 address in brackets. */
export function httpUrl(host: string, port: number): string {
  return isIP(host) === 6 ? `http://[${host}]:${port}` : `http://${host}:${port}`;
}

/** Whether `host` is a wildcard listen address (`0.0.0.0`, `::`). */
export function isWildcardHost(host: string): boolean {
  return WILDCARDS.has(host);
}

/**
 * The URL a node listening on `host`:`port` advertises when `--url` is not given: `http://<host>:<port>`,
 * or for a wildcard host the machine's one non-internal address (IPv4; for `::` an IPv6 one, not
 * link-local, when there is no IPv4 one).
 * @param interfaces the machine's interfaces. @default `os.networkInterfaces()`
 * @throws Error naming the addresses found (none, or several) when `host` is a wildcard and no one
 *   address stands out: the operator passes `--url` (or binds one address).
 */
export function defaultAdvertiseUrl(host: string, port: number, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces()): string {
  if (!isWildcardHost(host)) return httpUrl(host, port);
  const external = Object.values(interfaces)
    .flatMap((list) => list ?? [])
    .filter((i) => !i.internal);
  const v4 = external.filter((i) => i.family === 'IPv4').map((i) => i.address);
  const v6 = host === '0.0.0.0' ? [] : external.filter((i) => i.family === 'IPv6' && i.scopeid === 0 && !i.address.startsWith('fe80')).map((i) => i.address);
  const candidates = [...new Set(v4.length > 0 ? v4 : v6)];
  if (candidates.length === 1) return httpUrl(candidates[0] as string, port);
  const found = candidates.length === 0 ? 'no non-loopback address' : `several addresses (${candidates.join(', ')})`;
  throw new Error(`the node listens on ${host || 'every address'} and this machine has ${found}: pass --url with the URL routers and other nodes reach it at (e.g. --url http://<its address>:${port}), or listen on one address (--host, server.host)`);
}
