/**
 * Reconciliation of the global cap after Redis lost or regressed its data: restarted
 * empty, restored from an older snapshot (RDB), FLUSHALL, or an older copy of the keys written back.
 *
 * Detection ({@link RestoreWatch}): on every `ready` of the connection and every probe interval,
 * with or without traffic, a node reads Redis's `run_id` (`INFO server`, drawn anew at each start,
 * so a restore from an RDB, which needs a restart, changes it) and calls `lua/epoch.lua` on the
 * cluster's epoch key (a random id written by the first node that finds it missing, so a FLUSHALL
 * or an empty restart changes it; and a probe counter, so an older copy of the keys is seen as the
 * counter going back). A change of either is a restore, named by `<run_id>:<epoch id>`, the same on
 * every node that sees it.
 *
 * Re-seeding (`CapLeases.restored`, `lua/reseed.lua`): each node keeps, per bucket, the level it
 * last saw in Redis after its own last write (the lease or charge reply). On a restore it lowers
 * the bucket to that level refilled since — never below what Redis holds, never adding: the usage
 * becomes the maximum of what Redis holds and what any node knew, not their sum. Units taken since
 * the first reseed of the epoch stay taken whatever order the nodes reseed in (the script keeps the
 * bucket's base).
 *
 * Bound (over-admission): units leased from the regressed data before the first node reseeded the
 * bucket, i.e. after a FLUSHALL or a write-back without a restart, what the nodes lease within one
 * probe interval (a restart holds every node's leases until it has checked, so none). Under-admission:
 * units given back to Redis (a closing node's balance) after the last level a node saw are not
 * counted by that node's known level, so a restore may forget them (the safe side).
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { LUA_SCRIPTS, defineScript } from '../redis/lua-scripts.ts';

/** The reconciliation's script files (in `lua/`), by wrapper name (see the registry, `src/redis/lua-scripts.ts`). */
export const RECONCILE_SCRIPT_FILES = { reseed: LUA_SCRIPTS.capReseed.file, epoch: LUA_SCRIPTS.capEpoch.file } as const;

/** One bucket to re-seed (see `lua/reseed.lua`). */
export interface ReseedOptions {
  /** Units the bucket holds when full (> 0). */
  readonly capacity: number;
  /** Refill rate, units per second (> 0). */
  readonly ratePerSec: number;
  /** The level the node last saw in Redis after its own last write, units. */
  readonly knownLevel: number;
  /** ms since the node saw it (≥ 0): the script refills it at the rate since. */
  readonly ageMs: number;
  /** Names the restore (`<run_id>:<epoch id>`), the same on every node. */
  readonly epoch: string;
  /** Expiry of the bucket's key, ms (> 0), as in `token-bucket.lua`. */
  readonly ttlMs: number;
}

/** Reply of a reseed: levels before and after (floored units), and the epoch's base after. */
export interface ReseedResult {
  readonly before: number;
  readonly level: number;
  readonly base: number;
}

/** Re-seeds the bucket at `key`. Rejects with the Redis error, or an Error for a malformed reply. */
export type ReseedFn = (key: string, options: ReseedOptions) => Promise<ReseedResult>;

/** The epoch after one probe: its id and probe counter. */
export interface EpochReply {
  readonly id: string;
  readonly n: number;
}

/** The reconciliation's scripts bound to one connection. */
export interface ReconcileScripts {
  readonly reseed: ReseedFn;
  /**
   * One probe of the epoch at `key`: creates it with `fresh` when missing or gone back (`seen` is
   * what this node saw at its last probe), adds 1 to its counter.
   * @throws Error (as a rejection) for a malformed reply; the Redis error when the call fails.
   */
  epoch(key: string, fresh: string, seen: EpochReply | undefined): Promise<EpochReply>;
}

const defined = new WeakMap<Redis, ReconcileScripts>();

/**
 * Defines `lua/reseed.lua` and `lua/epoch.lua` on `redis` (once per connection) and returns typed
 * wrappers. @throws Error when a `.lua` file cannot be read (names its path).
 */
export function defineReconcileScripts(redis: Redis): ReconcileScripts {
  const existing = defined.get(redis);
  if (existing !== undefined) return existing;
  defineScript(redis, 'capReseed', 'capEpoch');
  const scripts: ReconcileScripts = {
    async reseed(key, o) {
      if (!(o.capacity > 0) || !(o.ratePerSec > 0) || !Number.isFinite(o.knownLevel) || !(o.ageMs >= 0) || !(o.ttlMs > 0) || o.epoch === '') {
        throw new RangeError(`bad reseed options ${JSON.stringify(o)}`);
      }
      const args = [o.capacity, o.ratePerSec, o.knownLevel, Math.min(o.ageMs, 2 ** 40), o.epoch, Math.ceil(Math.min(o.ttlMs, 2 ** 40))].map(String);
      const reply = await redis.qrCapReseed(key, ...args);
      if (Array.isArray(reply) && reply.length === 3 && reply.every((n) => Number.isSafeInteger(n))) {
        const [before, level, base] = reply as [number, number, number];
        if (level <= o.capacity && level <= Math.max(before, -o.capacity)) return { before, level, base };
      }
      throw new Error(`${RECONCILE_SCRIPT_FILES.reseed} answered ${JSON.stringify(reply)}, out of range for the call`);
    },
    async epoch(key, fresh, seen) {
      const reply = await redis.qrCapEpoch(key, fresh, seen?.id ?? '', String(seen?.n ?? 0));
      if (Array.isArray(reply) && reply.length === 2 && typeof reply[0] === 'string' && reply[0] !== '' && Number.isSafeInteger(reply[1]) && (reply[1] as number) >= 1) {
        return { id: reply[0], n: reply[1] as number };
      }
      throw new Error(`${RECONCILE_SCRIPT_FILES.epoch} answered ${JSON.stringify(reply)}, not {id, n}`);
    },
  };
  defined.set(redis, scripts);
  return scripts;
}

/** What one check of Redis found. */
export interface RestoreCheck {
  /** Redis lost or regressed its data since this node's previous check. */
  readonly restored: boolean;
  /** `<run_id>:<epoch id>`: names the data Redis holds now (the same on every node). */
  readonly epoch: string;
}

/** What {@link RestoreWatch} tells. */
export interface RestoreListener {
  /** The connection closed (ioredis `close`). */
  lost(): void;
  /** The connection is ready again and was checked; `check` undefined when the check failed. */
  back(check: RestoreCheck | undefined): void;
  /** A periodic check (connection up all along) found a restore. */
  restored(check: RestoreCheck): void;
}

/**
 * Watches one Redis for lost or regressed data: on every `ready` of the connection and every
 * `probeMs` (with or without traffic) reads `run_id` and probes the epoch key. The first check
 * only learns both. A failed check is retried at the next tick.
 */
export class RestoreWatch {
  #runId: string | undefined;
  #seen: EpochReply | undefined;
  #checking = false;
  #timer: NodeJS.Timeout | undefined;
  readonly #scripts: ReconcileScripts;

  constructor(
    private readonly redis: Redis,
    private readonly key: string,
    private readonly probeMs: number,
  ) {
    this.#scripts = defineReconcileScripts(redis);
  }

  /** Starts listening and the probe timer (unref'd). */
  start(on: RestoreListener): void {
    this.redis.on('close', () => on.lost());
    this.redis.on('ready', () => {
      void this.check().then(
        (c) => on.back(c),
        () => on.back(undefined),
      );
    });
    this.#timer = setInterval(() => {
      if (this.#checking || this.redis.status !== 'ready') return;
      this.check().then(
        (c) => {
          if (c.restored) on.restored(c);
        },
        () => undefined,
      );
    }, this.probeMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
  }

  /**
   * One check: `run_id` and an epoch probe.
   * @throws the Redis error (as a rejection) when a call fails; nothing is learnt then.
   */
  async check(): Promise<RestoreCheck> {
    this.#checking = true;
    try {
      const [text, epoch] = await Promise.all([this.redis.info('server'), this.#scripts.epoch(this.key, randomBytes(8).toString('hex'), this.#seen)]);
      const runId = /^run_id:(\w+)/m.exec(text)?.[1] ?? 'unknown';
      const restored = (this.#runId !== undefined && runId !== this.#runId) || (this.#seen !== undefined && epoch.id !== this.#seen.id);
      this.#runId = runId;
      this.#seen = epoch;
      return { restored, epoch: `${runId}:${epoch.id}` };
    } finally {
      this.#checking = false;
    }
  }
}

/** A level seen in Redis: units, and the node's clock time (ms) it was seen at. */
export interface LevelSeen {
  readonly level: number;
  readonly at: number;
}

/**
 * What a node knows of one bucket's level in Redis (`CapLeases` keeps one per bucket): the level of
 * the last reply to its own call, and the one before a reply that came back higher than that
 * knowledge allowed (a give-back by another node, or Redis regressed before the node noticed),
 * kept for `keepMs` so a restore detected within it still re-seeds from the older knowledge.
 */
export interface KnownLevel {
  readonly capacity: number;
  readonly ratePerSec: number;
  level: number;
  levelAt: number;
  prior: (LevelSeen & { readonly until: number }) | undefined;
}

/** `seen` refilled at the bucket's rate until `now`, at most capacity. */
export function refilledLevel(k: KnownLevel, seen: LevelSeen, now: number): number {
  return Math.min(k.capacity, seen.level + (Math.max(0, now - seen.at) * k.ratePerSec) / 1000);
}

/**
 * Records a reply's level (after the call took `consumed` units; negative for a give-back) at `at`.
 * When the level before the call is above the known level refilled since by more than one unit,
 * the knowledge before it is kept as `prior` until `at + keepMs`.
 */
export function noteLevel(k: KnownLevel, level: number, consumed: number, at: number, keepMs: number): void {
  const known = refilledLevel(k, { level: k.level, at: k.levelAt }, at);
  if (level + consumed > known + 1 && known < k.capacity) {
    const keep = k.prior !== undefined && k.prior.until >= at && refilledLevel(k, k.prior, at) < known ? k.prior : { level: k.level, at: k.levelAt };
    k.prior = { level: keep.level, at: keep.at, until: at + keepMs };
  }
  k.level = level;
  k.levelAt = at;
}

/** The lowest level the node knows for the bucket now (the last seen, or an unexpired prior), as a level seen at a time. */
export function lowestKnown(k: KnownLevel, now: number): LevelSeen {
  const last = { level: k.level, at: k.levelAt };
  if (k.prior === undefined || k.prior.until < now) return last;
  return refilledLevel(k, k.prior, now) < refilledLevel(k, last, now) ? k.prior : last;
}
