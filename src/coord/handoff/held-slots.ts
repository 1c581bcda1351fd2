/**
 * Slots of a possibly-alive writer: when a node loads a tenant's state written by another process
 * that is no longer deciding for it (the owner left the ring without a handoff, or the state is a
 * checkpoint of a node gone from the ring), the requests open in that state may still run: the
 * writer may only be stalled (SIGSTOP, a GC pause, a frozen VM), and after it wakes its streams
 * carry on at the provider. Their concurrency slots therefore stay counted here until the writer
 * is proven gone (`src/coord/handoff/process-gone.ts`: its port refuses connections, or another process
 * answers there) or their settlements reach this node, or their leases expire (`lease_ttl`, 10 min
 * by default). The proof is asked when the state is loaded (the claim waits at most `waitMs` for
 * it) and again every checkpoint period while slots are held.
 *
 * Availability cost of a SIGKILL (slots held that nobody uses): none beyond the probe when the
 * dead writer's host still answers (its port refuses at once, or a restarted process answers with
 * another incarnation); when the host itself is unreachable (a cut link, a powered-off machine),
 * until the slots' leases expire.
 */
import type { Limiter } from '../../limiter/limiter.ts';
import type { HandoffLog } from './handoff-context.ts';
import type { GoneProbe, ProcessIdentity } from './process-gone.ts';

/** The open requests of one writer held in one tenant's state here. */
interface Held {
  readonly writer: ProcessIdentity;
  /** `id|url|inc` of the writer: tenants held for one process are asked about once. */
  readonly key: string;
  readonly ids: readonly string[];
}

/** The held slots of every tenant loaded from a possibly-alive writer. See the module comment. */
export class HeldSlots {
  readonly #limiter: Limiter;
  readonly #probe: GoneProbe | undefined;
  readonly #log: HandoffLog;
  readonly #onFreed: (tenant: string, slots: number) => void;
  readonly #held = new Map<string, Held>();

  /**
   * @param probe answers whether a writer is proven gone; without it slots are held until their
   *   leases expire or their settlements arrive.
   * @param onFreed told after the slots of `tenant` were freed (to mark it for the next checkpoint).
   */
  constructor(limiter: Limiter, probe: GoneProbe | undefined, log: HandoffLog, onFreed: (tenant: string, slots: number) => void) {
    this.#limiter = limiter;
    this.#probe = probe;
    this.#log = log;
    this.#onFreed = onFreed;
  }

  /** Tenants with slots held here for a possibly-alive writer. */
  get size(): number {
    return this.#held.size;
  }

  /** True when `tenant` has slots held for a possibly-alive writer. */
  has(tenant: string): boolean {
    return this.#held.has(tenant);
  }

  /**
   * Holds the slots of reservations `ids` of `tenant` (just loaded, written by `writer`) until the
   * writer is proven gone, then asks at once, waiting at most `waitMs` for the answer (the answer
   * that comes later still frees them). Nothing is held when `ids` is empty. Never rejects.
   */
  async hold(tenant: string, writer: ProcessIdentity, ids: readonly string[], waitMs: number): Promise<void> {
    if (ids.length === 0) return;
    this.#held.set(tenant, { writer, key: writerKey(writer), ids });
    if (this.#probe === undefined) return;
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)));
    await Promise.race([this.#check([tenant]), waited]);
    clearTimeout(timer);
  }

  /** Forgets `tenant` (its claim is dropped). */
  forget(tenant: string): void {
    this.#held.delete(tenant);
  }

  /** Asks again, once per writer, for every tenant with held slots; frees those of writers proven gone. Never rejects. */
  async check(): Promise<void> {
    if (this.#held.size > 0) await this.#check([...this.#held.keys()]);
  }

  async #check(tenants: readonly string[]): Promise<void> {
    const probe = this.#probe;
    if (probe === undefined) return;
    const byWriter = new Map<string, { writer: ProcessIdentity; tenants: string[] }>();
    for (const tenant of tenants) {
      const held = this.#held.get(tenant);
      if (held === undefined) continue;
      let group = byWriter.get(held.key);
      if (group === undefined) byWriter.set(held.key, (group = { writer: held.writer, tenants: [] }));
      group.tenants.push(tenant);
    }
    await Promise.all(
      [...byWriter.values()].map(async ({ writer, tenants: group }) => {
        let gone = false;
        try {
          gone = await probe(writer);
        } catch {
          gone = false;
        }
        if (!gone) return;
        let slots = 0;
        for (const tenant of group) {
          const held = this.#held.get(tenant);
          if (held === undefined || held.key !== writerKey(writer)) continue;
          this.#held.delete(tenant);
          let freed = 0;
          for (const id of held.ids) if (this.#limiter.release(tenant, id)) freed++;
          slots += freed;
          this.#onFreed(tenant, freed);
        }
        this.#log.info({ writer: writer.id, url: writer.url, tenants: group.length, slots }, 'writer proven gone: the slots of its requests in flight are freed');
      }),
    );
  }
}

/** `id|url|inc` of a writer. */
function writerKey(w: ProcessIdentity): string {
  return `${w.id}|${w.url}|${w.inc ?? ''}`;
}
