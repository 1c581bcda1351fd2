/**
 * Load of the cluster benchmark: the request body, a fixed-connection autocannon run over many
 * tenants' keys, a closed loop at one connection timed in µs, requests sent one by one at a steady
 * rate with their latencies, and the statistics (median, nearest-rank percentile, paired ratios
 * over rounds) the report uses.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { build } from 'hdr-histogram-js';
import { Agent, Client, request } from 'undici';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';

/** The model every benchmark config serves (o200k_base). */
export const MODEL = 'gpt-4o-mini';

/** A chat body whose prompt is exactly `n` tokens (o200k_base, message overhead included), 16 output tokens. */
export function chatBody(n: number): string {
  const counter = exactCounter('o200k_base');
  const overhead = countOpenAIChat({ messages: [{ role: 'user', content: '' }] }, counter);
  const content = ' the'.repeat(Math.max(0, n - overhead));
  return JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content }] });
}

/** Options of {@link runAutocannon}. */
export interface AutocannonLoad {
  /** Base URL (the simulator or a router); requests go to `<url>/v1/chat/completions`. */
  readonly url: string;
  /** Request bodies, used round-robin. */
  readonly bodies: readonly string[];
  /** API keys used round-robin, one per request. */
  readonly keys: readonly string[];
  readonly connections: number;
  /** Seconds. */
  readonly durationS: number;
  /** Index of the key the first request uses (a run that goes on where another stopped). @default 0 */
  readonly firstKey?: number;
}

/** POSTs the bodies (round-robin) with fixed connections for `durationS` s, keys round-robin from `firstKey`; autocannon's result. */
export async function runAutocannon(load: AutocannonLoad): Promise<autocannon.Result> {
  let i = load.firstKey ?? 0;
  return autocannon({
    url: `${load.url}/v1/chat/completions`,
    connections: load.connections,
    duration: load.durationS,
    requests: [
      {
        method: 'POST',
        setupRequest: (req) => {
          const n = i++;
          return {
            ...req,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${load.keys[n % load.keys.length]}` },
            body: load.bodies[n % load.bodies.length],
          };
        },
      },
    ],
  });
}

/** What {@link runClosedLoop} measured: requests answered 2xx, the others, and the latency of the 2xx ones, µs (HDR histogram, 3 significant digits). */
export interface ClosedLoopResult {
  readonly requests: number;
  /** Non-2xx answers and connection errors. */
  readonly failures: number;
  readonly seconds: number;
  readonly latencyUs: { readonly p50: number; readonly p99: number; readonly p999: number };
}

/**
 * Sends `body` one request at a time over one keep-alive connection for `durationS` s (a closed
 * loop at one connection), keys round-robin from `firstKey`; each latency (request sent → body read)
 * in µs. autocannon's latencies are whole milliseconds, too coarse for added latencies under 1 ms.
 */
export async function runClosedLoop(load: Omit<AutocannonLoad, 'bodies' | 'connections'> & { readonly body: string }): Promise<ClosedLoopResult> {
  const client = new Client(load.url, { pipelining: 1, keepAliveTimeout: 30_000 });
  const hist = build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  let i = load.firstKey ?? 0;
  let failures = 0;
  const start = performance.now();
  const deadline = start + load.durationS * 1_000;
  try {
    while (performance.now() < deadline) {
      const t0 = performance.now();
      try {
        const res = await client.request({
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${load.keys[i++ % load.keys.length] ?? ''}` },
          body: load.body,
        });
        await res.body.dump();
        if (res.statusCode >= 200 && res.statusCode < 300) hist.recordValue(Math.round((performance.now() - t0) * 1_000));
        else failures++;
      } catch {
        failures++;
      }
    }
  } finally {
    await client.close();
  }
  const at = (p: number): number => (hist.totalCount === 0 ? Number.NaN : hist.getValueAtPercentile(p));
  return { requests: hist.totalCount, failures, seconds: (performance.now() - start) / 1_000, latencyUs: { p50: at(50), p99: at(99), p999: at(99.9) } };
}

/** One request sent by {@link sendPaced}. */
export interface Timed<T> {
  readonly item: T;
  /** HTTP status, or 0 when the request failed (connection error). */
  status: number;
  /** From the call to the end of the response body, ms. */
  latencyMs: number;
  /** How late the request left against its schedule, ms. */
  lagMs: number;
  /** When it left, ms after the first request left. */
  sentAtMs: number;
}

/**
 * Sends one chat request per item at `ratePerS` requests a second (item i leaves at start + i/rate),
 * without waiting for earlier answers; resolves when every answer is in.
 * @param keyOf the API key of an item.
 */
export async function sendPaced<T>(url: string, items: readonly T[], keyOf: (item: T) => string, body: string, ratePerS: number): Promise<Timed<T>[]> {
  const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000 });
  const out: Timed<T>[] = [];
  const pending: Promise<void>[] = [];
  const start = performance.now();
  try {
    for (let i = 0; i < items.length; i++) {
      const due = start + (i * 1_000) / ratePerS;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      const item = items[i] as T;
      const t = performance.now();
      const timed: Timed<T> = { item, status: 0, latencyMs: 0, lagMs: Math.max(0, t - due), sentAtMs: t - start };
      out.push(timed);
      pending.push(
        (async () => {
          try {
            const res = await request(`${url}/v1/chat/completions`, {
              method: 'POST',
              dispatcher: agent,
              headers: { 'content-type': 'application/json', authorization: `Bearer ${keyOf(item)}` },
              body,
            });
            await res.body.dump();
            timed.status = res.statusCode;
          } catch {
            timed.status = 0;
          }
          timed.latencyMs = performance.now() - t;
        })(),
      );
    }
    await Promise.all(pending);
  } finally {
    await agent.close();
  }
  return out;
}

/** Median of `xs` (mean of the middle two for an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Median over rounds i of `f(a[i], b[i])`, rounds whose result is not finite left out; NaN for none. */
function pairedMedian(a: readonly number[] | undefined, b: readonly number[] | undefined, f: (x: number, y: number) => number): number {
  if (a === undefined || b === undefined) return Number.NaN;
  return median(a.map((x, i) => f(x, b[i] ?? Number.NaN)).filter((x) => Number.isFinite(x)));
}

/** Median over rounds of `a[i] / b[i]` (figures of two targets measured in the same rounds): machine drift between rounds cancels. */
export function pairedRatio(a: readonly number[] | undefined, b: readonly number[] | undefined): number {
  return pairedMedian(a, b, (x, y) => x / y);
}

/** Median over rounds of `a[i] − b[i]` (figures of two targets measured in the same rounds). */
export function pairedDifference(a: readonly number[] | undefined, b: readonly number[] | undefined): number {
  return pairedMedian(a, b, (x, y) => x - y);
}

/** Nearest-rank percentile `p` (0-100) of `xs`; NaN for none. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.min(s.length, Math.max(1, Math.ceil((p / 100) * s.length)));
  return s[rank - 1] as number;
}

/** Counts of each HTTP status (0 = connection error) as `{ "200": n, ... }`. */
export function statusCounts(timed: readonly { status: number }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const t of timed) counts[String(t.status)] = (counts[String(t.status)] ?? 0) + 1;
  return counts;
}

/**
 * Writes a benchmark's results as `bench/results/<YYYY-MM-DD of date>/<name>.json` and `.md` and
 * prints the Markdown.
 * @param date ISO date-time of the run.
 */
export function writeResults(name: string, date: string, json: unknown, md: string): void {
  const dir = fileURLToPath(new URL(`../results/${date.slice(0, 10)}/`, import.meta.url));
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}${name}.json`, JSON.stringify(json, null, 2) + '\n');
  writeFileSync(`${dir}${name}.md`, md + '\n');
  process.stdout.write(md + '\n');
}
