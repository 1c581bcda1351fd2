/**
 * Forwarding one client request to the tenant's owner node and streaming the answer back, with at
 * most one retry: on another member when the first refused or dropped the connection before any
 * response byte or answered 503 `node_starting` (replayable bodies only), or on the named owner when
 * the node answered 421.
 */
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Member, Membership, Ring } from '../coord/types.ts';
import { lingerOnRefusal } from '../lingering-drain.ts';
import { chooseMember, chooseSpreadMember, fallbackFor } from './choose-member.ts';
import { endToEndHeaderList } from './hop-by-hop.ts';
import { Relay, rawHeader } from './relay.ts';
import type { ProxyExchange } from './exchange.ts';
import type { MemberPools } from './member-pools.ts';
import { drainUnsent, exceededLimit, isReplayable, requestBodyOf } from './request-body.ts';
import type { RequestBody } from './request-body.ts';
import type { Departures } from './departures.ts';
import type { Suspects } from './suspects.ts';
import { FALLBACK_HEADER, FROM_HEADER, HOPS_HEADER, OWNER_BACK_HEADER, OWNER_HEADER, OWNER_URL_HEADER, REDIRECTED_HEADER, RING_HEADER, TENANT_HEADER } from '../coord/headers.ts';
import { CONTENT_DIGEST_HEADER, SIGNATURE_HEADER } from '../security/request-signature.ts';
import { randomId } from '../security/random-id.ts';
import type { RequestSigner } from '../security/request-signature.ts';
import type { Tracing } from '../http/tracing.ts';
import { TRACE_HEADERS, traceForward } from './request-span.ts';

export { FALLBACK_HEADER, OWNER_HEADER, OWNER_URL_HEADER, REDIRECTED_HEADER, RING_HEADER, TENANT_HEADER } from '../coord/headers.ts';

/** What {@link forward} needs from the router. */
export interface ForwardContext {
  readonly membership: Membership;
  readonly pools: MemberPools;
  /** Signs every attempt (method, path, the router's `x-quotaring-*` headers, a timestamp). */
  readonly signer: RequestSigner;
  readonly suspects: Suspects;
  /** Members that left the ring recently. */
  readonly departures: Departures;
  /** How long a member that refused or dropped a connection stays suspect, ms. */
  readonly suspectMs: number;
  /** Largest body (bytes) buffered to allow a retry. */
  readonly maxReplayBytes: number;
  /** The nodes' body limit (`server.body_limit`), bytes: a streamed body is cut at its first byte past it. */
  readonly bodyLimit: () => number;
  /** Told of each retry on another member. */
  readonly onRetry?: (reason: '421' | 'unreachable') => void;
  /** Told of each member that answered a forwarded request (status and headers came): it is alive (the health check counts it). */
  readonly onAnswer?: (memberId: string) => void;
  /** OpenTelemetry tracing: a server span per forwarded request (`request-span.ts`); absent when off. */
  readonly tracing?: Tracing;
}

/**
 * Client headers never forwarded besides hop-by-hop ones: undici sets `host`, refuses `expect`; the
 * router sets its own `x-quotaring-*` (it signs what it sends: a client's value must never be signed).
 */
const DROP_REQUEST = new Set(['host', 'expect', 'content-length', RING_HEADER, TENANT_HEADER, FALLBACK_HEADER, REDIRECTED_HEADER, FROM_HEADER, HOPS_HEADER, SIGNATURE_HEADER, CONTENT_DIGEST_HEADER]);

/** {@link DROP_REQUEST} and the client's trace context, replaced by the router's span's when tracing is on. */
const DROP_TRACED = new Set([...DROP_REQUEST, ...TRACE_HEADERS]);

/** Errors that mean the member never started answering: the connection was refused, reset or closed before headers. */
const CONNECT_FAILURES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
]);

/** Of {@link CONNECT_FAILURES}, those that happen before a connection exists: nothing of the request was sent. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

/** Whether an undici `request()` rejection is a connection failure before any response byte. */
export function isConnectFailure(err: unknown, codes: ReadonlySet<string> = CONNECT_FAILURES): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && codes.has(code)) return true;
  const cause = (err as { cause?: unknown }).cause;
  return cause !== undefined && cause !== err && isConnectFailure(cause, codes);
}

/**
 * Whether a failed attempt is the member's fault, making it suspect: a connection failure, except
 * while a streamed body was being sent — a node closes the connection after refusing a body (413,
 * 415), and the router cannot tell that from a crash then (its health check can). A body the
 * router cut at the body limit is never the member's fault.
 */
function blamesMember(body: RequestBody, err: unknown): boolean {
  if (exceededLimit(body)) return false;
  return isConnectFailure(err, body.kind === 'stream' ? NEVER_CONNECTED : CONNECT_FAILURES);
}

/**
 * Proxies the request of `ex` for `tenant` (a spread tenant, `spread` = k: to one of `ring.range(tenant, k)` in
 * turn) and relays the node's answer (status, end-to-end headers, body chunk by chunk as it comes,
 * see `relay.ts`) on `ex`'s response. Errors the router answers itself:
 * 503 `no_healthy_node` (empty ring, or every member suspect and the owner unreachable; an owner
 * suspect only for slow health checks still gets its tenants' requests), 502 `upstream_unavailable` (the
 * chosen member failed and no retry was possible or the retry failed too).
 * A 421 that cannot be retried (large body, no other owner) is relayed as the node sent it.
 * A request sent to a member other than the ring owner because the owner is suspect carries
 * {@link FALLBACK_HEADER} naming the owner; the retry after a 421 carries {@link REDIRECTED_HEADER}.
 * A 421 that names that owner in {@link OWNER_BACK_HEADER} (it woke from a stall and took its
 * tenants back) clears the suspicion, and the retry goes to the owner.
 */
export async function forward(ctx: ForwardContext, ex: ProxyExchange, tenant: string, spread?: number): Promise<void> {
  const isSuspect = (id: string): boolean => ctx.suspects.has(id);
  const isUnreachable = (id: string): boolean => ctx.suspects.unreachable(id);
  const choose = (r: Ring, excludeId?: string): Member | undefined =>
    spread === undefined ? chooseMember(r, tenant, isSuspect, excludeId, isUnreachable) : chooseSpreadMember(r, tenant, spread, isSuspect, excludeId, isUnreachable);
  let ring = ctx.membership.ring();
  const first = choose(ring);
  if (first === undefined) return ex.sendError('no_healthy_node');

  let body: RequestBody;
  try {
    body = await requestBodyOf(ex.req, ctx.maxReplayBytes, ctx.bodyLimit());
  } catch {
    return clientGone(ex);
  }
  const { req } = ex;
  const tracing = ctx.tracing;
  const headers = endToEndHeaderList(req.headers, tracing === undefined ? DROP_REQUEST : DROP_TRACED);
  const span = tracing === undefined ? undefined : traceForward(tracing, ex, tenant, headers);
  const base: Outgoing = { method: req.method as string, url: req.url as string, tenant, headers, body };
  /**
   * Sends to `member`, routed by `routedBy`. `standIn`: true names the suspect owner it stands in
   * for, if any ({@link FALLBACK_HEADER}); a string is the member a retry after a 421 stands in for
   * ({@link REDIRECTED_HEADER}). `hold`: a 421 or 503 answer waits for a decision (a retry is possible).
   */
  const send = (member: Member, routedBy: Ring, standIn: true | string, hold: boolean): Promise<Attempt> => {
    if (standIn !== true) return attempt(ctx, member, base, ex, routedBy.version, hold, standIn === member.id ? undefined : [REDIRECTED_HEADER, standIn]);
    const owner = fallbackFor(routedBy, tenant, member, isSuspect);
    return attempt(ctx, member, base, ex, routedBy.version, hold, owner === undefined ? undefined : [FALLBACK_HEADER, owner]);
  };

  let target = first;
  let result = await send(first, ring, true, isReplayable(body));
  if (!result.ok) {
    if (!blamesMember(body, result.err)) return failed(ex, body, first, result.err);
    ctx.suspects.markFor(first.id, ctx.suspectMs);
    if (!isReplayable(body)) return failed(ex, body, first, result.err);
    const next = choose(ring, first.id);
    if (next === undefined) return ex.sendError('no_healthy_node');
    ex.log.warn({ member: first.id, retry: next.id, err: result.err }, 'member unreachable; retrying once on the next member');
    ctx.onRetry?.('unreachable');
    target = next;
    result = await send(next, ring, true, false);
  } else if (!result.relayed && isNodeStarting(result)) {
    // The member has not joined its cluster yet (started while Redis was down) and decides for no
    // tenant: route around it like an unreachable member; the next one stands in (from its replica).
    ctx.suspects.markFor(first.id, ctx.suspectMs);
    const next = choose(ring, first.id);
    if (next !== undefined) {
      result.relay.discard();
      ex.log.warn({ member: first.id, retry: next.id }, 'member not in the cluster yet; retrying once on the next member');
      ctx.onRetry?.('unreachable');
      target = next;
      result = await send(next, ring, true, false);
    }
  } else if (!result.relayed && result.statusCode === 421) {
    // Rings in transition: the node and this router disagree on the owner.
    // - The named owner is a live member here: retry there, naming the node that redirected (whose
    //   ring the owner may not have caught up with).
    // - It left this router's ring recently: the node's ring is the stale one. Retry on this router's
    //   choice; when that is the same node, name the departed owner so it stands in.
    // - It is unknown here but the node gave its URL: this router's ring is the stale one (a member
    //   that just joined). Retry at that URL, naming the node that redirected.
    // - Otherwise, when the re-read ring routes elsewhere, retry there; else the 421 is relayed.
    const named = rawHeader(result.rawHeaders, OWNER_HEADER);
    const namedUrl = rawHeader(result.rawHeaders, OWNER_URL_HEADER);
    // The suspect owner this request stood in for woke and took its tenants back: it answers again.
    if (named !== undefined && rawHeader(result.rawHeaders, OWNER_BACK_HEADER) === named) ctx.suspects.clear(named);
    const live = (r: Ring): Member | undefined => r.members.find((m) => m.id === named && m.id !== first.id && !isSuspect(m.id));
    let owner = live(ring);
    let standsInFor: true | string = first.id;
    if (owner === undefined) {
      ring = ctx.membership.ring();
      owner = live(ring);
      if (owner === undefined && named !== undefined && ctx.departures.has(named)) {
        owner = chooseMember(ring, tenant, isSuspect);
        standsInFor = owner?.id === first.id ? named : true;
      } else if (owner === undefined && named !== undefined && named !== first.id && namedUrl !== undefined && /^https?:\/\//.test(namedUrl) && URL.canParse(namedUrl)) {
        owner = { id: named, url: namedUrl };
      } else if (owner === undefined) {
        // The ring may have changed since this request was routed: its choice gets the retry.
        const choice = chooseMember(ring, tenant, isSuspect);
        if (choice !== undefined && choice.id !== first.id) {
          owner = choice;
          standsInFor = true;
        }
      }
    }
    if (owner !== undefined) {
      result.relay.discard();
      ex.log.info({ member: first.id, named, retry: owner.id }, 'misdirected; retrying once on the owner');
      ctx.onRetry?.('421');
      target = owner;
      result = await send(owner, ring, standsInFor, false);
    }
  }
  span?.setAttribute('quotaring.member', target.id);
  if (!result.ok) {
    if (blamesMember(body, result.err)) ctx.suspects.markFor(target.id, ctx.suspectMs);
    return failed(ex, body, target, result.err);
  }
  // A held answer no retry was made for goes out as the node sent it.
  if (!result.relayed) result.relay.relayHeld();
}

/** What every attempt of one client request sends: the client's end-to-end headers (a flat name/value list) and body. */
interface Outgoing {
  readonly method: string;
  readonly url: string;
  readonly tenant: string;
  readonly headers: readonly string[];
  readonly body: RequestBody;
}

/** One attempt's outcome: the node's headers (relayed, or held for a decision), or the failure that prevented them. */
type Attempt =
  | { readonly ok: true; readonly statusCode: number; readonly rawHeaders: readonly Buffer[]; readonly relayed: boolean; readonly relay: Relay }
  | { readonly ok: false; readonly err: unknown };

/**
 * Sends one attempt to `member` and resolves at the node's headers: relayed to the client from
 * there on, or (`hold`, a 421 or 503) held for the caller. `standIn`: a stand-in header to add
 * ({@link FALLBACK_HEADER} or {@link REDIRECTED_HEADER} and its value).
 */
async function attempt(ctx: ForwardContext, member: Member, out: Outgoing, ex: ProxyExchange, ringVersion: string, hold: boolean, standIn: readonly [string, string] | undefined): Promise<Attempt> {
  const { pool, prefix } = ctx.pools.get(member);
  const path = prefix + out.url;
  const { body } = out;
  const h = out.headers.slice();
  h.push(TENANT_HEADER, out.tenant);
  if (standIn !== undefined) h.push(standIn[0], standIn[1]);
  h.push(RING_HEADER, ringVersion);
  // A stand-in header lets the node decide for a tenant it does not own: such a request carries a
  // nonce, and the node accepts its signature once (a captured one cannot be replayed with another body).
  const signed: Record<string, string> = { [TENANT_HEADER]: out.tenant, [RING_HEADER]: ringVersion };
  if (standIn !== undefined) signed[standIn[0]] = standIn[1];
  h.push(SIGNATURE_HEADER, ctx.signer.signature({ method: out.method, path, headers: signed }, standIn !== undefined ? randomId() : ''));
  let payload: Buffer | Readable | null = null;
  if (body.kind === 'buffer') {
    payload = body.bytes;
    h.push('content-length', String(body.bytes.length));
  } else if (body.kind === 'stream') {
    payload = body.stream;
    if (body.length !== undefined) h.push('content-length', String(body.length));
  }
  const relay = new Relay(ex, { hold, beforeHead: body.kind === 'stream' ? (headers) => closeAfterEarlyAnswer(body, headers) : undefined });
  pool.dispatch({ method: out.method as Dispatcher.HttpMethod, path, headers: h, body: payload }, relay);
  const head = await relay.head;
  if (!head.ok) return head;
  ctx.onAnswer?.(member.id);
  return { ...head, relay };
}

/**
 * The node answered before the whole body came (an early refusal such as 415): the rest is
 * discarded while the answer goes out, and the connection closes after it (its framing is lost).
 */
function closeAfterEarlyAnswer(body: RequestBody & { kind: 'stream' }, headers: string[]): void {
  if (body.source.readableEnded) return;
  drainUnsent(body);
  headers.push('connection', 'close');
}

/** A held 503 `node_starting`: the node has not joined its cluster yet (see `src/gateway/ownership.ts`). */
function isNodeStarting(head: { readonly statusCode: number; readonly rawHeaders: readonly Buffer[] }): boolean {
  return head.statusCode === 503 && rawHeader(head.rawHeaders, 'x-quotaring-error') === 'node_starting';
}

function failed(ex: ProxyExchange, body: RequestBody, member: Member, err: unknown): void {
  if (ex.res.destroyed || ex.req.socket.destroyed) return clientGone(ex);
  if (body.kind === 'stream' && body.stream.exceeded) return bodyTooLarge(ex, body.stream.limit);
  drainUnsent(body);
  ex.log.warn({ member: member.id, err }, 'member failed before answering');
  return ex.sendError('upstream_unavailable', `Gateway node "${member.id}" could not be reached; retry the request.`);
}

/**
 * 413 `body_too_large` for a body over the nodes' limit (declared, or found while streaming it):
 * the rest of the body is drained after the answer within twice the limit and a time bound (see
 * `src/lingering-drain.ts`), so the client reads the 413 rather than a reset; past them the
 * connection is cut.
 * @param limit bytes (`server.body_limit`).
 */
export function bodyTooLarge(ex: ProxyExchange, limit: number): void {
  ex.log.debug({ limit }, 'request body over the limit');
  lingerOnRefusal(ex.req, ex, 2 * limit);
  return ex.sendError('body_too_large', `The request body is larger than ${limit} bytes (server.body_limit).`);
}

/** The client left: nothing to answer; the response is hijacked and its socket destroyed. */
export function clientGone(ex: ProxyExchange): void {
  ex.hijack();
  if (!ex.res.destroyed) ex.res.destroy();
}
