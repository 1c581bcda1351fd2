/**
 * AWS Signature Version 4 for Bedrock (signing name `bedrock`), with the Smithy signer the AWS
 * SDKs use (`@smithy/signature-v4`) and Node's SHA-256 through `@smithy/core/serde`'s `Hash` (what
 * the SDKs' Node runtime passes as `sha256`). Signing a gateway request and verifying one in the
 * simulator both run the same library: verification re-signs the received request with the
 * secret of its access key id, the same signed headers and date, and compares the signatures.
 * Source: AWS General Reference, "Signature Version 4 signing process" (canonical request, credential
 * scope `<date>/<region>/<service>/aws4_request`, `Authorization: AWS4-HMAC-SHA256 Credential=…,
 * SignedHeaders=…, Signature=…`; a request more than 5 minutes from the server's clock is refused).
 */
import { timingSafeEqual } from 'node:crypto';
import { HttpRequest } from '@smithy/core/protocols';
import { Hash } from '@smithy/core/serde';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentials, BedrockSigning } from './credentials.ts';

/** The SigV4 signing name of Bedrock (runtime included). */
export const BEDROCK_SIGNING_NAME = 'bedrock';

/** Largest accepted distance between a request's `x-amz-date` and the verifier's clock, ms. */
export const MAX_CLOCK_SKEW_MS = 5 * 60_000;

const Sha256 = Hash.bind(null, 'sha256');

/** One signer per signing set (credentials never change without a config reload). */
const signers = new WeakMap<BedrockSigning, SignatureV4>();

function signerOf(signing: BedrockSigning): SignatureV4 {
  let signer = signers.get(signing);
  if (signer === undefined) {
    signer = new SignatureV4({ service: BEDROCK_SIGNING_NAME, region: signing.region, credentials: signing.credentials, sha256: Sha256 });
    signers.set(signing, signer);
  }
  return signer;
}

/** A request to sign: where it goes and what it carries. */
export interface SignableRequest {
  /** The endpoint's origin, e.g. `https://bedrock-runtime.us-east-1.amazonaws.com`. */
  readonly origin: string;
  /** The path as sent (percent-encoded labels), e.g. `/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse`. */
  readonly path: string;
  /** Headers to send and sign (lower-case names); `host` is added. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Uint8Array;
}

/**
 * Signs a POST: returns the headers to send — the given ones, `host`, `x-amz-date`,
 * `x-amz-content-sha256`, `x-amz-security-token` (temporary credentials) and `authorization`.
 * @param now the signing time. @default new Date()
 */
export async function signBedrockRequest(signing: BedrockSigning, request: SignableRequest, now: Date = new Date()): Promise<Record<string, string>> {
  const url = new URL(request.origin);
  const unsigned = new HttpRequest({
    method: 'POST',
    protocol: url.protocol,
    hostname: url.hostname,
    ...(url.port === '' ? {} : { port: Number(url.port) }),
    path: request.path,
    headers: { ...request.headers, host: url.host },
    body: request.body,
  });
  const signed = await signerOf(signing).sign(unsigned, { signingDate: now });
  return signed.headers;
}

/** Why a signature was refused, in the words AWS answers with (403 unless said). */
export type SignatureRefusal =
  | { readonly kind: 'missing'; readonly message: string }
  | { readonly kind: 'unknown_key'; readonly message: string }
  | { readonly kind: 'expired'; readonly message: string }
  | { readonly kind: 'mismatch'; readonly message: string };

/** A received request, as a server sees it. */
export interface ReceivedRequest {
  readonly method: string;
  /** The request target as received: path and query, still percent-encoded. */
  readonly url: string;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Uint8Array;
}

const AUTHORIZATION = /^AWS4-HMAC-SHA256 Credential=([^/,\s]+)\/(\d{8})\/([^/,\s]+)\/([^/,\s]+)\/aws4_request,\s*SignedHeaders=([a-z0-9;_.-]+),\s*Signature=([0-9a-f]{64})$/;

function header(headers: ReceivedRequest['headers'], name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v.join(',') : v;
}

/** `YYYYMMDDTHHMMSSZ` → a Date, or undefined. */
function amzDate(v: string | undefined): Date | undefined {
  const m = v === undefined ? null : /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(v);
  if (m === null) return undefined;
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  return new Date(Date.UTC(y, mo - 1, d, h, mi, s));
}

/**
 * Verifies the SigV4 signature of a received Bedrock request.
 * @param secretOf the credentials of an access key id (undefined: unknown key).
 * @param now the verifier's clock, ms since the epoch.
 * @returns the access key id and region it was signed for, or the refusal.
 */
export async function verifyBedrockSignature(
  request: ReceivedRequest,
  secretOf: (accessKeyId: string) => AwsCredentials | undefined,
  now: number,
): Promise<{ readonly ok: true; readonly accessKeyId: string; readonly region: string } | ({ readonly ok: false } & SignatureRefusal)> {
  const auth = header(request.headers, 'authorization');
  if (auth === undefined || auth === '') return { ok: false, kind: 'missing', message: 'Missing Authentication Token' };
  const m = AUTHORIZATION.exec(auth);
  if (m === null) return { ok: false, kind: 'missing', message: 'Authorization header requires \'Credential\', \'SignedHeaders\' and \'Signature\' parameters (AWS4-HMAC-SHA256).' };
  const [, accessKeyId, scopeDate, region, service, signedList, signature] = m as unknown as [string, string, string, string, string, string, string];
  const credentials = secretOf(accessKeyId);
  if (credentials === undefined) return { ok: false, kind: 'unknown_key', message: 'The security token included in the request is invalid.' };
  if (service !== BEDROCK_SIGNING_NAME) return { ok: false, kind: 'mismatch', message: `Credential should be scoped to correct service: '${BEDROCK_SIGNING_NAME}'.` };
  const date = amzDate(header(request.headers, 'x-amz-date'));
  if (date === undefined || !date.toISOString().replaceAll('-', '').startsWith(scopeDate)) {
    return { ok: false, kind: 'mismatch', message: 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.' };
  }
  if (Math.abs(now - date.getTime()) > MAX_CLOCK_SKEW_MS) {
    return { ok: false, kind: 'expired', message: `Signature expired: ${header(request.headers, 'x-amz-date')} is now earlier or later than the allowed 5 minutes of the server time.` };
  }
  const token = header(request.headers, 'x-amz-security-token');
  if (credentials.sessionToken !== undefined && token !== credentials.sessionToken) return { ok: false, kind: 'unknown_key', message: 'The security token included in the request is invalid.' };
  const signed = signedList.split(';');
  const headers: Record<string, string> = {};
  for (const name of signed) {
    // The payload hash is recomputed from the body, never taken from the header.
    if (name === 'x-amz-content-sha256') continue;
    const v = header(request.headers, name);
    if (v !== undefined) headers[name] = v;
  }
  const target = new URL(request.url, 'http://verifier.invalid');
  const query: Record<string, string> = {};
  for (const [k, v] of target.searchParams) query[k] = v;
  const path = request.url.split('?')[0] ?? '/';
  const expected = await new SignatureV4({
    service: BEDROCK_SIGNING_NAME,
    region,
    credentials: { accessKeyId, secretAccessKey: credentials.secretAccessKey, ...(token === undefined ? {} : { sessionToken: token }) },
    sha256: Sha256,
    applyChecksum: signed.includes('x-amz-content-sha256'),
  }).sign(new HttpRequest({ method: request.method, protocol: 'http:', hostname: headers.host ?? '', path, query, headers, body: request.body }), { signingDate: date });
  const got = /Signature=([0-9a-f]{64})$/.exec(expected.headers.authorization ?? '')?.[1] ?? '';
  const sentHash = header(request.headers, 'x-amz-content-sha256');
  const hashOk = sentHash === undefined || !signed.includes('x-amz-content-sha256') || sentHash === expected.headers['x-amz-content-sha256'];
  if (!hashOk || got.length !== signature.length || !timingSafeEqual(Buffer.from(got), Buffer.from(signature))) {
    return { ok: false, kind: 'mismatch', message: 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.' };
  }
  return { ok: true, accessKeyId, region };
}
