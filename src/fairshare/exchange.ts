/**
 * The exchange of demand reports: every `everyMs` (default 500 ms) each node writes its report of
 * each fair-shared deployment into the deployment's hash in Redis and reads every live node's in the
 * same call (`lua/fair-demand.lua`, key `qr:<cluster>:fair:{deployment:<name>}`, field = node id),
 * then hands them to its `FairShares`. One call per deployment per period per node, never one per
 * request. A report older than `staleMs` is deleted by the script and read by nobody.
 *
 * Reports cross between processes through Redis, so every one read is validated (`DemandReportSchema`):
 * one that does not parse is left out and logged (once a minute per node and deployment), never
 * trusted. A failed or slow call (timeout `timeoutMs`) changes nothing; after `staleMs` without a
 * good exchange, `FairShares` water-fills its own tenants over capacity / live nodes.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { wallNow } from '../clock.ts';
import { defineScript } from '../redis/lua-scripts.ts';
import type { DemandReport, FairShares, ReceivedReport } from './shares.ts';

/** Key of a deployment's demand hash: `qr:<cluster>:fair:{deployment:<name>}` (the deployment's buckets' hash tag). */
export function fairDemandKey(cluster: string, deployment: string): string {
  return `qr:${cluster}:fair:{deployment:${deployment}}`;
}

/** At most this many tenants per report (a report is at most 1 MiB in the script). */
const MAX_TENANTS = 20_000;

/** A report as read from Redis: checked before anything of it is used. */
export const DemandReportSchema = z.strictObject({
  v: z.literal(1),
  kinds: z.array(z.enum(['requests', 'tokens'])).min(1).max(2),
  t: z
    .array(
      z.tuple([
        z.string().regex(/^[A-Za-z0-9._-]{1,64}$/),
        z.array(z.number().finite().min(0).max(1e15)).min(1).max(2),
        z.number().finite().gt(0).max(1e6),
        z.number().finite().min(0).max(1),
      ]),
    )
    .max(MAX_TENANTS),
}) satisfies z.ZodType<DemandReport>;

/** Log sink (pino's shape). */
export interface ExchangeLog {
  warn(obj: object, msg: string): void;
}

/** Options of {@link DemandExchange}. */
export interface DemandExchangeOptions {
  readonly redis: Redis;
  readonly cluster: string;
  /** This node's id: its field in every hash. */
  readonly nodeId: string;
  readonly shares: FairShares;
  readonly log: ExchangeLog;
  /** @default 500 */
  readonly everyMs?: number;
  /** @default 2000 */
  readonly staleMs?: number;
  /** @default 250 */
  readonly timeoutMs?: number;
}

/** Counts of the exchange (metrics and tests). */
export interface ExchangeCounts {
  ok: number;
  failed: number;
  /** Reports read that did not validate (left out). */
  invalid: number;
}

/** The periodic exchange of one node (see the file comment). */
export class DemandExchange {
  readonly counts: ExchangeCounts = { ok: 0, failed: 0, invalid: 0 };
  readonly #o: DemandExchangeOptions;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  readonly #warnedAt = new Map<string, number>();

  constructor(o: DemandExchangeOptions) {
    this.#o = o;
    defineScript(o.redis, 'fairDemand');
  }

  /** Starts the periodic exchange (the first one at once). */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => void this.exchangeAll(), this.#o.everyMs ?? 500);
    this.#timer.unref();
    void this.exchangeAll();
  }

  /** Stops it; an exchange in flight completes. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One exchange of every deployment (skipped while the previous one runs). Never rejects. */
  async exchangeAll(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    try {
      await Promise.all(this.#o.shares.deployments.map((d) => this.exchange(d)));
    } finally {
      this.#running = false;
    }
  }

  /** One exchange of `deployment`. Resolves true when it was answered. Never rejects. */
  async exchange(deployment: string): Promise<boolean> {
    const o = this.#o;
    const report = o.shares.report(deployment);
    if (report === undefined) return false;
    const staleMs = o.staleMs ?? 2_000;
    let timer: NodeJS.Timeout | undefined;
    try {
      const call = o.redis.qrFairDemand(fairDemandKey(o.cluster, deployment), o.nodeId, JSON.stringify(report), String(staleMs));
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`fair-demand exchange timed out after ${o.timeoutMs ?? 250} ms`)), o.timeoutMs ?? 250);
      });
      const reply = await Promise.race([call, timeout]);
      o.shares.received(deployment, this.#parse(deployment, reply));
      this.counts.ok++;
      return true;
    } catch {
      this.counts.failed++;
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The script's flat reply `[node, age, report, ...]`, each report validated; bad ones left out. */
  #parse(deployment: string, reply: unknown): ReceivedReport[] {
    const out: ReceivedReport[] = [];
    if (!Array.isArray(reply)) return out;
    for (let i = 0; i + 2 < reply.length; i += 3) {
      const node = String(reply[i]);
      let parsed: z.ZodSafeParseResult<DemandReport> | undefined;
      try {
        parsed = DemandReportSchema.safeParse(JSON.parse(String(reply[i + 2])));
      } catch {
        parsed = undefined;
      }
      if (parsed?.success === true) {
        out.push({ node, report: parsed.data });
        continue;
      }
      this.counts.invalid++;
      const key = `${node}\0${deployment}`;
      const now = wallNow(); // wall time: log rate limiting only
      if (now - (this.#warnedAt.get(key) ?? -Infinity) > 60_000) {
        this.#warnedAt.set(key, now);
        this.#o.log.warn({ node, deployment }, 'fair share: a demand report in Redis is not valid; left out');
      }
    }
    return out;
  }
}
