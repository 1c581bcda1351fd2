/**
 * What of an upstream's reply the client may see: which upstream headers pass (never the
 * upstream's own limits or hop-by-hop headers; retry hints only with an error), and the scrubber
 * that removes every deployment's provider credentials from what is relayed.
 */
import { SecretScrubber } from '../security/scrub.ts';
import type { GatewayContext } from './context.ts';

/**
 * Upstream response headers never passed to the client: hop-by-hop, length, and the upstream's own
 * limits (Azure's `x-ms-retry-after-ms` too: a relayed 429 carries `retry-after` and `retry-after-ms`,
 * which are replaced when the tenant must wait longer).
 */
const DROPPED_UPSTREAM_HEADER = /^(connection|keep-alive|transfer-encoding|content-length|content-encoding|set-cookie|x-ratelimit-.*|anthropic-ratelimit-.*|openai-organization|openai-project|x-ms-retry-after-ms)$/;
/** Upstream retry hints, passed only with an upstream error (a success carries the tenant's view alone). */
const RETRY_HEADER = /^(retry-after|retry-after-ms|x-should-retry)$/;

/** One scrubber per deployment set (deployments never change on a reload; a new set gets a new one). */
const scrubbers = new WeakMap<object, SecretScrubber>();

/**
 * The scrubber of everything relayed from upstreams: it knows every deployment's provider key (a
 * failover or a shared proxy may echo another deployment's key than the one it was sent).
 */
export function scrubberOf(ctx: GatewayContext): SecretScrubber {
  const deployments = ctx.config.deployments;
  let scrubber = scrubbers.get(deployments);
  if (scrubber === undefined) {
    scrubber = new SecretScrubber([...deployments.values()].flatMap((d) => [d.apiKey, d.aws?.credentials.secretAccessKey, d.aws?.credentials.sessionToken]));
    scrubbers.set(deployments, scrubber);
  }
  return scrubber;
}

/** Copies the upstream's headers the client may see into `into`, scrubbed of credentials (see `SecretScrubber.headers`). */
export function passHeaders(scrubber: SecretScrubber, upstream: Record<string, string | string[] | undefined>, into: Record<string, string>, isError: boolean): void {
  const passed: Record<string, string> = {};
  for (const [name, value] of Object.entries(upstream)) {
    if (value === undefined || DROPPED_UPSTREAM_HEADER.test(name) || (!isError && RETRY_HEADER.test(name))) continue;
    passed[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  scrubber.headers(passed);
  Object.assign(into, passed);
}
