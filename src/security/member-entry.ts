/**
 * Signed member entries: what a node writes into Redis membership is its member JSON plus an
 * HMAC-SHA256 of it under the cluster secret, `{"id","url"[,"weight"],"sig"}`. Routers send
 * tenants' API keys and prompts to the URLs of the ring, so an entry that anyone with write access
 * to Redis could add must not join it: readers ignore an entry without a valid signature (under the
 * current or, during a rotation, the previous secret).
 */
import type { Member } from '../coord/types.ts';
import type { ClusterSecret } from './cluster-secret.ts';
import { MAC_BYTES } from './cluster-secret.ts';

/** Domain separation: a member signature is never a valid request signature, nor the reverse. */
const CONTEXT = 'quotaring-member-v1\n';

/** Why an entry was ignored. */
export type MemberEntryProblem = 'not_a_member' | 'unsigned' | 'bad_signature';

/** The member as signed: JSON with keys in a fixed order (id, url, weight when set). */
export function memberJson(m: Member): string {
  return JSON.stringify(m.weight === undefined ? { id: m.id, url: m.url } : { id: m.id, url: m.url, weight: m.weight });
}

/** The stored entry of `m`: its JSON with `sig` (base64url HMAC of {@link memberJson}) last. Deterministic: one entry per member and secret. */
export function signedMemberEntry(m: Member, secret: ClusterSecret): string {
  const sig = secret.mac(CONTEXT + memberJson(m)).toString('base64url');
  return JSON.stringify(m.weight === undefined ? { id: m.id, url: m.url, sig } : { id: m.id, url: m.url, weight: m.weight, sig });
}

/**
 * Reads a stored entry: the member when its signature verifies, else why not (never throws).
 * A member is an object with a non-empty string `id`, an http(s) `url` and an optional positive
 * finite `weight`; `sig` is checked over exactly those fields.
 */
export function readMemberEntry(entry: string, secret: ClusterSecret): { readonly member: Member } | { readonly problem: MemberEntryProblem; readonly id?: string } {
  let v: unknown;
  try {
    v = JSON.parse(entry);
  } catch {
    return { problem: 'not_a_member' };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { problem: 'not_a_member' };
  const { id, url, weight, sig } = v as Record<string, unknown>;
  if (typeof id !== 'string' || id === '' || typeof url !== 'string' || !/^https?:\/\//.test(url)) return { problem: 'not_a_member' };
  if (weight !== undefined && (typeof weight !== 'number' || !Number.isFinite(weight) || weight <= 0)) return { problem: 'not_a_member', id };
  const member: Member = weight === undefined ? { id, url } : { id, url, weight };
  if (typeof sig !== 'string') return { problem: 'unsigned', id };
  const mac = Buffer.from(sig, 'base64url');
  if (mac.length !== MAC_BYTES || !secret.matches(CONTEXT + memberJson(member), mac)) return { problem: 'bad_signature', id };
  return { member };
}
