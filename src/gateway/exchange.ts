/**
 * One limited request from admission to settlement: reserve (prompt + reserved output) on the
 * tenant's limits, call the deployment, pass the reply through (JSON whole, SSE event by event),
 * then settle on the provider's reported usage and release the concurrency slot — on every path.
 * This file is the pipeline: its stages in order, each in its own file, none importing another
 * (what one hands the next is typed in `request.ts`): admission (`admission.ts`, its refusals in
 * `refusals.ts`) → the upstream attempt and failover (`upstream-attempt.ts`) → relay (`relay.ts`)
 * → settlement (`settlement.ts`).
 */
import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { newTrail } from '../ops/node-activity.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import { admit } from './admission.ts';
import type { GatewayContext } from './context.ts';
import { relayReply } from './relay.ts';
import { nothingUsed } from './request.ts';
import type { AdmittedRun, Exchange, RequestRun } from './request.ts';
import { endRequestSpan, recordQueueWait, startRequestSpan } from './request-spans.ts';
import { settleExchange } from './settlement.ts';
import { attemptUpstream } from './upstream-attempt.ts';

/**
 * Runs an exchange and answers the client. Never throws for a client-caused condition: refusals and
 * upstream failures are rendered here; the slot is released and the reservation settled on every path.
 */
export async function runExchange(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, ex: Exchange): Promise<FastifyReply> {
  const startedAt = performance.now();
  const trail = newTrail(ex.tenant.id, ex.tier.name, ex.model.name, ex.promptTokens + ex.reservedOutput);
  request.trail = trail;
  const span = startRequestSpan(ctx, request, ex);
  const run: RequestRun = { ctx, request, reply, ex, trail, span };
  try {
    return await exchange(run);
  } finally {
    // A client that closed first: 499, as proxies log it.
    const status = trail.clientGone === true ? 499 : reply.raw.headersSent ? reply.raw.statusCode : reply.statusCode;
    ctx.activity.finished(trail, status, performance.now() - startedAt, request.log);
    if (span !== undefined) endRequestSpan(span, trail, status);
  }
}

/** The stages of an exchange, in order; settlement runs once on every path after admission. */
async function exchange(run: RequestRun): Promise<FastifyReply> {
  const { ctx, request, reply, ex, trail, span } = run;
  const admission = await admit(run);
  if (span !== undefined) recordQueueWait(ctx, span, trail.waitMs);
  if (admission.kind === 'answered') return admission.reply;
  const { client, cancel, stop } = watchClient(reply, trail);
  // The primary deployment serves first, with the call admission chose for it. (A literal of fixed
  // shape, not a spread of `run`: the spread cost about 2% of a node's CPU per request.)
  const served = { deployment: ex.deployment, call: admission.first ?? ex, held: admission.held };
  const admitted: AdmittedRun = { ctx, request, reply, ex, trail, span, admission, served, used: nothingUsed(), client, cancel };
  // In flight from here to the `finally` that settles it.
  ctx.activity.inFlight++;
  try {
    const response = await attemptUpstream(admitted);
    if (response.kind === 'answered') return response.reply;
    return await relayReply(admitted, response);
  } finally {
    stop();
    ctx.activity.inFlight--;
    settleExchange(admitted);
  }
}

/**
 * Watches for the client leaving before its reply is finished: `client.gone` is then set, the trail
 * notes it, and `cancel` emits `abort` (undici takes an EventEmitter as its abort signal: much
 * cheaper per request than an AbortController). `stop` ends the watch.
 */
function watchClient(reply: FastifyReply, trail: RequestTrail): { readonly client: { readonly gone: boolean }; readonly cancel: EventEmitter; readonly stop: () => void } {
  const cancel = new EventEmitter();
  const client = { gone: false };
  const raw = reply.raw;
  const onClose = (): void => {
    if (!raw.writableFinished) {
      client.gone = true;
      trail.clientGone = true;
      cancel.emit('abort');
    }
  };
  raw.on('close', onClose);
  return { client, cancel, stop: () => raw.off('close', onClose) };
}
