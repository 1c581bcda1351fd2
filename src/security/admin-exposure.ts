/**
 * When an admin listener may start: on a loopback address with any token (only this machine's
 * users reach it), on any other address only with a token the operator chose — not empty, not a
 * placeholder such as the old compose default `change-me`, at least {@link MIN_EXPOSED_TOKEN}
 * characters. The admin API reloads config, drains nodes and shows every tenant's usage.
 */
import { isIP } from 'node:net';

/** Shortest admin token accepted on a non-loopback address, characters (16 random hex = 64 bits). */
export const MIN_EXPOSED_TOKEN = 16;

/** Tokens that are documentation, not secrets (compared case-insensitively). */
const PLACEHOLDERS: ReadonlySet<string> = new Set(['change-me', 'changeme', 'change_me', 'secret', 'password', 'admin', 'token', 'quotaring']);

/** Whether `host` (a listen address) is reachable from this machine only: `localhost`, 127.0.0.0/8, `::1`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || h.startsWith('::ffff:127.');
  return false;
}

/**
 * Why an admin listener on `host` must not start with `token`, or undefined when it may. The
 * message names the variable, never the token (except a well-known placeholder).
 * @param token the value of `tokenEnv`; undefined or '' when unset (the listener is off anyway).
 */
export function adminExposureProblem(host: string, tokenEnv: string, token: string | undefined): string | undefined {
  if (token === undefined || token === '' || isLoopbackHost(host)) return undefined;
  const fix = `set ${tokenEnv} to a token of your own (at least ${MIN_EXPOSED_TOKEN} characters, e.g. openssl rand -hex 16), or bind admin.host to 127.0.0.1`;
  if (PLACEHOLDERS.has(token.trim().toLowerCase())) return `${host} is not a loopback address and ${tokenEnv} holds the placeholder "${token}": ${fix}`;
  if (token.length < MIN_EXPOSED_TOKEN) return `${host} is not a loopback address and ${tokenEnv} is shorter than ${MIN_EXPOSED_TOKEN} characters: ${fix}`;
  return undefined;
}
