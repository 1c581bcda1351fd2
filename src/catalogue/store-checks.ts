/**
 * The rules both catalogue stores apply the same way inside a write: what a well-formed write is,
 * and when a {@link RowCondition} holds. Kept here so that PostgreSQL and the file store cannot
 * drift apart (the conformance suite in `test/helpers/store-conformance.ts` pins them).
 */
import { isRow } from './follower.ts';
import { CatalogueConflict } from './store.ts';
import type { CatalogueWrite, RowCondition } from './store.ts';

/**
 * Checks a write before anything is stored.
 * @throws Error when the actor is not 1-128 characters, or a row would not be a valid
 *   `CatalogueRow` (kind plan|tenant|key, id 1-64 of A-Z a-z 0-9 . _ -, doc a JSON object,
 *   tenant and hash strings when given).
 */
export function checkWrite(write: CatalogueWrite): void {
  if (typeof write.actor !== 'string' || write.actor.length < 1 || write.actor.length > 128) throw new Error('catalogue write: actor must be 1-128 characters');
  for (const r of write.rows) {
    if (!isRow({ ...r, version: 1, at: 0, actor: write.actor })) throw new Error(`catalogue write: malformed row ${String(r.kind)} ${String(r.id)} (kind plan|tenant|key, id 1-64 of A-Z a-z 0-9 . _ -, doc an object)`);
  }
}

/**
 * Checks one condition against the row as stored (`undefined`: absent): `live: true` holds when it
 * is present and not a tombstone, `live: false` when it is absent or a tombstone, `version` when it
 * is at exactly that version (never when absent).
 * @throws CatalogueConflict naming the condition when it does not hold.
 */
export function conflictOf(cond: RowCondition, row: { readonly version: number; readonly deleted: boolean } | undefined): void {
  const live = row !== undefined && !row.deleted;
  if (cond.live !== undefined && live !== cond.live) {
    throw new CatalogueConflict(cond, `${cond.kind} ${cond.id} ${cond.live ? (row === undefined ? 'does not exist' : 'was deleted') : 'exists already'}`);
  }
  if (cond.version !== undefined && row?.version !== cond.version) {
    throw new CatalogueConflict(cond, `${cond.kind} ${cond.id} is at version ${row?.version ?? 'none (absent)'}, not ${cond.version}`);
  }
}
