/**
 * The streaming load of the benchmarks (`npm run bench`, `bench:streams`): many concurrent
 * streaming chat requests opened on a ramp from one undici Agent, through undici's `dispatch` with a
 * handler (no Readable per response, so that the client takes little of the CPU the measured
 * processes need), and one measured pass over a target: per stream its status, content tokens, SSE
 * events, time to headers and duration; the gaps between consecutive events (HDR histogram, µs);
 * the RSS peak (sampled every 100 ms) and the CPU of each process of the target.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { build } from 'hdr-histogram-js';
import type { Histogram } from 'hdr-histogram-js';
import { Agent } from 'undici';
import { processCpuSeconds } from './cluster-processes.ts';
import { chatBody, percentile, statusCounts } from './load.ts';
import { cpuByRole, rssByRole } from './targets.ts';
import type { Target } from './targets.ts';

/** One content token of an OpenAI chat stream (the first event's `"role"` delta does not match). */
const TOKEN_EVENT = Buffer.from('"delta":{"content":');
/** The start of one SSE event's data line (`data: [DONE]` included). */
const SSE_EVENT = Buffer.from('data:');
/** Bytes kept from the end of a chunk to find a needle that straddles two chunks. */
const TAIL_BYTES = Math.max(TOKEN_EVENT.length, SSE_EVENT.length) - 1;

/** What {@link openStreams} opens. */
export interface StreamLoad {
  /** Base URL; streams go to `<url>/v1/chat/completions`. */
  readonly url: string;
  /** API keys, one per stream round-robin. */
  readonly keys: readonly string[];
  /** How many streams. */
  readonly streams: number;
  /** Output tokens each stream asks for (`max_tokens`). */
  readonly tokens: number;
  /** Stream i is opened at start + i · rampS / streams, s. */
  readonly rampS: number;
}

/** One stream's outcome. */
export interface Stream {
  /** HTTP status, 0 for a connection error. */
  status: number;
  /** Content tokens received (OpenAI chat deltas with content). */
  tokens: number;
  /** SSE `data:` events received (role delta, tokens, finish, `[DONE]`). */
  events: number;
  /** Body chunks received: fewer than the events when a late hop sends several events at once. */
  chunks: number;
  /** Request sent → status and headers received, ms. */
  headersMs: number;
  /** Headers → end of the body, ms (NaN unless status 200 and no error). */
  durationMs: number;
  error?: string;
}

/** Counts `needle` in `chunk`, including one that straddles the end of `prevTail` and the head of `chunk`. */
function countIn(needle: Buffer, prevTail: Buffer, chunk: Buffer): number {
  let n = 0;
  for (let at = chunk.indexOf(needle); at !== -1; at = chunk.indexOf(needle, at + needle.length)) n++;
  if (prevTail.length > 0) {
    const seam = Buffer.concat([prevTail.subarray(Math.max(0, prevTail.length - (needle.length - 1))), chunk.subarray(0, needle.length - 1)]);
    if (seam.indexOf(needle) !== -1) n++;
  }
  return n;
}

/** An undici Agent for `streams` concurrent streams: a connection each, kept alive 120 s, no headers timeout to speak of. */
export function streamAgent(streams: number): Agent {
  return new Agent({ connections: streams, keepAliveTimeout: 120_000, headersTimeout: 900_000, bodyTimeout: 120_000 });
}

/**
 * Opens `load.streams` streaming chat requests (50-token prompt, `stream: true`) through `agent`,
 * stream i at start + i · rampS / streams, and reads each to its end.
 * @param onOpen called with +1 when a stream gets status 200 and its headers, -1 when it ends.
 * @param gapsUs records, for each chunk of a 200 stream after its first, the time since the stream's
 *   previous chunk (µs) for its first event and 0 for each further event in it.
 */
export async function openStreams(agent: Agent, load: StreamLoad, onOpen: (delta: number) => void = () => {}, gapsUs?: Histogram): Promise<Stream[]> {
  const base = JSON.parse(chatBody(50)) as Record<string, unknown>;
  const body = JSON.stringify({ ...base, max_tokens: load.tokens, stream: true });
  const start = performance.now();
  const one = async (i: number): Promise<Stream> => {
    const wait = start + (i * load.rampS * 1_000) / load.streams - performance.now();
    if (wait > 1) await sleep(wait);
    const s: Stream = { status: 0, tokens: 0, events: 0, chunks: 0, headersMs: Number.NaN, durationMs: Number.NaN };
    const t0 = performance.now();
    let t1 = 0;
    let last = 0;
    let open = false;
    let tail: Buffer = Buffer.alloc(0);
    let errorBody = '';
    await new Promise<void>((resolve) => {
      const done = (err?: Error): void => {
        if (open) onOpen(-1);
        open = false;
        if (err !== undefined) s.error = err.message;
        else if (s.status !== 200) s.error = `${s.status}: ${errorBody.slice(0, 300)}`;
        else s.durationMs = performance.now() - t1;
        resolve();
      };
      agent.dispatch(
        { origin: load.url, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${load.keys[i % load.keys.length] ?? ''}` }, body },
        {
          onConnect: () => {},
          onHeaders: (statusCode: number) => {
            t1 = performance.now();
            s.headersMs = t1 - t0;
            s.status = statusCode;
            if (statusCode === 200) {
              open = true;
              onOpen(1);
            }
            return true;
          },
          onData: (chunk: Buffer) => {
            if (s.status !== 200) {
              if (errorBody.length < 300) errorBody += chunk.toString();
              return true;
            }
            const now = performance.now();
            const events = countIn(SSE_EVENT, tail, chunk);
            if (gapsUs !== undefined && s.chunks > 0 && events > 0) {
              gapsUs.recordValue(Math.round((now - last) * 1_000));
              for (let e = 1; e < events; e++) gapsUs.recordValue(0);
            }
            if (events > 0) last = now;
            s.chunks++;
            s.events += events;
            s.tokens += countIn(TOKEN_EVENT, tail, chunk);
            tail = chunk.subarray(Math.max(0, chunk.length - TAIL_BYTES));
            return true;
          },
          onComplete: () => done(),
          onError: (err: Error) => done(err),
        },
      );
    });
    return s;
  };
  return Promise.all(Array.from({ length: load.streams }, (_, i) => one(i)));
}

/**
 * Unmeasured pass that opens a connection per stream on every hop of `url`: `streams` streams over
 * `rampS` s, each lasting the ramp and 1 s more at `tps` tokens a second so that all overlap; then
 * 500 ms of rest. Resolves with the number of streams that were not 200.
 */
export async function warmStreams(agent: Agent, load: Omit<StreamLoad, 'tokens'>, tps: number): Promise<number> {
  const tokens = Math.max(2, Math.ceil(tps * (load.rampS + 1)));
  const warm = await openStreams(agent, { ...load, tokens });
  await sleep(500);
  return warm.filter((s) => s.status !== 200).length;
}

/** Figures of one measured pass of {@link measureStreams}. */
export interface StreamPass {
  readonly streams: number;
  /** Counts of each status (0 = connection error). */
  readonly statuses: Record<string, number>;
  /** Streams with status 200 and exactly the asked number of content tokens. */
  readonly complete: number;
  /** SSE events received over all streams. */
  readonly events: number;
  /** Most streams open at once (headers received, end not yet). */
  readonly peakOpen: number;
  readonly headersMs: { readonly p50: number; readonly p99: number };
  readonly durationS: { readonly p50: number; readonly p99: number };
  /** Gap between consecutive events of a stream, ms (0 for events that came in one chunk). */
  readonly gapMs: { readonly p50: number; readonly p99: number };
  /** Median body chunks per 200 stream (tokens + 2 or so when every event arrives alone). */
  readonly chunksP50: number;
  /** Peak RSS of each process of the target during the pass, KiB. */
  readonly rssPeakKiB: Record<string, number>;
  /**
   * What one more open stream costs each process, KiB: the least-squares slope of its RSS over the
   * number of streams open, on the samples (every 100 ms) of the ramp up to the peak. The process's
   * fixed costs of being under load (a grown young generation, compiled code) do not depend on the
   * number of streams and fall into the intercept, not the slope. NaN with fewer than 5 samples.
   */
  readonly rssSlopeKiB: Record<string, number>;
  /** CPU seconds of each process of the target during the pass, and of this client (`client`). */
  readonly cpuSeconds: Record<string, number>;
  readonly seconds: number;
  /** Up to 5 distinct client-side errors and non-200 bodies. */
  readonly errors: string[];
}

/**
 * One measured pass: opens the streams of `load` against `target` through `agent` (warm it first:
 * see {@link openStreams}), samples the target's processes' RSS every 100 ms and reads their CPU
 * (and this client's) before and after.
 */
export async function measureStreams(agent: Agent, target: Target, load: Omit<StreamLoad, 'url'>): Promise<StreamPass> {
  const peak: Record<string, number> = rssByRole(target.procs);
  /** (streams open, RSS by role) every 100 ms while the number open has not yet reached its peak. */
  const ramp: { open: number; rss: Record<string, number> }[] = [];
  let open = 0;
  let peakOpen = 0;
  const sample = (): void => {
    const rss = rssByRole(target.procs);
    for (const [role, kib] of Object.entries(rss)) peak[role] = Math.max(peak[role] ?? 0, kib);
    if (open >= peakOpen) ramp.push({ open, rss });
  };
  const timer = setInterval(sample, 100);
  const gaps = build({ lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: 3 });
  const cpu = (): Record<string, number> => ({ ...cpuByRole(target.procs), client: processCpuSeconds(process.pid) });
  const cpuBefore = cpu();
  const started = performance.now();
  let streams: Stream[];
  try {
    streams = await openStreams(agent, { ...load, url: target.url }, (d) => {
      open += d;
      peakOpen = Math.max(peakOpen, open);
    }, gaps);
  } finally {
    clearInterval(timer);
  }
  sample();
  const seconds = (performance.now() - started) / 1_000;
  const cpuAfter = cpu();
  const headers = streams.map((s) => s.headersMs).filter((x) => Number.isFinite(x));
  const durations = streams.map((s) => s.durationMs / 1_000).filter((x) => Number.isFinite(x));
  const gapAt = (p: number): number => (gaps.totalCount === 0 ? Number.NaN : gaps.getValueAtPercentile(p) / 1_000);
  return {
    streams: streams.length,
    statuses: statusCounts(streams),
    complete: streams.filter((s) => s.status === 200 && s.tokens === load.tokens).length,
    events: streams.reduce((sum, s) => sum + s.events, 0),
    peakOpen,
    headersMs: { p50: percentile(headers, 50), p99: percentile(headers, 99) },
    durationS: { p50: percentile(durations, 50), p99: percentile(durations, 99) },
    gapMs: { p50: gapAt(50), p99: gapAt(99) },
    chunksP50: percentile(streams.filter((s) => s.status === 200).map((s) => s.chunks), 50),
    rssPeakKiB: peak,
    rssSlopeKiB: Object.fromEntries(Object.keys(peak).map((role) => [role, slope(ramp.map((r) => [r.open, r.rss[role] ?? Number.NaN]))])),
    cpuSeconds: Object.fromEntries(Object.keys(cpuAfter).map((role) => [role, (cpuAfter[role] ?? Number.NaN) - (cpuBefore[role] ?? Number.NaN)])),
    seconds,
    errors: [...new Set(streams.flatMap((s) => (s.error === undefined ? [] : [s.error])))].slice(0, 5),
  };
}

/** Least-squares slope of y over x for `points` ([x, y]); NaN with fewer than 5 points or no spread of x. */
export function slope(points: readonly (readonly [number, number])[]): number {
  if (points.length < 5) return Number.NaN;
  const n = points.length;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (const [x, y] of points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) ** 2;
  }
  return sxx === 0 ? Number.NaN : sxy / sxx;
}
