/**
 * The router's live stream: once a second it polls every ring member's levels report
 * (`GET /_quotaring/v1/levels` on the member's service port), builds a {@link LiveSnapshot} and sends
 * it to every WebSocket client of `GET /admin/v1/live` on the router's admin port (the dashboard at
 * `GET /dashboard`, and `quotaring top`).
 *
 * The WebSocket upgrade is authenticated like every admin route: `Authorization: Bearer <token>`
 * (`quotaring top`), or from a browser, which cannot set headers, the subprotocols
 * `quotaring, bearer.<token>` (the server selects `quotaring`). A missing or wrong token gets a raw
 * `401 Unauthorized` and the socket is closed. Polling never throws: a member that does not answer
 * within the timeout is reported down.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { Agent, request } from 'undici';
import { WebSocket, WebSocketServer } from 'ws';
import type { LoadedConfig } from '../config/load.ts';
import type { HotSet } from '../coord/hot/hot-set.ts';
import type { Member, Membership, Ring } from '../coord/types.ts';
import { adminError, presentedToken, tokenMatches, UNAUTHORIZED_BODY } from './admin-server.ts';
import { hotTenants } from './admin-routes.ts';
import { DASHBOARD_HTML } from './dashboard-page.ts';
import type { LiveEvent, LiveNode, LiveSnapshot, NodeLevels, TenantLevels } from './levels.ts';
import type { RequestSigner } from '../security/request-signature.ts';
import { wallNow } from '../clock.ts';

/** Path of the live stream on the admin port. */
export const LIVE_PATH = '/admin/v1/live';
/** The subprotocol a browser offers (with `bearer.<token>`) and the server selects. */
export const LIVE_PROTOCOL = 'quotaring';
/** Events kept for new clients. */
export const KEPT_EVENTS = 50;
/** Tenants in a snapshot. */
export const LIVE_TENANTS = 10;
/** Longest wait for a member's levels report, ms. */
const POLL_TIMEOUT_MS = 800;
/** A client with more than this many bytes unsent skips snapshots until it catches up. */
const MAX_BUFFERED_BYTES = 1 << 20;
/** How long {@link LiveHub.stop} waits for a client's close handshake before cutting it, ms. */
const CLOSE_WAIT_MS = 1_000;

/** Options of {@link LiveHub}. */
export interface LiveHubOptions {
  /** The router's id (`router-<port>`). */
  readonly router: string;
  readonly membership: Membership;
  /** Signs the levels polls (internal route). */
  readonly signer: RequestSigner;
  /** Read at every round (a reload changes the configured spread tenants). */
  readonly config: LoadedConfig;
  /** The cluster's hot set, when hot detection is on. */
  readonly hot?: HotSet;
  readonly log: FastifyBaseLogger;
  /** Period of the polls and snapshots, ms. @default 1000 */
  readonly intervalMs?: number;
}

/** The outcome of one member's poll. */
type Poll = { readonly up: true; readonly levels: NodeLevels } | { readonly up: false; readonly reason: string };

function isLevels(v: unknown): v is NodeLevels {
  const l = v as Partial<NodeLevels> | null;
  return typeof l === 'object' && l !== null && typeof l.node === 'string' && typeof l.inFlight === 'number' && typeof l.queued === 'number' && typeof l.fallback === 'boolean' && Array.isArray(l.tenants);
}

function busyness(t: TenantLevels): number {
  return t.admittedPerSec + t.refusedPerSec;
}

/** The polling loop and the WebSocket clients of one router's live stream. */
export class LiveHub {
  readonly #opts: LiveHubOptions;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #wss = new WebSocketServer({
    noServer: true,
    clientTracking: true,
    maxPayload: 4_096,
    handleProtocols: (protocols) => (protocols.has(LIVE_PROTOCOL) ? LIVE_PROTOCOL : false),
  });
  readonly #agent = new Agent({ keepAliveTimeout: 10_000, connections: 2 });
  /** Every event seen, newest last, at most {@link KEPT_EVENTS}. */
  #kept: LiveEvent[] = [];
  /** Events since the last snapshot. */
  #pending: LiveEvent[] = [];
  #latest: LiveSnapshot | undefined;
  /** Last poll outcome per member id (absent: never polled). */
  readonly #up = new Map<string, boolean>();
  readonly #fallback = new Map<string, boolean>();
  /** Spread tenants at the last round, with k. */
  #hot = new Map<string, number>();
  #hotSeen = false;
  #timer: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void) | undefined;
  #running = false;
  #stopped = false;
  #round: Promise<void> | undefined;

  constructor(opts: LiveHubOptions) {
    this.#opts = opts;
    this.#intervalMs = Math.max(50, opts.intervalMs ?? 1_000);
    this.#timeoutMs = Math.min(POLL_TIMEOUT_MS, Math.max(40, Math.round(this.#intervalMs * 0.8)));
  }

  /** Open WebSocket clients. */
  clients(): number {
    let n = 0;
    for (const ws of this.#wss.clients) if (ws.readyState === WebSocket.OPEN) n++;
    return n;
  }

  /** The last snapshot built (undefined before the first round ends). */
  latest(): LiveSnapshot | undefined {
    return this.#latest;
  }

  /**
   * Registers `GET /dashboard` (public: the page, no data), `GET /admin/v1/live` without an upgrade
   * (426 with the token, 401 without: the admin server's check), and the WebSocket upgrade handler
   * on the admin server. Call before `admin.listen()`.
   */
  attach(admin: FastifyInstance, token: string): void {
    admin.get('/dashboard', { config: { public: true } }, async (_request, reply) =>
      reply
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .header('referrer-policy', 'no-referrer')
        .header('x-content-type-options', 'nosniff')
        .header('content-security-policy', "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
        .send(DASHBOARD_HTML),
    );
    admin.get(LIVE_PATH, async (_request, reply) =>
      reply.code(426).header('upgrade', 'websocket').send(adminError(`${LIVE_PATH} is a WebSocket: connect with Upgrade: websocket (the dashboard at /dashboard, or quotaring top).`, 'upgrade_required')),
    );
    admin.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.#upgrade(req, socket, head, token));
  }

  #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, token: string): void {
    socket.on('error', (err) => this.#opts.log.debug({ err }, 'live stream socket error'));
    let path: string;
    try {
      path = new URL(req.url ?? '/', 'http://admin').pathname;
    } catch {
      path = '';
    }
    if (path !== LIVE_PATH || this.#stopped) {
      socket.destroy();
      return;
    }
    if (!tokenMatches(presentedToken(req.headers), token)) {
      const body = JSON.stringify(UNAUTHORIZED_BODY);
      socket.once('finish', () => socket.destroy());
      socket.end(
        'HTTP/1.1 401 Unauthorized\r\n' +
          'WWW-Authenticate: Bearer realm="quotaring-admin"\r\n' +
          'Content-Type: application/json; charset=utf-8\r\n' +
          `Content-Length: ${Buffer.byteLength(body)}\r\n` +
          'Connection: close\r\n\r\n' +
          body,
      );
      return;
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => this.#welcome(ws));
  }

  #welcome(ws: WebSocket): void {
    ws.on('error', (err) => this.#opts.log.debug({ err }, 'live stream client error'));
    // Clients only listen; whatever they send is ignored. Events not yet in a snapshot come with the next one.
    const shown = this.#kept.slice(0, Math.max(0, this.#kept.length - this.#pending.length));
    if (this.#latest !== undefined) ws.send(JSON.stringify({ ...this.#latest, events: shown }));
  }

  /** Starts polling: a round now, then one per interval (never two at once). */
  start(): void {
    if (this.#running || this.#stopped) return;
    this.#running = true;
    let last = this.#opts.membership.ring();
    this.#unsubscribe = this.#opts.membership.onChange((ring) => {
      this.#ringChanged(last, ring);
      last = ring;
    });
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      const started = performance.now();
      this.#round = this.#roundSafely().then(() => this.#schedule(Math.max(0, this.#intervalMs - (performance.now() - started))));
    }, delayMs);
    this.#timer.unref();
  }

  async #roundSafely(): Promise<void> {
    try {
      await this.round();
    } catch (err) {
      this.#opts.log.warn({ err }, 'live stream round failed');
    }
  }

  /** Stops polling and closes every client (1001 going away). */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#running = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    await this.#round;
    const closing = [...this.#wss.clients].map(
      (ws) =>
        new Promise<void>((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve();
          const cut = setTimeout(() => ws.terminate(), CLOSE_WAIT_MS);
          cut.unref();
          ws.once('close', () => {
            clearTimeout(cut);
            resolve();
          });
          ws.close(1001, 'router shutting down');
        }),
    );
    await Promise.all(closing);
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()));
    await this.#agent.close().catch(() => {});
  }

  #event(kind: LiveEvent['kind'], subject: string, message: string): void {
    const e: LiveEvent = { atMs: wallNow(), kind, subject, message }; // wall time: a stamp shown to a person
    this.#pending.push(e);
    this.#kept.push(e);
    if (this.#kept.length > KEPT_EVENTS) this.#kept = this.#kept.slice(-KEPT_EVENTS);
  }

  #ringChanged(before: Ring, after: Ring): void {
    const was = new Set(before.members.map((m) => m.id));
    const is = new Set(after.members.map((m) => m.id));
    const joined = [...is].filter((id) => !was.has(id));
    const left = [...was].filter((id) => !is.has(id));
    const parts = [joined.length > 0 ? `joined ${joined.join(', ')}` : '', left.length > 0 ? `left ${left.join(', ')}` : ''].filter((p) => p !== '');
    this.#event('ring_changed', after.version, `ring ${after.version || '(empty)'}: ${after.members.length} member${after.members.length === 1 ? '' : 's'}${parts.length > 0 ? ` (${parts.join('; ')})` : ''}`);
    for (const id of left) {
      this.#up.delete(id);
      this.#fallback.delete(id);
    }
  }

  async #poll(member: Member): Promise<Poll> {
    try {
      const url = new URL(`${member.url.replace(/\/+$/, '')}/_quotaring/v1/levels`);
      const res = await request(url, {
        headers: this.#opts.signer.signInternal('GET', url, {}),
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(this.#timeoutMs),
        headersTimeout: this.#timeoutMs,
        bodyTimeout: this.#timeoutMs,
      });
      if (res.statusCode !== 200) {
        await res.body.dump();
        return { up: false, reason: `HTTP ${res.statusCode}` };
      }
      const body: unknown = await res.body.json();
      if (!isLevels(body)) return { up: false, reason: 'not a levels report' };
      return { up: true, levels: body };
    } catch (err) {
      const e = err as Error & { code?: string };
      const reason = e.name === 'TimeoutError' || e.name === 'AbortError' ? `no answer within ${this.#timeoutMs} ms` : (e.code ?? e.message);
      this.#opts.log.debug({ member: member.id, reason }, 'live stream: member did not answer its levels poll');
      return { up: false, reason };
    }
  }

  /**
   * One round: polls every member at once, records the events, builds the snapshot and sends it
   * to every open client. Exposed for tests; the timer calls it once per interval.
   */
  async round(): Promise<LiveSnapshot> {
    const ring = this.#opts.membership.ring();
    const polls = await Promise.all(ring.members.map((m) => this.#poll(m)));
    const nodes: LiveNode[] = [];
    const tenants: (TenantLevels & { node: string })[] = [];
    ring.members.forEach((m, i) => {
      const p = polls[i] as Poll;
      const was = this.#up.get(m.id);
      if (was !== p.up) {
        if (p.up) this.#event('node_up', m.id, `${m.id} ${was === undefined ? 'is up' : 'answers again'} (${m.url})`);
        else this.#event('node_down', m.id, `${m.id} is down: ${p.reason} (${m.url})`);
      }
      this.#up.set(m.id, p.up);
      if (!p.up) {
        nodes.push({ id: m.id, url: m.url, up: false });
        return;
      }
      const fellBack = this.#fallback.get(m.id) ?? false;
      if (p.levels.fallback && !fellBack) this.#event('fallback_entered', m.id, `${m.id} decides from local fallback shares (Redis unreachable)`);
      if (!p.levels.fallback && fellBack) this.#event('fallback_left', m.id, `${m.id} is back on Redis leases`);
      this.#fallback.set(m.id, p.levels.fallback);
      nodes.push({ id: m.id, url: m.url, up: true, levels: p.levels });
      for (const t of p.levels.tenants) tenants.push({ ...t, node: m.id });
    });
    tenants.sort((a, b) => busyness(b) - busyness(a) || b.queued - a.queued || a.tenant.localeCompare(b.tenant) || a.node.localeCompare(b.node));

    const hotNow = new Map(hotTenants(this.#opts.config, this.#opts.hot).map((h) => [h.tenant, h]));
    for (const [tenant, h] of hotNow) {
      if (!this.#hot.has(tenant)) this.#event('tenant_hot', tenant, `${tenant} is spread over ${h.k} nodes (${h.source === 'config' ? 'config' : 'found hot'})`);
    }
    if (this.#hotSeen) {
      for (const tenant of this.#hot.keys()) if (!hotNow.has(tenant)) this.#event('tenant_cooled', tenant, `${tenant} cooled: back on its owner alone`);
    }
    this.#hot = new Map([...hotNow].map(([t, h]) => [t, h.k]));
    this.#hotSeen = true;

    const snapshot: LiveSnapshot = {
      type: 'snapshot',
      atMs: wallNow(), // wall time: a stamp shown to a person
      router: this.#opts.router,
      ring: { version: ring.version, members: ring.members.length },
      nodes,
      tenants: tenants.slice(0, LIVE_TENANTS),
      hot: [...this.#hot].map(([tenant, k]) => ({ tenant, k })),
      events: this.#pending,
    };
    this.#pending = [];
    this.#latest = snapshot;
    this.#broadcast(snapshot);
    return snapshot;
  }

  #broadcast(snapshot: LiveSnapshot): void {
    if (this.#wss.clients.size === 0) return;
    const json = JSON.stringify(snapshot);
    for (const ws of this.#wss.clients) {
      if (ws.readyState !== WebSocket.OPEN) continue;
      if (ws.bufferedAmount > MAX_BUFFERED_BYTES) {
        this.#opts.log.debug({ buffered: ws.bufferedAmount }, 'live stream client is slow: snapshot skipped');
        continue;
      }
      ws.send(json, (err) => {
        if (err !== undefined && err !== null) this.#opts.log.debug({ err }, 'live stream send failed');
      });
    }
  }
}
