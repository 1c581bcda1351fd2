/**
 * The wire format of a tenant's limiter state, for handing a tenant from one gateway node to
 * another (ring change) and for checkpoints: what `Limiter.exportTenant` returns and
 * `Limiter.importTenant` takes, stored as JSON (in Redis by the coordination layer).
 *
 * Version 1. Every time is absolute ms on the limiter's clock (epoch ms in production); numbers
 * are plain JSON numbers, never `Infinity` or `NaN`.
 */
import { z } from 'zod';

/**
 * A `requests` or `tokens` token bucket. Its level is kept scaled by the window, exactly as
 * the limiter holds it (see `token-bucket.ts`), so a handoff loses no precision: `level` is
 * the units available × `windowMs` (unit·ms), as of `refilledAt`; it may be negative after a
 * settlement debit. `limit` and `windowMs` are the spec the level was measured under, so an
 * import onto a changed limit can carry the units used over.
 */
export interface TokenBucketSnapshot {
  readonly name: string;
  readonly algorithm: 'token_bucket';
  readonly kind: 'requests' | 'tokens';
  /** Capacity, units. */
  readonly limit: number;
  /** Window (capacity refills in this many ms), ms. */
  readonly windowMs: number;
  /** Units available × `windowMs` (unit·ms) at `refilledAt`; negative after a debit. */
  readonly level: number;
  /** Clock ms of the last refill. */
  readonly refilledAt: number;
}

/** A sliding log: its entries, oldest first (timestamps never decrease). */
export interface SlidingWindowSnapshot {
  readonly name: string;
  readonly algorithm: 'sliding_window';
  /** Kind of the limit; when present, an import onto a limit of another kind starts fresh. */
  readonly kind?: 'requests' | 'tokens';
  /** `[admission time ms, cost in units (≥ 0), request id]`; id `''` for usage carried over by a reload. */
  readonly entries: readonly (readonly [ts: number, cost: number, id: string])[];
}

/** A concurrency semaphore: the leases held. */
export interface SemaphoreSnapshot {
  readonly name: string;
  readonly algorithm: 'semaphore';
  /** `[request id, lease expiry ms]`. */
  readonly leases: readonly (readonly [id: string, expiresAt: number])[];
}

/**
 * A budget (a `cost` limit): the spend of the period that starts at `start`. An import keeps the
 * spend only while that period is the current one (a later period starts empty).
 */
export interface BudgetSnapshot {
  readonly name: string;
  readonly algorithm: 'budget';
  /** Spend in the period, pico-dollars, as a decimal integer string (it may pass 2⁵³). */
  readonly spent: string;
  /** Clock ms when the period began. */
  readonly start: number;
}

/** State of one limit, by the limit's name (the spec's `name`). */
export type LimitSnapshot = TokenBucketSnapshot | SlidingWindowSnapshot | SemaphoreSnapshot | BudgetSnapshot;

/** An open reservation: admitted, not yet both settled and released, not expired. */
export interface ReservationSnapshot {
  /** The request id (settle/release/renew use it). */
  readonly id: string;
  /** Tokens reserved from every `tokens` limit it applied to. */
  readonly tokens: number;
  /** Requests counted by every `requests` limit it applied to. */
  readonly requests: number;
  /** Clock ms from which the reservation is gone. */
  readonly expiresAt: number;
  readonly settled: boolean;
  readonly released: boolean;
  /** Names of the limits it applied to. */
  readonly limits: readonly string[];
  /** Pico-dollars reserved from every cost limit it applied to, as a decimal integer string. @default "0" */
  readonly cost?: string;
  /** Clock ms when it was admitted (a settlement after its budget's period ended charges the new period). @default expiresAt */
  readonly admittedAt?: number;
}

/** JSON-serialisable state of one tenant. Times are absolute ms on the limiter's clock (epoch ms in production). Version 1. */
export interface TenantSnapshot {
  readonly v: 1;
  /** Clock ms when taken. */
  readonly at: number;
  /**
   * A stored state only: the id of the node that wrote it and why (`checkpoint`: it was deciding
   * for the tenant then; `handoff`: it gave the tenant up). A claim that loads a checkpoint of a node
   * gone from the ring frees its open requests' slots (`src/coord/handoff/claims.ts`).
   */
  readonly by?: string;
  readonly how?: 'checkpoint' | 'handoff';
  /**
   * A stored state only: where the writer served (its URL) and which process it was (its
   * incarnation: a random id drawn at each start). A claim holds the slots of the writer's open
   * requests until that process is proven gone: its port refuses connections, or another process
   * answers there (`src/coord/handoff/held-slots.ts`).
   */
  readonly byUrl?: string;
  readonly byInc?: string;
  /** State per limit, by limit name (the spec's `name`). */
  readonly limits: readonly LimitSnapshot[];
  /** Open reservations (admitted, not yet both settled and released, not expired). */
  readonly reservations: readonly ReservationSnapshot[];
}

// z.number() rejects Infinity and NaN (a JSON literal such as 1e999 parses to Infinity).
const time = z.number();
const units = z.number().min(0);
const rateKind = z.enum(['requests', 'tokens']);
/** An amount of pico-dollars: a decimal integer ≥ 0 of at most 30 digits (10¹⁸ dollars). */
const picoText = z.string().regex(/^(0|[1-9]\d{0,29})$/, 'a whole number of pico-dollars ≥ 0, as a decimal string');
/** A token bucket's spec: capacity (units) and window (ms). */
const bucketSpec = { limit: z.number().int().positive(), windowMs: z.number().positive() };

const reservationSchema = z.strictObject({
  id: z.string(),
  tokens: units,
  requests: units,
  expiresAt: time,
  settled: z.boolean(),
  released: z.boolean(),
  limits: z.array(z.string()),
  cost: picoText.optional(),
  admittedAt: time.optional(),
});

const tenantSnapshotSchema = z.strictObject({
  v: z.literal(1),
  at: time,
  by: z.string().min(1).max(256).optional(),
  how: z.enum(['checkpoint', 'handoff']).optional(),
  byUrl: z.string().min(1).max(2_048).optional(),
  byInc: z.string().min(1).max(64).optional(),
  limits: z.array(
    z.discriminatedUnion('algorithm', [
      z.strictObject({
        name: z.string(),
        algorithm: z.literal('token_bucket'),
        kind: rateKind,
        ...bucketSpec,
        level: z.number(),
        refilledAt: time,
      }),
      z.strictObject({
        name: z.string(),
        algorithm: z.literal('sliding_window'),
        kind: rateKind.optional(),
        entries: z.array(z.tuple([time, units, z.string()])),
      }),
      z.strictObject({
        name: z.string(),
        algorithm: z.literal('semaphore'),
        leases: z.array(z.tuple([z.string(), time])),
      }),
      z.strictObject({
        name: z.string(),
        algorithm: z.literal('budget'),
        spent: picoText,
        start: time,
      }),
    ]),
  ),
  reservations: z.array(reservationSchema),
});

/**
 * Zod schema of a stand-in's usage (`UsageDelta`, see `usage-delta.ts`) on the node-to-node wire:
 * finite times, costs and units taken ≥ 0, a bucket's `limit` a positive integer and `windowMs` > 0;
 * carried open requests shaped like a snapshot's (the import clamps their expiries as it does a snapshot's).
 */
export const usageDeltaSchema = z.strictObject({
  windows: z.array(z.strictObject({ name: z.string(), kind: rateKind.optional(), entries: z.array(z.tuple([time, units, z.string()])) })),
  buckets: z.array(z.strictObject({ name: z.string(), kind: rateKind, ...bucketSpec, taken: units })),
  budgets: z.array(z.strictObject({ name: z.string(), start: time, spent: picoText })).optional(),
  open: z
    .strictObject({
      reservations: z.array(reservationSchema),
      leases: z.array(z.strictObject({ name: z.string(), leases: z.array(z.tuple([z.string(), time])) })),
    })
    .optional(),
});

/** `limits[0].entries[2][1]` from a zod issue path. */
function pathText(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) out += typeof key === 'number' ? `[${key}]` : `${out === '' ? '' : '.'}${String(key)}`;
  return out === '' ? '(root)' : out;
}

function invalid(path: string, message: string): Error {
  return new Error(`tenant snapshot: ${path}: ${message}`);
}

/**
 * Parses and validates untrusted JSON (from Redis) into a snapshot: version 1, every field
 * present with its type, no unknown field, finite numbers, costs, tokens and requests ≥ 0, a
 * bucket's `limit` a positive integer and `windowMs` > 0, window entries in timestamp order,
 * limit names, reservation ids and a semaphore's lease ids unique.
 * @throws Error naming the bad field (`tenant snapshot: limits[0].entries[2][1]: …`), or
 *   saying the text is not JSON.
 */
export function parseTenantSnapshot(json: string): TenantSnapshot {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (err) {
    throw new Error(`tenant snapshot: not JSON (${(err as Error).message})`);
  }
  const parsed = tenantSnapshotSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw invalid(pathText(issue?.path ?? []), issue?.message ?? 'invalid');
  }
  const snap = parsed.data;
  const names = new Set<string>();
  snap.limits.forEach((l, i) => {
    if (names.has(l.name)) throw invalid(`limits[${i}].name`, `limit "${l.name}" appears twice`);
    names.add(l.name);
    if (l.algorithm === 'sliding_window') {
      for (let k = 1; k < l.entries.length; k++) {
        if ((l.entries[k] as [number, number, string])[0] < (l.entries[k - 1] as [number, number, string])[0]) {
          throw invalid(`limits[${i}].entries[${k}][0]`, 'entries must be in timestamp order');
        }
      }
    } else if (l.algorithm === 'semaphore') {
      const ids = new Set<string>();
      l.leases.forEach(([id], k) => {
        if (ids.has(id)) throw invalid(`limits[${i}].leases[${k}][0]`, `lease "${id}" appears twice`);
        ids.add(id);
      });
    }
  });
  const ids = new Set<string>();
  snap.reservations.forEach((r, k) => {
    if (ids.has(r.id)) throw invalid(`reservations[${k}].id`, `reservation "${r.id}" appears twice`);
    ids.add(r.id);
  });
  return snap as TenantSnapshot;
}
