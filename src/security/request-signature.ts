/**
 * Signatures of the HTTP calls between the processes of a cluster (router → node, node → node):
 * an HMAC-SHA256 under the cluster secret, sent as
 * `x-quotaring-signature: t=<ms>,n=<nonce>,s=<base64url MAC>`, over
 *
 * - the method and the path with its query, exactly as sent on the wire;
 * - the timestamp `t` (ms since the epoch), accepted within ±{@link REPLAY_WINDOW_MS} of the
 *   receiver's wall clock;
 * - the nonce `n` (random on internal calls and on forwarded client requests that carry a stand-in
 *   header; empty on other forwarded requests), so that two identical calls in one millisecond still
 *   differ and the receiver can refuse a replay;
 * - the value (or absence) of each internal request header that grants something
 *   ({@link SIGNED_HEADERS}: stand in for an owner, accept a redirect, who sent a settlement and
 *   through how many hops, the ring and tenant the router routed by);
 * - on internal routes (`/_quotaring/v1/*`), a SHA-256 digest of the body, sent as
 *   `x-quotaring-content-sha256` (checked against the bytes received before the body is used).
 *
 * Why not the body of client requests (`/v1/*`): a client's body is authenticated by the client's
 * own API key, which the node checks again itself (`src/gateway/auth.ts`: the node resolves the
 * tenant from the key and never trusts `x-quotaring-tenant`). The router's signature only has to
 * cover what the router asserts — the internal headers — which keeps it streaming bodies unbuffered.
 * Internal routes carry small JSON bodies that are signed whole, and their POSTs are refused when
 * replayed (see `replay-guard.ts`).
 *
 * Why an HMAC and not mutual TLS: no PKI to run (one secret from the environment), one HMAC over a
 * short string per request, and rotation by accepting a second secret for a while. Confidentiality
 * (API keys and prompts between router and nodes) is TLS's job: terminate it in front of the
 * routers and run router ↔ node traffic on a private network or through a mesh (docs/security.md).
 */
import { createHash } from 'node:crypto';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import { FALLBACK_HEADER, FROM_HEADER, HOPS_HEADER, REDIRECTED_HEADER, RING_HEADER, TENANT_HEADER } from '../coord/headers.ts';
import type { ClusterSecret } from './cluster-secret.ts';
import { MAC_BYTES } from './cluster-secret.ts';
import { randomId } from './random-id.ts';

/** Request header carrying the signature: `t=<ms>,n=<nonce>,s=<base64url MAC>`. */
export const SIGNATURE_HEADER = 'x-quotaring-signature';
/** Request header of an internal call: SHA-256 of its body, base64url (of zero bytes for a GET). */
export const CONTENT_DIGEST_HEADER = 'x-quotaring-content-sha256';
/** Internal headers whose values (or absence) every signature covers, in this order. */
export const SIGNED_HEADERS = [FALLBACK_HEADER, REDIRECTED_HEADER, FROM_HEADER, HOPS_HEADER, RING_HEADER, TENANT_HEADER] as const;
/** How far a signature's timestamp may be from the receiver's wall clock, ms (either way). */
export const REPLAY_WINDOW_MS = 30_000;
/** Path prefix of the node-to-node routes (settlements, tenant views, handoff counters, levels). */
export const INTERNAL_PATH_PREFIX = '/_quotaring/';

/** Domain separation: request signatures can never be mistaken for member-entry signatures. */
const CONTEXT = 'quotaring-request-v1';
const SIGNATURE_FORMAT = /^t=(\d{1,16}),n=([A-Za-z0-9_-]{0,32}),s=([A-Za-z0-9_-]{43})$/;
const DIGEST_FORMAT = /^[A-Za-z0-9_-]{43}$/;

/** Header values as node's `IncomingHttpHeaders` and undici give them (names lower case). */
export type HeaderValues = Readonly<Record<string, string | readonly string[] | undefined>>;

/** What a signature covers of a request. */
export interface SignedRequest {
  /** HTTP method, upper case. */
  readonly method: string;
  /** Path with query, exactly as on the request line (`/v1/chat/completions?x=1`). */
  readonly path: string;
  /** Request headers, names lower case; only {@link SIGNED_HEADERS} and {@link CONTENT_DIGEST_HEADER} are read. */
  readonly headers: HeaderValues;
}

/** The outcome of {@link RequestSigner.verify}: the signature's timestamp and MAC, or why it was refused. */
export type Verdict =
  | { readonly ok: true; readonly timestampMs: number; readonly nonce: string; readonly mac: string }
  | { readonly ok: false; readonly reason: 'missing' | 'malformed' | 'expired' | 'bad_signature' };

/** SHA-256 of `body`, base64url (the value of {@link CONTENT_DIGEST_HEADER}). */
export function bodyDigest(body: string | Uint8Array): string {
  return createHash('sha256').update(body).digest('base64url');
}

/** Whether a path is a node-to-node route (`/_quotaring/...`), which only signed calls may use. */
export function isInternalPath(path: string): boolean {
  return path.startsWith(INTERNAL_PATH_PREFIX);
}

function single(value: string | readonly string[] | undefined): string | undefined {
  return value === undefined ? undefined : typeof value === 'string' ? value : value.join(', ');
}

/**
 * The string a MAC is computed over: context, method, path, timestamp, nonce, body digest ('' when
 * none) and, for each of {@link SIGNED_HEADERS}, `name=value` or the bare name when absent (header
 * values cannot contain a newline, so the encoding is unambiguous).
 */
export function canonicalRequest(req: SignedRequest, timestampMs: string, nonce: string): string {
  let s = `${CONTEXT}\n${req.method}\n${req.path}\n${timestampMs}\n${nonce}\n${single(req.headers[CONTENT_DIGEST_HEADER]) ?? ''}`;
  for (const name of SIGNED_HEADERS) {
    const value = single(req.headers[name]);
    s += value === undefined ? `\n${name}` : `\n${name}=${value}`;
  }
  return s;
}

/** Options of {@link RequestSigner}. */
export interface RequestSignerOptions {
  /**
   * Wall time of signatures and of their checks. Signer and verifier are different processes, so this
   * is the system clock in production even where a process's limiter runs on another clock. @default systemClock
   */
  readonly clock?: Clock;
  /** @default {@link REPLAY_WINDOW_MS} */
  readonly windowMs?: number;
}

/** Signs and verifies requests with a {@link ClusterSecret}. One per process; stateless (replays: `ReplayGuard`). */
export class RequestSigner {
  readonly #secret: ClusterSecret;
  readonly #clock: Clock;
  /** Accepted distance between a signature's timestamp and now, ms. */
  readonly windowMs: number;

  constructor(secret: ClusterSecret, opts: RequestSignerOptions = {}) {
    this.#secret = secret;
    this.#clock = opts.clock ?? systemClock;
    this.windowMs = opts.windowMs ?? REPLAY_WINDOW_MS;
  }

  /** The environment variable the secret came from. */
  get variable(): string {
    return this.#secret.variable;
  }

  /**
   * The {@link SIGNATURE_HEADER} value for a request whose headers are final (the signed internal
   * headers, and {@link CONTENT_DIGEST_HEADER} when it has one): one HMAC over a short string.
   * @param nonce a random nonce (internal calls, whose POSTs are checked for replays). @default ''
   */
  signature(req: SignedRequest, nonce = ''): string {
    const t = String(Math.floor(this.#clock.now()));
    return `t=${t},n=${nonce},s=${this.#secret.mac(canonicalRequest(req, t, nonce)).toString('base64url')}`;
  }

  /**
   * Headers that authenticate an internal call (`/_quotaring/v1/*`): the body digest, a random
   * nonce and the signature. Merge them into `headers` (which must already hold the call's other
   * signed headers) before sending.
   * @param body the exact bytes sent; '' for a request without one.
   */
  signInternal(method: string, url: string | URL, headers: HeaderValues, body: string | Uint8Array = ''): Record<string, string> {
    const u = typeof url === 'string' ? new URL(url) : url;
    const digest = bodyDigest(body);
    const req: SignedRequest = { method, path: u.pathname + u.search, headers: { ...headers, [CONTENT_DIGEST_HEADER]: digest } };
    return { [CONTENT_DIGEST_HEADER]: digest, [SIGNATURE_HEADER]: this.signature(req, randomId()) };
  }

  /**
   * Checks a request's {@link SIGNATURE_HEADER}: format, timestamp within the window, MAC under the
   * current or the previous secret. The body digest it covers is the header's claim: the receiver
   * compares it with the bytes it got (see {@link bodyDigest}).
   */
  verify(req: SignedRequest): Verdict {
    const header = single(req.headers[SIGNATURE_HEADER]);
    if (header === undefined) return { ok: false, reason: 'missing' };
    const m = SIGNATURE_FORMAT.exec(header);
    if (m === null) return { ok: false, reason: 'malformed' };
    const [, t = '', nonce = '', mac = ''] = m;
    const digest = single(req.headers[CONTENT_DIGEST_HEADER]);
    if (digest !== undefined && !DIGEST_FORMAT.test(digest)) return { ok: false, reason: 'malformed' };
    const timestampMs = Number(t);
    if (!(Math.abs(this.#clock.now() - timestampMs) <= this.windowMs)) return { ok: false, reason: 'expired' };
    const bytes = Buffer.from(mac, 'base64url');
    // 43 base64url characters carry 258 bits: the last one's 2 spare bits are ignored by the decoder,
    // so four spellings decode to one MAC. Only the canonical one is accepted (replays are keyed on it).
    if (bytes.length !== MAC_BYTES || bytes.toString('base64url') !== mac) return { ok: false, reason: 'malformed' };
    if (!this.#secret.matches(canonicalRequest(req, t, nonce), bytes)) return { ok: false, reason: 'bad_signature' };
    return { ok: true, timestampMs, nonce, mac };
  }
}
