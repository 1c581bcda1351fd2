/**
 * The closed-loop load of `npm run bench:global`: one node's `CapLeases` group (a deployment's
 * quota or a hot tenant's limits) taken from as fast as the cap allows, the way the gateway takes (src/gateway/exchange.ts): a take refused with a wait of at
 * most 20 ms awaits the renewal in flight and takes again, up to 3 times; a refusal after that
 * sleeps its wait (not timed) before the next request. Latencies go to HDR histograms in ns.
 */
import { setImmediate as yieldLoop, setTimeout as sleep } from 'node:timers/promises';
import { build } from 'hdr-histogram-js';
import type { Histogram } from 'hdr-histogram-js';
import type { CapCost, CapLeases } from '../../src/globalcap/cap-leases.ts';

// The gateway's rule (CapLeases.takeAfterRenewals), unrolled here to time every take().
import { RENEWAL_WAIT_MS, RENEWAL_WAITS } from '../../src/globalcap/cap-leases.ts';
/** Admitted requests between two yields to the event loop (so Redis replies get read). */
const YIELD_EVERY = 20;

/** Where one request's timings go (ns). */
export interface LatencySink {
  /** Every `take()` call (a request that waited calls it up to 4 times). */
  readonly take: Histogram;
  /** The `take()` calls that sent a Redis call (a renewal: ioredis writes the script call synchronously). */
  readonly takeSendingCall: Histogram;
  /** Every request: first `take()` to its final answer, renewal waits included. */
  readonly request: Histogram;
  /** Requests that ended admitted. */
  readonly admitted: Histogram;
  /** Of the admitted requests, those that awaited at least one renewal. */
  admittedAfterWait: number;
}

/** A new, empty {@link LatencySink} (values in ns, 3 significant digits). */
export function latencySink(): LatencySink {
  const h = (): Histogram => build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: 3 });
  return { take: h(), takeSendingCall: h(), request: h(), admitted: h(), admittedAfterWait: 0 };
}

/** What one node's loop did. */
export interface DriveCounts {
  /** `take()` calls. */
  takeCalls: number;
  /** Requests (each ends admitted or refused). */
  requests: number;
  /** Requests admitted. */
  admitted: number;
  /** Requests admitted after awaiting at least one renewal. */
  admittedAfterWait: number;
  /** Requests refused after their renewal waits. */
  refused: number;
}

/** Options of {@link drive}. */
export interface DriveOptions {
  readonly leases: CapLeases;
  /** The group taken from: a deployment's name, or a group made with `CapLeases.define`. */
  readonly group: string;
  readonly cost: CapCost;
  /** `performance.now()` at which the loop stops, ms. */
  readonly stopAt: number;
  /** The sink of the request starting now, or undefined not to time it (read once per request). */
  readonly sink: () => LatencySink | undefined;
  /** Redis calls the node has sent so far (its guard's `stats.calls`), read around each timed take. */
  readonly callsSent?: () => number;
  /** Called for each admitted request with `performance.now()`, ms. */
  readonly onAdmit?: (atMs: number) => void;
}

/** Runs one node's requests until `stopAt`. Never rejects unless `take` throws (a bug). */
export async function drive(o: DriveOptions): Promise<DriveCounts> {
  const counts: DriveCounts = { takeCalls: 0, requests: 0, admitted: 0, admittedAfterWait: 0, refused: 0 };
  let sinceYield = 0;
  const take = (sink: LatencySink | undefined): ReturnType<CapLeases['take']> => {
    counts.takeCalls++;
    const calls = sink === undefined ? 0 : (o.callsSent?.() ?? 0);
    const t0 = process.hrtime.bigint();
    const r = o.leases.take(o.group, o.cost);
    const ns = Number(process.hrtime.bigint() - t0);
    if (sink !== undefined) {
      sink.take.recordValue(ns);
      if ((o.callsSent?.() ?? 0) > calls) sink.takeSendingCall.recordValue(ns);
    }
    return r;
  };
  while (performance.now() < o.stopAt) {
    const sink = o.sink();
    counts.requests++;
    const start = process.hrtime.bigint();
    let r = take(sink);
    let waits = 0;
    for (; waits < RENEWAL_WAITS && !r.ok && r.waitMs >= 0 && r.waitMs <= RENEWAL_WAIT_MS; waits++) {
      await o.leases.whenRenewed(o.group);
      r = take(sink);
    }
    const ns = Number(process.hrtime.bigint() - start);
    sink?.request.recordValue(ns);
    if (r.ok) {
      sink?.admitted.recordValue(ns);
      counts.admitted++;
      if (waits > 0) {
        counts.admittedAfterWait++;
        if (sink !== undefined) sink.admittedAfterWait++;
      }
      o.onAdmit?.(performance.now());
      if (++sinceYield >= YIELD_EVERY) {
        sinceYield = 0;
        await yieldLoop();
      }
    } else {
      counts.refused++;
      const left = o.stopAt - performance.now();
      if (left > 0) await sleep(Math.min(Math.max(1, r.waitMs), left));
    }
  }
  return counts;
}

/** Percentiles of a histogram of ns, in µs (NaN when empty). */
export interface LatencySummary {
  readonly count: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly p999Us: number;
  readonly maxUs: number;
}

/** p50 / p99 / p99.9 / max of `h` (ns) in µs. */
export function summarize(h: Histogram): LatencySummary {
  const us = (ns: number): number => (h.totalCount === 0 ? Number.NaN : ns / 1000);
  return {
    count: h.totalCount,
    p50Us: us(h.getValueAtPercentile(50)),
    p99Us: us(h.getValueAtPercentile(99)),
    p999Us: us(h.getValueAtPercentile(99.9)),
    maxUs: us(h.maxValue),
  };
}
