/**
 * Admission counted where the provider sees it: the simulator's arrival log (`GET /sim/arrivals`,
 * one entry per request received, its `user` naming the tenant), per tenant the busiest sliding
 * window of the limit's length, and the token bucket's exact bound over every interval
 * (`worstInterval` of test/helpers/bounds.ts: at most capacity + refill × d in any interval of
 * length d). A requests limit is a token bucket by default (capacity = the limit, refilled over its
 * window), so a window of the limit's length may hold up to twice the limit; any excess over the
 * bound at the provider is admissions decided twice (a crash's last checkpoint period, a stale
 * state) or the jitter of the hop from the owner to the provider.
 */
import { request } from 'undici';
import { worstInterval } from '../../test/helpers/bounds.ts';
import type { Worst } from '../../test/helpers/bounds.ts';

/** The fields of an arrival this benchmark reads (the simulator's entries carry more). */
export interface ProviderArrival {
  /** Simulator clock, ms since the epoch, when the request arrived. */
  readonly at: number;
  readonly user: string | null;
  readonly status: number | null;
}

/** What {@link fetchArrivals} read. */
export interface ArrivalLog {
  readonly arrivals: readonly ProviderArrival[];
  /** Arrivals the simulator's ring dropped: when not 0, the counts are too low. */
  readonly evicted: number;
}

/**
 * Reads the simulator's arrivals since `sinceMs` (epoch ms).
 * @returns undefined when the simulator has no `GET /sim/arrivals` (404: a build before it).
 * @throws Error on another status or a body of another shape.
 */
export async function fetchArrivals(simUrl: string, sinceMs: number): Promise<ArrivalLog | undefined> {
  const res = await request(`${simUrl}/sim/arrivals?since=${Math.floor(sinceMs)}`, { headersTimeout: 30_000, bodyTimeout: 30_000 });
  if (res.statusCode === 404) {
    await res.body.dump();
    return undefined;
  }
  if (res.statusCode !== 200) {
    await res.body.dump();
    throw new Error(`GET /sim/arrivals answered ${res.statusCode}`);
  }
  const body = (await res.body.json()) as { arrivals?: unknown; evicted?: unknown };
  if (!Array.isArray(body.arrivals)) throw new Error('GET /sim/arrivals: no arrivals array');
  const arrivals: ProviderArrival[] = [];
  for (const a of body.arrivals as unknown[]) {
    const e = a as { at?: unknown; user?: unknown; status?: unknown };
    if (typeof e.at !== 'number') throw new Error('GET /sim/arrivals: an arrival without a numeric at');
    arrivals.push({ at: e.at, user: typeof e.user === 'string' ? e.user : null, status: typeof e.status === 'number' ? e.status : null });
  }
  return { arrivals, evicted: typeof body.evicted === 'number' ? body.evicted : 0 };
}

/** The busiest window found by {@link worstWindow}. */
export interface WorstWindow {
  /** Arrivals in `[from, from + windowMs)`. */
  readonly count: number;
  /** Start of that window (an arrival's time), epoch ms; NaN when there were none. */
  readonly from: number;
}

/** The most arrivals in any half-open window `[t, t + windowMs)` starting at an arrival `t` (two pointers over the sorted times). */
export function worstWindow(times: readonly number[], windowMs: number): WorstWindow {
  const s = [...times].sort((a, b) => a - b);
  let best: WorstWindow = { count: 0, from: Number.NaN };
  let j = 0;
  for (let i = 0; i < s.length; i++) {
    const from = s[i] as number;
    if (j < i) j = i;
    while (j < s.length && (s[j] as number) < from + windowMs) j++;
    if (j - i > best.count) best = { count: j - i, from };
  }
  return best;
}

/** Per tenant id, the arrivals whose user is that id. */
export function arrivalsByUser(log: ArrivalLog): Map<string, number[]> {
  const by = new Map<string, number[]>();
  for (const a of log.arrivals) {
    if (a.user === null) continue;
    let list = by.get(a.user);
    if (list === undefined) by.set(a.user, (list = []));
    list.push(a.at);
  }
  return by;
}

/**
 * The interval where a tenant's arrivals most exceed a token bucket of `capacity` refilled at
 * `refillPerS` (each arrival costs 1; see `worstInterval`): `excess` ≤ 0 when within the bound.
 */
export function tokenBucketExcess(times: readonly number[], capacity: number, refillPerS: number): Worst {
  return worstInterval(
    times.map((t) => ({ start: t, end: t, tokens: 1 })),
    capacity,
    refillPerS,
  );
}
