/**
 * Tenant states straight between nodes over HTTP, with or without Redis: handoffs to new owners
 * (or to the member that stands in for a leaving static member), replicated checkpoints to each
 * tenant's replica, the pull of a restarted static member, and the reclaim of a member woken from a stall. Four internal routes, reachable only
 * with a call signed with the cluster secret (`src/gateway/cluster-auth.ts`), which also vouches for
 * the sender's id (`x-quotaring-from`):
 *
 * - `POST /_quotaring/v1/handoff/tenants` `{kind, states: [{tenant, json, at}], ring?}`: stores the
 *   states among the receiver's replicas (`src/coord/handoff/replicas.ts`); 200 `{stored}`. The last push
 *   of a handoff carries the ring version it was made for: it is the sender's announcement to this
 *   receiver (`Handoff.handedHere`), which does not wait for Redis pub/sub to bring it.
 * - `POST /_quotaring/v1/handoff/pull` `{owner}`: gives back every state the receiver holds for
 *   tenants `owner` owns (see `Handoff.surrender`); 200 `{states}`.
 * - `POST /_quotaring/v1/handoff/reclaim` `{owner}`: the sender (`owner`, vouched for by the
 *   signature's `x-quotaring-from`) woke from a stall: the receiver ends every claim it holds in its
 *   place and answers what it admitted for each (`Handoff.reclaim`); 200 `{reclaimed: [{tenant, usage}]}`.
 * - `POST /_quotaring/v1/handoff/nudge` `{ring}`: a member waiting for the receiver's handoff under
 *   ring `ring` asks it to read the member list now rather than at its next heartbeat
 *   (`Handoff.nudged`); 200 `{ring}` (the receiver's ring version before that read).
 *
 * The states are untrusted JSON wherever they land: the claim that loads one parses and clamps it
 * like a value read from Redis (corrupt: the conservative state).
 */
import type { FastifyInstance } from 'fastify';
import { request as httpRequest } from 'undici';
import { z } from 'zod';
import type { LoadedConfig } from '../config/load.ts';
import { sendError } from '../error-reply.ts';
import { MAX_STATE_BYTES } from '../limiter/snapshot-bounds.ts';
import { usageDeltaSchema } from '../limiter/snapshot.ts';
import type { UsageDelta } from '../limiter/usage-delta.ts';
import type { RequestSigner } from '../security/request-signature.ts';
import type { Handoff } from '../coord/handoff/handoff.ts';
import { FROM_HEADER } from '../coord/headers.ts';
import type { PeerTransport, Reclaimed, TransferKind, WireState } from '../coord/handoff/peer-wire.ts';
import type { Member } from '../coord/types.ts';

/** Path of the route that takes states pushed by another node. */
export const HANDOFF_TENANTS_PATH = '/_quotaring/v1/handoff/tenants';
/** Path of the route a restarted static member pulls its tenants' states from. */
export const HANDOFF_PULL_PATH = '/_quotaring/v1/handoff/pull';
/** Path of the route a member woken from a stall takes its tenants back from their stand-in by. */
export const HANDOFF_RECLAIM_PATH = '/_quotaring/v1/handoff/reclaim';
/** Path of the route that asks a node to read the member list now (a member waits for its handoff). */
export const HANDOFF_NUDGE_PATH = '/_quotaring/v1/handoff/nudge';

/** Largest body of a push, bytes: one state at the cap ({@link MAX_STATE_BYTES}) with its JSON escaping, and more. */
export const MAX_PUSH_BYTES = 3 * MAX_STATE_BYTES;
/** A push carries at most about this much state JSON (one state over it goes alone). */
const PUSH_CHUNK_CHARS = 1024 * 1024;
/** Longest wait for a peer's answer, ms. */
const PEER_TIMEOUT_MS = 2_000;
/** Largest reply read from a peer to a push, bytes (it answers `{"stored": n}`). */
const MAX_PUSH_REPLY_BYTES = 64 * 1024;
/**
 * Largest reply read from a peer to a pull, bytes: the states a stand-in held for this member (about
 * 1 KiB a tenant: over 100,000 tenants). A peer that sends more is cut off and the pull fails (the
 * member then starts from its replica or Redis), so a broken or hostile peer cannot exhaust memory.
 */
export const MAX_PULL_REPLY_BYTES = 128 * 1024 * 1024;

const WireStateSchema = z.strictObject({ tenant: z.string().min(1).max(256), json: z.string(), at: z.number().finite() });
/** A ring version (`Ring.version`: 12 hex digits). */
const RingVersionSchema = z.string().regex(/^[0-9a-f]{1,64}$/);
const PushSchema = z.strictObject({ kind: z.enum(['handoff', 'checkpoint']), states: z.array(WireStateSchema).max(100_000), ring: RingVersionSchema.optional() });
const PullSchema = z.strictObject({ owner: z.string().min(1).max(256) });
const NudgeSchema = z.strictObject({ ring: RingVersionSchema });
const PullReplySchema = z.strictObject({ states: z.array(WireStateSchema).max(1_000_000) });
const ReclaimReplySchema = z.strictObject({ reclaimed: z.array(z.strictObject({ tenant: z.string().min(1).max(256), usage: usageDeltaSchema })).max(1_000_000) });

/**
 * Registers the four routes on a node (`deadAfterMs`: how long a stand-in that gave an owner its
 * tenants back refuses to stand in for it again). 400 for a body that is not what the route takes (or a
 * handoff push that names its ring without the sender's id); 413 (fastify) for a push over
 * {@link MAX_PUSH_BYTES}.
 */
export function transferRoutes(app: FastifyInstance, config: LoadedConfig, handoff: Handoff, deadAfterMs = 3_000): void {
  const known = (tenant: string): boolean => config.policies.has(tenant);
  app.post(HANDOFF_TENANTS_PATH, { bodyLimit: MAX_PUSH_BYTES }, async (request, reply) => {
    const parsed = PushSchema.safeParse(request.body);
    const from = request.headers[FROM_HEADER];
    const announces = parsed.success && parsed.data.kind === 'handoff' && parsed.data.ring !== undefined;
    if (!parsed.success || (announces && (typeof from !== 'string' || from === ''))) {
      const why = parsed.success ? `a handoff naming its ring needs ${FROM_HEADER}` : (parsed.error.issues[0]?.message ?? 'invalid');
      return sendError(reply, 'openai', 'invalid_request', { message: `Not a state push: ${why}.` });
    }
    const sender = typeof from === 'string' && from !== '' ? from : undefined;
    const stored = handoff.receive(parsed.data.states, known, parsed.data.kind === 'handoff' ? sender : undefined);
    if (announces) handoff.handedHere(from as string, parsed.data.ring as string);
    return { stored };
  });
  app.post(HANDOFF_NUDGE_PATH, async (request, reply) => {
    const parsed = NudgeSchema.safeParse(request.body);
    if (!parsed.success) return sendError(reply, 'openai', 'invalid_request', { message: `Not a nudge: ${parsed.error.issues[0]?.message ?? 'invalid'}.` });
    const ring = handoff.ring().version;
    handoff.nudged();
    return { ring };
  });
  app.post(HANDOFF_RECLAIM_PATH, async (request, reply) => {
    const parsed = PullSchema.safeParse(request.body);
    const from = request.headers[FROM_HEADER];
    // Only the owner itself takes its tenants back: the signed sender must be the owner named.
    if (!parsed.success || from !== parsed.data.owner) {
      const why = parsed.success ? `the sender (${FROM_HEADER}) must be the owner named` : (parsed.error.issues[0]?.message ?? 'invalid');
      return sendError(reply, 'openai', 'invalid_request', { message: `Not a reclaim: ${why}.` });
    }
    const reclaimed = handoff.reclaim(parsed.data.owner, deadAfterMs);
    return { reclaimed };
  });
  app.post(HANDOFF_PULL_PATH, async (request, reply) => {
    const parsed = PullSchema.safeParse(request.body);
    if (!parsed.success) return sendError(reply, 'openai', 'invalid_request', { message: `Not a state pull: ${parsed.error.issues[0]?.message ?? 'invalid'}.` });
    const states = handoff.surrender(parsed.data.owner);
    request.log.info({ owner: parsed.data.owner, tenants: states.length }, 'tenant states given back to a restarted member');
    return { states };
  });
}

/**
 * Signed POST of `body` to `path` at `to`; the reply's text, read up to `maxBytes`.
 * @throws Error for a status other than 200, or a reply over `maxBytes` (the connection is dropped).
 */
async function post(signer: RequestSigner, from: Member, to: Member, path: string, body: string, maxBytes: number): Promise<string> {
  const url = new URL(path, to.url);
  const headers: Record<string, string> = { 'content-type': 'application/json', [FROM_HEADER]: from.id };
  const res = await httpRequest(url, {
    method: 'POST',
    headers: { ...headers, ...signer.signInternal('POST', url, headers, body) },
    body,
    headersTimeout: PEER_TIMEOUT_MS,
    bodyTimeout: PEER_TIMEOUT_MS,
  });
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      res.body.destroy();
      throw new Error(`${to.id}: reply to ${path} over ${maxBytes} bytes, cut off`);
    }
    parts.push(chunk);
  }
  const text = Buffer.concat(parts).toString('utf8');
  if (res.statusCode !== 200) throw new Error(`${to.id} answered ${res.statusCode}: ${text.slice(0, 200)}`);
  return text;
}

/** States in pushes of about {@link PUSH_CHUNK_CHARS} of JSON each. */
function chunks(states: readonly WireState[]): WireState[][] {
  const out: WireState[][] = [];
  let current: WireState[] = [];
  let chars = 0;
  for (const s of states) {
    if (current.length > 0 && chars + s.json.length > PUSH_CHUNK_CHARS) {
      out.push(current);
      current = [];
      chars = 0;
    }
    current.push(s);
    chars += s.json.length;
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** The {@link PeerTransport} over signed HTTP (2 s timeout per call; `reclaim` bounded by its caller). */
export function httpPeerTransport(signer: RequestSigner): PeerTransport {
  return {
    async push(from: Member, to: Member, kind: TransferKind, states: readonly WireState[], ring?: string): Promise<void> {
      const parts = chunks(states);
      // A handoff for a ring is announced by its last push, sent even when it carries no state.
      if (ring !== undefined && parts.length === 0) parts.push([]);
      for (const [i, chunk] of parts.entries()) {
        const body = ring !== undefined && i === parts.length - 1 ? { kind, states: chunk, ring } : { kind, states: chunk };
        await post(signer, from, to, HANDOFF_TENANTS_PATH, JSON.stringify(body), MAX_PUSH_REPLY_BYTES);
      }
    },
    async nudge(from: Member, to: Member, ring: string): Promise<void> {
      await post(signer, from, to, HANDOFF_NUDGE_PATH, JSON.stringify({ ring }), MAX_PUSH_REPLY_BYTES);
    },
    async pull(from: Member, to: Member): Promise<WireState[]> {
      const text = await post(signer, from, to, HANDOFF_PULL_PATH, JSON.stringify({ owner: from.id }), MAX_PULL_REPLY_BYTES);
      const parsed = PullReplySchema.safeParse(JSON.parse(text));
      if (!parsed.success) throw new Error(`${to.id}: not a state pull reply (${parsed.error.issues[0]?.message ?? 'invalid'})`);
      return parsed.data.states;
    },
    async reclaim(from: Member, to: Member): Promise<Reclaimed[]> {
      const text = await post(signer, from, to, HANDOFF_RECLAIM_PATH, JSON.stringify({ owner: from.id }), MAX_PULL_REPLY_BYTES);
      const parsed = ReclaimReplySchema.safeParse(JSON.parse(text));
      if (!parsed.success) throw new Error(`${to.id}: not a reclaim reply (${parsed.error.issues[0]?.message ?? 'invalid'})`);
      return parsed.data.reclaimed.map((r) => ({ tenant: r.tenant, usage: r.usage as UsageDelta }));
    },
  };
}
