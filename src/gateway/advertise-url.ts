/**
 * The URL a node advertises (in its Redis membership entry: what routers and peers call): `--url` as
 * given; else `http://<--advertise-host>:<port>` (what the Helm chart passes: the pod IP, which may
 * be IPv6 and needs brackets the chart cannot add); else `http://<listen host>:<port>`. A wildcard
 * listen address (`0.0.0.0`, `::`) is not an address another host can reach — a router calling
 * `http://0.0.0.0:8080` reaches its own machine — so for a wildcard the node advertises its
 * machine's one non-loopback address instead.
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

/**
 * `http://<host>:<port>` for a host another machine reaches this node at (`--advertise-host`): an
 * IP address (IPv6 in brackets; one already bracketed is kept) or a DNS name.
 * @throws Error when `host` is empty, a wildcard (`0.0.0.0`, `::`), or not a valid URL host (e.g. an
 *   unexpanded `$(POD_IP)`: Kubernetes leaves the reference as is when the variable is not defined).
 */
export function advertiseHostUrl(host: string, port: number): string {
  const bare = /^\[.*\]$/.test(host) ? host.slice(1, -1) : host;
  if (isWildcardHost(bare)) throw new Error(`--advertise-host ${JSON.stringify(host)}: a wildcard or empty address is not one routers can reach; give this node's address (e.g. the pod IP)`);
  if (isIP(bare) === 0 && !/^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(bare)) {
    throw new Error(`--advertise-host ${JSON.stringify(host)}: not an IP address or a DNS name`);
  }
  return httpUrl(bare, port);
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

/**
 * The URL a node advertises: `url` (`--url`) as given; else {@link advertiseHostUrl} of
 * `advertiseHost` (`--advertise-host`) on the listen port; else `http://<listen host>:<port>`, through
 * {@link defaultAdvertiseUrl} when `resolveWildcard` (Redis membership: the URL is published to other
 * machines).
 * @param o.port the listen port (server.port or --port).
 * @throws Error when both `url` and `advertiseHost` are given; the errors of {@link advertiseHostUrl}
 *   and {@link defaultAdvertiseUrl}.
 */
export function advertiseUrl(
  o: { readonly url?: string | undefined; readonly advertiseHost?: string | undefined; readonly host: string; readonly port: number; readonly resolveWildcard: boolean },
  interfaces?: NodeJS.Dict<NetworkInterfaceInfo[]>,
): string {
  if (o.url !== undefined && o.advertiseHost !== undefined) throw new Error('--url and --advertise-host: give one of them');
  if (o.url !== undefined) return o.url;
  if (o.advertiseHost !== undefined) return advertiseHostUrl(o.advertiseHost, o.port);
  return o.resolveWildcard ? defaultAdvertiseUrl(o.host, o.port, interfaces) : httpUrl(o.host, o.port);
}
