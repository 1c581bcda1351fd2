/**
 * `quotaring top`: the router's live stream (`/admin/v1/live` on its admin port) as a plain-text
 * table in the terminal, redrawn on every snapshot (once a second) until `q` or Ctrl-C; with
 * `--once`, one snapshot printed without ANSI codes (for scripts and tests).
 */
import type { IncomingMessage } from 'node:http';
import { WebSocket } from 'ws';
import type { LimitLevel, LiveSnapshot } from './levels.ts';

/** How long `--once` waits for a first snapshot, ms. */
const ONCE_TIMEOUT_MS = 10_000;
/** Events listed under the table. */
const TOP_EVENTS = 8;
const CLEAR = '\x1b[H\x1b[2J\x1b[3J';

function rate(n: number): string {
  return n >= 100 ? String(Math.round(n)) : n.toFixed(1);
}

function clock(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}

function pad(s: string, n: number): string {
  return s.length >= n ? `${s} ` : s + ' '.repeat(n - s.length);
}

function padLeft(s: string, n: number): string {
  return s.length >= n ? ` ${s}` : ' '.repeat(n - s.length) + s;
}

function limitText(l: LimitLevel): string {
  return `${l.name} ${l.remaining}/${l.limit}`;
}

/**
 * The snapshot as lines of at most `width` characters: a header (router, ring version, members,
 * time), one line per node, the busiest tenants with remaining/limit per limit, hot tenants, and the
 * last events of the snapshot.
 */
export function renderTop(s: LiveSnapshot, width: number): string {
  const w = Math.max(40, Math.floor(width));
  const lines: string[] = [];
  const up = s.nodes.filter((n) => n.up).length;
  lines.push(`quotaring top · ${s.router} · ring ${s.ring.version === '' ? '(empty)' : s.ring.version} · ${s.ring.members} members (${up} up) · ${clock(s.atMs)} UTC`);
  lines.push('');
  lines.push(`${pad('NODE', 14)}${pad('STATE', 6)}${padLeft('IN-FLIGHT', 10)}${padLeft('ADMIT/S', 9)}${padLeft('429/S', 8)}${padLeft('QUEUED', 8)}  FLAGS`);
  for (const n of s.nodes) {
    const l = n.levels;
    if (l === undefined) {
      lines.push(`${pad(n.id, 14)}${pad(n.up ? 'up' : 'DOWN', 6)}${padLeft('-', 10)}${padLeft('-', 9)}${padLeft('-', 8)}${padLeft('-', 8)}  ${n.url}`);
      continue;
    }
    const flags = [l.fallback ? 'FALLBACK' : '', l.ring !== null && l.ring !== s.ring.version ? `ring ${l.ring}` : ''].filter((f) => f !== '').join(' ');
    lines.push(`${pad(n.id, 14)}${pad('up', 6)}${padLeft(String(l.inFlight), 10)}${padLeft(rate(l.admittedPerSec), 9)}${padLeft(rate(l.refusedPerSec), 8)}${padLeft(String(l.queued), 8)}  ${flags}`);
  }
  lines.push('');
  lines.push(`${pad('TENANT', 16)}${pad('NODE', 12)}${padLeft('ADMIT/S', 9)}${padLeft('429/S', 8)}${padLeft('QUEUED', 8)}  LIMITS (remaining/limit)`);
  if (s.tenants.length === 0) lines.push('(no traffic in the last second)');
  for (const t of s.tenants) {
    const limits = t.limits.length === 0 ? '(decided elsewhere)' : t.limits.map(limitText).join('  ');
    lines.push(`${pad(t.tenant, 16)}${pad(t.node, 12)}${padLeft(rate(t.admittedPerSec), 9)}${padLeft(rate(t.refusedPerSec), 8)}${padLeft(String(t.queued), 8)}  ${limits}`);
  }
  if (s.hot.length > 0) {
    lines.push('');
    lines.push(`HOT  ${s.hot.map((h) => `${h.tenant} ×${h.k}`).join('  ')}`);
  }
  if (s.events.length > 0) {
    lines.push('');
    lines.push('EVENTS');
    for (const e of s.events.slice(-TOP_EVENTS)) lines.push(`${clock(e.atMs)}  ${pad(e.kind, 17)}${e.message}`);
  }
  return lines.map((line) => line.trimEnd()).map((l) => (l.length > w ? `${l.slice(0, w - 1)}…` : l)).join('\n');
}

/** The live stream's ws(s):// URL from a router admin base URL (http or https). @throws TypeError for a bad URL. */
export function liveUrl(adminUrl: string): string {
  const u = new URL(adminUrl);
  if (u.protocol !== 'http:' && u.protocol !== 'https:' && u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new TypeError(`${adminUrl}: not an http(s) URL`);
  u.protocol = u.protocol === 'https:' || u.protocol === 'wss:' ? 'wss:' : 'ws:';
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/admin/v1/live`;
  u.search = '';
  u.hash = '';
  return u.toString();
}

/** Options of {@link runTop}. */
export interface TopOptions {
  /** The router's admin base URL, e.g. `http://127.0.0.1:9200`. */
  readonly url: string;
  readonly token: string;
  readonly out: NodeJS.WritableStream;
  /** Print the first snapshot without ANSI codes and resolve 0. */
  readonly once?: boolean;
  /** Stops the view (resolves 0), like Ctrl-C. */
  readonly signal?: AbortSignal;
  /** Where failures are written. @default process.stderr */
  readonly err?: NodeJS.WritableStream;
  /**
   * Keys: `q`, `Q` or Ctrl-C stop the view (resolves 0). A TTY is put in raw mode (one key at
   * a time) and restored on exit. Not read with `once`. @default process.stdin when it is a TTY
   */
  readonly input?: NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
}

/** Keys that quit the live view: q, Q, Ctrl-C (in raw mode Ctrl-C arrives as a byte, not SIGINT). */
const QUIT_KEYS = new Set(['q', 'Q', '\x03']);

/**
 * Connects to the live stream with `Authorization: Bearer <token>` and prints each snapshot until
 * SIGINT or `signal` (0), or once with `once` (0). Resolves 1, after one line on `err`, when the
 * token is refused (`admin token refused`), the router cannot be reached, or the stream ends.
 */
export async function runTop(opts: TopOptions): Promise<number> {
  const err = opts.err ?? process.stderr;
  let url: string;
  try {
    url = liveUrl(opts.url);
  } catch (e) {
    err.write(`error: --url ${(e as Error).message}\n`);
    return 1;
  }
  const tty = opts.out as NodeJS.WritableStream & { columns?: number; isTTY?: boolean };
  return new Promise<number>((resolve) => {
    let done = false;
    let events: LiveSnapshot['events'] = [];
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${opts.token}` }, handshakeTimeout: 5_000, perMessageDeflate: false });
    const onSigint = (): void => finish(0);
    const onAbort = (): void => finish(0);
    const input = opts.once === true ? undefined : (opts.input ?? (process.stdin.isTTY ? process.stdin : undefined));
    const raw = input?.isTTY === true && typeof input.setRawMode === 'function';
    const onKey = (data: Buffer | string): void => {
      if ([...String(data)].some((c) => QUIT_KEYS.has(c))) finish(0);
    };
    const onceTimer =
      opts.once === true
        ? setTimeout(() => {
            err.write(`error: no snapshot from ${url} within ${ONCE_TIMEOUT_MS / 1_000} s\n`);
            finish(1);
          }, ONCE_TIMEOUT_MS)
        : undefined;
    function finish(code: number): void {
      if (done) return;
      done = true;
      clearTimeout(onceTimer);
      process.removeListener('SIGINT', onSigint);
      opts.signal?.removeEventListener('abort', onAbort);
      if (input !== undefined) {
        input.removeListener('data', onKey);
        if (raw) input.setRawMode?.(false);
        input.pause();
      }
      if (opts.once !== true && tty.isTTY === true) opts.out.write('\x1b[?25h');
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.terminate();
      resolve(code);
    }
    if (opts.signal?.aborted === true) return finish(0);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    process.once('SIGINT', onSigint);
    if (input !== undefined) {
      if (raw) input.setRawMode?.(true);
      input.on('data', onKey);
      input.resume();
    }

    ws.on('unexpected-response', (_req, res: IncomingMessage) => {
      res.resume();
      if (res.statusCode === 401) err.write(`admin token refused by ${opts.url} (check the variable given by --token-env)\n`);
      else err.write(`error: ${url} answered HTTP ${res.statusCode ?? '?'} instead of opening the live stream\n`);
      finish(1);
    });
    ws.on('error', (e: Error & { code?: string }) => {
      if (done) return;
      if (e.code === 'ECONNREFUSED') err.write(`error: cannot reach the router admin API at ${opts.url}: connection refused (is the router running with its admin token set, and is this its admin port?)\n`);
      else err.write(`error: live stream ${url}: ${e.code ?? e.message}\n`);
      finish(1);
    });
    ws.on('open', () => {
      if (opts.once !== true && tty.isTTY === true) opts.out.write('\x1b[?25l');
    });
    ws.on('message', (data) => {
      if (done) return;
      let s: LiveSnapshot;
      try {
        s = JSON.parse(String(data)) as LiveSnapshot;
      } catch {
        return;
      }
      if (s.type !== 'snapshot') return;
      const width = tty.columns ?? 120;
      if (opts.once === true) {
        opts.out.write(`${renderTop(s, width)}\n`);
        finish(0);
        return;
      }
      // Each snapshot carries the events since the previous one (the first: the last 50): keep the latest.
      events = [...events, ...s.events].slice(-TOP_EVENTS);
      opts.out.write(`${CLEAR}${renderTop({ ...s, events }, width)}\n`);
    });
    ws.on('close', (code, reason) => {
      if (done) return;
      err.write(`live stream closed by the router (${code}${reason.length > 0 ? ` ${reason.toString()}` : ''})\n`);
      finish(1);
    });
  });
}
