/**
 * The cluster secret of tests: every in-process node and router, and every child process started
 * by the test helpers, uses this one. `signedRequest` calls a node's internal route the way another
 * member does.
 */
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import { ClusterSecret, DEFAULT_SECRET_ENV } from '../../src/security/cluster-secret.ts';
import { RequestSigner, SIGNATURE_HEADER } from '../../src/security/request-signature.ts';
import { randomId } from '../../src/security/random-id.ts';

/** The secret's value (≥ 32 characters). */
export const TEST_SECRET_VALUE = 'quotaring-test-cluster-secret-0123456789';
/** The cluster secret of tests. */
export const TEST_SECRET = new ClusterSecret(TEST_SECRET_VALUE);
/** The environment that hands it to a process (`QUOTARING_CLUSTER_SECRET`). */
export const TEST_SECRET_ENV: Readonly<Record<string, string>> = { [DEFAULT_SECRET_ENV]: TEST_SECRET_VALUE };
/** A signer with the test secret. */
export const testSigner = new RequestSigner(TEST_SECRET);

/**
 * Calls an internal route (`/_quotaring/v1/*`) signed with the test secret, like a member does.
 * @param opts.body a JSON value, sent as `application/json`.
 */
export async function signedRequest(
  url: string,
  opts: { readonly method?: 'GET' | 'POST'; readonly body?: unknown; readonly headers?: Record<string, string>; readonly signer?: RequestSigner } = {},
): Promise<Dispatcher.ResponseData> {
  const method = opts.method ?? (opts.body === undefined ? 'GET' : 'POST');
  const body = opts.body === undefined ? '' : JSON.stringify(opts.body);
  const headers: Record<string, string> = { ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }), ...opts.headers };
  const signer = opts.signer ?? testSigner;
  return request(url, { method, headers: { ...headers, ...signer.signInternal(method, url, headers, body) }, ...(opts.body === undefined ? {} : { body }) });
}

/**
 * `headers` plus the signature a router adds to a client request it forwards (over method, path and
 * the internal `x-quotaring-*` headers among `headers`), for tests that play the router.
 */
export function routerSigned(method: string, path: string, headers: Record<string, string>): Record<string, string> {
  // As a router does: a request asking a node to stand in carries a nonce (the node accepts it once).
  const standIn = headers['x-quotaring-fallback-for'] !== undefined || headers['x-quotaring-redirected-for'] !== undefined;
  return { ...headers, [SIGNATURE_HEADER]: testSigner.signature({ method, path, headers }, standIn ? randomId() : '') };
}
