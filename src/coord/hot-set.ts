/**
 * The cluster's hot set: tenants their owner found too busy for one node (issue 4, "Hot tenants"),
 * shared through Redis so that every router and node spreads them the same way.
 *
 * One hash, `qr:{<cluster>}:hot`: field = tenant id, value = `{"k":<nodes>,"until":<ms since the
 * epoch>}`. An entry counts until `until`; its owner refreshes it while the tenant stays hot and lets
 * it lapse (or deletes it) when it cools. Every process reads the whole hash every `pollMs` (default
 * 500 ms, so a change reaches everyone within 1 s) and keeps its last view when Redis cannot be read.
 * `until` is compared with each reader's clock: cluster clocks must be synchronised (NTP), as for
 * limiter snapshots.
 */
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';

/** The hash of the hot set. */
export function hotKey(cluster: string): string {
  return `qr:{${cluster}}:hot`;
}

/** One hot tenant: spread over `k` nodes until `until` (ms since the epoch). */
export interface HotEntry {
  readonly k: number;
  readonly until: number;
}

/** Options of {@link HotSet}. */
export interface HotSetOptions {
  readonly redis: Redis;
  readonly cluster: string;
  /** @default systemClock */
  readonly clock?: Clock;
  /** Period of the reads of the whole set, ms. @default 500 */
  readonly pollMs?: number;
  /** Told about a failed read or write (the view is kept). @default ignore */
  readonly onError?: (err: Error) => void;
  /** Called after each read that changed the set of hot tenants, with the tenants that stopped being hot. */
  readonly onChange?: (cooled: readonly string[]) => void;
}

/** How long entries past `until` stay in the hash before a reader deletes them, ms. */
const KEEP_EXPIRED_MS = 60_000;

/** A process's view of the hot set. */
export class HotSet {
  readonly #redis: Redis;
  readonly #key: string;
  readonly #clock: Clock;
  readonly #pollMs: number;
  readonly #onError: (err: Error) => void;
  readonly #onChange: ((cooled: readonly string[]) => void) | undefined;
  #entries = new Map<string, HotEntry>();
  /** Tenants hot at the last read. */
  #lastHot = new Set<string>();
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: HotSetOptions) {
    this.#redis = opts.redis;
    this.#key = hotKey(opts.cluster);
    this.#clock = opts.clock ?? systemClock;
    this.#pollMs = opts.pollMs ?? 500;
    this.#onError = opts.onError ?? (() => {});
    this.#onChange = opts.onChange;
  }

  /** Reads the set once, then every `pollMs`. Never rejects (a failed first read leaves the set empty). */
  async start(): Promise<void> {
    await this.refresh();
    this.#timer ??= setInterval(() => void this.refresh(), this.#pollMs);
    this.#timer.unref();
  }

  /** Stops polling. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** k of a tenant hot now, or undefined. */
  spreadOf(tenant: string): number | undefined {
    const e = this.#entries.get(tenant);
    return e !== undefined && e.until > this.#clock.now() ? e.k : undefined;
  }

  /** The tenants hot now. */
  hot(): string[] {
    const now = this.#clock.now();
    return [...this.#entries].filter(([, e]) => e.until > now).map(([t]) => t);
  }

  /**
   * Marks (or refreshes) `tenant` as hot over `k` nodes for `ttlMs`; this process sees it at once,
   * others at their next read. @throws the Redis error (the local view is updated anyway).
   */
  async mark(tenant: string, k: number, ttlMs: number): Promise<void> {
    const entry = { k, until: this.#clock.now() + ttlMs };
    this.#entries.set(tenant, entry);
    await this.#redis.hset(this.#key, tenant, JSON.stringify(entry));
  }

  /** Reads the whole set now; keeps the last view when Redis fails. Never rejects. */
  async refresh(): Promise<void> {
    let raw: Record<string, string>;
    try {
      raw = await this.#redis.hgetall(this.#key);
    } catch (err) {
      this.#onError(err as Error);
      return;
    }
    const now = this.#clock.now();
    const next = new Map<string, HotEntry>();
    const stale: string[] = [];
    for (const [tenant, json] of Object.entries(raw)) {
      const e = parseEntry(json);
      if (e === undefined || e.until < now - KEEP_EXPIRED_MS) stale.push(tenant);
      else next.set(tenant, e);
    }
    const wasHot = this.#lastHot;
    this.#entries = next;
    const isHot = new Set(this.hot());
    this.#lastHot = isHot;
    const cooled = [...wasHot].filter((t) => !isHot.has(t));
    if (stale.length > 0) this.#redis.hdel(this.#key, ...stale).catch((err: unknown) => this.#onError(err as Error));
    if (this.#onChange !== undefined && (cooled.length > 0 || [...isHot].some((t) => !wasHot.has(t)))) this.#onChange(cooled);
  }
}

function parseEntry(json: string): HotEntry | undefined {
  try {
    const v = JSON.parse(json) as { k?: unknown; until?: unknown };
    return typeof v.k === 'number' && Number.isInteger(v.k) && v.k >= 1 && typeof v.until === 'number' && Number.isFinite(v.until) ? { k: v.k, until: v.until } : undefined;
  } catch {
    return undefined;
  }
}
