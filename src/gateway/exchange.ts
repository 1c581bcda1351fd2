/**
 * One limited request from admission to settlement: reserve (prompt + reserved output) on the
 * tenant's limits, call the deployment, pass the reply through (JSON whole, SSE event by event),
 * then settle on the provider's reported usage and release the concurrency slot — on every path.
 * This file holds the request's contract (`Exchange`, `DeploymentCall`) and its stages in order,
 * each in its own file, none re-entered: admission (`admission.ts`, its refusals in
 * `refusals.ts`) → the upstream attempt and failover (`upstream-attempt.ts`) → relay (`relay.ts`)
 * → settlement (`settlement.ts`).
 */
import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedDeployment, Tier } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import type { ErrorDialect } from '../errors.ts';
import type { SseEvent } from '../providers/sse.ts';
import type { StreamObserver, TokenUsage } from '../providers/types.ts';
import { newTrail } from '../ops/node-activity.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import { admit } from './admission.ts';
import type { GatewayContext } from './context.ts';
import { relayReply } from './relay.ts';
import { nothingUsed, settleExchange } from './settlement.ts';
import { attemptUpstream } from './upstream-attempt.ts';
import type { Served } from './upstream-attempt.ts';

export { passHeaders, scrubberOf, upstreamError } from './relay.ts';

/** A stream of the other wire format, re-written in the client's: see `src/providers/translate`. */
export interface StreamTranslator {
  /** The client's SSE text for one upstream event ('' for none). */
  push(event: SseEvent): string;
  /** The client's SSE text that closes a finished stream. */
  end(): string;
}

/** How to call one deployment for this request, in the deployment's wire format. */
export interface DeploymentCall {
  /** Upstream provider path, e.g. `/v1/chat/completions`. */
  readonly path: string;
  readonly body: string | Buffer;
  /** Extra upstream headers (provider version headers). */
  readonly headers: Record<string, string>;
  /** Usage from the `usage` field of a JSON reply body. */
  readonly usageFromJson: (usage: unknown) => TokenUsage | undefined;
  /** A fresh stream observer, for SSE replies (of the deployment's format). */
  readonly observer: () => StreamObserver;
  /** Set when the deployment speaks the other wire format: its replies re-written in the client's. */
  readonly translate?: { json(text: string): string; stream(): StreamTranslator };
  /**
   * Set when the deployment streams something other than SSE (Bedrock's event stream, which is
   * always translated): the reply's content type and its decoder into events, in batches.
   */
  readonly framing?: { readonly contentType: string; events(body: AsyncIterable<Uint8Array>): AsyncIterable<readonly SseEvent[]> };
}

/** Everything a route knows about a request once it is parsed and counted; as a call, the primary deployment's. */
export interface Exchange extends DeploymentCall {
  readonly dialect: ErrorDialect;
  readonly tenant: TenantConfig;
  /** Priority tier of the request (its floor and longest queue wait). */
  readonly tier: Tier;
  readonly model: ModelConfig;
  readonly deployment: ResolvedDeployment;
  /** The model's other deployments, in order: a hard failure of one moves the request to the next. */
  readonly failover: readonly ResolvedDeployment[];
  /** The call of a failover deployment. @throws TranslationError when the request cannot be said in its format. */
  readonly callFor: (deployment: ResolvedDeployment) => DeploymentCall;
  /** Prompt tokens counted or estimated at admission. */
  readonly promptTokens: number;
  /** Output tokens reserved (max_tokens × n, or the model's default). */
  readonly reservedOutput: number;
  readonly stream: boolean;
  /**
   * Whether the request takes from its deployments' provider quotas (false for calls a provider
   * limits apart, such as Anthropic's count_tokens: no quota taken, a 429 drains none). @default true
   */
  readonly deploymentQuota?: boolean;
  /**
   * Units the request takes from the tenant's requests limits: 0 for a call that holds only a
   * concurrency slot and is charged nothing (`count_tokens: free`). @default 1
   */
  readonly requests?: 0 | 1;
  /**
   * Called once per request whose reply succeeded (2xx), after it was relayed, with the upstream's
   * JSON text (undefined for a stream). `settle` is given when the reply may not have reported its
   * usage (a JSON reply without it, any stream): the concurrency slot was released, and returning
   * true takes the settlement over — the reservation (and the deployment quota it holds) stays
   * until `settle(actualTokens)` is called, once the provider reports the usage (Responses
   * `background: true`, whose usage comes with a later GET). Returning false settles as usual.
   * Never given `settle` in central mode (one call settles and releases there). @default none
   */
  readonly onReply?: (text: string | undefined, settle: ((actualTokens: number, usage?: TokenUsage) => void) | undefined) => boolean;
}

/** A stage's end of the request: the client was answered (refused, failed, or gone); the stages after it do not run. */
export interface Answered {
  readonly kind: 'answered';
  readonly reply: FastifyReply;
}

/**
 * Runs an exchange and answers the client. Never throws for a client-caused condition: refusals and
 * upstream failures are rendered here; the slot is released and the reservation settled on every path.
 */
export async function runExchange(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, ex: Exchange): Promise<FastifyReply> {
  const startedAt = performance.now();
  const trail = newTrail(ex.tenant.id, ex.tier.name, ex.model.name, ex.promptTokens + ex.reservedOutput);
  request.trail = trail;
  try {
    return await exchange(ctx, request, reply, ex, trail);
  } finally {
    // A client that closed first: 499, as proxies log it.
    const status = trail.clientGone === true ? 499 : reply.raw.headersSent ? reply.raw.statusCode : reply.statusCode;
    ctx.activity.finished(trail, status, performance.now() - startedAt, request.log);
  }
}

/** The stages of an exchange, in order; settlement runs once on every path after admission. */
async function exchange(ctx: GatewayContext, request: FastifyRequest, reply: FastifyReply, ex: Exchange, trail: RequestTrail): Promise<FastifyReply> {
  const admission = await admit(ctx, request, reply, ex, trail);
  if (admission.kind === 'answered') return admission.reply;
  const { client, cancel, stop } = watchClient(reply, trail);
  const used = nothingUsed();
  // The deployment serving the request, its call, and the deployment whose quota it holds (failover moves all three).
  const served: Served = { deployment: ex.deployment, call: admission.first ?? ex, held: admission.held };
  // In flight from here to the `finally` that settles it.
  ctx.activity.inFlight++;
  try {
    const response = await attemptUpstream(ctx, request, reply, ex, admission, served, cancel, client, used, trail);
    if (response.kind === 'answered') return response.reply;
    return await relayReply(ctx, reply, ex, admission, served, response, client, used);
  } finally {
    stop();
    ctx.activity.inFlight--;
    settleExchange(ctx, ex, admission, served, used, trail);
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
