/**
 * The cluster's hot set: tenants their owner found too busy for one node,
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
import type { Clock } from '../../clock.ts';
import { systemClock } from '../../clock.ts';
import { MAX_CLOCK_SKEW_MS } from '../../limiter/snapshot-bounds.ts';

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
  /**
   * The most nodes a tenant can be spread over now (the ring's members): a larger `k` read from
   * Redis is taken as this. @default no bound
   */
  readonly maxSpread?: () => number;
  /**
   * The longest an entry may last from now, ms (`cluster.hot.cooldown`: an owner marks for that
   * long): an `until` later than now + this + {@link MAX_CLOCK_SKEW_MS} read from Redis is clamped
   * to now + this and written back, so a forged entry lapses like a real one. @default no bound
   */
  readonly maxTtlMs?: number;
  /** Told about an entry read from Redis that was not valid (deleted) or out of range (clamped). @default ignore */
  readonly onInvalid?: (tenant: string, problem: string) => void;
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
  readonly #maxSpread: () => number;
  readonly #maxTtlMs: number;
  readonly #onInvalid: (tenant: string, problem: string) => void;
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
    this.#maxSpread = opts.maxSpread ?? (() => Infinity);
    this.#maxTtlMs = opts.maxTtlMs ?? Infinity;
    this.#onInvalid = opts.onInvalid ?? (() => {});
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

  /** k of a tenant hot now (at most `maxSpread()`, at least 1), or undefined. */
  spreadOf(tenant: string): number | undefined {
    const e = this.#entries.get(tenant);
    return e !== undefined && e.until > this.#clock.now() ? Math.max(1, Math.min(e.k, this.#maxSpread())) : undefined;
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
    const clamped: string[] = [];
    for (const [tenant, json] of Object.entries(raw)) {
      let e = parseEntry(json);
      if (e === undefined) this.#onInvalid(tenant, 'not a hot-set entry: deleted');
      else if (e.until > now + this.#maxTtlMs + MAX_CLOCK_SKEW_MS) {
        // Later than any owner marks (forged, or a clock far ahead): it lapses one cooldown from now.
        this.#onInvalid(tenant, `until ${e.until} beyond now + ${this.#maxTtlMs} ms: clamped`);
        e = { k: e.k, until: now + this.#maxTtlMs };
        clamped.push(tenant, JSON.stringify(e));
      }
      if (e === undefined || e.until < now - KEEP_EXPIRED_MS) stale.push(tenant);
      else next.set(tenant, e);
    }
    if (clamped.length > 0) this.#redis.hset(this.#key, ...clamped).catch((err: unknown) => this.#onError(err as Error));
    const wasHot = this.#lastHot;
    this.#entries = next;
    const isHot = new Set(this.hot());
    this.#lastHot = isHot;
    const cooled = [...wasHot].filter((t) => !isHot.has(t));
    if (stale.length > 0) this.#redis.hdel(this.#key, ...stale).catch((err: unknown) => this.#onError(err as Error));
    if (this.#onChange !== undefined && (cooled.length > 0 || [...isHot].some((t) => !wasHot.has(t)))) this.#onChange(cooled);
  }
}

/** An entry: `k` an integer ≥ 1, `until` a finite number; undefined when it is not one. */
function parseEntry(json: string): HotEntry | undefined {
  try {
    const v = JSON.parse(json) as { k?: unknown; until?: unknown };
    return typeof v.k === 'number' && Number.isInteger(v.k) && v.k >= 1 && typeof v.until === 'number' && Number.isFinite(v.until) ? { k: v.k, until: v.until } : undefined;
  } catch {
    return undefined;
  }
}
