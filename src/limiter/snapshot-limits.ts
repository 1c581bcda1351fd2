/**
 * A tenant's limit state ↔ its snapshot (`snapshot.ts`): what `Limiter.exportTenant` and
 * `Limiter.importTenant` do with buckets, windows and semaphores. Not on the decision path.
 */
import { Budget } from './budget.ts';
import type { CompiledPolicy } from './compiled-policy.ts';
import { Semaphore } from './semaphore.ts';
import { SlidingWindow } from './sliding-window.ts';
import type { LimitSnapshot } from './snapshot.ts';
import { tenantLimits, type LimitObject, type TenantLimits } from './tenant-limits.ts';
import { bucketInit, bucketRefill, bucketSetUsed, bucketUsed } from './token-bucket.ts';
import type { LimitSpec } from './types.ts';

/**
 * Snapshots every limit of `t` (policy `c`) at `nowMs`, in policy order: a bucket's raw level
 * and refill time (not refilled: the numbers are copied exactly), a window's entries and a
 * semaphore's leases after dropping the expired ones (which the limiter would drop anyway).
 */
export function snapshotLimits(c: CompiledPolicy, t: TenantLimits, nowMs: number): LimitSnapshot[] {
  const out: LimitSnapshot[] = [];
  for (let i = 0; i < c.limits.length; i++) {
    const spec = c.limits[i] as LimitSpec;
    const obj = t.objs[i];
    if (obj === null || obj === undefined) {
      if (spec.kind === 'concurrent' || spec.kind === 'cost') continue; // unreachable: an object
      const o = c.offsets[i] as number;
      out.push({
        name: spec.name,
        algorithm: 'token_bucket',
        kind: spec.kind,
        limit: spec.limit,
        windowMs: spec.windowMs,
        level: t.num[o] as number,
        refilledAt: t.num[o + 1] as number,
      });
    } else if (obj.algorithm === 'budget') {
      obj.purge(nowMs);
      out.push({ name: spec.name, algorithm: 'budget', spent: obj.spent.toString(), start: obj.start });
    } else if (obj.algorithm === 'sliding_window') {
      obj.purge(nowMs);
      const kind = spec.kind === 'tokens' ? 'tokens' : 'requests';
      out.push({ name: spec.name, algorithm: 'sliding_window', kind, entries: obj.entries() });
    } else {
      obj.purge(nowMs);
      out.push({ name: spec.name, algorithm: 'semaphore', leases: obj.leases() });
    }
  }
  return out;
}

/** Limit state rebuilt from a snapshot, plus what reservations need to find their window entries. */
export interface RestoredLimits extends TenantLimits {
  /** Per limit index: for a window restored from the snapshot, request id → sequence number of its newest entry; else null. */
  readonly entryOf: readonly (ReadonlyMap<string, number> | null)[];
}

/**
 * State for policy `c` at `nowMs` from snapshot limits `snaps`, matched by name. A limit keeps
 * the snapshot's state when the snapshot has a limit of that name with the same kind and
 * algorithm (a window snapshot without `kind` matches either rate kind); otherwise, or when the
 * snapshot lacks it, it starts fresh (full bucket, empty window, no lease). Snapshot limits the
 * policy lacks are ignored. Kept state, as on a policy reload (`rebuildTenantLimits`):
 * - bucket: the exact level and refill time when `limit` and `windowMs` are unchanged; else the
 *   units used at `nowMs` (refilled under the snapshot's spec), clamped to `[0, limit]`;
 * - window: the entries still inside the (current) window at `nowMs`, at their timestamps;
 * - semaphore: the leases not expired at `nowMs`, with their expiries (even beyond `limit`);
 * - budget: the spend, when the snapshot's period began no earlier than the current one (a
 *   snapshot taken in an earlier period holds spend already forgotten; one from a node whose clock
 *   is ahead past the boundary is kept, the safe side, until the current period ends).
 * Slot 0 of `num` is left for the caller.
 */
export function restoreLimits(c: CompiledPolicy, snaps: readonly LimitSnapshot[], nowMs: number): RestoredLimits {
  const byName = new Map<string, LimitSnapshot>();
  for (const s of snaps) byName.set(s.name, s);
  const num = new Array<number>(c.slots).fill(0.5);
  const objs: (LimitObject | null)[] = [];
  const entryOf: (Map<string, number> | null)[] = [];
  for (let i = 0; i < c.limits.length; i++) {
    const spec = c.limits[i] as LimitSpec;
    const o = c.offsets[i] as number;
    const snap = byName.get(spec.name);
    let seqs: Map<string, number> | null = null;
    if (spec.kind === 'cost') {
      const budget = new Budget(spec.limit, spec.period, nowMs);
      if (snap !== undefined && snap.algorithm === 'budget' && snap.start >= budget.start) budget.spent = BigInt(snap.spent);
      objs.push(budget);
    } else if (spec.kind === 'concurrent') {
      const sem = new Semaphore(spec.limit, spec.leaseTtlMs, num, o);
      if (snap !== undefined && snap.algorithm === 'semaphore') {
        for (const [id, exp] of snap.leases) if (exp > nowMs) sem.restore(id, exp);
      }
      objs.push(sem);
    } else if (spec.algorithm === 'sliding_window') {
      const w = new SlidingWindow(spec.limit, spec.windowMs);
      if (snap !== undefined && snap.algorithm === 'sliding_window' && (snap.kind === undefined || snap.kind === spec.kind)) {
        seqs = new Map();
        const edge = nowMs - spec.windowMs;
        for (const [ts, cost, id] of snap.entries) if (ts > edge) seqs.set(id, w.add(ts, cost, id));
      }
      objs.push(w);
    } else {
      if (snap !== undefined && snap.algorithm === 'token_bucket' && snap.kind === spec.kind) {
        if (snap.limit === spec.limit && snap.windowMs === spec.windowMs) {
          num[o] = snap.level;
          num[o + 1] = snap.refilledAt;
        } else {
          const prev = [snap.level, snap.refilledAt];
          bucketRefill(prev, 0, snap.limit, snap.windowMs, nowMs);
          bucketSetUsed(num, o, spec.limit, spec.windowMs, bucketUsed(prev, 0, snap.limit, snap.windowMs), nowMs);
        }
      } else {
        bucketInit(num, o, spec.limit, spec.windowMs, nowMs);
      }
      objs.push(null);
    }
    entryOf.push(seqs);
  }
  return { ...tenantLimits(c, num, objs), entryOf };
}
