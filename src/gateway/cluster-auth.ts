/**
 * A node's check of cluster signatures (see `src/security/request-signature.ts`), as two root hooks:
 *
 * - `/_quotaring/*` (settlements, tenant views, handoff counters, levels): refused with 401
 *   `cluster_auth_failed` unless signed with the cluster secret, within the replay window, with a
 *   body digest that matches the bytes received; a POST whose signature was seen before is refused
 *   too. A node without a secret (a single node) refuses them all.
 * - Client routes (`/v1/*`): `x-quotaring-fallback-for` and `x-quotaring-redirected-for` let a node
 *   decide for a tenant it does not own (and, for a fallback, free the owner's slots); they count
 *   only on a request a router signed with a nonce, once (a replayed signature is refused), and only
 *   for the tenant the signature names (`x-quotaring-tenant`, checked against the key's tenant in
 *   `ownership.ts`). Otherwise they are removed from the request before ownership is checked: the
 *   request is then answered like any other (421 when not the owner).
 *   The signature is checked only when one of them is present: a node's ordinary requests pay nothing.
 *
 * `/healthz`, `/readyz` and `/metrics` stay open: they tell nothing about tenants (orchestrators and
 * Prometheus call them without the secret).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { FALLBACK_HEADER, REDIRECTED_HEADER } from '../coord/headers.ts';
import { sendError } from '../error-reply.ts';
import { ReplayGuard } from '../security/replay-guard.ts';
import { CONTENT_DIGEST_HEADER, bodyDigest, isInternalPath } from '../security/request-signature.ts';
import type { RequestSigner, SignedRequest } from '../security/request-signature.ts';
import { wallNow } from '../clock.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The body digest an accepted internal call's signature covers; null elsewhere. */
    signedDigest: string | null;
  }
}

/** Counters of refused calls. */
export interface ClusterAuthStats {
  /** Internal calls refused (no, bad, expired or replayed signature; body not matching its digest). */
  refused: number;
  /** Client requests whose stand-in headers were dropped for want of a valid signature. */
  headersDropped: number;
}

const EMPTY_DIGEST = bodyDigest('');

function refuse(reply: FastifyReply, message: string): FastifyReply {
  return sendError(reply, 'openai', 'cluster_auth_failed', { message });
}

function signed(request: FastifyRequest): SignedRequest {
  return { method: request.method, path: request.raw.url ?? request.url, headers: request.headers };
}

/**
 * Registers the hooks on the node's root instance (before its routes).
 * @param signer verifies signatures; undefined on a node without a cluster secret (internal routes all refused).
 * @returns the counters of refusals, and `prune(nowMs)`, which forgets remembered signatures that
 *   left the window (the node's sweep calls it).
 */
export function clusterAuthHooks(app: FastifyInstance, signer: RequestSigner | undefined): { readonly stats: ClusterAuthStats; prune(nowMs: number): void } {
  const stats: ClusterAuthStats = { refused: 0, headersDropped: 0 };
  const replays = signer === undefined ? undefined : new ReplayGuard(signer.windowMs);
  app.decorateRequest('signedDigest', null);

  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    const url = request.raw.url ?? request.url;
    // By the matched route, not only the raw URL: fastify's router decodes `%5F` and `%73` (`/%5Fquotaring/...` is routed here too).
    if (!isInternalPath(request.routeOptions.url ?? '') && !isInternalPath(url)) {
      const h = request.headers;
      if (h[FALLBACK_HEADER] === undefined && h[REDIRECTED_HEADER] === undefined) return done();
      const verdict = signer?.verify(signed(request));
      let reason: string | undefined;
      if (verdict === undefined) reason = 'no_secret';
      else if (!verdict.ok) reason = verdict.reason;
      else if (verdict.nonce === '') reason = 'no_nonce';
      // wall time: the signature's timestamp is another process's clock
      else if (!(replays?.accept(verdict.mac, verdict.timestampMs, wallNow()) ?? false)) reason = 'replayed';
      if (reason !== undefined) {
        delete h[FALLBACK_HEADER];
        delete h[REDIRECTED_HEADER];
        stats.headersDropped++;
        request.log.warn({ reason }, 'stand-in headers without a valid, fresh cluster signature: ignored');
      }
      return done();
    }
    if (signer === undefined || replays === undefined) {
      stats.refused++;
      request.log.warn({ url: url.split('?')[0] }, 'internal route called on a node without a cluster secret: refused');
      refuse(reply, 'Internal routes answer only calls signed with the cluster secret, and this node has none (a single node): nothing calls them.');
      return;
    }
    const verdict = signer.verify(signed(request));
    const digest = request.headers[CONTENT_DIGEST_HEADER];
    let problem: string | undefined;
    if (!verdict.ok) problem = verdict.reason;
    else if (typeof digest !== 'string') problem = 'no_body_digest';
    // wall time: the signature's timestamp is another process's clock
    else if (request.method === 'POST' && !replays.accept(verdict.mac, verdict.timestampMs, wallNow())) problem = 'replayed';
    if (problem !== undefined) {
      stats.refused++;
      request.log.warn({ url: url.split('?')[0], reason: problem }, 'internal call without a valid cluster signature: refused');
      refuse(reply, `Internal routes answer only calls signed with the cluster secret (${signer.variable}); this one was refused: ${problem}.`);
      return;
    }
    request.signedDigest = digest as string;
    done();
  });

  // The body (parsed by now, its bytes in rawBody) must be the one the signature covers.
  app.addHook('preValidation', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    const claimed = request.signedDigest;
    if (claimed === null) return done();
    const actual = request.rawBody === null ? EMPTY_DIGEST : bodyDigest(request.rawBody);
    if (actual === claimed) return done();
    stats.refused++;
    request.log.warn({ url: request.url.split('?')[0] }, 'internal call whose body does not match its signed digest: refused');
    refuse(reply, 'The body does not match the digest the cluster signature covers.');
  });

  return { stats, prune: (nowMs) => replays?.prune(nowMs) };
}
