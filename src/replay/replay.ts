/**
 * Replays trace rows against a gateway (or any OpenAI-compatible server) on the trace's schedule,
 * compressed by `speed`, one `POST /v1/chat/completions` per row with a prompt of the row's exact
 * token count, and records what came back. A 429 is never retried: it is the measurement.
 */
import { once, setMaxListeners } from 'node:events';
import { open } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool, request } from 'undici';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { EncodingName } from '../tokens/index.ts';
import type { ProgressSink } from './progress.ts';
import { progressBar, silentProgress } from './progress.ts';
import { PromptBuilder } from './prompt.ts';
import type { RateLimitSnapshot, ReplayRecord, ReplayReport, UsageSnapshot } from './report.ts';
import { buildReport } from './report.ts';
import { ZipfAssigner } from './tenants.ts';
import type { TraceRow } from './trace.ts';

/** Options of {@link runReplay}. */
export interface ReplayOptions {
  /** Rows to replay, in time order (from `readTrace`). The first row is sent at once. */
  readonly rows: readonly TraceRow[];
  /** Base URL of the gateway, e.g. `http://127.0.0.1:8080` (a trailing `/v1` is accepted). */
  readonly target: string;
  /** Tenant API keys, hottest first (Zipf rank order); sent as `Authorization: Bearer <key>`. */
  readonly keys: readonly string[];
  /** Names that stand for keys in records and the report (a key without one is shown as is). */
  readonly labels?: ReadonlyMap<string, string>;
  /** Time compression: 1 = real time, 10 = ten times faster, Infinity = as fast as concurrency allows. @default 1 */
  readonly speed?: number;
  /** Most requests in flight; a row due while all are busy waits (and its lag is reported). @default 256 */
  readonly concurrency?: number;
  /** Zipf exponent of the tenant draw. @default 1.1 */
  readonly zipf?: number;
  /** Seed of the tenant draw. @default 42 */
  readonly seed?: number;
  /** Model name sent. @default 'gpt-4o-mini' */
  readonly model?: string;
  /** Tokenizer for the prompts; by default the model's. */
  readonly encoding?: EncodingName;
  /** Fixed `max_tokens` for every request; by default each row's `GeneratedTokens`. */
  readonly maxTokens?: number;
  /** Provider simulator base URL: its `GET /sim/stats` `rateLimited` is read before and after. */
  readonly simulator?: string;
  /** Write one JSON record per request to this file (JSONL), in completion order. */
  readonly out?: string;
  /** Draw a progress bar on stderr. @default process.stderr.isTTY */
  readonly progress?: boolean;
  /** Stops the replay: no new request is sent, those in flight are cancelled (recorded as `aborted`). */
  readonly signal?: AbortSignal;
  /** Timeout for the response headers and for gaps in the body, ms. @default 300_000 */
  readonly timeoutMs?: number;
  /** Source of time for `sentMs` and `latencyMs` (sleeps use real timers). @default systemClock */
  readonly clock?: Clock;
}

/** Counter of a semaphore whose waiters are woken in FIFO order. */
class Slots {
  #free: number;
  readonly #waiters: (() => void)[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  /** Resolves once a slot is taken; false if the signal fired first. */
  async take(signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return false;
    if (this.#free > 0) {
      this.#free--;
      return true;
    }
    return new Promise<boolean>((resolve) => {
      const onAbort = (): void => {
        const k = this.#waiters.indexOf(wake);
        if (k >= 0) this.#waiters.splice(k, 1);
        resolve(false);
      };
      const wake = (): void => {
        signal.removeEventListener('abort', onAbort);
        resolve(true);
      };
      this.#waiters.push(wake);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  give(): void {
    const next = this.#waiters.shift();
    if (next === undefined) this.#free++;
    else next();
  }
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function numberHeader(headers: Record<string, string | string[] | undefined>, name: string): number | null {
  const v = header(headers, name);
  if (v === undefined || v.trim() === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

function rateLimitSnapshot(headers: Record<string, string | string[] | undefined>): RateLimitSnapshot {
  return {
    limitTokens: numberHeader(headers, 'x-ratelimit-limit-tokens'),
    remainingTokens: numberHeader(headers, 'x-ratelimit-remaining-tokens'),
    limitRequests: numberHeader(headers, 'x-ratelimit-limit-requests'),
    remainingRequests: numberHeader(headers, 'x-ratelimit-remaining-requests'),
  };
}

const NO_HEADERS: RateLimitSnapshot = { limitTokens: null, remainingTokens: null, limitRequests: null, remainingRequests: null };

function retryAfterMsOf(headers: Record<string, string | string[] | undefined>): number | null {
  const ms = numberHeader(headers, 'retry-after-ms');
  if (ms !== null) return ms;
  const s = numberHeader(headers, 'retry-after');
  return s === null ? null : s * 1_000;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function usageOf(body: unknown): UsageSnapshot | null {
  if (!isObject(body) || !isObject(body.usage)) return null;
  const { prompt_tokens: p, completion_tokens: c, total_tokens: t } = body.usage;
  if (typeof p !== 'number' || typeof c !== 'number') return null;
  return { promptTokens: p, completionTokens: c, totalTokens: typeof t === 'number' ? t : p + c };
}

function errorCodeOf(headers: Record<string, string | string[] | undefined>, body: unknown): string | null {
  const ours = header(headers, 'x-quotaring-error');
  if (ours !== undefined) return ours;
  if (!isObject(body) || !isObject(body.error)) return null;
  const { code, type } = body.error;
  if (typeof code === 'string') return code;
  return typeof type === 'string' ? type : null;
}

/** `rateLimited` (429s sent) of the simulator's `GET /sim/stats`. @throws Error when it cannot be read. */
export async function simulatorRateLimited(simulator: string, signal?: AbortSignal): Promise<number> {
  const res = await request(new URL('/sim/stats', simulator), signal === undefined ? {} : { signal });
  const body: unknown = await res.body.json();
  if (res.statusCode !== 200 || !isObject(body) || typeof body.rateLimited !== 'number') {
    throw new Error(`${simulator}/sim/stats answered ${res.statusCode} without a numeric rateLimited`);
  }
  return body.rateLimited;
}

function chatPath(target: URL): string {
  return `${target.pathname.replace(/\/+$/, '').replace(/\/v1$/, '')}/v1/chat/completions`;
}

/**
 * Replays `rows` against `target` and returns the report (see {@link ReplayReport}).
 * Row r is sent at `(r.atMs − rows[0].atMs) / speed` ms after the start (or later when all
 * `concurrency` slots are busy), with a prompt of exactly `r.promptTokens` tokens (raised to the chat
 * overhead when smaller), `max_tokens` = `maxTokens` ?? `r.completionTokens`, and header
 * `x-sim-output-tokens: r.completionTokens`. Tenants are drawn by {@link ZipfAssigner} on the row index.
 * @throws RangeError for bad options (no keys, speed ≤ 0, concurrency < 1, maxTokens < 1, bad URL).
 * @throws Error when the simulator's stats cannot be read before the start.
 */
export async function runReplay(opts: ReplayOptions): Promise<ReplayReport> {
  const speed = opts.speed ?? 1;
  const concurrency = opts.concurrency ?? 256;
  const clock = opts.clock ?? systemClock;
  if (!(speed > 0)) throw new RangeError(`speed must be > 0 (got ${speed})`);
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be an integer >= 1 (got ${concurrency})`);
  if (opts.maxTokens !== undefined && (!Number.isInteger(opts.maxTokens) || opts.maxTokens < 1)) throw new RangeError(`maxTokens must be an integer >= 1 (got ${opts.maxTokens})`);
  let target: URL;
  try {
    target = new URL(opts.target);
  } catch {
    throw new RangeError(`target is not a URL: ${opts.target}`);
  }
  const tenants = new ZipfAssigner(opts.keys, { ...(opts.zipf === undefined ? {} : { s: opts.zipf }), ...(opts.seed === undefined ? {} : { seed: opts.seed }) });
  const prompts = new PromptBuilder({ model: opts.model ?? 'gpt-4o-mini', ...(opts.encoding === undefined ? {} : { encoding: opts.encoding }) });
  // One internal signal for every request (undici adds a listener per request in flight), linked to the caller's.
  const internal = new AbortController();
  setMaxListeners(concurrency + 16, internal.signal);
  const signal = internal.signal;
  const stop = (): void => internal.abort();
  if (opts.signal?.aborted === true) internal.abort();
  const path = chatPath(target);
  const rows = opts.rows;
  const t0 = rows[0]?.atMs ?? 0;

  const rateLimitedBefore = opts.simulator === undefined ? null : await simulatorRateLimited(opts.simulator, signal);
  // Opened before the start so that a bad path fails at once, not after an hour of replay.
  const out = opts.out === undefined ? null : (await open(opts.out, 'w')).createWriteStream();
  const timeoutMs = opts.timeoutMs ?? 300_000;
  const pool = new Pool(target.origin, { connections: concurrency, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  const progress: ProgressSink = (opts.progress ?? process.stderr.isTTY === true) ? progressBar(rows.length, process.stderr, opts.progress === true) : silentProgress;
  const slots = new Slots(concurrency);
  const records: ReplayRecord[] = [];
  const inFlight = new Set<Promise<void>>();
  let promptRaised = 0;

  const send = async (i: number, row: TraceRow, start: number): Promise<void> => {
    const promptTokens = Math.max(row.promptTokens, prompts.overhead);
    if (promptTokens !== row.promptTokens) promptRaised++;
    const maxTokens = opts.maxTokens ?? Math.max(1, row.completionTokens);
    const key = tenants.tenantOf(row.index);
    const tenant = opts.labels?.get(key) ?? key;
    const payload = JSON.stringify({ ...prompts.body(promptTokens), max_tokens: maxTokens });
    const sentAt = clock.now();
    const base = { i, row: row.index, tenant, atMs: row.atMs - t0, sentMs: sentAt - start, promptTokens, completionTokens: row.completionTokens, reservedTokens: promptTokens + maxTokens };
    let record: ReplayRecord;
    try {
      const res = await pool.request({
        method: 'POST',
        path,
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${key}`,
          'x-sim-output-tokens': String(row.completionTokens),
        },
        body: payload,
        signal,
      });
      const text = await res.body.text();
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch {
        body = null;
      }
      const queued = Number(header(res.headers, 'x-quotaring-queued-ms'));
      const queuedMs = Number.isFinite(queued) && queued > 0 ? queued : null;
      record = {
        ...base,
        queuedMs,
        decidedMs: base.sentMs + (queuedMs ?? 0),
        status: res.statusCode,
        latencyMs: clock.now() - sentAt,
        usage: res.statusCode >= 200 && res.statusCode < 300 ? usageOf(body) : null,
        headers: rateLimitSnapshot(res.headers),
        retryAfterMs: retryAfterMsOf(res.headers),
        errorCode: res.statusCode >= 200 && res.statusCode < 300 ? null : errorCodeOf(res.headers, body),
        gatewayError: header(res.headers, 'x-quotaring-error') !== undefined,
      };
    } catch (err) {
      const code = signal.aborted ? 'aborted' : `network:${(err as { code?: unknown }).code ?? (err as Error).name}`;
      record = { ...base, queuedMs: null, decidedMs: base.sentMs, status: 0, latencyMs: clock.now() - sentAt, usage: null, headers: NO_HEADERS, retryAfterMs: null, errorCode: code, gatewayError: false };
    }
    records.push(record);
    out?.write(`${JSON.stringify(record)}\n`);
    progress.tick(record);
  };

  opts.signal?.addEventListener('abort', stop, { once: true });
  const start = clock.now();
  try {
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as TraceRow;
      const dueAt = start + (row.atMs - t0) / speed;
      // Timers may fire a little early against the clock: sleep until less than 1 ms remains.
      for (let waitMs = dueAt - clock.now(); waitMs >= 1 && !signal.aborted; waitMs = dueAt - clock.now()) {
        await sleep(waitMs, undefined, { signal }).catch(() => undefined);
      }
      if (!(await slots.take(signal))) break;
      const p = send(i, row, start).finally(() => {
        slots.give();
        inFlight.delete(p);
      });
      inFlight.add(p);
    }
    await Promise.all(inFlight);
  } finally {
    opts.signal?.removeEventListener('abort', stop);
    progress.stop();
    await pool.close();
    if (out !== null) {
      out.end();
      await once(out, 'finish');
    }
  }
  const durationMs = clock.now() - start;

  let upstream429: number | null = null;
  const warnings: string[] = [];
  if (opts.simulator !== undefined && rateLimitedBefore !== null) {
    try {
      upstream429 = (await simulatorRateLimited(opts.simulator)) - rateLimitedBefore;
    } catch (err) {
      warnings.push(`could not read ${opts.simulator}/sim/stats after the run: ${(err as Error).message}`);
    }
  }
  return buildReport(records, { rule: tenants.rule, speed, rows: rows.length, durationMs, upstream429, promptRaised, aborted: signal.aborted, warnings });
}
