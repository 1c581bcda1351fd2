/**
 * Node-to-node settlements: a node that admitted a request for a tenant that has since moved sends
 * the settlement (or a lease renewal) to the tenant's new owner, which applies it to the reservation
 * it received in the handoff. Not proxied by routers (they proxy `/v1/*` only): nodes must be
 * reachable by each other, not by clients. Only calls signed with the cluster secret reach the
 * route (`src/gateway/cluster-auth.ts`).
 */
import type { FastifyInstance } from 'fastify';
import { request as httpRequest } from 'undici';
import { z } from 'zod';
import type { ForwardedSettlement, Handoff } from '../coord/handoff/handoff.ts';
import { MAX_FORWARD_HOPS } from '../coord/handoff/handoff.ts';
import type { Member } from '../coord/types.ts';
import type { LoadedConfig } from '../config/load.ts';
import { usageDeltaSchema } from '../limiter/snapshot.ts';
import type { UsageDelta } from '../limiter/usage-delta.ts';
import { sendError } from '../error-reply.ts';
import { FROM_HEADER, HOPS_HEADER } from '../coord/headers.ts';
import type { RequestSigner } from '../security/request-signature.ts';

/** Path of the settlement route on every node. */
export const SETTLEMENTS_PATH = '/_quotaring/v1/settlements';
export { FROM_HEADER, HOPS_HEADER } from '../coord/headers.ts';

/** A count of tokens of one kind in a settlement. */
const kindCount = z.number().int().nonnegative().optional();

const SettlementSchema = z.discriminatedUnion('op', [
  z.strictObject({
    op: z.literal('finish'),
    tenant: z.string().min(1),
    id: z.string().min(1),
    tokens: z.number().int().nonnegative(),
    cost: z.string().regex(/^(0|[1-9]\d{0,29})$/, 'cost: a whole number of pico-dollars as a decimal string').optional(),
    kinds: z.strictObject({ cacheRead: kindCount, cacheWrite: kindCount, reasoning: kindCount }).optional(),
  }),
  z.strictObject({ op: z.literal('renew'), tenant: z.string().min(1), id: z.string().min(1) }),
  z.strictObject({ op: z.literal('absorb'), tenant: z.string().min(1), usage: usageDeltaSchema }),
]);

/**
 * Registers `POST /_quotaring/v1/settlements` (JSON {@link ForwardedSettlement}). Answers 200
 * `{settled, released}` (finish) or `{renewed}` (renew) once applied here or forwarded on, 200
 * `{absorbed: true}` once a stand-in's usage is added here; 400 for a body that is not a
 * settlement; 404 for a tenant not in the config; 409 `not_owner` for usage of a tenant this node
 * does not own under its ring (nothing changes; the stand-in tries again); 508 past {@link MAX_FORWARD_HOPS}.
 */
export function settlementRoutes(app: FastifyInstance, config: LoadedConfig, handoff: Handoff): void {
  app.post(SETTLEMENTS_PATH, async (request, reply) => {
    const parsed = SettlementSchema.safeParse(request.body);
    if (!parsed.success) {
      return sendError(reply, 'openai', 'invalid_request', { message: `Not a settlement: ${parsed.error.issues[0]?.message ?? 'invalid'}.` });
    }
    const s = parsed.data;
    if (!config.policies.has(s.tenant)) {
      return sendError(reply, 'openai', 'not_found', { message: `No tenant ${s.tenant}.` });
    }
    const hops = Number(request.headers[HOPS_HEADER] ?? 1);
    if (!(hops >= 1 && hops <= MAX_FORWARD_HOPS)) {
      return sendError(reply, 'openai', 'forward_loop', { message: `Settlement forwarded ${hops} times (at most ${MAX_FORWARD_HOPS}).` });
    }
    const from = request.headers[FROM_HEADER];
    const sender = typeof from === 'string' ? from : undefined;
    if (s.op === 'absorb') {
      if (await handoff.absorb(s.tenant, s.usage as UsageDelta)) return { absorbed: true };
      return sendError(reply, 'openai', 'not_owner', { message: `This node does not own tenant ${s.tenant}.` });
    }
    if (s.op === 'finish') {
      const kinds = s.kinds === undefined ? undefined : Object.fromEntries(Object.entries(s.kinds).filter(([, v]) => v !== undefined));
      return handoff.finish(s.tenant, s.id, s.tokens, hops, sender, { ...(s.cost === undefined ? {} : { cost: BigInt(s.cost) }), ...(kinds === undefined ? {} : { kinds }) });
    }
    return { renewed: await handoff.renew(s.tenant, s.id, hops, sender) };
  });
}

/**
 * Sends a settlement from node `from` to node `to` (2 s timeout), signed with the cluster secret
 * (body, hops and sender included).
 * @throws Error when the node answers other than 200 or cannot be reached.
 */
export async function sendSettlement(from: Member, to: Member, settlement: ForwardedSettlement, hops: number, signer: RequestSigner): Promise<void> {
  const url = new URL(SETTLEMENTS_PATH, to.url);
  const body = JSON.stringify(settlement);
  const headers: Record<string, string> = { 'content-type': 'application/json', [HOPS_HEADER]: String(hops), [FROM_HEADER]: from.id };
  const res = await httpRequest(url, {
    method: 'POST',
    headers: { ...headers, ...signer.signInternal('POST', url, headers, body) },
    body,
    headersTimeout: 2_000,
    bodyTimeout: 2_000,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${to.id} answered ${res.statusCode}: ${text.slice(0, 200)}`);
}
