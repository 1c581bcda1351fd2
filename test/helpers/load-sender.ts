/**
 * The open-loop load sender of the e2e tests: requests at a fixed rate whatever the answers take.
 *
 * What it sends: one `POST` (undici `request`) per due time of each {@link LoadStream}, to the
 * URL, with the headers and the body the test gives (per stream, per request), through the test's
 * dispatcher (or undici's global one), optionally with a client timeout.
 *
 * At what rate: stream i's n-th request is due at `t0 + fromMs + n × 1000 / ratePerS` ms (with
 * `stagger`, plus i / streams.length of its interval, so the streams do not fire together). It is
 * sent at its due time or, when the process fell behind, at once: the rate is kept, not the gaps.
 * The sender never waits for an answer before sending the next request.
 *
 * What it records per request ({@link LoadRecord}, in `sent`, in send order, filled in as it goes):
 * its stream's `id` as `tenant`, when it was sent (`start`) and answered (`end`), its HTTP status
 * (or -1 failed, -2 timed out) and whatever the test's hooks read from the answer (`tokens`, its own
 * fields).
 *
 * How it stops: a stream stops at its first request due at or after `untilMs` (or, with
 * `stopBy: 'clock'`, once the clock passed `untilMs` after a request was sent); every stream stops
 * at {@link Load.stop}. `ended` resolves when no stream will send again; `settled()` when every
 * request sent was answered or failed.
 */
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Dispatcher } from 'undici';

/** One stream of requests at a fixed rate: a tenant's, or one phase of a tenant's load. */
export interface LoadStream {
  /** Recorded as each of its requests' `tenant`. */
  readonly id: string | number;
  /** Requests a second. */
  readonly ratePerS: number;
  /** When its first request is due, after t0 (ms); default 0. */
  readonly fromMs?: number;
  /** Its requests due at or after this, after t0, are not sent (ms); default: it sends until stopped. */
  readonly untilMs?: number;
}

/** One request as the sender saw it; `start` and `end` in clock ms, or ms since t0 with `relative`. */
export interface SentRequest<Id = string | number> {
  /** The `id` of the stream that sent it. */
  readonly tenant: Id;
  /** When it was sent (ms). */
  readonly start: number;
  /** When its body was read, or when it failed (ms); 0 while in flight. */
  end: number;
  /** HTTP status (set when the headers arrive; 0 before); -1 failed (no answer, a cut body, or a hook threw); -2 no answer within `timeoutMs`. */
  status: number;
  /** Tokens it used, as the test's hook read them from the answer; 0 unless one set it. */
  tokens: number;
  /** A failed request's error message (or what a hook kept of an answer). */
  error?: string;
}

/** The record of one request of stream type `S`, with the test's own fields `X`. */
export type LoadRecord<S extends LoadStream, X extends object = object> = SentRequest<S['id']> & X;

/** Options of {@link startLoad}; `S` is the test's stream type, `X` its own fields on each record. */
export interface LoadOptions<S extends LoadStream, X extends object> {
  /** The streams, each at its own rate. */
  readonly streams: readonly S[];
  /** Stream i's first request due i / streams.length of its interval after its `fromMs`. */
  readonly stagger?: boolean;
  /** The schedule's origin (clock ms); default: now. */
  readonly t0?: number;
  /** Record `start` and `end` as ms since t0 rather than clock ms. */
  readonly relative?: boolean;
  /**
   * How `untilMs` ends a stream: `'due'` (default) sends every request due before it; `'clock'`
   * sends the next request (when due) while the clock, once the previous one was sent, is before
   * it, as a `for (n = 0; Date.now() - t0 < untilMs; n++)` loop does (on time: one more request,
   * due at `untilMs`).
   */
  readonly stopBy?: 'due' | 'clock';
  /** Where request `n` of a stream goes (full URL). */
  readonly url: string | ((stream: S, n: number) => string);
  /** The headers of request `n` of a stream. */
  readonly headers: (stream: S, n: number) => Record<string, string>;
  /** The body of a stream's request; `index`: its record's place in `sent`. */
  readonly body: string | ((stream: S, index: number) => string);
  /** Default: undici's global dispatcher. */
  readonly dispatcher?: Dispatcher;
  /** A request not answered (body included) within this is aborted and recorded -2 (ms). */
  readonly timeoutMs?: number;
  /** undici's `headersTimeout` (ms). */
  readonly headersTimeout?: number;
  /** undici's `bodyTimeout` (ms). */
  readonly bodyTimeout?: number;
  /** The test's own fields of a new record, before it is sent. */
  readonly fields?: (stream: S) => X;
  /** Called before each turn of a stream (before waiting for request `n`'s due time). */
  readonly beforeWait?: (stream: S, n: number) => void;
  /** Called when an answer's status and headers arrive, before its body is read. */
  readonly onResponse?: (s: LoadRecord<S, X>, res: Dispatcher.ResponseData) => void;
  /** Called with each answer once its body is read (`end` set); may set the record's fields; throwing fails it (-1). */
  readonly onAnswer?: (s: LoadRecord<S, X>, res: Dispatcher.ResponseData, text: string) => void;
  /** Called when a request failed (status and `error` set). */
  readonly onError?: (s: LoadRecord<S, X>, err: Error) => void;
}

/** A running load, from {@link startLoad}. */
export interface Load<R> {
  /** Every request sent, in send order, filled in as answers arrive. */
  readonly sent: R[];
  /** The schedule's origin (clock ms). */
  readonly t0: number;
  /** Resolves once no stream will send again (each past its `untilMs`, or stopped). */
  readonly ended: Promise<void>;
  /** No request is sent from now on; resolves as `ended`. */
  stop(): Promise<void>;
  /** Resolves once every request sent so far was answered or failed. */
  settled(): Promise<void>;
}

/** Starts sending: see the module comment. Returns at once; the first requests go out as they fall due. */
export function startLoad<S extends LoadStream, X extends object = object>(o: LoadOptions<S, X>): Load<LoadRecord<S, X>> {
  const t0 = o.t0 ?? Date.now();
  const origin = o.relative === true ? t0 : 0;
  const sent: LoadRecord<S, X>[] = [];
  const inFlight = new Set<Promise<void>>();
  const stopping = new AbortController();
  setMaxListeners(0, stopping.signal); // one listener per stream's pause: many streams share it

  const fire = (stream: S, n: number): void => {
    const s = { tenant: stream.id, start: Date.now() - origin, end: 0, status: 0, tokens: 0, ...o.fields?.(stream) } as LoadRecord<S, X>;
    const index = sent.push(s) - 1;
    const p = (async () => {
      try {
        const res = await request(typeof o.url === 'string' ? o.url : o.url(stream, n), {
          method: 'POST',
          headers: o.headers(stream, n),
          body: typeof o.body === 'string' ? o.body : o.body(stream, index),
          ...(o.dispatcher === undefined ? {} : { dispatcher: o.dispatcher }),
          ...(o.timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(o.timeoutMs) }),
          ...(o.headersTimeout === undefined ? {} : { headersTimeout: o.headersTimeout }),
          ...(o.bodyTimeout === undefined ? {} : { bodyTimeout: o.bodyTimeout }),
        });
        s.status = res.statusCode;
        o.onResponse?.(s, res);
        const text = await res.body.text();
        s.end = Date.now() - origin;
        o.onAnswer?.(s, res, text);
      } catch (err) {
        s.end = Date.now() - origin;
        s.status = o.timeoutMs !== undefined && (err as Error).name === 'TimeoutError' ? -2 : -1;
        s.error = (err as Error).message;
        o.onError?.(s, err as Error);
      }
    })();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };

  const run = async (stream: S, i: number): Promise<void> => {
    const interval = 1_000 / stream.ratePerS;
    const from = (stream.fromMs ?? 0) + (o.stagger === true ? (interval * i) / o.streams.length : 0);
    const until = stream.untilMs ?? Infinity;
    for (let n = 0; !stopping.signal.aborted; n++) {
      if (o.stopBy === 'clock' && Date.now() - t0 >= until) break;
      o.beforeWait?.(stream, n);
      const due = t0 + from + n * interval;
      if (o.stopBy !== 'clock' && due - t0 >= until) break;
      if (due > Date.now()) await sleep(due - Date.now(), undefined, { signal: stopping.signal }).catch(() => undefined);
      if (stopping.signal.aborted) break;
      fire(stream, n);
    }
  };

  // From the next microtask: the hooks may use the handle returned below.
  const ended = Promise.resolve()
    .then(() => Promise.all(o.streams.map(run)))
    .then(() => undefined);
  return {
    sent,
    t0,
    ended,
    stop: () => {
      stopping.abort();
      return ended;
    },
    settled: () => Promise.all([...inFlight]).then(() => undefined),
  };
}

/** Prompt + completion tokens of the first `usage` in an answer's text (JSON or SSE); undefined when it has none. */
export function usageTokens(text: string): number | undefined {
  const usage = /"usage":\{"prompt_tokens":(\d+),"completion_tokens":(\d+)/.exec(text);
  return usage === null ? undefined : Number(usage[1]) + Number(usage[2]);
}

/** `usage.total_tokens` of a JSON answer; throws when the text is not JSON. */
export function totalTokens(text: string): number {
  return (JSON.parse(text) as { usage: { total_tokens: number } }).usage.total_tokens;
}
