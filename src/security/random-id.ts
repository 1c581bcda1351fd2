/**
 * Unguessable ids: 128 random bits, base64url (22 characters). Reservation ids name a request in
 * settlements between nodes, so they must not be predictable from ids a client saw
 * (`x-quotaring-request-id`). Random bytes are drawn from the CSPRNG in blocks of
 * {@link IDS_PER_BLOCK} ids, so an id costs a slice and an encoding, not a system call.
 */
import { randomBytes } from 'node:crypto';

/** Bytes of an id (128 bits). */
export const ID_BYTES = 16;
/** Ids drawn per `randomBytes` call. */
export const IDS_PER_BLOCK = 256;

let block = Buffer.alloc(0);
let offset = 0;

/** A new random id: 128 bits from `crypto.randomBytes`, base64url (22 characters). */
export function randomId(): string {
  if (offset + ID_BYTES > block.length) {
    block = randomBytes(ID_BYTES * IDS_PER_BLOCK);
    offset = 0;
  }
  const id = block.toString('base64url', offset, offset + ID_BYTES);
  // Never hand out the same bytes twice.
  block.fill(0, offset, offset + ID_BYTES);
  offset += ID_BYTES;
  return id;
}
