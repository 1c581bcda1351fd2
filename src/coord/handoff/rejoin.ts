/**
 * A node cut from Redis (not from its peers nor routers) is dropped from every other process's ring
 * after `dead_after`: its tenants go to other nodes, which start from its last checkpoint and decide
 * for them while it is away. It cannot read Redis, so it never sees that ring; when the link heals,
 * its membership finds that a process in contact recorded its drop (`dropsKey`, later than its last
 * answered heartbeat; `MembershipSync#rejoin`) and shows it the ring without it, then the ring
 * with it. `Handoff` then drops every tenant it decided for, keeping
 * their states here, and loads each again like any moved tenant: the interim owner's handoff, or
 * the newest checkpoint, and this node's own state only when what it loads is older than the moment
 * it lost contact (nothing newer exists: no interim owner decided for the tenant and Redis holds
 * no checkpoint of it).
 *
 * Bound (admitted beyond a limit): the tenant's admissions on this node between its last checkpoint
 * before the cut and the moment routers drop it from their rings (`dead_after` + a heartbeat + a
 * health check), as for a crashed owner. Nothing after the heal.
 */
import type { TenantSnapshot } from '../../limiter/snapshot.ts';
import type { OversizedState } from './state-store.ts';

/** The states a node held when it found itself dropped from the ring, by tenant. */
export class Rejoined {
  readonly #states = new Map<string, { readonly json: string; readonly at: number }>();

  /** Keeps `snapshot` of `tenant`, valid as of `atMs` (clock ms: when this node last reached Redis). */
  keep(tenant: string, snapshot: TenantSnapshot, atMs: number): void {
    this.#states.set(tenant, { json: JSON.stringify(snapshot), at: atMs });
  }

  /** Tenants kept. */
  get size(): number {
    return this.#states.size;
  }

  /**
   * What to load for `tenant`: `loaded` (a state from a peer or Redis; null: none), unless a state
   * kept here is newer than it (`loaded` absent, or taken before the kept state's time). Forgets the
   * kept state either way. A `loaded` value that does not parse is returned as is (the loader
   * treats it as corrupt).
   */
  newer(tenant: string, loaded: string | OversizedState | null): string | OversizedState | null {
    const kept = this.#states.get(tenant);
    if (kept === undefined) return loaded;
    this.#states.delete(tenant);
    if (loaded === null) return kept.json;
    if (typeof loaded !== 'string') return loaded;
    const at = snapshotTime(loaded);
    return at !== undefined && at < kept.at ? kept.json : loaded;
  }
}

/** The `at` of a snapshot's JSON, or undefined when it does not parse. */
function snapshotTime(json: string): number | undefined {
  try {
    const at = (JSON.parse(json) as { at?: unknown }).at;
    return typeof at === 'number' && Number.isFinite(at) ? at : undefined;
  } catch {
    return undefined;
  }
}
