/**
 * The contract between the tenant catalogue and where it is stored (PostgreSQL for a cluster, a
 * durable file for one machine). A store is a versioned set of rows: every write gives each row it
 * writes the next store-wide version, in commit order, so a follower that has applied every row up
 * to version V catches up with `readSince(V)` and never misses a row. Deletions are rows too
 * (tombstones, `deleted: true`) so that they reach followers the same way.
 *
 * Stores know nothing of limits or HTTP: a row's `doc` is opaque JSON here, validated where it is
 * applied (`src/catalogue/docs.ts`).
 */

/** What a row describes: a plan (a named set of limits), a tenant, or one API key of a tenant. */
export type RowKind = 'plan' | 'tenant' | 'key';

/** One row as stored. */
export interface CatalogueRow {
  readonly kind: RowKind;
  /** Plan name, tenant id, or the key's public id (never the secret). 1-64 of A-Z a-z 0-9 . _ - */
  readonly id: string;
  /** Store-wide version of the write that last wrote this row: an integer > 0, strictly increasing in commit order. */
  readonly version: number;
  /** A tombstone: the plan or tenant was deleted, the key revoked. */
  readonly deleted: boolean;
  /** Key rows: the tenant the key belongs to. */
  readonly tenant?: string;
  /** Key rows: base64url SHA-256 of the whole key (43 characters); the key itself is never stored. */
  readonly hash?: string;
  /** The row's content (plan limits, tenant settings, key settings), JSON. `{}` on a tombstone. */
  readonly doc: Readonly<Record<string, unknown>>;
  /** When the write happened, ms since the Unix epoch (the store's clock). */
  readonly at: number;
  /** Who made the write (the admin caller's name; `import` for a bulk import). */
  readonly actor: string;
}

/** One row to write; the store assigns `version`, `at` and `actor`. */
export interface RowWrite {
  readonly kind: RowKind;
  readonly id: string;
  readonly deleted: boolean;
  readonly tenant?: string;
  readonly hash?: string;
  readonly doc: Readonly<Record<string, unknown>>;
}

/**
 * A precondition checked inside the write's transaction, before anything is written: the row
 * `(kind, id)` must be live (`live: true`: present and not a tombstone) or not (`live: false`:
 * absent or a tombstone), and, when `version` is given, be at exactly that version.
 */
export interface RowCondition {
  readonly kind: RowKind;
  readonly id: string;
  readonly live?: boolean;
  readonly version?: number;
}

/** One write: rows written all or nothing, under conditions. */
export interface CatalogueWrite {
  readonly rows: readonly RowWrite[];
  readonly conditions?: readonly RowCondition[];
  /** Who makes the change, recorded with every row and in the audit log. 1-128 characters. */
  readonly actor: string;
}

/** An entry of the audit log: one row written, by whom and when. */
export interface AuditEntry {
  readonly version: number;
  readonly at: number;
  readonly actor: string;
  readonly kind: RowKind;
  readonly id: string;
  /** `put` (created or changed) or `delete` (tombstone). */
  readonly op: 'put' | 'delete';
}

/** The store's latest version, and whether it still holds the write a follower last saw. */
export interface StoreHead {
  /** Highest version written (0 for an empty store). */
  readonly version: number;
  /**
   * False when the store no longer holds the write `known` names (no write at `known.version`, or
   * one with another `at`): it went back in time (restored from an older backup, or replaced).
   * True when it does, or when no `known` was given.
   */
  readonly consistent: boolean;
}

/** The store cannot be reached or did not answer in time. Callers answer 503 and retry later. */
export class CatalogueUnavailable extends Error {
  override readonly name = 'CatalogueUnavailable';
}

/** A write's condition did not hold: nothing was written. */
export class CatalogueConflict extends Error {
  override readonly name = 'CatalogueConflict';
  readonly condition: RowCondition;
  constructor(condition: RowCondition, message: string) {
    super(message);
    this.condition = condition;
  }
}

/** Where the catalogue is kept. Every method may throw {@link CatalogueUnavailable}. */
export interface CatalogueStore {
  /** `postgres` or `file`, for logs and `/readyz`. */
  readonly kind: string;
  /** Creates what the store needs (tables, the file) when missing; idempotent. */
  open(): Promise<void>;
  /** Rows whose version is > `since`, in version order, at most `max` of them (each row at its latest version only). */
  readSince(since: number, max: number): Promise<CatalogueRow[]>;
  /** The latest version; see {@link StoreHead} for `known`. */
  head(known?: { readonly version: number; readonly at: number }): Promise<StoreHead>;
  /**
   * Writes `write.rows` in one transaction, each at the next version, once every condition holds.
   * Returns the rows as stored (with version, at, actor), in the order given.
   * @throws CatalogueConflict when a condition does not hold (nothing written).
   */
  write(write: CatalogueWrite): Promise<CatalogueRow[]>;
  /** Audit entries with version < `before` (all when undefined), newest first, at most `max`. */
  audit(before: number | undefined, max: number): Promise<AuditEntry[]>;
  /**
   * Makes the next version assigned greater than `version` (after the store went back in time, so
   * that new writes never reuse a version a follower has seen). No-op when it already is.
   */
  advanceTo(version: number): Promise<void>;
  /**
   * Calls `listener` soon after another process (or this one) writes, with the new head version.
   * A hint only: followers also poll `head`, so a lost notification delays a change, never loses it.
   */
  onChange(listener: (version: number) => void): void;
  /** Releases connections, watchers and timers. */
  close(): Promise<void>;
}
