/**
 * Delivers a successful reply: the whole JSON body after a delay, or an SSE stream written in one
 * go (tokensPerSecond 0) or paced with a single timer at a time; cuts dropped streams; notices a
 * client that went away and stops every timer.
 */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { FastifyReply } from 'fastify';
import type { HeaderMap } from '../providers/rate-limit-headers.ts';

/** How a reply ended: sent in full, cut by the drop fault, or abandoned by the client. */
export type ReplyOutcome = 'completed' | 'dropped' | 'aborted';

/** Called exactly once when a reply ends, with the output tokens sent to the client. */
export type ReplyEnd = (outcome: ReplyOutcome, sentTokens: number) => void;

/**
 * An SSE stream whose token events are all the same text (the simulator streams one `" the"` per
 * event), so a whole stream is `head + unit × units + tail`.
 */
export interface StreamPlan {
  /** Events before the first token (e.g. OpenAI's role chunk, Anthropic's message_start … ping). */
  readonly head: string;
  /** The event of one output token. */
  readonly unit: string;
  /** Output tokens (unit events). */
  readonly units: number;
  /** The event of output token `i` (from 0) when they differ (a sequence number in each); else `unit` every time. */
  readonly unitAt?: (i: number) => string;
  /** Events after the last token (final chunk, usage chunk, `[DONE]`; message_delta, message_stop). */
  readonly tail: string;
  /**
   * How the strings are written: `utf8` text (SSE), or `latin1` for a binary stream held one byte
   * per character (Bedrock's event-stream messages, whose head + unit × n + tail is the same concatenation). @default 'utf8'
   */
  readonly encoding?: 'utf8' | 'latin1';
}

/** Timing of a stream. */
export interface StreamTiming {
  /** Ms before the headers and the first token. */
  readonly delayMs: number;
  /** Token events per second after the first; 0 = everything at once. */
  readonly tokensPerSecond: number;
  /** When not null, the socket is destroyed after this many token events (the drop fault). */
  readonly dropAfter: number | null;
}

const SSE_HEADERS: HeaderMap = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
};

/** Calls `onEnd('aborted', sent())` if the client goes away before `isDone()`. */
function watchClose(raw: ServerResponse, isDone: () => boolean, abort: () => void): void {
  raw.once('close', () => {
    if (!isDone()) abort();
  });
}

/**
 * Sends a 200 JSON reply after `delayMs` (ms; 0 = now, through fastify's normal path).
 * @param tokens output tokens carried by the body, reported to `onEnd` on completion.
 */
export function deliverJson(reply: FastifyReply, headers: HeaderMap, body: string, delayMs: number, tokens: number, onEnd: ReplyEnd): void {
  headers['content-type'] = 'application/json; charset=utf-8';
  if (delayMs <= 0) {
    reply.code(200).headers(headers).send(body);
    onEnd('completed', tokens);
    return;
  }
  reply.hijack();
  const raw = reply.raw;
  let done = false;
  const timer = setTimeout(() => {
    done = true;
    headers['content-length'] = String(Buffer.byteLength(body));
    raw.writeHead(200, headers);
    raw.end(body);
    onEnd('completed', tokens);
  }, delayMs);
  watchClose(raw, () => done, () => {
    done = true;
    clearTimeout(timer);
    onEnd('aborted', 0);
  });
}

/** Writes `data`, then destroys the socket once it was handed to the OS. */
function writeThenDestroy(raw: ServerResponse, data: string, encoding: BufferEncoding): void {
  raw.write(data, encoding, () => raw.destroy());
}

/**
 * Streams `plan` as `text/event-stream`: after `timing.delayMs` the headers, the head and the
 * first token; then the other tokens at `timing.tokensPerSecond` (catching up after a late timer,
 * one timer at a time), then the tail. With `tokensPerSecond` 0 the rest is one write.
 * `timing.dropAfter` cuts the connection after that many tokens. A client that disconnects stops
 * the stream (the pending timer is cleared) and ends it as `aborted`.
 */
export function deliverStream(reply: FastifyReply, headers: HeaderMap, plan: StreamPlan, timing: StreamTiming, onEnd: ReplyEnd): void {
  reply.hijack();
  const raw = reply.raw;
  const { head, units, tail } = plan;
  const enc = plan.encoding ?? 'utf8';
  const unitAt = plan.unitAt;
  /** The events of tokens `from` (inclusive) to `to` (exclusive). */
  const run = (from: number, to: number): string => {
    if (unitAt === undefined) return plan.unit.repeat(to - from);
    let out = '';
    for (let i = from; i < to; i++) out += unitAt(i);
    return out;
  };
  const dropAt = timing.dropAfter === null ? Infinity : Math.min(timing.dropAfter, units);
  const tps = timing.tokensPerSecond;
  let done = false;
  let sent = 0;
  let timer: NodeJS.Timeout | undefined;
  let t0 = 0;

  const finish = (outcome: ReplyOutcome): void => {
    done = true;
    onEnd(outcome, sent);
  };
  const drop = (data: string): void => {
    finish('dropped');
    writeThenDestroy(raw, data, enc);
  };

  const tick = (): void => {
    timer = undefined;
    const interval = 1000 / tps;
    const due = Math.min(units, dropAt, 1 + Math.floor((performance.now() - t0) / interval));
    let data = '';
    if (due > sent) {
      data = run(sent, due);
      sent = due;
    }
    if (sent >= dropAt) return drop(data);
    if (sent >= units) {
      finish('completed');
      raw.end(data + tail, enc);
      return;
    }
    if (data !== '') raw.write(data, enc);
    timer = setTimeout(tick, Math.max(0, t0 + sent * interval - performance.now()));
  };

  const start = (): void => {
    timer = undefined;
    raw.writeHead(200, { ...SSE_HEADERS, ...headers });
    if (dropAt !== Infinity && (tps === 0 || dropAt === 0)) {
      sent = dropAt;
      return drop(head + run(0, dropAt));
    }
    if (tps === 0 || units === 0) {
      sent = units;
      finish('completed');
      raw.end(head + run(0, units) + tail, enc);
      return;
    }
    t0 = performance.now();
    sent = 1;
    if (sent >= dropAt) return drop(head + run(0, 1));
    if (sent >= units) {
      finish('completed');
      raw.end(head + run(0, 1) + tail, enc);
      return;
    }
    raw.write(head + run(0, 1), enc);
    timer = setTimeout(tick, 1000 / tps);
  };

  watchClose(raw, () => done, () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    finish('aborted');
  });
  if (timing.delayMs > 0) timer = setTimeout(start, timing.delayMs);
  else start();
}
