/**
 * Tenant API keys issued by the catalogue, and how a presented key is checked.
 *
 * An issued key reads `qr_<id>_<secret>`: `id` is the key's public id (16 characters of a-z 0-9,
 * shown in listings, logs and the audit log, used to revoke it without the secret) and `secret`
 * 256 random bits (base64url, 43 characters). Only the SHA-256 of the whole key is stored and held
 * in RAM (base64url, 43 characters); the key itself is shown once, when it is issued. A presented
 * key is found by its id and compared to the stored hash with `crypto.timingSafeEqual`. A fast hash
 * is enough for keys of 256 random bits (no dictionary to try), as for GitHub's or Stripe's tokens.
 *
 * Keys written in the YAML `tenants:` list keep whatever form the operator gave them; they are held
 * in RAM only as their hash too (looked up by hash: a key of unknown form has no id to find first).
 */
import { hash as digest, randomBytes, timingSafeEqual } from 'node:crypto';

/** Prefix of every issued key. */
export const KEY_PREFIX = 'qr_';
/** Characters of a key's public id. */
export const KEY_ID_LENGTH = 16;
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const ISSUED = /^qr_([a-z0-9]{16})_([A-Za-z0-9_-]{43})$/;

/** A key just issued: the secret to show once, its public id and the hash to store. */
export interface IssuedKey {
  /** The whole key (`qr_<id>_<secret>`): returned to the caller once, never stored or logged. */
  readonly key: string;
  readonly id: string;
  /** base64url SHA-256 of `key` (43 characters). */
  readonly hash: string;
}

/** base64url SHA-256 of a key (43 characters). */
export function keyHash(key: string): string {
  return digest('sha256', key, 'base64url');
}

/** A new public key id: 16 characters of a-z 0-9 from the CSPRNG (about 82 bits). */
export function newKeyId(): string {
  const bytes = randomBytes(KEY_ID_LENGTH);
  let id = '';
  // 252 = 7 × 36: bytes above it are redrawn so every character is equally likely.
  for (let i = 0; i < KEY_ID_LENGTH; i++) {
    let b = bytes[i] as number;
    while (b >= 252) b = randomBytes(1)[0] as number;
    id += ID_ALPHABET[b % 36];
  }
  return id;
}

/** Issues a new key: 256 random bits under a new public id. */
export function issueKey(): IssuedKey {
  const id = newKeyId();
  const key = `${KEY_PREFIX}${id}_${randomBytes(32).toString('base64url')}`;
  return { key, id, hash: keyHash(key) };
}

/** The public id of a presented key when it has the issued form, else undefined. Reads no secret. */
export function issuedKeyId(key: string): string | undefined {
  if (key.length !== 3 + KEY_ID_LENGTH + 1 + 43 || !key.startsWith(KEY_PREFIX)) return undefined;
  const m = ISSUED.exec(key);
  return m === null ? undefined : m[1];
}

/**
 * Whether `key` hashes to `storedHash` (base64url SHA-256), compared in constant time.
 * False for a stored hash that is not 32 bytes of base64url.
 */
export function keyMatches(key: string, storedHash: string): boolean {
  const stored = Buffer.from(storedHash, 'base64url');
  if (stored.length !== 32) return false;
  return timingSafeEqual(digest('sha256', key, 'buffer') as Buffer, stored);
}
